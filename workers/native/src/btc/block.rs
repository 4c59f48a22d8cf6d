//! Block bodies: transaction framing exactly as Core's deserializer (spec §4.3–4.4), txid and
//! wtxid (§4.5), merkle root with the CVE-2012-2459 mutation check (§4.6), the BIP141 witness
//! commitment (§4.7) and sizes (§4.8).
//!
//! ```text
//! block = header(80) | CompactSize n_tx | tx * n_tx
//! tx    = version(4) [| 00 01] | CompactSize n_in | in * n_in | CompactSize n_out | out * n_out
//!         [| witness stack per input] | lock_time(4)
//! ```

use super::encode::{Cursor, DecodeError};
use super::header::HEADER_LEN;
use super::sha256::{sha256d, sha256d_64_pairs, sha256d_parts};

pub const MAX_BLOCK_WEIGHT: u64 = 4_000_000;
const WITNESS_COMMITMENT_PREFIX: [u8; 6] = [0x6a, 0x24, 0xaa, 0x21, 0xa9, 0xed];

/// How much work to do per transaction: framing only (to learn where a record really ends), or
/// hashing too (to check merkle root and witness commitment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyMode {
    FrameOnly,
    Check,
}

#[derive(Clone, Debug, Default)]
pub struct TxInfo {
    pub txid: [u8; 32],
    pub wtxid: [u8; 32],
    pub has_witness: bool,
    pub size: usize,
    pub stripped_size: usize,
    /// Coinbase only: the last output script carrying a witness commitment.
    pub commitment: Option<[u8; 32]>,
    /// Witness stack of input 0 as (item count, first item if it is 32 bytes).
    pub first_input_witness: (u64, Option<[u8; 32]>),
}

#[derive(Clone, Debug)]
pub struct BodySummary {
    /// Bytes of the block actually consumed (header included).
    pub consumed: usize,
    pub n_tx: u64,
    pub stripped_size: usize,
    pub weight: u64,
    /// Core's reject reason when a checked body is not the block its header commits to.
    pub invalid: Option<&'static str>,
}

pub fn parse_tx(c: &mut Cursor, data: &[u8], mode: BodyMode) -> Result<TxInfo, DecodeError> {
    let start = c.pos();
    let mut commitment = None;
    c.skip(4)?;
    let mut n_in = c.compact_size()?;
    let mut flags = 0u8;
    let mut segwit_form = false;
    let body_start;
    if n_in == 0 {
        // Either a segwit marker or a zero-input, zero-output transaction (Core's ambiguity).
        flags = c.u8()?;
        if flags != 0 {
            segwit_form = true;
            body_start = c.pos();
            n_in = c.compact_size()?;
            skip_inputs(c, n_in)?;
            let n_out = c.compact_size()?;
            skip_outputs(c, n_out, Some(&mut commitment))?;
        } else {
            body_start = start + 4;
        }
    } else {
        body_start = start + 4;
        skip_inputs(c, n_in)?;
    }
    let zero_in_zero_out = n_in == 0 && flags == 0;
    if !segwit_form && !zero_in_zero_out {
        let n_out = c.compact_size()?;
        skip_outputs(c, n_out, Some(&mut commitment))?;
    }
    let body_end = c.pos();
    let mut has_witness = false;
    let mut first_input_witness = (0u64, None);
    if flags & 1 != 0 {
        flags ^= 1;
        for i in 0..n_in {
            let items = c.compact_size()?;
            if items > 0 {
                has_witness = true;
            }
            for j in 0..items {
                let len = c.compact_size()? as usize;
                let item = c.take(len)?;
                if i == 0 && j == 0 && len == 32 {
                    first_input_witness.1 = Some(item.try_into().unwrap());
                }
            }
            if i == 0 {
                first_input_witness.0 = items;
            }
        }
        if !has_witness {
            return Err(DecodeError::SuperfluousWitness);
        }
    }
    if flags != 0 {
        return Err(DecodeError::UnknownOptionalData);
    }
    let lock = c.take(4)?;
    let end = c.pos();
    let size = end - start;
    let stripped_size = if segwit_form {
        4 + (body_end - body_start) + 4
    } else {
        size
    };
    let mut info = TxInfo {
        has_witness,
        size,
        stripped_size,
        commitment,
        first_input_witness,
        ..Default::default()
    };
    if mode == BodyMode::Check {
        if segwit_form {
            info.txid =
                sha256d_parts(&[&data[start..start + 4], &data[body_start..body_end], lock]);
            info.wtxid = sha256d(&data[start..end]);
        } else {
            info.txid = sha256d(&data[start..end]);
            info.wtxid = info.txid;
        }
    }
    Ok(info)
}

fn skip_inputs(c: &mut Cursor, n: u64) -> Result<(), DecodeError> {
    for _ in 0..n {
        c.skip(36)?;
        let len = c.compact_size()? as usize;
        c.skip(len + 4)?;
    }
    Ok(())
}

fn skip_outputs(
    c: &mut Cursor,
    n: u64,
    mut commitment: Option<&mut Option<[u8; 32]>>,
) -> Result<(), DecodeError> {
    for _ in 0..n {
        c.skip(8)?;
        let len = c.compact_size()? as usize;
        let script = c.take(len)?;
        if let Some(slot) = commitment.as_deref_mut() {
            if len >= 38 && script[..6] == WITNESS_COMMITMENT_PREFIX {
                *slot = Some(script[6..38].try_into().unwrap());
            }
        }
    }
    Ok(())
}

/// Merkle root over `leaves` and whether the tree is mutated (CVE-2012-2459), as Core computes it.
pub fn merkle_root(leaves: &[[u8; 32]]) -> ([u8; 32], bool) {
    if leaves.is_empty() {
        return ([0u8; 32], false);
    }
    let mut level: Vec<[u8; 32]> = leaves.to_vec();
    let mut next = Vec::with_capacity(level.len().div_ceil(2));
    let mut mutated = false;
    while level.len() > 1 {
        for pair in level.chunks_exact(2) {
            if pair[0] == pair[1] {
                mutated = true;
            }
        }
        if level.len() % 2 == 1 {
            level.push(*level.last().unwrap());
        }
        sha256d_64_pairs(&level, &mut next);
        std::mem::swap(&mut level, &mut next);
    }
    (level[0], mutated)
}

/// Parses a block (header included) that must lie within `data`; `data` is cut at the declared
/// record size or the end of the file, whichever comes first.
pub fn parse_block(data: &[u8], mode: BodyMode) -> Result<BodySummary, DecodeError> {
    let mut c = Cursor::new(data);
    let header = c.take(HEADER_LEN)?;
    let n_tx = c.compact_size()?;
    let mut stripped = c.pos();
    let mut txs: Vec<TxInfo> = Vec::new();
    for _ in 0..n_tx {
        let tx = parse_tx(&mut c, data, mode)?;
        stripped += tx.stripped_size;
        if mode == BodyMode::Check {
            txs.push(tx);
        }
    }
    let consumed = c.pos();
    let weight = 3 * stripped as u64 + consumed as u64;
    let mut summary = BodySummary {
        consumed,
        n_tx,
        stripped_size: stripped,
        weight,
        invalid: None,
    };
    if mode == BodyMode::Check {
        summary.invalid = check_body(header, &txs, weight);
    }
    Ok(summary)
}

fn check_body(header: &[u8], txs: &[TxInfo], weight: u64) -> Option<&'static str> {
    if let Some(reason) = check_merkle(header, txs) {
        return Some(reason);
    }
    if txs.is_empty() {
        return Some("bad-blk-length");
    }
    check_witness_and_weight(txs, weight)
}

/// The first body checks in Core's order: the header's merkle root over the txids, then
/// CVE-2012-2459 mutation.
pub(crate) fn check_merkle(header: &[u8], txs: &[TxInfo]) -> Option<&'static str> {
    let txids: Vec<[u8; 32]> = txs.iter().map(|t| t.txid).collect();
    let (root, mutated) = merkle_root(&txids);
    if root[..] != header[36..68] {
        return Some("bad-txnmrklroot");
    }
    mutated.then_some("bad-txns-duplicate")
}

/// The contextual part of the body checks: BIP141 witness commitment, then block weight.
pub(crate) fn check_witness_and_weight(txs: &[TxInfo], weight: u64) -> Option<&'static str> {
    let coinbase = &txs[0];
    match coinbase.commitment {
        Some(commitment) => {
            let reserved = match coinbase.first_input_witness {
                (1, Some(v)) => v,
                _ => return Some("bad-witness-nonce-size"),
            };
            let mut wtxids: Vec<[u8; 32]> = txs.iter().map(|t| t.wtxid).collect();
            wtxids[0] = [0u8; 32];
            let (witness_root, _) = merkle_root(&wtxids);
            if sha256d_parts(&[&witness_root, &reserved]) != commitment {
                return Some("bad-witness-merkle-match");
            }
        }
        None => {
            if txs.iter().any(|t| t.has_witness) {
                return Some("unexpected-witness");
            }
        }
    }
    if weight > MAX_BLOCK_WEIGHT {
        return Some("bad-blk-weight");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/bitcoin");
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.file_name().unwrap().to_str().unwrap().starts_with(name) {
                return std::fs::read(p).unwrap();
            }
        }
        panic!("fixture {name} missing");
    }

    fn display(h: &[u8; 32]) -> String {
        crate::datasets::hex::display_hex(h)
    }

    #[test]
    fn real_mainnet_block_checks_out() {
        let raw = fixture("mainnet_block_");
        let s = parse_block(&raw, BodyMode::Check).unwrap();
        assert_eq!(s.consumed, 1_381_836);
        assert_eq!(s.n_tx, 2500);
        assert_eq!(s.stripped_size, 870_406);
        assert_eq!(s.weight, 3_993_054);
        assert_eq!(s.invalid, None);
        let mut c = Cursor::new(&raw);
        c.skip(80).unwrap();
        c.compact_size().unwrap();
        let cb = parse_tx(&mut c, &raw, BodyMode::Check).unwrap();
        assert_eq!(
            display(&cb.txid),
            "764b60c3d9a2c3c5bb6fe7141d9ca6e6778122df75f19366a2c5cb948d1d7d84"
        );
        assert_eq!(
            display(&cb.wtxid),
            "786891acf7ca49b7292374cda40c378805daa14b968b93b9b34ebeb4b9db19f0"
        );
        assert_eq!((cb.size, cb.stripped_size), (253, 217));
    }

    #[test]
    fn real_testnet_block_checks_out() {
        let raw = fixture("testnet_block_");
        let s = parse_block(&raw, BodyMode::Check).unwrap();
        assert_eq!(
            (s.consumed, s.n_tx, s.stripped_size, s.weight),
            (4319, 15, 4283, 17168)
        );
        assert_eq!(s.invalid, None);
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let raw = fixture("testnet_block_");
        for cut in (0..raw.len()).step_by(7) {
            assert!(
                parse_block(&raw[..cut], BodyMode::Check).is_err(),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn witness_bit_flip_is_caught() {
        let mut raw = fixture("mainnet_block_");
        // Last byte before the final lock time of the last tx sits in its witness.
        let n = raw.len();
        raw[n - 10] ^= 0x01;
        let s = parse_block(&raw, BodyMode::Check).unwrap();
        assert_eq!(s.invalid, Some("bad-witness-merkle-match"));
    }

    #[test]
    fn mutation_detected() {
        let a = [1u8; 32];
        let b = [2u8; 32];
        let c = [3u8; 32];
        let (r1, m1) = merkle_root(&[a, b, c]);
        let (r2, m2) = merkle_root(&[a, b, c, c]);
        assert_eq!(r1, r2);
        assert!(!m1 && m2);
    }
}
