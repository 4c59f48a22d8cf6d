//! Ere archives (spec §2.8; geth `internal/era/execdb`): execution history across the merge.
//!
//! ```text
//! ere   := Version | CompressedHeader+ | CompressedBody+ | CompressedSlimReceipts* | Proof* |
//!          TotalDifficulty* | other-entries* | Accumulator? | DynamicBlockIndex
//! index := start:u64 | offset[count][components]:i64 | components:u64 | count:u64
//! ```
//!
//! Records are grouped by kind, not by block. Which index slot holds which kind is found, as
//! geth finds it (`detectLayout`), from the record type at each slot of the first block: two
//! to five components, header and body required, receipts (absent in the `noreceipts`
//! profile), TD (pre-merge and transition epochs) and proofs (absent in `noproofs`) optional.
//!
//! [`Ere::open`] reads the index and the layout only; each block's records are read with
//! positioned reads when asked ([`Ere::block`]), so a file of any size costs one block of
//! memory. Every error names the byte offset, and the block where one applies.

use super::e2store::{self, HEADER_LEN, VALUE_SIZE_LIMIT};
use super::error::{Error, ErrorKind, Result};
use super::header::list_items;
use super::snappy;
use alloy_primitives::{B256, U256};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Most blocks an Ere file holds (its accumulator's list limit).
pub const MAX_BLOCKS: u64 = 8192;

/// The kinds of per-block record, in the order geth's builder writes their slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    Header,
    Body,
    Receipts,
    TotalDifficulty,
    Proof,
}

impl Component {
    fn of_type(t: [u8; 2]) -> Option<Component> {
        Some(match t {
            e2store::COMPRESSED_HEADER => Component::Header,
            e2store::COMPRESSED_BODY => Component::Body,
            e2store::COMPRESSED_SLIM_RECEIPTS => Component::Receipts,
            e2store::TOTAL_DIFFICULTY => Component::TotalDifficulty,
            e2store::PROOF => Component::Proof,
            _ => return None,
        })
    }
    pub fn record_type(self) -> [u8; 2] {
        match self {
            Component::Header => e2store::COMPRESSED_HEADER,
            Component::Body => e2store::COMPRESSED_BODY,
            Component::Receipts => e2store::COMPRESSED_SLIM_RECEIPTS,
            Component::TotalDifficulty => e2store::TOTAL_DIFFICULTY,
            Component::Proof => e2store::PROOF,
        }
    }
}

/// The profiles a name may carry, in the order they are written (alphabetical).
pub const PROFILES: [&str; 2] = ["noproofs", "noreceipts"];

/// The parts of an Ere file name: `<network>-<epoch:05>-<last hash[0..4]>[-profile…].ere`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EreName {
    pub network: String,
    pub epoch: u64,
    /// First 4 bytes of the hash of the file's last block.
    pub short_hash: [u8; 4],
    pub profiles: Vec<String>,
}

/// Parse an Ere file name; `None` if it does not follow the scheme (profiles known, sorted,
/// each once).
pub fn parse_name(name: &str) -> Option<EreName> {
    let stem = name.strip_suffix(".ere")?;
    let parts: Vec<&str> = stem.split('-').collect();
    if parts.len() < 3 {
        return None;
    }
    let (network, epoch, hash) = (parts[0], parts[1], parts[2]);
    let profiles: Vec<String> = parts[3..].iter().map(|p| p.to_string()).collect();
    if network.is_empty()
        || epoch.len() < 5
        || !epoch.bytes().all(|b| b.is_ascii_digit())
        || hash.len() != 8
        || !hash
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
        || !profiles.iter().all(|p| PROFILES.contains(&p.as_str()))
        || !profiles.windows(2).all(|w| w[0] < w[1])
    {
        return None;
    }
    let mut short_hash = [0u8; 4];
    for (i, b) in short_hash.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hash[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(EreName {
        network: network.to_string(),
        epoch: epoch.parse().ok()?,
        short_hash,
        profiles,
    })
}

/// geth's `execdb.Filename` with the profiles given: `noproofs` for a file without proofs,
/// `noreceipts` for one without receipts.
pub fn file_name(
    network: &str,
    epoch: u64,
    last_hash: &B256,
    proofs: bool,
    receipts: bool,
) -> String {
    let mut name = format!(
        "{network}-{epoch:05}-{:02x}{:02x}{:02x}{:02x}",
        last_hash[0], last_hash[1], last_hash[2], last_hash[3]
    );
    if !proofs {
        name.push_str("-noproofs");
    }
    if !receipts {
        name.push_str("-noreceipts");
    }
    name + ".ere"
}

/// One block's records, decompressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EreBlock {
    pub number: u64,
    /// File offset of the block's CompressedHeader record.
    pub offset: u64,
    pub header: Vec<u8>,
    pub body: Vec<u8>,
    /// Slim receipts RLP, when the file has receipts.
    pub receipts: Option<Vec<u8>>,
    pub total_difficulty: Option<U256>,
    /// `rlp([proofType, ssz(proof)])`, when the file has proofs.
    pub proof: Option<Vec<u8>>,
}

/// An Ere file, its index and layout read; blocks are read on demand.
pub struct Ere {
    path: Option<PathBuf>,
    src: Backing,
    len: u64,
    start: u64,
    count: u64,
    components: usize,
    /// Slot of each component in a block's index entry.
    slots: Vec<(Component, usize)>,
    /// Absolute record offsets, `count × components`.
    offsets: Vec<u64>,
    index_offset: u64,
    accumulator: Option<B256>,
}

enum Backing {
    File(File),
    Bytes(Vec<u8>),
}

impl Backing {
    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<()> {
        match self {
            Backing::File(f) => f.read_exact_at(buf, off),
            Backing::Bytes(b) => {
                let s = usize::try_from(off)
                    .ok()
                    .and_then(|o| b.get(o..o + buf.len()));
                match s {
                    Some(s) => {
                        buf.copy_from_slice(s);
                        Ok(())
                    }
                    None => Err(std::io::ErrorKind::UnexpectedEof.into()),
                }
            }
        }
    }
}

fn layout(s: String, off: u64) -> Error {
    Error::at(ErrorKind::Layout(s), off)
}

impl Ere {
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let f = File::open(path).map_err(|e| Error::io(path, e))?;
        let len = f.metadata().map_err(|e| Error::io(path, e))?.len();
        let mut e = Ere::from_backing(Backing::File(f), len).map_err(|e| e.in_file(path))?;
        e.path = Some(path.to_path_buf());
        Ok(e)
    }

    pub fn from_bytes(data: Vec<u8>) -> Result<Self> {
        let len = data.len() as u64;
        Ere::from_backing(Backing::Bytes(data), len)
    }

    fn read(&self, off: u64, n: u64, what: &'static str) -> Result<Vec<u8>> {
        let truncated = || {
            Error::at(
                ErrorKind::Truncated {
                    what,
                    need: n,
                    have: self.len.saturating_sub(off),
                },
                off,
            )
        };
        if off.checked_add(n).is_none_or(|end| end > self.len) {
            return Err(truncated());
        }
        let mut buf = vec![0u8; n as usize];
        self.src.read_at(&mut buf, off).map_err(|_| truncated())?;
        Ok(buf)
    }

    /// The record at `off`: its type and value (never past the index record).
    fn record(&self, off: u64) -> Result<([u8; 2], Vec<u8>)> {
        let h = self.read(off, HEADER_LEN as u64, "e2store record header")?;
        if h[6] != 0 || h[7] != 0 {
            return Err(Error::at(ErrorKind::ReservedNonZero, off));
        }
        let n = u32::from_le_bytes([h[2], h[3], h[4], h[5]]) as u64;
        if n > VALUE_SIZE_LIMIT {
            return Err(Error::at(ErrorKind::ValueTooLarge(n), off));
        }
        let start = off + HEADER_LEN as u64;
        if off < self.index_offset && start + n > self.index_offset {
            return Err(layout(
                format!("record of {n} bytes runs into the block index"),
                off,
            ));
        }
        Ok(([h[0], h[1]], self.read(start, n, "e2store record value")?))
    }

    fn from_backing(src: Backing, len: u64) -> Result<Self> {
        let mut e = Ere {
            path: None,
            src,
            len,
            start: 0,
            count: 0,
            components: 0,
            slots: Vec::new(),
            offsets: Vec::new(),
            index_offset: len,
            accumulator: None,
        };
        let version = e.read(0, HEADER_LEN as u64, "Version record")?;
        if version[..2] != e2store::VERSION || version[2..] != [0u8; 6] {
            return Err(layout(
                "first record is not an empty Version record".into(),
                0,
            ));
        }
        let tail_at = len.saturating_sub(16);
        let tail = e.read(tail_at, 16, "block index trailer")?;
        let components = u64::from_le_bytes(tail[..8].try_into().unwrap());
        let count = u64::from_le_bytes(tail[8..].try_into().unwrap());
        if !(2..=5).contains(&components) {
            return Err(layout(
                format!("block index with {components} components (2 to 5)"),
                tail_at,
            ));
        }
        if count == 0 || count > MAX_BLOCKS {
            return Err(layout(
                format!("block index with {count} blocks (1 to {MAX_BLOCKS})"),
                tail_at,
            ));
        }
        let payload = 8 + 8 * count * components + 16;
        let index_offset = len
            .checked_sub(payload + HEADER_LEN as u64)
            .filter(|o| *o >= HEADER_LEN as u64)
            .ok_or_else(|| {
                layout(
                    format!("file of {len} bytes cannot hold an index of {count} blocks"),
                    0,
                )
            })?;
        let (typ, value) = e.record(index_offset)?;
        if typ != e2store::DYNAMIC_BLOCK_INDEX || value.len() as u64 != payload {
            return Err(layout(
                format!(
                    "no DynamicBlockIndex of {payload} bytes at the end (type {:02x}{:02x}, {} bytes)",
                    typ[0],
                    typ[1],
                    value.len()
                ),
                index_offset,
            ));
        }
        e.index_offset = index_offset;
        e.start = u64::from_le_bytes(value[..8].try_into().unwrap());
        if e.start.checked_add(count).is_none() {
            return Err(layout(
                format!("starting number {} overflows", e.start),
                index_offset,
            ));
        }
        e.count = count;
        e.components = components as usize;
        let n = (count * components) as usize;
        e.offsets = Vec::with_capacity(n);
        for i in 0..n {
            let rel = i64::from_le_bytes(value[8 + 8 * i..16 + 8 * i].try_into().unwrap());
            let abs = index_offset as i128 + rel as i128;
            let block = e.start + (i / e.components) as u64;
            match u64::try_from(abs) {
                Ok(a) if a >= HEADER_LEN as u64 && a < index_offset => e.offsets.push(a),
                _ => {
                    return Err(layout(
                        format!("index offset {rel} points outside the records"),
                        index_offset,
                    )
                    .for_block(block))
                }
            }
        }
        // The layout from the record types at the first block's slots (geth's detectLayout).
        for slot in 0..e.components {
            let off = e.offsets[slot];
            let h = e.read(off, HEADER_LEN as u64, "e2store record header")?;
            let Some(c) = Component::of_type([h[0], h[1]]) else {
                return Err(layout(
                    format!(
                        "unknown record type {:02x}{:02x} at index slot {slot}",
                        h[0], h[1]
                    ),
                    off,
                ));
            };
            if e.slots.iter().any(|(k, _)| *k == c) {
                return Err(layout(format!("{c:?} at two index slots"), off));
            }
            e.slots.push((c, slot));
        }
        for need in [Component::Header, Component::Body] {
            if e.slot(need).is_none() {
                return Err(layout(
                    format!("index has no {need:?} component"),
                    index_offset,
                ));
            }
        }
        // Between the last block record and the index: other entries and the Accumulator.
        let last = *e.offsets.iter().max().expect("count ≥ 1");
        let (_, v) = e.record(last)?;
        let mut off = last + HEADER_LEN as u64 + v.len() as u64;
        while off < index_offset {
            let (typ, value) = e.record(off)?;
            if typ == e2store::ACCUMULATOR {
                if value.len() != 32 {
                    return Err(layout("Accumulator record is not 32 bytes".into(), off));
                }
                e.accumulator = Some(B256::from_slice(&value));
            }
            off += HEADER_LEN as u64 + value.len() as u64;
        }
        if off != index_offset {
            return Err(layout(
                "records after the blocks do not end at the index".into(),
                index_offset,
            ));
        }
        Ok(e)
    }

    fn slot(&self, c: Component) -> Option<usize> {
        self.slots.iter().find(|(k, _)| *k == c).map(|(_, s)| *s)
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
    pub fn start(&self) -> u64 {
        self.start
    }
    pub fn count(&self) -> u64 {
        self.count
    }
    pub fn end(&self) -> u64 {
        self.start + self.count
    }
    /// Components per block in the index (2 to 5).
    pub fn components(&self) -> usize {
        self.components
    }
    pub fn has(&self, c: Component) -> bool {
        self.slot(c).is_some()
    }
    /// The Accumulator record, if the file has one (pre-merge and transition epochs).
    pub fn accumulator(&self) -> Option<B256> {
        self.accumulator
    }
    pub fn index_offset(&self) -> u64 {
        self.index_offset
    }
    pub fn len_bytes(&self) -> u64 {
        self.len
    }

    fn located(&self, e: Error, number: u64) -> Error {
        let e = e.for_block(number);
        match &self.path {
            Some(p) => e.in_file(p),
            None => e,
        }
    }

    /// The value of component `c` of block `number`: its record checked for type, framed
    /// snappy decompressed (TD as stored).
    fn component(&self, number: u64, c: Component) -> Result<Option<(u64, Vec<u8>)>> {
        let Some(slot) = self.slot(c) else {
            return Ok(None);
        };
        let off = self.offsets[(number - self.start) as usize * self.components + slot];
        let (typ, value) = self.record(off)?;
        if typ != c.record_type() {
            return Err(layout(
                format!(
                    "index slot {slot} ({c:?}) points at a record of type {:02x}{:02x}",
                    typ[0], typ[1]
                ),
                off,
            ));
        }
        if c == Component::TotalDifficulty {
            if value.len() != 32 {
                return Err(layout("TotalDifficulty value is not 32 bytes".into(), off));
            }
            return Ok(Some((off, value)));
        }
        let data = snappy::decode_framed(&value).map_err(|e| e.shifted(off + 8))?;
        Ok(Some((off, data)))
    }

    /// Read block `number` (absolute block number).
    pub fn block(&self, number: u64) -> Result<EreBlock> {
        if number < self.start || number >= self.end() {
            return Err(self.located(
                Error::new(ErrorKind::OutOfRange {
                    number,
                    first: self.start,
                    end: self.end(),
                }),
                number,
            ));
        }
        let read = || -> Result<EreBlock> {
            let (offset, header) = self
                .component(number, Component::Header)?
                .expect("required");
            let (_, body) = self.component(number, Component::Body)?.expect("required");
            Ok(EreBlock {
                number,
                offset,
                header,
                body,
                receipts: self.component(number, Component::Receipts)?.map(|(_, v)| v),
                total_difficulty: self
                    .component(number, Component::TotalDifficulty)?
                    .map(|(_, v)| U256::from_le_slice(&v)),
                proof: self.component(number, Component::Proof)?.map(|(_, v)| v),
            })
        };
        read().map_err(|e| self.located(e, number))
    }

    /// The header RLP of block `number` alone.
    pub fn header(&self, number: u64) -> Result<Vec<u8>> {
        if number < self.start || number >= self.end() {
            return Err(self.located(
                Error::new(ErrorKind::OutOfRange {
                    number,
                    first: self.start,
                    end: self.end(),
                }),
                number,
            ));
        }
        self.component(number, Component::Header)
            .map(|v| v.expect("required").1)
            .map_err(|e| self.located(e, number))
    }
}

/// Proof types of the Ere `Proof` record.
pub const PROOF_HISTORICAL_HASHES_ACCUMULATOR: u64 = 0;
pub const PROOF_HISTORICAL_ROOTS: u64 = 1;
pub const PROOF_HISTORICAL_SUMMARIES: u64 = 2;
pub const PROOF_HISTORICAL_SUMMARIES_DENEB: u64 = 3;

/// Branch length of a block's proof in its epoch's accumulator: the TD beside the hash, the
/// 13 levels of the 8192-leaf list, the list's length.
pub const ACCUMULATOR_PROOF_LEN: usize = 15;

/// A decoded `rlp([proofType, ssz(proof)])`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockProof {
    pub proof_type: u64,
    pub data: Vec<u8>,
}

pub fn decode_proof(raw: &[u8]) -> Result<BlockProof> {
    let bad = |e| Error::rlp("proof", e);
    let items = list_items(raw).map_err(bad)?;
    if items.len() != 2 {
        return Err(bad(alloy_rlp::Error::Custom("a proof is [type, ssz]")));
    }
    let mut t = items[0];
    let proof_type = <u64 as alloy_rlp::Decodable>::decode(&mut t).map_err(bad)?;
    let data = super::header::string_payload(items[1])
        .map_err(bad)?
        .to_vec();
    Ok(BlockProof { proof_type, data })
}

/// `rlp([proofType, ssz(proof)])`.
pub fn encode_proof(p: &BlockProof) -> Vec<u8> {
    let mut items = Vec::new();
    alloy_rlp::Encodable::encode(&p.proof_type, &mut items);
    alloy_rlp::Encodable::encode(&alloy_primitives::Bytes::from(p.data.clone()), &mut items);
    let mut out = Vec::with_capacity(items.len() + 4);
    alloy_rlp::Header {
        list: true,
        payload_length: items.len(),
    }
    .encode(&mut out);
    out.extend_from_slice(&items);
    out
}

fn sha256_pair(a: &[u8], b: &[u8]) -> B256 {
    let mut h = Sha256::new();
    h.update(a);
    h.update(b);
    B256::from_slice(&h.finalize())
}

/// The root a historical-hashes-accumulator proof leads to from `hash` at position `index` of
/// its epoch (the epoch's accumulator root when the proof holds).
pub fn accumulator_proof_root(hash: &B256, index: u64, proof: &[u8]) -> Option<B256> {
    if proof.len() != 32 * ACCUMULATOR_PROOF_LEN || index >= MAX_BLOCKS {
        return None;
    }
    let node = |i: usize| &proof[32 * i..32 * i + 32];
    let mut acc = sha256_pair(&hash[..], node(0));
    for level in 0..13 {
        let sibling = node(1 + level);
        acc = if (index >> level) & 1 == 1 {
            sha256_pair(sibling, &acc[..])
        } else {
            sha256_pair(&acc[..], sibling)
        };
    }
    Some(sha256_pair(&acc[..], node(14)))
}

/// The proof of every record of an epoch (`(hash, TD)` per block, in order) in its accumulator.
pub fn accumulator_proofs(records: &[(B256, U256)]) -> Vec<Vec<u8>> {
    let leaves: Vec<B256> = records
        .iter()
        .map(|(h, td)| sha256_pair(&h[..], &td.to_le_bytes::<32>()))
        .collect();
    // levels[d] = the nodes at height d (zero subtrees past the records).
    let mut zero = B256::ZERO;
    let mut levels = vec![leaves];
    let mut zeros = vec![zero];
    for _ in 0..13 {
        let below = levels.last().expect("leaves");
        let next: Vec<B256> = below
            .chunks(2)
            .map(|c| sha256_pair(&c[0][..], &c.get(1).unwrap_or(&zero)[..]))
            .collect();
        zero = sha256_pair(&zero[..], &zero[..]);
        zeros.push(zero);
        levels.push(next);
    }
    let mut length = [0u8; 32];
    length[..8].copy_from_slice(&(records.len() as u64).to_le_bytes());
    records
        .iter()
        .enumerate()
        .map(|(i, (_, td))| {
            let mut p = Vec::with_capacity(32 * ACCUMULATOR_PROOF_LEN);
            p.extend_from_slice(&td.to_le_bytes::<32>());
            for (d, level) in levels.iter().take(13).enumerate() {
                let sib = (i >> d) ^ 1;
                p.extend_from_slice(&level.get(sib).unwrap_or(&zeros[d])[..]);
            }
            p.extend_from_slice(&length);
            p
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eth::accumulator::epoch_root;

    #[test]
    fn names() {
        let n = parse_name("mainnet-00000-a6860fef.ere").unwrap();
        assert_eq!((n.epoch, n.short_hash), (0, [0xa6, 0x86, 0x0f, 0xef]));
        let n = parse_name("sepolia-00000-deadbeef-noreceipts.ere").unwrap();
        assert_eq!(n.profiles, ["noreceipts"]);
        assert!(parse_name("mainnet-00001-a6860fef-noproofs-noreceipts.ere").is_some());
        assert!(parse_name("mainnet-00001-a6860fef-noreceipts-noproofs.ere").is_none());
        assert!(parse_name("mainnet-00001-a6860fef-other.ere").is_none());
        assert!(parse_name("mainnet-00001-A6860FEF.ere").is_none());
        assert!(parse_name("mainnet-00001-a6860fef.era1").is_none());
        let h = B256::repeat_byte(0xab);
        assert_eq!(
            file_name("dev", 3, &h, false, true),
            "dev-00003-abababab-noproofs.ere"
        );
        assert_eq!(
            file_name("dev", 3, &h, false, false),
            "dev-00003-abababab-noproofs-noreceipts.ere"
        );
    }

    #[test]
    fn accumulator_proofs_lead_to_the_epoch_root() {
        for n in [1usize, 2, 5, 300] {
            let records: Vec<(B256, U256)> = (0..n)
                .map(|i| (B256::repeat_byte(i as u8 + 1), U256::from(1000 + i)))
                .collect();
            let root = epoch_root(&records).unwrap();
            for (i, p) in accumulator_proofs(&records).iter().enumerate() {
                assert_eq!(
                    accumulator_proof_root(&records[i].0, i as u64, p),
                    Some(root)
                );
                let mut other = records[i].0;
                other.0[31] ^= 1;
                assert_ne!(accumulator_proof_root(&other, i as u64, p), Some(root));
                assert_ne!(
                    accumulator_proof_root(&records[i].0, i as u64 ^ 1, p),
                    Some(root)
                );
            }
        }
    }

    #[test]
    fn proof_record_round_trips() {
        let p = BlockProof {
            proof_type: 0,
            data: vec![7; 480],
        };
        assert_eq!(decode_proof(&encode_proof(&p)).unwrap(), p);
        assert!(decode_proof(&[0xc0]).is_err());
    }
}
