//! Test-chain generator: a `blocks/` folder laid out like a real node's (spec §1.4): blocks in
//! arrival order (shuffled within windows), files cut below a maximum size, `xor.dat`, a
//! zero-filled preallocated tail on the file still being written, side branches and blocks
//! whose parent never appears. Real proof of work at regtest difficulty; deterministic per seed.
//! Best-chain spends carry real signatures (gen_keys.rs), so Bitcoin Core accepts the chains
//! with full script validation; side-branch and orphan blocks, which no node ever connects,
//! spend made-up outputs with random bytes where signatures go.

use super::block::merkle_root;
use super::encode::write_compact_size;
use super::gen_keys::{KeyRing, Kind, Owned, ALL_KINDS, KEY_COUNT, KINDS};
use super::header::{block_work, check_pow, Header};
use super::network::Network;
use super::sha256::sha256d;
use primitive_types::U256;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::fs::File;
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::Path;

/// Generated blocks are mined at regtest difficulty, whatever the network's magic and genesis.
pub const GENERATED_BITS: u32 = 0x207fffff;
pub const GENERATED_NETWORKS: [Network; 4] = [
    Network::Main,
    Network::Testnet3,
    Network::Signet,
    Network::Regtest,
];
const BLOCKFILE_CHUNK_SIZE: u64 = 16 << 20;
const GENESIS_SCRIPT_SIG: &str = "04ffff001d0104455468652054696d65732030332f4a616e2f32303039204368616e63656c6c6f72206f6e206272696e6b206f66207365636f6e64206261696c6f757420666f722062616e6b73";
const GENESIS_PUBKEY_SCRIPT: &str = "4104678afdb0fe5548271967f1a67130b7105cd6a828e03909a67962e0ea1f61deb649f6bc3f4cef38c4f35504e51ec112de5c384df7ba0b8d578a4c702b6bf11d5fac";
#[derive(Clone, Debug)]
pub struct GenConfig {
    pub network: Network,
    pub blocks: u64,
    pub seed: u64,
    pub file_size: u64,
    pub xor: bool,
    pub shuffle_window: usize,
    pub side_branches: usize,
    pub orphans: usize,
    pub tx_min: usize,
    pub tx_max: usize,
    /// A reorg written after everything else: a branch forking `reorg_depth` blocks below the
    /// main tip, one block longer, so it wins (0: none).
    pub reorg_depth: u64,
    /// Then two more main-chain blocks, so the main chain wins again.
    pub reorg_back: bool,
    /// Damage for oracle tests: the first spend of the main-chain block at this height carries
    /// a wrong (well-formed) signature, so a node checking scripts rejects that block (0: none).
    pub bad_signature_height: u64,
    /// Damage for oracle tests: the reorg branch's first block carries a wrong signature, so a
    /// node checking scripts keeps the main chain though the branch has more work.
    pub bad_signature_branch: bool,
    /// The wallet owns (and signs spends of) every script kind the generator knows, not only
    /// P2PKH, P2WPKH and P2TR key path; off, the bytes are those of earlier generators.
    pub all_script_kinds: bool,
    /// The damaged signature is on a spend of this kind (the first such coin the wallet holds;
    /// None: whatever the first spend's first input is).
    pub bad_signature_kind: Option<Kind>,
}

#[derive(Clone, Debug, Default)]
pub struct GenSummary {
    pub tip_hash: [u8; 32],
    pub tip_height: u64,
    pub chainwork: U256,
    pub blocks_indexed: u64,
    pub side_branch_blocks: u64,
    pub orphans: Vec<[u8; 32]>,
    /// Records whose proof of work the network rejects (non-regtest networks).
    pub invalid_count: u64,
    pub records: u64,
    pub files: u32,
    pub bytes: u64,
    pub xor_key: [u8; 8],
    pub heights: Vec<(u64, [u8; 32])>,
    /// The best chain's final UTXO set as `gettxoutsetinfo` counts it (genesis excluded).
    pub utxo_count: u64,
    pub utxo_total: u64,
    /// The records the reorg appended last, in order: (branch blocks, main-chain blocks after
    /// it); a folder cut before them holds the chain as it was before the reorg.
    pub reorg_records: (u64, u64),
    /// The kind of the input whose signature was damaged, main chain first (None: no damage).
    pub bad_signature_kind: Option<Kind>,
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// The network's real genesis block, rebuilt from its parameters (spec §8.2). Testnet4's genesis
/// carries a different coinbase and is not generated.
pub fn genesis_block(network: Network) -> Vec<u8> {
    let (script_sig, pubkey_script) = (unhex(GENESIS_SCRIPT_SIG), unhex(GENESIS_PUBKEY_SCRIPT));
    let mut tx = Vec::new();
    tx.extend_from_slice(&1u32.to_le_bytes());
    tx.push(1);
    tx.extend_from_slice(&[0u8; 32]);
    tx.extend_from_slice(&u32::MAX.to_le_bytes());
    write_compact_size(&mut tx, script_sig.len() as u64);
    tx.extend_from_slice(&script_sig);
    tx.extend_from_slice(&u32::MAX.to_le_bytes());
    tx.push(1);
    tx.extend_from_slice(&5_000_000_000u64.to_le_bytes());
    write_compact_size(&mut tx, pubkey_script.len() as u64);
    tx.extend_from_slice(&pubkey_script);
    tx.extend_from_slice(&0u32.to_le_bytes());
    let (time, nonce) = network.genesis_time_nonce();
    let header = Header {
        version: 1,
        prev_hash: [0u8; 32],
        merkle_root: sha256d(&tx),
        time,
        bits: network.genesis_bits(),
        nonce,
    };
    let mut block = header.serialize().to_vec();
    block.push(1);
    block.extend_from_slice(&tx);
    block
}

struct TxBytes {
    bytes: Vec<u8>,
    txid: [u8; 32],
    wtxid: [u8; 32],
}

fn push_script(out: &mut Vec<u8>, script: &[u8]) {
    write_compact_size(out, script.len() as u64);
    out.extend_from_slice(script);
}

fn random_output_script(rng: &mut SmallRng) -> Vec<u8> {
    let mut key = [0u8; 32];
    rng.fill(&mut key);
    match rng.gen_range(0..4) {
        0 => [&[0x00, 0x14][..], &key[..20]].concat(),
        1 => [&[0x76, 0xa9, 0x14][..], &key[..20], &[0x88, 0xac]].concat(),
        2 => [&[0x51, 0x20][..], &key[..]].concat(),
        _ => [&[0xa9, 0x14][..], &key[..20], &[0x87]].concat(),
    }
}

/// A spend with random prevouts and plausible script sizes; segwit about half the time.
fn random_tx(rng: &mut SmallRng) -> TxBytes {
    let segwit = rng.gen_bool(0.5);
    let n_in = rng.gen_range(1..=2usize);
    let n_out = rng.gen_range(1..=2usize);
    let mut base = Vec::with_capacity(256);
    write_compact_size(&mut base, n_in as u64);
    for _ in 0..n_in {
        let mut prev = [0u8; 36];
        rng.fill(&mut prev[..]);
        base.extend_from_slice(&prev);
        if segwit {
            base.push(0);
        } else {
            let mut sig = vec![0u8; 106];
            rng.fill(&mut sig[..]);
            push_script(&mut base, &sig);
        }
        base.extend_from_slice(&0xffff_fffdu32.to_le_bytes());
    }
    write_compact_size(&mut base, n_out as u64);
    for _ in 0..n_out {
        base.extend_from_slice(&rng.gen_range(546u64..100_000_000).to_le_bytes());
        push_script(&mut base, &random_output_script(rng));
    }
    finish_tx(rng, &base, n_in, segwit)
}

/// Version 2 and lock time 0 around `base` (inputs and outputs); with `segwit`, the BIP144
/// form with a two-item witness of random bytes per input.
fn finish_tx(rng: &mut SmallRng, base: &[u8], n_in: usize, segwit: bool) -> TxBytes {
    let version = 2u32.to_le_bytes();
    let lock = 0u32.to_le_bytes();
    let legacy = [&version[..], base, &lock].concat();
    let txid = sha256d(&legacy);
    if !segwit {
        return TxBytes {
            wtxid: txid,
            txid,
            bytes: legacy,
        };
    }
    let mut witness = Vec::with_capacity(110 * n_in);
    for _ in 0..n_in {
        witness.push(2);
        let mut sig = [0u8; 105];
        rng.fill(&mut sig[..]);
        push_script(&mut witness, &sig[..72]);
        push_script(&mut witness, &sig[72..]);
    }
    let bytes = [&version[..], &[0x00, 0x01], base, &witness, &lock].concat();
    TxBytes {
        wtxid: sha256d(&bytes),
        txid,
        bytes,
    }
}

fn bip34_push(height: u64) -> Vec<u8> {
    if height == 0 {
        return vec![0x00];
    }
    if height <= 16 {
        return vec![0x50 + height as u8];
    }
    let mut n = Vec::new();
    let mut h = height;
    while h > 0 {
        n.push((h & 0xff) as u8);
        h >>= 8;
    }
    if n.last().unwrap() & 0x80 != 0 {
        n.push(0);
    }
    [&[n.len() as u8][..], &n].concat()
}

/// The block subsidy of generated chains (regtest's schedule: halving every 150 blocks).
pub fn generated_subsidy(height: u64) -> u64 {
    5_000_000_000u64 >> (height / 150).min(63)
}

fn coinbase(
    height: u64,
    tag: u64,
    value: u64,
    payout: &[u8],
    witness_commitment: Option<[u8; 32]>,
) -> TxBytes {
    let mut base = Vec::with_capacity(128);
    base.push(1);
    base.extend_from_slice(&[0u8; 32]);
    base.extend_from_slice(&u32::MAX.to_le_bytes());
    let script_sig = [bip34_push(height), tag.to_le_bytes().to_vec()].concat();
    push_script(&mut base, &script_sig);
    base.extend_from_slice(&u32::MAX.to_le_bytes());
    base.push(if witness_commitment.is_some() { 2 } else { 1 });
    base.extend_from_slice(&value.to_le_bytes());
    push_script(&mut base, payout);
    if let Some(c) = witness_commitment {
        base.extend_from_slice(&0u64.to_le_bytes());
        push_script(
            &mut base,
            &[&[0x6a, 0x24, 0xaa, 0x21, 0xa9, 0xed][..], &c].concat(),
        );
    }
    let version = 2u32.to_le_bytes();
    let lock = 0u32.to_le_bytes();
    let legacy = [&version[..], &base, &lock].concat();
    let txid = sha256d(&legacy);
    if witness_commitment.is_none() {
        return TxBytes {
            wtxid: txid,
            txid,
            bytes: legacy,
        };
    }
    // Witness reserved value: one 32-byte item of zeros.
    let mut witness = vec![1u8, 32];
    witness.extend_from_slice(&[0u8; 32]);
    let bytes = [&version[..], &[0x00, 0x01], &base, &witness, &lock].concat();
    TxBytes {
        wtxid: sha256d(&bytes),
        txid,
        bytes,
    }
}

/// Builds and mines one block on `prev` at `height` with random spends of made-up outputs (for
/// side branches and orphans, which a reindex never connects); returns (hash, block bytes).
fn make_block(
    rng: &mut SmallRng,
    ring: &KeyRing,
    prev: [u8; 32],
    height: u64,
    time: u32,
    n_tx: usize,
    pow_limit: U256,
) -> ([u8; 32], Vec<u8>) {
    let spends: Vec<TxBytes> = (1..n_tx).map(|_| random_tx(rng)).collect();
    let payout = ring.script_pubkey(KINDS[rng.gen_range(0..KINDS.len())], rng.gen());
    let (hash, block, _) = assemble_block(
        rng,
        prev,
        height,
        time,
        &spends,
        (generated_subsidy(height), &payout),
        pow_limit,
    );
    (hash, block)
}

/// Coinbase (paying `coinbase_out`: value, script) plus `spends`, merkle root, witness
/// commitment and proof of work; returns (hash, block bytes, coinbase txid).
fn assemble_block(
    rng: &mut SmallRng,
    prev: [u8; 32],
    height: u64,
    time: u32,
    spends: &[TxBytes],
    coinbase_out: (u64, &[u8]),
    pow_limit: U256,
) -> ([u8; 32], Vec<u8>, [u8; 32]) {
    let n_tx = spends.len() + 1;
    let tag: u64 = rng.gen();
    let commitment = if spends.iter().any(|t| t.txid != t.wtxid) {
        let mut wtxids: Vec<[u8; 32]> = vec![[0u8; 32]];
        wtxids.extend(spends.iter().map(|t| t.wtxid));
        let (root, _) = merkle_root(&wtxids);
        Some(sha256d(&[&root[..], &[0u8; 32]].concat()))
    } else {
        None
    };
    let cb = coinbase(height, tag, coinbase_out.0, coinbase_out.1, commitment);
    let mut txids = vec![cb.txid];
    txids.extend(spends.iter().map(|t| t.txid));
    let (root, _) = merkle_root(&txids);
    let mut header = Header {
        version: 0x2000_0000,
        prev_hash: prev,
        merkle_root: root,
        time,
        bits: GENERATED_BITS,
        nonce: 0,
    };
    let mut bytes = header.serialize();
    let hash = loop {
        let h = sha256d(&bytes);
        if check_pow(&h, GENERATED_BITS, pow_limit).is_ok() {
            break h;
        }
        header.nonce += 1;
        bytes[76..80].copy_from_slice(&header.nonce.to_le_bytes());
    };
    let mut block = bytes.to_vec();
    write_compact_size(&mut block, n_tx as u64);
    block.extend_from_slice(&cb.bytes);
    for t in spends {
        block.extend_from_slice(&t.bytes);
    }
    (hash, block, cb.txid)
}

/// Core's COINBASE_MATURITY: a coinbase output is spendable 100 blocks later.
const COINBASE_MATURITY: u64 = 100;

/// The generator's own view of the best chain's UTXO set: main-chain transactions spend real,
/// mature outputs, so a reindex has spends to resolve and a known final set to reach.
/// `foreign` counts the outputs it pays to scripts it holds no key for (count, total): they stay
/// unspent.
#[derive(Clone, Default)]
struct Wallet {
    spendable: Vec<Owned>,
    immature: std::collections::VecDeque<(u64, Owned)>,
    foreign: (u64, u64),
    /// The kinds its new outputs take.
    kinds: &'static [Kind],
    /// `GenConfig::bad_signature_kind`, and the kind of the input it damaged.
    bad_kind: Option<Kind>,
    damaged: Option<Kind>,
}

impl Wallet {
    fn mature_at(&mut self, height: u64) {
        while let Some(&(h, c)) = self.immature.front() {
            if h + COINBASE_MATURITY > height {
                break;
            }
            self.spendable.push(c);
            self.immature.pop_front();
        }
    }

    fn count_and_total(&self) -> (u64, u64) {
        let all = self
            .spendable
            .iter()
            .chain(self.immature.iter().map(|(_, c)| c));
        all.fold(self.foreign, |(n, t), c| (n + 1, t + c.value))
    }

    /// A signed transaction spending 1-3 random coins into 1-3 outputs: the wallet's own kinds,
    /// now and then a small payment to another standard script (never the last output, which
    /// takes the change), plus an OP_RETURN now and then. Its own outputs are spendable at once
    /// (in-block chains). With `bad_signature`, the first input's signature is wrong (and when
    /// a damaged kind is asked for, that input is a coin of that kind, if the wallet has one);
    /// the flag returned says whether it did damage.
    fn spend(
        &mut self,
        rng: &mut SmallRng,
        ring: &KeyRing,
        bad_signature: bool,
    ) -> Option<(TxBytes, u64, bool)> {
        if self.spendable.is_empty() {
            return None;
        }
        let forced = match (bad_signature, self.bad_kind) {
            (true, Some(kind)) => self.spendable.iter().position(|c| c.kind == kind),
            _ => None,
        };
        let bad_signature = bad_signature && (self.bad_kind.is_none() || forced.is_some());
        let n_in = rng.gen_range(1..=3usize.min(self.spendable.len()));
        let inputs: Vec<Owned> = (0..n_in)
            .map(|j| {
                let i = match forced {
                    Some(i) if j == 0 => i,
                    _ => rng.gen_range(0..self.spendable.len()),
                };
                self.spendable.swap_remove(i)
            })
            .collect();
        if bad_signature {
            self.damaged.get_or_insert(inputs[0].kind);
        }
        let total_in: u64 = inputs.iter().map(|c| c.value).sum();
        let fee = rng.gen_range(0..=(total_in / 10).min(50_000));
        let mut n_out = rng.gen_range(1..=3usize);
        let spendable_total = total_in - fee;
        if spendable_total < 1_000 * n_out as u64 {
            n_out = 1;
        }
        // Each output: Some((kind, key)) for the wallet's own, None for a foreign script.
        let owners: Vec<Option<(Kind, u8)>> = (0..n_out)
            .map(|i| {
                if i + 1 < n_out && rng.gen_bool(0.2) {
                    None
                } else {
                    let kind = self.kinds[rng.gen_range(0..self.kinds.len())];
                    Some((kind, rng.gen_range(0..KEY_COUNT) as u8))
                }
            })
            .collect();
        let mut outputs: Vec<(u64, Vec<u8>)> = Vec::with_capacity(n_out + 1);
        let mut left = spendable_total;
        for (i, owner) in owners.iter().enumerate() {
            let v = if i + 1 == n_out {
                left
            } else if owner.is_none() {
                rng.gen_range(546..=20_000).min(left / 2)
            } else {
                rng.gen_range(0..=left / 2)
            };
            left -= v;
            let script = match owner {
                Some((kind, key)) => ring.script_pubkey(*kind, *key),
                None => {
                    self.foreign.0 += 1;
                    self.foreign.1 += v;
                    standard_script(rng)
                }
            };
            outputs.push((v, script));
        }
        if rng.gen_bool(0.1) {
            let mut data = [0u8; 20];
            rng.fill(&mut data);
            outputs.push((0, [&[0x6a, 20][..], &data].concat()));
        }
        let signed = ring.sign(&inputs, &outputs, bad_signature);
        for (vout, (owner, (v, _))) in owners.iter().zip(&outputs).enumerate() {
            if let Some((kind, key)) = *owner {
                self.spendable.push(Owned {
                    txid: signed.txid,
                    vout: vout as u32,
                    value: *v,
                    kind,
                    key,
                });
            }
        }
        let tx = TxBytes {
            bytes: signed.bytes,
            txid: signed.txid,
            wtxid: signed.wtxid,
        };
        Some((tx, fee, bad_signature))
    }
}

/// An output script of a random standard type (keys are random bytes of the right shape): the
/// wallet's payments to others.
fn standard_script(rng: &mut SmallRng) -> Vec<u8> {
    let mut k = [0u8; 33];
    rng.fill(&mut k[..]);
    k[0] = 2 + (k[0] & 1);
    let mut k2 = k;
    k2[0] ^= 1;
    match rng.gen_range(0..10) {
        0..=5 => random_output_script(rng),
        6 => [&[0x00, 0x20][..], &k[1..]].concat(),
        7 => [&[0x21][..], &k, &[0xac]].concat(),
        8 => [&[0x51, 0x21][..], &k, &[0x21], &k2, &[0x52, 0xae]].concat(),
        _ => [&[0x52, 0x20][..], &k[1..]].concat(),
    }
}

/// Writes records like Core's `FlatFileSeq`: a new file when the next record would reach the
/// maximum size, finished files truncated, the last one preallocated with raw zeros.
struct BlkWriter<'a> {
    dir: &'a Path,
    file_size: u64,
    key: [u8; 8],
    file_no: u32,
    used: u64,
    out: Option<BufWriter<File>>,
    scratch: Vec<u8>,
    total: u64,
}

impl<'a> BlkWriter<'a> {
    fn write(&mut self, magic: [u8; 4], block: &[u8]) -> io::Result<()> {
        let rec_len = 8 + block.len() as u64;
        if self.out.is_some() && self.used + rec_len >= self.file_size {
            self.out.take().unwrap().flush()?;
            self.file_no += 1;
            self.used = 0;
        }
        if self.out.is_none() {
            let path = self.dir.join(format!("blk{:05}.dat", self.file_no));
            self.out = Some(BufWriter::with_capacity(1 << 20, File::create(path)?));
        }
        self.scratch.clear();
        self.scratch.extend_from_slice(&magic);
        self.scratch
            .extend_from_slice(&(block.len() as u32).to_le_bytes());
        self.scratch.extend_from_slice(block);
        let phase = (self.used % 8) as usize;
        for (i, b) in self.scratch.iter_mut().enumerate() {
            *b ^= self.key[(phase + i) & 7];
        }
        self.out.as_mut().unwrap().write_all(&self.scratch)?;
        self.used += rec_len;
        self.total += rec_len;
        Ok(())
    }

    /// Leaves the last file with the zero-filled tail of Core's preallocation.
    fn finish(mut self) -> io::Result<u32> {
        if let Some(mut w) = self.out.take() {
            let chunk = if self.file_size >= 4 * BLOCKFILE_CHUNK_SIZE {
                BLOCKFILE_CHUNK_SIZE
            } else {
                (self.file_size / 4).max(4096)
            };
            let target = self.used.div_ceil(chunk) * chunk;
            w.flush()?;
            let mut f = w.into_inner().map_err(|e| e.into_error())?;
            f.seek(SeekFrom::Start(self.used))?;
            f.write_all(&vec![0u8; (target - self.used) as usize])?;
        }
        Ok(self.file_no + 1)
    }
}

/// One block at `height` on `prev` whose transactions spend `wallet`'s mature coins (and whose
/// coinbase joins it): (hash, bytes). With `bad_signature`, the first spend's first signature
/// is wrong.
#[allow(clippy::too_many_arguments)]
fn wallet_block(
    rng: &mut SmallRng,
    ring: &KeyRing,
    wallet: &mut Wallet,
    prev: [u8; 32],
    height: u64,
    time: u32,
    k: usize,
    pow_limit: U256,
    bad_signature: bool,
) -> ([u8; 32], Vec<u8>) {
    wallet.mature_at(height);
    let mut fees = 0;
    let mut bad = bad_signature;
    let spends: Vec<TxBytes> = (1..k)
        .filter_map(|_| {
            let spend = wallet.spend(rng, ring, bad);
            bad &= !matches!(spend, Some((_, _, true)));
            spend
        })
        .map(|(tx, fee, _)| {
            fees += fee;
            tx
        })
        .collect();
    let value = generated_subsidy(height) + fees;
    let (kind, key) = (
        wallet.kinds[rng.gen_range(0..wallet.kinds.len())],
        rng.gen_range(0..KEY_COUNT) as u8,
    );
    let payout = ring.script_pubkey(kind, key);
    let (hash, block, cb_txid) = assemble_block(
        rng,
        prev,
        height,
        time,
        &spends,
        (value, &payout),
        pow_limit,
    );
    let coin = Owned {
        txid: cb_txid,
        vout: 0,
        value,
        kind,
        key,
    };
    wallet.immature.push_back((height, coin));
    (hash, block)
}

pub fn generate(cfg: &GenConfig, blocks_dir: &Path) -> io::Result<GenSummary> {
    if !GENERATED_NETWORKS.contains(&cfg.network) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "cannot generate {} chains (main, testnet, signet, regtest)",
                cfg.network.name()
            ),
        ));
    }
    std::fs::create_dir_all(blocks_dir)?;
    let mut rng = SmallRng::seed_from_u64(cfg.seed);
    let mut key = [0u8; 8];
    if cfg.xor {
        while key == [0u8; 8] {
            rng.fill(&mut key);
        }
    }
    std::fs::write(blocks_dir.join("xor.dat"), key)?;
    let pow_limit = Network::Regtest.pow_limit();
    let ring = KeyRing::new(cfg.seed);
    let genesis = genesis_block(cfg.network);
    let genesis_hash = cfg.network.genesis_hash();
    let (genesis_time, _) = cfg.network.genesis_time_nonce();
    let n = cfg.blocks.max(1);
    let tx_count =
        |rng: &mut SmallRng| rng.gen_range(cfg.tx_min.max(1)..=cfg.tx_max.max(cfg.tx_min).max(1));

    // Main chain, in height order; heights[h] = hash.
    let mut chain: Vec<([u8; 32], Vec<u8>)> = Vec::with_capacity(n as usize);
    chain.push((genesis_hash, genesis));
    let mut wallet = Wallet {
        kinds: if cfg.all_script_kinds {
            &ALL_KINDS
        } else {
            &KINDS
        },
        bad_kind: cfg.bad_signature_kind,
        ..Default::default()
    };
    let fork = (cfg.reorg_depth > 0 && cfg.reorg_depth + 1 < n).then(|| n - 1 - cfg.reorg_depth);
    let mut fork_wallet = None;
    for h in 1..n {
        let prev = chain[h as usize - 1].0;
        let time = genesis_time + 600 * h as u32;
        let k = tx_count(&mut rng);
        chain.push(wallet_block(
            &mut rng,
            &ring,
            &mut wallet,
            prev,
            h,
            time,
            k,
            pow_limit,
            h == cfg.bad_signature_height,
        ));
        if fork == Some(h) {
            fork_wallet = Some(wallet.clone());
        }
    }
    // The reorg: a branch with real spends of the set at the fork, one block longer than the
    // main chain above it; then (reorg_back) two more main-chain blocks.
    let mut damaged = wallet.damaged;
    let mut branch: Vec<([u8; 32], Vec<u8>)> = Vec::new();
    let mut back: Vec<([u8; 32], Vec<u8>)> = Vec::new();
    if let (Some(fork), Some(mut bw)) = (fork, fork_wallet) {
        let mut prev = chain[fork as usize].0;
        for h in fork + 1..=n {
            let time = genesis_time + 600 * h as u32 + 3;
            let k = tx_count(&mut rng);
            let bad = cfg.bad_signature_branch && h == fork + 1;
            let b = wallet_block(&mut rng, &ring, &mut bw, prev, h, time, k, pow_limit, bad);
            prev = b.0;
            branch.push(b);
        }
        damaged = damaged.or(bw.damaged);
        if cfg.reorg_back {
            let mut prev = chain[n as usize - 1].0;
            for h in n..n + 2 {
                let time = genesis_time + 600 * h as u32;
                let k = tx_count(&mut rng);
                let b = wallet_block(
                    &mut rng,
                    &ring,
                    &mut wallet,
                    prev,
                    h,
                    time,
                    k,
                    pow_limit,
                    false,
                );
                prev = b.0;
                back.push(b);
            }
        } else {
            wallet = bw;
        }
    }
    let (summary_utxo_count, summary_utxo_total) = wallet.count_and_total();
    // Arrival order: genesis first, then each window of the main chain shuffled.
    let mut summary = GenSummary {
        utxo_count: summary_utxo_count,
        utxo_total: summary_utxo_total,
        xor_key: key,
        bad_signature_kind: damaged,
        tip_height: n - 1,
        tip_hash: chain[n as usize - 1].0,
        ..Default::default()
    };
    let final_chain: Vec<[u8; 32]> = if !back.is_empty() {
        chain.iter().chain(&back).map(|b| b.0).collect()
    } else if !branch.is_empty() {
        let fork = fork.unwrap() as usize;
        chain[..=fork].iter().chain(&branch).map(|b| b.0).collect()
    } else {
        chain.iter().map(|b| b.0).collect()
    };
    summary.tip_height = final_chain.len() as u64 - 1;
    summary.tip_hash = *final_chain.last().unwrap();
    summary.heights = final_chain
        .iter()
        .enumerate()
        .map(|(h, b)| (h as u64, *b))
        .collect();
    let w = cfg.shuffle_window.max(1);
    let mut main_positions: Vec<usize> = (1..chain.len()).collect();
    for win in main_positions.chunks_mut(w) {
        for i in (1..win.len()).rev() {
            let j = rng.gen_range(0..=i);
            win.swap(i, j);
        }
    }
    let mut blocks_out: Vec<(u64, Vec<u8>)> = Vec::with_capacity(chain.len());
    // Sort key: arrival slot; extra blocks are slotted after their parent's window.
    for (slot, (_, bytes)) in std::iter::once(0usize)
        .chain(main_positions)
        .map(|h| (h, std::mem::take(&mut chain[h].1)))
        .enumerate()
    {
        blocks_out.push(((slot as u64) << 20, bytes));
    }
    // Side branches: fork below the tip so the main chain keeps strictly more work.
    if n >= 4 {
        for _ in 0..cfg.side_branches {
            let fork_at = rng.gen_range(1..n - 2);
            let max_len = (n - 2 - fork_at).clamp(1, 3);
            let len = rng.gen_range(1..=max_len);
            let mut prev = summary.heights[fork_at as usize].1;
            for d in 1..=len {
                let h = fork_at + d;
                let time = genesis_time + 600 * h as u32 + 1;
                let k = tx_count(&mut rng);
                let (hash, bytes) = make_block(&mut rng, &ring, prev, h, time, k, pow_limit);
                prev = hash;
                summary.side_branch_blocks += 1;
                let slot = (h + w as u64) << 20 | rng.gen_range(0..1u64 << 19);
                blocks_out.push((slot, bytes));
            }
        }
    }
    // Orphans: a child of a block that is mined but never written.
    for _ in 0..cfg.orphans {
        let at = rng.gen_range(0..n);
        let parent = summary.heights[at as usize].1;
        let time = genesis_time + 600 * (at as u32 + 1) + 2;
        let (ghost, _) = make_block(&mut rng, &ring, parent, at + 1, time, 1, pow_limit);
        let (hash, bytes) = make_block(&mut rng, &ring, ghost, at + 2, time + 600, 1, pow_limit);
        summary.orphans.push(hash);
        let slot = rng.gen_range(0..blocks_out.len() as u64) << 20 | 1 << 19;
        blocks_out.push((slot, bytes));
    }
    blocks_out.sort_by_key(|b| b.0);
    // The reorg's records come last, after every other record.
    summary.reorg_records = (branch.len() as u64, back.len() as u64);
    for (_, bytes) in branch.into_iter().chain(back) {
        blocks_out.push((u64::MAX, bytes));
    }

    let mut writer = BlkWriter {
        dir: blocks_dir,
        file_size: cfg.file_size.max(1024),
        key,
        file_no: 0,
        used: 0,
        out: None,
        scratch: Vec::new(),
        total: 0,
    };
    let magic = cfg.network.magic();
    for (_, bytes) in &blocks_out {
        writer.write(magic, bytes)?;
    }
    summary.records = blocks_out.len() as u64;
    summary.bytes = writer.total;
    summary.files = writer.finish()?;

    if cfg.network == Network::Regtest {
        summary.blocks_indexed =
            n + summary.side_branch_blocks + summary.reorg_records.0 + summary.reorg_records.1;
        summary.chainwork = block_work(GENERATED_BITS) * U256::from(summary.tip_height + 1);
    } else {
        // Regtest difficulty is above every other network's limit: only genesis is valid.
        summary.blocks_indexed = 1;
        summary.chainwork = block_work(cfg.network.genesis_bits());
        summary.tip_height = 0;
        summary.tip_hash = genesis_hash;
        summary.invalid_count = summary.records - 1;
        summary.utxo_count = 0;
        summary.utxo_total = 0;
        summary.heights.truncate(1);
        summary.orphans.clear();
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn genesis_blocks_hash_to_the_known_values() {
        for net in GENERATED_NETWORKS {
            let g = genesis_block(net);
            assert_eq!(sha256d(&g[..80]), net.genesis_hash(), "{net:?}");
        }
        assert_eq!(genesis_block(Network::Main).len(), 285);
    }

    #[test]
    fn bip34_pushes() {
        assert_eq!(bip34_push(1), vec![0x51]);
        assert_eq!(bip34_push(127), vec![1, 127]);
        assert_eq!(bip34_push(128), vec![2, 128, 0]);
        assert_eq!(bip34_push(702_861), vec![3, 0x8d, 0xb9, 0x0a]);
    }
}
