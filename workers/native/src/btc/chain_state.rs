//! The chain state: the UTXO set advanced block by block in height order, with the consensus
//! rules that need it or the chain's median times past (Core's `CheckTxInputs`, BIP34's
//! coinbase height, the coinbase amount, lock times and BIP68's sequence locks: `locktime.rs`)
//! and per-block undo data, so that a reorg rolls the set back exactly (Core's `rev*.dat`).
//!
//! The set itself lives in RocksDB (`btc_utxo`, keys and values as in `utxo.rs`); a `Chunk`
//! is a bounded run of consecutive best-chain blocks. The caller reads the coins the chunk
//! spends from the database (`Chunk::needed`), `Chunk::apply` advances them, and the caller
//! writes the net change, the undo records and its checkpoint in one batch.
//!
//! Coins and their encoding are `coin.rs`; undo records are `undo.rs`.

use super::coin::{key_order, output_row, spendable, utxo_key, Coin, CoinHead, Key, Txid};
use super::decode::{coinbase_height, frame_and_check, is_null_prevout, Spans};
use super::error::{
    BlockAt, ChainStateError, Failure, FailureKind, ReadError, RecordProblem, Reject, StoreError,
};
use super::header::HEADER_LEN;
use super::locktime::{enforces_sequence_locks, is_final, MedianTimes, SequenceLock};
use super::network::Network;
use super::scan::xor_in_place;
use super::sha256::sha256d;
use super::undo::encode_undo;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// Blocks a coinbase output waits before it may be spent.
pub const COINBASE_MATURITY: u32 = 100;

/// Core's block subsidy at `height`.
pub fn subsidy(height: u32, halving_interval: u64) -> u64 {
    let halvings = height as u64 / halving_interval;
    if halvings >= 64 {
        0
    } else {
        5_000_000_000u64 >> halvings
    }
}

/// One best-chain block to apply: where its record is, and what it must hash to.
pub struct SourceBlock {
    pub height: u32,
    pub hash: [u8; 32],
    pub path: PathBuf,
    /// Offset of the record's magic.
    pub offset: u64,
}

impl SourceBlock {
    /// A run of consecutive heights from `first_height`: block `i` is `hashes[i]` (internal
    /// order), its record at `offsets[i]` of `paths[i]`. None when the lengths differ or a
    /// hash is not 32 bytes.
    pub fn run(
        first_height: u32,
        hashes: &[Vec<u8>],
        paths: Vec<PathBuf>,
        offsets: &[u64],
    ) -> Option<Vec<SourceBlock>> {
        if paths.len() != hashes.len() || offsets.len() != hashes.len() {
            return None;
        }
        hashes
            .iter()
            .zip(paths)
            .zip(offsets)
            .enumerate()
            .map(|(i, ((h, path), &offset))| {
                Some(SourceBlock {
                    height: first_height + i as u32,
                    hash: h.as_slice().try_into().ok()?,
                    path,
                    offset,
                })
            })
            .collect()
    }
}

struct LoadedBlock {
    height: u32,
    hash: [u8; 32],
    data: Vec<u8>,
    spans: Spans,
}

/// One best-chain spend, resolved (a row of the `spends` staging table).
#[derive(Default)]
pub struct SpendRows {
    pub height: Vec<u32>,
    pub pos: Vec<u32>,
    pub vin: Vec<u32>,
    pub value: Vec<u64>,
    pub prev_height: Vec<u32>,
    /// The spent output's row among its block's outputs (see `coin_value`).
    pub prev_row: Vec<u32>,
    /// The spent output's scriptPubKey, one per spend (for the `inputs` table's `prev_*`).
    pub prev_script: SpentScripts,
}

/// Scripts one after another: `ends[i]` is where script `i` ends in `bytes`.
#[derive(Default, Clone, Debug, PartialEq, Eq)]
pub struct SpentScripts {
    pub bytes: Vec<u8>,
    pub ends: Vec<usize>,
}

impl SpentScripts {
    pub fn push(&mut self, script: &[u8]) {
        self.bytes.extend_from_slice(script);
        self.ends.push(self.bytes.len());
    }

    pub fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    fn truncate(&mut self, n: usize) {
        self.ends.truncate(n);
        self.bytes.truncate(self.ends.last().copied().unwrap_or(0));
    }
}

/// What applying a chunk did: the net change to `btc_utxo`, one undo record per applied block,
/// the resolved spends, and the first block that broke a rule (nothing from it on applied).
#[derive(Default)]
pub struct Applied {
    pub blocks: u32,
    /// (height, hash) of the last applied block.
    pub tip: Option<(u32, [u8; 32])>,
    pub puts: Vec<(Key, Vec<u8>)>,
    pub deletes: Vec<Key>,
    pub undo: Vec<(u32, Vec<u8>)>,
    pub spends: SpendRows,
    pub count_delta: i64,
    pub amount_delta: i128,
    /// (height, hash, the rule broken).
    pub failure: Option<(u32, [u8; 32], Reject)>,
    /// With every block of the chunk applied: the block after them, which failed its body
    /// checks (`Chunk::body_failure`).
    pub body_failure: Option<(u32, [u8; 32], String)>,
}

impl Applied {
    /// The first block of the chunk that failed, if any: one that broke a consensus rule, or
    /// else the block after the applied ones, which failed its body checks.
    pub fn first_failure(&self) -> Option<Failure> {
        match (&self.failure, &self.body_failure) {
            (Some((height, hash, reject)), _) => Some(Failure {
                height: *height,
                hash: *hash,
                kind: FailureKind::Block,
                reason: reject.reason().to_string(),
            }),
            (None, Some((height, hash, reason))) => Some(Failure {
                height: *height,
                hash: *hash,
                kind: FailureKind::Body,
                reason: reason.clone(),
            }),
            (None, None) => None,
        }
    }
}

/// A run of consecutive best-chain blocks, read and framed, and the coins it needs from the
/// database: every outpoint it spends that it does not create first, and its coinbase outputs
/// (a coinbase can repeat an earlier one's txid, BIP30, and overwrite its unspent outputs).
pub struct Chunk {
    network: Network,
    blocks: Vec<LoadedBlock>,
    pub needed: Vec<Key>,
    /// The first block that failed its context-free checks (height, hash, reject reason):
    /// the chunk holds the blocks before it only.
    pub body_failure: Option<(u32, [u8; 32], String)>,
}

/// Reads one block record (magic, size, block) at `offset` of an open blk file.
fn read_record(
    file: &File,
    len: u64,
    offset: u64,
    key: [u8; 8],
    magic: [u8; 4],
) -> Result<Vec<u8>, RecordProblem> {
    let xor = |buf: &mut Vec<u8>, pos: u64| {
        if key != [0u8; 8] {
            xor_in_place(buf, key, pos);
        }
    };
    if offset + 8 > len {
        return Err(RecordProblem::PastEnd);
    }
    let mut head = vec![0u8; 8];
    file.read_exact_at(&mut head, offset)
        .map_err(RecordProblem::Io)?;
    xor(&mut head, offset);
    if head[..4] != magic {
        return Err(RecordProblem::NoMagic);
    }
    let size = u32::from_le_bytes(head[4..8].try_into().unwrap()) as u64;
    if offset + 8 + size > len {
        return Err(RecordProblem::RunsPastEnd);
    }
    let mut data = vec![0u8; size as usize];
    file.read_exact_at(&mut data, offset + 8)
        .map_err(RecordProblem::Io)?;
    xor(&mut data, offset + 8);
    Ok(data)
}

/// A block read from its file: (height, hash, block bytes).
pub type ReadBlock = (u32, [u8; 32], Vec<u8>);

/// Reads `blocks` from their blk files (each record checked to hold the block its hash names),
/// in the order given.
pub fn read_blocks(
    network: Network,
    xor_key: [u8; 8],
    blocks: Vec<SourceBlock>,
) -> Result<Vec<ReadBlock>, ReadError> {
    let magic = network.magic();
    let mut open: HashMap<PathBuf, (File, u64)> = HashMap::default();
    let mut loaded = Vec::with_capacity(blocks.len());
    for b in blocks {
        if !open.contains_key(&b.path) {
            let f = File::open(&b.path).map_err(|source| ReadError::Open {
                path: b.path.clone(),
                source,
            })?;
            let len = f.metadata().map_err(ReadError::Metadata)?.len();
            open.insert(b.path.clone(), (f, len));
        }
        let (file, len) = &open[&b.path];
        let at = |problem| ReadError::Record {
            block: BlockAt {
                hash: b.hash,
                height: b.height,
                path: b.path.clone(),
                offset: b.offset,
            },
            problem,
        };
        let data = read_record(file, *len, b.offset, xor_key, magic).map_err(at)?;
        if data.len() < HEADER_LEN || sha256d(&data[..HEADER_LEN]) != b.hash {
            return Err(at(RecordProblem::OtherBlock));
        }
        loaded.push((b.height, b.hash, data));
    }
    Ok(loaded)
}

impl Chunk {
    /// Reads and frames `blocks` (consecutive heights, ascending) from their blk files.
    pub fn load(
        network: Network,
        xor_key: [u8; 8],
        blocks: Vec<SourceBlock>,
    ) -> Result<Chunk, ChainStateError> {
        let loaded = read_blocks(network, xor_key, blocks)?;
        Ok(Chunk::from_blocks(network, loaded))
    }

    /// A chunk of blocks already in memory: (height, hash, block bytes), heights ascending.
    /// Each block is framed and makes the body pass's context-free checks (the body pass
    /// leaves the blocks the chain state reads to it): the chunk ends before the first that
    /// fails them (`body_failure`).
    pub fn from_blocks(network: Network, blocks: Vec<(u32, [u8; 32], Vec<u8>)>) -> Chunk {
        let mut loaded = Vec::with_capacity(blocks.len());
        let mut body_failure = None;
        for (height, hash, data) in blocks {
            let mut spans = Spans::default();
            if let (_, Some(reason)) = frame_and_check(&mut spans, &data) {
                body_failure = Some((height, hash, reason));
                break;
            }
            loaded.push(LoadedBlock {
                height,
                hash,
                data,
                spans,
            });
        }
        let mut chunk = Chunk {
            network,
            blocks: loaded,
            needed: Vec::new(),
            body_failure,
        };
        chunk.needed = chunk.plan_reads();
        chunk
    }

    pub(crate) fn network(&self) -> Network {
        self.network
    }

    /// (height, hash, bytes, parse) of each block, in height order.
    pub(crate) fn blocks(&self) -> impl Iterator<Item = (u32, &[u8; 32], &[u8], &Spans)> {
        self.blocks
            .iter()
            .map(|b| (b.height, &b.hash, b.data.as_slice(), &b.spans))
    }

    fn plan_reads(&self) -> Vec<Key> {
        // Sized up front, as the view is: growing a set rehashes every key in it again.
        let (ins, txs) = self.blocks.iter().fold((0, 0), |(i, t), b| {
            (i + b.spans.ins.len(), t + b.spans.txs.len())
        });
        // Transactions other than coinbases made by the chunk's blocks so far: a spend of one
        // is never read. The set holds no coin of its txid (BIP30 lets only a coinbase repeat
        // a txid), so whether the output exists is for the apply to find. One entry a
        // transaction, not one an output: half the probes into a table half the size.
        let mut made: HashSet<Txid> = HashSet::with_capacity_and_hasher(txs, Default::default());
        let mut needed: Vec<Key> = Vec::new();
        let mut seen: HashSet<Key> = HashSet::with_capacity_and_hasher(ins, Default::default());
        for b in &self.blocks {
            let sp = &b.spans;
            for (t, tx) in sp.txs.iter().enumerate() {
                if t == 0 {
                    // A coinbase's outputs may overwrite coins of an earlier one's txid.
                    for (vout, out) in sp.outs[tx.outs.0..tx.outs.1].iter().enumerate() {
                        let k = utxo_key(&tx.txid, vout as u32);
                        if spendable(b.height, &b.data[out.script.0..out.script.1])
                            && seen.insert(k)
                        {
                            needed.push(k);
                        }
                    }
                    continue;
                }
                for inp in &sp.ins[tx.ins.0..tx.ins.1] {
                    let p = &b.data[inp.prev..inp.prev + 36];
                    let txid: &[u8; 32] = p[..32].try_into().unwrap();
                    if made.contains(&Txid(*txid)) {
                        continue;
                    }
                    let k = utxo_key(txid, u32::from_le_bytes(p[32..36].try_into().unwrap()));
                    if seen.insert(k) {
                        needed.push(k);
                    }
                }
                made.insert(Txid(tx.txid));
            }
        }
        needed
    }

    /// Applies the blocks in order to the coins read for `needed` (`values[i]` is the stored
    /// value of `needed[i]`, None if absent), stopping before the first block that breaks a
    /// rule. `times` holds the best chain's median times past up to the chunk's last block's
    /// parent at least.
    pub fn apply(
        &self,
        values: Vec<Option<Vec<u8>>>,
        times: MedianTimes,
    ) -> Result<Applied, ChainStateError> {
        if values.len() != self.needed.len() {
            return Err(ChainStateError::ValueCount {
                given: values.len(),
                needed: self.needed.len(),
            });
        }
        // Sized up front: growing the map rehashes every key again, a chunk's worth each. Only
        // the stored coins and the chunk's outputs add keys (an input finds its coin or fails
        // the block), and a map sized for the inputs too is twice as large: its probes, a cache
        // miss each, then miss more.
        let made: usize = self.blocks.iter().map(|b| b.spans.outs.len()).sum();
        let mut view: View =
            HashMap::with_capacity_and_hasher(made + self.needed.len(), Default::default());
        for (k, v) in self.needed.iter().zip(values) {
            view.insert(
                *k,
                Slot {
                    stored: v.is_some(),
                    coin: v.map(Coin::Stored),
                    touched: false,
                },
            );
        }
        let mut out = Applied::default();
        let rules = ConnectRules {
            bip34: self.network.bip34_height(),
            halving: self.network.halving_interval(),
            csv: self.network.csv_height(),
            times,
        };
        // One list for every block's changes, cleared between blocks.
        let most = self
            .blocks
            .iter()
            .map(|b| b.spans.ins.len() + b.spans.outs.len())
            .max();
        let mut block = BlockChanges::with_capacity(most.unwrap_or(0));
        for b in &self.blocks {
            block.0.clear();
            let spends_mark = out.spends.height.len();
            let failure = apply_block(b, &mut view, &mut block, &mut out.spends, &rules)?;
            if let Some(reason) = failure {
                block.roll_back(&mut view);
                truncate_spends(&mut out.spends, spends_mark);
                out.failure = Some((b.height, b.hash, reason));
                break;
            }
            let (undo, count, amount) = block.undo_record(&b.hash)?;
            out.undo.push((b.height, undo));
            out.count_delta += count;
            out.amount_delta += amount;
            out.blocks += 1;
            out.tip = Some((b.height, b.hash));
        }
        if out.failure.is_none() {
            out.body_failure = self.body_failure.clone();
        }
        // The net change: a coin the chunk left in place is put (if it was stored unchanged,
        // the same bytes again), a stored coin it spent is deleted.
        let mut changed: Vec<(Key, Option<Coin>)> = view
            .into_iter()
            .filter(|(_, s)| s.touched && (s.coin.is_some() || s.stored))
            .map(|(k, s)| (k, s.coin))
            .collect();
        for i in key_order(changed.len(), |i| &changed[i].0) {
            let (k, v) = &mut changed[i as usize];
            match v.take() {
                Some(v) => out.puts.push((*k, v.into_value())),
                None => out.deletes.push(*k),
            }
        }
        Ok(out)
    }
}

/// The set changes of an applied chunk that is not committed yet: its puts and deletes, each
/// sorted by key (as [`Chunk::apply`] returns them).
#[derive(Clone, Copy)]
pub struct Pending<'a> {
    pub puts: &'a [(Key, Vec<u8>)],
    pub deletes: &'a [Key],
}

/// `values` (the stored values of `needed`, None where absent) as they are once `pending`
/// (oldest first) is written: each chunk's deletes, then its puts, as its commit writes them.
/// A binary search per needed key and chunk: the needed keys are few beside a chunk's puts.
pub fn overlay(needed: &[Key], values: &mut [Option<Vec<u8>>], pending: &[Pending]) {
    for (k, v) in needed.iter().zip(values.iter_mut()) {
        for p in pending {
            if let Ok(i) = p.puts.binary_search_by(|(put, _)| put.cmp(k)) {
                *v = Some(p.puts[i].1.clone());
            } else if p.deletes.binary_search(k).is_ok() {
                *v = None;
            }
        }
    }
}

/// The coins a chunk reads and makes, one slot per key: one probe finds a coin whether the
/// database had it or an earlier block of the chunk created it.
type View<'a> = HashMap<Key, Slot<'a>>;

struct Slot<'a> {
    /// The coin as the chunk's blocks so far left it (None: spent or never there).
    coin: Option<Coin<'a>>,
    /// Whether the database holds this key (so that spending it is a delete).
    stored: bool,
    /// Whether an applied block changed it.
    touched: bool,
}

/// What one block did to the coins it touched, change by change in the block's order: the key,
/// the coin before the change (moved out of the view, which no longer needs it) and the value
/// after it (None: spent). A key's first change holds the coin the block found, its last what
/// the block left. A list, not a map: a push per change instead of a hash probe, and the undo
/// record sorts the keys anyway.
struct BlockChanges<'a>(Vec<(Key, Option<Coin<'a>>, Option<u64>)>);

impl<'a> BlockChanges<'a> {
    fn with_capacity(n: usize) -> BlockChanges<'a> {
        BlockChanges(Vec::with_capacity(n))
    }

    /// Replaces `slot`'s coin (key `k`) by `coin` (of `value`; None: spent).
    fn set(&mut self, k: Key, slot: &mut Slot<'a>, coin: Option<Coin<'a>>, value: Option<u64>) {
        let old = std::mem::replace(&mut slot.coin, coin);
        slot.touched = true;
        self.0.push((k, old, value));
    }

    /// Puts back what the block found (a block that breaks a rule changes nothing): newest
    /// change first, so each key ends with the coin before its first change.
    fn roll_back(&mut self, view: &mut View<'a>) {
        for (k, old, _) in self.0.drain(..).rev() {
            if let Some(slot) = view.get_mut(&k) {
                slot.coin = old;
            }
        }
    }

    /// The block's undo record (keys sorted, so equal blocks on equal sets give equal
    /// bytes), and the change it made to the set's count and amount.
    fn undo_record(&self, hash: &[u8; 32]) -> Result<(Vec<u8>, i64, i128), StoreError> {
        let changes = &self.0;
        // By key, then in the block's order within a key.
        let order = key_order(changes.len(), |i| &changes[i].0);
        let mut created = Vec::new();
        let mut restored = Vec::new();
        let (mut count, mut amount) = (0i64, 0i128);
        for run in order.chunk_by(|&a, &b| changes[a as usize].0 == changes[b as usize].0) {
            let (k, old, _) = &changes[run[0] as usize];
            let new = changes[run[run.len() - 1] as usize].2;
            if let Some(value) = new {
                created.push((k, value));
                count += 1;
                amount += value as i128;
            }
            if let Some(v) = old {
                let value = v.head()?.value;
                restored.push((k, v));
                count -= 1;
                amount -= value as i128;
            }
        }
        let u = encode_undo(hash, &created, &restored);
        Ok((u, count, amount))
    }
}

fn truncate_spends(s: &mut SpendRows, n: usize) {
    s.height.truncate(n);
    s.pos.truncate(n);
    s.vin.truncate(n);
    s.value.truncate(n);
    s.prev_height.truncate(n);
    s.prev_row.truncate(n);
    s.prev_script.truncate(n);
}

/// What the consensus rules of `apply_block` need besides the block and the coins.
struct ConnectRules<'t> {
    bip34: u64,
    halving: u64,
    csv: u32,
    times: MedianTimes<'t>,
}

impl ConnectRules<'_> {
    /// The median time past at `height` (of the best chain), which the block at `needed_by`
    /// needs.
    fn median_time(&self, height: u32, needed_by: u32) -> Result<u32, ChainStateError> {
        self.times
            .at(height)
            .ok_or(ChainStateError::MedianTimeMissing { height: needed_by })
    }
}

/// Applies one block to `view`; the reject reason of the rule it breaks first, in the order
/// rechain has always reported them: a lock time not reached and BIP34 height (Core's
/// contextual block checks), missing or spent input, premature coinbase spend, inputs below
/// outputs, a BIP68 sequence lock not reached, coinbase amount.
fn apply_block<'a>(
    b: &'a LoadedBlock,
    view: &mut View<'a>,
    block: &mut BlockChanges<'a>,
    spends: &mut SpendRows,
    rules: &ConnectRules,
) -> Result<Option<Reject>, ChainStateError> {
    let sp = &b.spans;
    let data = &b.data;
    let Some(coinbase) = sp.txs.first() else {
        return Err(ChainStateError::NoTransactions { hash: b.hash });
    };
    // The body checks keep a block whose first transaction is not a coinbase (one input, the
    // null outpoint) off the best chain; one that reaches here anyway is refused as Core
    // refuses it, not read past the inputs it lacks.
    let first = &sp.ins[coinbase.ins.0..coinbase.ins.1];
    if first.len() != 1 || !is_null_prevout(&data[first[0].prev..]) {
        return Ok(Some(Reject::CbMissing));
    }
    // Lock times are measured against the parent's median time past from BIP113 (the CSV
    // deployment) on, before against the block's own time. The genesis block has no context.
    let parent_mtp = match b.height.checked_sub(1) {
        Some(parent) if b.height >= rules.csv => Some(rules.median_time(parent, b.height)?),
        _ => None,
    };
    if b.height > 0 {
        let own_time = u32::from_le_bytes(data[68..72].try_into().unwrap());
        let cutoff = parent_mtp.unwrap_or(own_time);
        for tx in &sp.txs {
            let sequences = sp.ins[tx.ins.0..tx.ins.1].iter().map(|i| i.sequence);
            if !is_final(tx.lock_time, sequences, b.height, cutoff) {
                return Ok(Some(Reject::TxnsNonFinal));
            }
        }
    }
    if b.height as u64 >= rules.bip34 {
        let first = &first[0];
        let sig = &data[first.script.0..first.script.1];
        if coinbase_height(sig) != Some(b.height as i64) {
            return Ok(Some(Reject::CbHeight));
        }
    }
    let (mut premature, mut below_out, mut nonfinal) = (false, false, false);
    let mut fees: u64 = 0;
    let mut coinbase_out: u64 = 0;
    for (t, tx) in sp.txs.iter().enumerate() {
        let outs = &sp.outs[tx.outs.0..tx.outs.1];
        let out_value: u64 = outs.iter().map(|o| o.value).sum();
        if t == 0 {
            coinbase_out = out_value;
        } else {
            let mut in_value: u64 = 0;
            let relative = enforces_sequence_locks(tx.version, b.height, rules.csv);
            let mut lock = SequenceLock::default();
            for (vin, inp) in sp.ins[tx.ins.0..tx.ins.1].iter().enumerate() {
                let p = &data[inp.prev..inp.prev + 36];
                let vout = u32::from_le_bytes(p[32..36].try_into().unwrap());
                let k = utxo_key(&p[..32], vout);
                let Some(slot) = view.get_mut(&k) else {
                    return Ok(Some(Reject::InputsMissingOrSpent));
                };
                let Some(coin) = slot.coin.as_ref() else {
                    return Ok(Some(Reject::InputsMissingOrSpent));
                };
                let prev = coin.head()?;
                if relative {
                    lock.add(inp.sequence, prev.height, |h| rules.times.at(h))
                        .ok_or(ChainStateError::MedianTimeMissing { height: b.height })?;
                }
                spends.prev_script.push(coin.script());
                premature |= prev.coinbase && b.height - prev.height < COINBASE_MATURITY;
                in_value += prev.value;
                spends.height.push(b.height);
                spends.pos.push(t as u32);
                spends.vin.push(vin as u32);
                spends.value.push(prev.value);
                spends.prev_height.push(prev.height);
                spends.prev_row.push(prev.row);
                block.set(k, slot, None, None);
            }
            if in_value < out_value {
                below_out = true;
            } else {
                fees += in_value - out_value;
            }
            // `relative` holds only from the CSV height on, where the parent's time is known.
            nonfinal |= relative && !lock.satisfied(b.height, parent_mtp.unwrap_or(0));
        }
        for (vout, o) in outs.iter().enumerate() {
            let script = &data[o.script.0..o.script.1];
            if !spendable(b.height, script) {
                continue;
            }
            let k = utxo_key(&tx.txid, vout as u32);
            let slot = view.entry(k).or_insert(Slot {
                coin: None,
                stored: false,
                touched: false,
            });
            let head = CoinHead {
                height: b.height,
                coinbase: t == 0,
                value: o.value,
                row: output_row(tx, vout),
            };
            block.set(k, slot, Some(Coin::Made { head, script }), Some(o.value));
        }
    }
    if premature {
        return Ok(Some(Reject::PrematureSpendOfCoinbase));
    }
    if below_out {
        return Ok(Some(Reject::InBelowOut));
    }
    if nonfinal {
        return Ok(Some(Reject::TxnsNonFinal));
    }
    if coinbase_out > fees + subsidy(b.height, rules.halving) {
        return Ok(Some(Reject::CbAmount));
    }
    Ok(None)
}

/// Blocks built by hand for the chain state's tests and the spend resolution's.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;

    pub(crate) const COIN: u64 = 100_000_000;
    pub(crate) const OP_TRUE: &[u8] = &[0x51];

    /// A legacy transaction: inputs (txid internal, vout, scriptSig), outputs (value, script).
    pub(crate) fn tx(inputs: &[([u8; 32], u32, &[u8])], outputs: &[(u64, &[u8])]) -> Vec<u8> {
        let mut t = 1u32.to_le_bytes().to_vec();
        crate::btc::encode::write_compact_size(&mut t, inputs.len() as u64);
        for (txid, vout, sig) in inputs {
            t.extend_from_slice(txid);
            t.extend_from_slice(&vout.to_le_bytes());
            crate::btc::encode::write_compact_size(&mut t, sig.len() as u64);
            t.extend_from_slice(sig);
            t.extend_from_slice(&u32::MAX.to_le_bytes());
        }
        crate::btc::encode::write_compact_size(&mut t, outputs.len() as u64);
        for (value, script) in outputs {
            t.extend_from_slice(&value.to_le_bytes());
            crate::btc::encode::write_compact_size(&mut t, script.len() as u64);
            t.extend_from_slice(script);
        }
        t.extend_from_slice(&0u32.to_le_bytes());
        t
    }

    pub(crate) fn coinbase(tag: &[u8], value: u64) -> Vec<u8> {
        tx(&[([0u8; 32], u32::MAX, tag)], &[(value, OP_TRUE)])
    }

    pub(crate) fn txid(t: &[u8]) -> [u8; 32] {
        sha256d(t)
    }

    /// A block of `txs` under a header that holds their merkle root (the rest of the header
    /// is not checked here: only its hash is carried).
    pub(crate) fn block(txs: &[&Vec<u8>]) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_LEN];
        let txids: Vec<[u8; 32]> = txs.iter().map(|t| txid(t)).collect();
        b[36..68].copy_from_slice(&crate::btc::block::merkle_root(&txids).0);
        crate::btc::encode::write_compact_size(&mut b, txs.len() as u64);
        for t in txs {
            b.extend_from_slice(t);
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btc::coin::{coin_fields, coin_value, MAX_KEY};
    use crate::btc::undo::{decode_undo, unwind, UNDO_VERSION};

    #[test]
    fn keys_order_as_their_bytes() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(17);
        // Few distinct byte values and lengths, so ties, shared prefixes, a key that is
        // another's prefix (the shorter one first) and zero bytes at a shorter key's end occur.
        let mut keys: Vec<Key> = (0..4_000)
            .map(|_| {
                let len = rng.gen_range(0..=MAX_KEY);
                let bytes: Vec<u8> = (0..len).map(|_| rng.gen_range(0..3u8)).collect();
                Key::from_slice(&bytes).unwrap()
            })
            .collect();
        keys.push(utxo_key(&[0xff; 32], 0x7fff_ffff));
        keys.push(utxo_key(&[0xff; 32], 0));
        keys.push(Key::from_slice(&[]).unwrap());
        for a in &keys[..400] {
            for b in &keys {
                assert_eq!(a.cmp(b), (**a).cmp(&**b), "{a:?} against {b:?}");
                assert_eq!(a == b, **a == **b, "{a:?} against {b:?}");
            }
        }
        // By key, equal keys in index order: a stable sort of the bytes.
        let mut stable: Vec<u32> = (0..keys.len() as u32).collect();
        stable.sort_by(|&a, &b| (*keys[a as usize]).cmp(&*keys[b as usize]));
        assert_eq!(key_order(keys.len(), |i| &keys[i]), stable);
    }

    #[test]
    fn overlay_reads_through_uncommitted_chunks_oldest_first() {
        let k = |b: u8| utxo_key(&[b; 32], 0);
        let v = |s: &str| Some(s.as_bytes().to_vec());
        // Stored, spent before, created before, absent, created again before.
        let needed = [k(1), k(2), k(3), k(4), k(5)];
        let stored = vec![v("s"), v("x"), None, None, v("old")];
        let puts = vec![(k(3), b"c".to_vec()), (k(5), b"new".to_vec())];
        let deletes = vec![k(2)];
        let first = Pending {
            puts: &puts,
            deletes: &deletes,
        };
        let mut values = stored.clone();
        overlay(&needed, &mut values, &[first]);
        assert_eq!(values, vec![v("s"), None, v("c"), None, v("new")]);
        // A later chunk's changes win: it spends k3 and creates k2 again.
        let (puts2, deletes2) = (vec![(k(2), b"back".to_vec())], vec![k(3)]);
        let later = Pending {
            puts: &puts2,
            deletes: &deletes2,
        };
        let mut values = stored.clone();
        overlay(&needed, &mut values, &[first, later]);
        assert_eq!(values, vec![v("s"), v("back"), None, None, v("new")]);
        // Nothing pending: as stored.
        let mut values = stored.clone();
        overlay(&needed, &mut values, &[]);
        assert_eq!(values, stored);
    }

    #[test]
    fn a_made_coin_is_encoded_as_the_set_stores_it() {
        let script: &[u8] = b"\x76\xa9\x14";
        let head = CoinHead {
            height: 700_001,
            coinbase: true,
            value: 625_000_000,
            row: 4_097,
        };
        let expected = coin_value(700_001, true, 625_000_000, 4_097, script);
        let made = Coin::Made { head, script };
        assert_eq!(made.encoded_len(), expected.len());
        assert_eq!(made.head().unwrap(), coin_fields(&expected).unwrap());
        assert_eq!(made.clone().into_value(), expected);
        // Spent by a later block of the chunk, the undo record restores those very bytes.
        let k = utxo_key(&[3u8; 32], 1);
        let mut view: View = HashMap::default();
        let slot = Slot {
            coin: Some(made),
            stored: false,
            touched: true,
        };
        view.insert(k, slot);
        let mut block = BlockChanges::with_capacity(1);
        block.set(k, view.get_mut(&k).unwrap(), None, None);
        let (rec, count, amount) = block.undo_record(&[9u8; 32]).unwrap();
        assert_eq!((count, amount), (-1, -625_000_000));
        assert_eq!(decode_undo(&rec).unwrap().restored, vec![(k, expected)]);
    }

    #[test]
    fn undo_round_trip() {
        let k1 = utxo_key(&[1u8; 32], 0);
        let k2 = utxo_key(&[2u8; 32], 300);
        let spent = coin_value(5, true, 50, 3, b"\x51");
        // The block created k1 and spent k2, which it found stored.
        let mut view: View = HashMap::default();
        for (k, coin) in [(k1, None), (k2, Some(Coin::Stored(spent.clone())))] {
            let stored = coin.is_some();
            let touched = false;
            view.insert(
                k,
                Slot {
                    coin,
                    stored,
                    touched,
                },
            );
        }
        let mut block = BlockChanges::with_capacity(2);
        let head = CoinHead {
            height: 9,
            coinbase: false,
            value: 40,
            row: 0,
        };
        let created = Coin::Made { head, script: b"" };
        block.set(k1, view.get_mut(&k1).unwrap(), Some(created), Some(40));
        block.set(k2, view.get_mut(&k2).unwrap(), None, None);
        let (rec, count, amount) = block.undo_record(&[7u8; 32]).unwrap();
        block.roll_back(&mut view);
        assert_eq!(view[&k1].coin, None);
        assert_eq!(view[&k2].coin, Some(Coin::Stored(spent.clone())));
        assert_eq!((count, amount), (0, -10));
        let u = decode_undo(&rec).unwrap();
        assert_eq!(u.hash, [7u8; 32]);
        assert_eq!(u.created, vec![(k1, 40)]);
        assert_eq!(u.restored, vec![(k2, spent.clone())]);
        let (puts, deletes, c, a) = unwind(&[rec]).unwrap();
        assert_eq!(puts, vec![(k2, spent)]);
        assert_eq!(deletes, vec![k1]);
        assert_eq!((c, a), (0, 10));
    }

    #[test]
    fn malformed_undo_is_an_error() {
        assert!(decode_undo(&[]).is_err());
        assert!(decode_undo(&[UNDO_VERSION; 40]).is_err());
        assert!(decode_undo(&[9u8; 41]).is_err());
    }

    use fixtures::{block, coinbase, tx, txid, COIN, OP_TRUE};

    fn apply(blocks: Vec<(u32, Vec<u8>)>, set: &mut HashMap<Key, Vec<u8>>) -> Applied {
        // Mainnet: BIP34 is not active at these heights, so coinbases may repeat (BIP30).
        let chunk = Chunk::from_blocks(
            Network::Main,
            blocks
                .into_iter()
                .map(|(h, b)| (h, [h as u8; 32], b))
                .collect(),
        );
        let values = chunk.needed.iter().map(|k| set.get(k).cloned()).collect();
        // Below mainnet's CSV height: lock times are measured against the blocks' own times.
        let a = chunk.apply(values, MedianTimes(&[])).unwrap();
        for k in &a.deletes {
            set.remove(k);
        }
        for (k, v) in &a.puts {
            set.insert(*k, v.clone());
        }
        a
    }

    #[test]
    fn a_repeated_coinbase_overwrites_and_unwinds_exactly() {
        let mut set = HashMap::default();
        let x = coinbase(b"\x01\x07", 50 * COIN);
        let first = block(&[&x]);
        let second = block(&[&x]); // the same txid again (mainnet's d5d2...8599 case)
        let a = apply(vec![(1, first), (2, second)], &mut set);
        assert_eq!(
            (a.blocks, a.count_delta, a.amount_delta),
            (2, 1, 50 * COIN as i128)
        );
        let key = utxo_key(&txid(&x), 0);
        assert_eq!(
            coin_fields(&set[&key]).unwrap(),
            CoinHead {
                height: 2,
                coinbase: true,
                value: 50 * COIN,
                row: 0
            }
        );
        // Height 102 spends the height-2 copy (mature: 100 blocks later).
        let spend = tx(&[(txid(&x), 0, b"")], &[(49 * COIN, OP_TRUE)]);
        let cb = coinbase(b"\x02\x66\x00", 50 * COIN + COIN);
        let b = apply(vec![(102, block(&[&cb, &spend]))], &mut set);
        assert_eq!(b.failure, None);
        assert_eq!(b.spends.prev_height, vec![2]);
        assert_eq!(b.spends.value, vec![50 * COIN]);
        assert_eq!(set.len(), 2);
        // Unwinding 102 then 2 brings back the height-1 copy the second coinbase overwrote.
        let undos: Vec<Vec<u8>> = a
            .undo
            .iter()
            .chain(&b.undo)
            .rev()
            .map(|u| u.1.clone())
            .collect();
        let (puts, deletes, count, _) = unwind(&undos[..2]).unwrap();
        for k in &deletes {
            set.remove(k);
        }
        for (k, v) in puts {
            set.insert(k, v);
        }
        assert_eq!(count, -1);
        assert_eq!(set.len(), 1);
        assert_eq!(
            coin_fields(&set[&key]).unwrap(),
            CoinHead {
                height: 1,
                coinbase: true,
                value: 50 * COIN,
                row: 0
            }
        );
    }

    #[test]
    fn each_rule_names_the_block_and_applies_nothing_of_it() {
        let cb1 = coinbase(b"\x01\x01", 50 * COIN);
        let base: Vec<(u32, Vec<u8>)> = vec![(1, block(&[&cb1]))];
        let spend_cb1 = |value: u64| tx(&[(txid(&cb1), 0, b"")], &[(value, OP_TRUE)]);
        let cases: Vec<(u32, Vec<u8>, &str)> = vec![
            // A coinbase output spent before maturity.
            (
                50,
                block(&[&coinbase(b"\x01\x32", 50 * COIN), &spend_cb1(COIN)]),
                "bad-txns-premature-spend-of-coinbase",
            ),
            // An output that does not exist.
            (
                101,
                block(&[
                    &coinbase(b"\x01\x65", 50 * COIN),
                    &tx(&[([9u8; 32], 0, b"")], &[(1, OP_TRUE)]),
                ]),
                "bad-txns-inputs-missingorspent",
            ),
            // The same output spent twice in one block.
            (
                101,
                block(&[
                    &coinbase(b"\x01\x65", 50 * COIN),
                    &spend_cb1(COIN),
                    &tx(&[(txid(&cb1), 0, b"\x00")], &[(COIN, OP_TRUE)]),
                ]),
                "bad-txns-inputs-missingorspent",
            ),
            // Outputs worth more than the inputs.
            (
                101,
                block(&[&coinbase(b"\x01\x65", 50 * COIN), &spend_cb1(51 * COIN)]),
                "bad-txns-in-belowout",
            ),
            // A coinbase claiming more than subsidy and fees.
            (
                101,
                block(&[
                    &coinbase(b"\x01\x65", 50 * COIN + COIN + 1),
                    &spend_cb1(49 * COIN),
                ]),
                "bad-cb-amount",
            ),
        ];
        for (height, bad, reason) in cases {
            let mut set = HashMap::default();
            apply(base.clone(), &mut set);
            let before = set.clone();
            let a = apply(vec![(height, bad)], &mut set);
            assert_eq!(a.failure.map(|f| f.2.reason()), Some(reason));
            assert_eq!((a.blocks, a.undo.len(), a.spends.height.len()), (0, 0, 0));
            assert_eq!(
                set, before,
                "{reason}: nothing of the failing block applied"
            );
        }
        // The exact fee is allowed.
        let mut set = HashMap::default();
        apply(base, &mut set);
        let ok = block(&[
            &coinbase(b"\x01\x65", 50 * COIN + COIN),
            &spend_cb1(49 * COIN),
        ]);
        assert_eq!(apply(vec![(101, ok)], &mut set).failure, None);
    }

    #[test]
    fn the_chunk_ends_before_a_block_that_fails_its_body_checks() {
        let (cb1, cb2) = (
            coinbase(b"\x01\x01", 50 * COIN),
            coinbase(b"\x01\x02", 50 * COIN),
        );
        let good = block(&[&cb1]);
        // No coinbase first (found by fuzzing `chain_state`: a first transaction without
        // inputs was read past its end): a spend, or two null inputs; a merkle root that is
        // not the transactions'; bytes that do not frame.
        let mut bad_root = block(&[&cb2]);
        bad_root[40] ^= 1;
        let mut short = block(&[&cb2]);
        short.truncate(short.len() - 3);
        let cases = [
            (
                block(&[&tx(&[(txid(&cb1), 0, b"\x00")], &[(COIN, OP_TRUE)])]),
                "bad-cb-missing",
            ),
            (
                block(&[&tx(
                    &[
                        ([0u8; 32], u32::MAX, b"\x01\x65"),
                        ([0u8; 32], u32::MAX, b""),
                    ],
                    &[(COIN, OP_TRUE)],
                )]),
                "bad-cb-missing",
            ),
            (bad_root, "bad-txnmrklroot"),
            (short, "read past declared block end"),
        ];
        for (bad, reason) in cases {
            let blocks = vec![
                (1, [1u8; 32], good.clone()),
                (2, [2u8; 32], bad),
                (3, [3u8; 32], block(&[&coinbase(b"\x01\x03", 50 * COIN)])),
            ];
            let chunk = Chunk::from_blocks(Network::Main, blocks);
            let (height, hash, why) = chunk.body_failure.clone().unwrap();
            assert_eq!((height, hash), (2, [2u8; 32]));
            assert!(why.contains(reason), "{why} is not {reason}");
            // The blocks before it apply; nothing of it or after it is read.
            assert_eq!(chunk.blocks().count(), 1);
            let a = chunk
                .apply(vec![None; chunk.needed.len()], MedianTimes(&[]))
                .unwrap();
            assert_eq!(
                (a.failure, a.blocks, a.tip),
                (None, 1, Some((1, [1u8; 32])))
            );
        }
    }

    #[test]
    fn bip34_height_is_checked_where_active() {
        // Regtest checks lock times from height 1: the parent's median time (any; none set).
        let times = [0u8; 4 * 5];
        let chunk = Chunk::from_blocks(
            Network::Regtest,
            vec![(5, [5u8; 32], block(&[&coinbase(b"\x01\x06", 50 * COIN)]))],
        );
        let a = chunk
            .apply(vec![None; chunk.needed.len()], MedianTimes(&times))
            .unwrap();
        assert_eq!(a.failure.map(|f| f.2.reason()), Some("bad-cb-height"));
        let chunk = Chunk::from_blocks(
            Network::Regtest,
            vec![(5, [5u8; 32], block(&[&coinbase(b"\x55\x00", 50 * COIN)]))],
        );
        let a = chunk
            .apply(vec![None; chunk.needed.len()], MedianTimes(&times))
            .unwrap();
        assert_eq!((a.failure, a.blocks, a.count_delta), (None, 1, 1));
    }

    #[test]
    fn subsidy_halves() {
        assert_eq!(subsidy(0, 150), 5_000_000_000);
        assert_eq!(subsidy(150, 150), 2_500_000_000);
        assert_eq!(subsidy(150 * 64, 150), 0);
    }

    #[test]
    fn a_lock_time_not_reached_refuses_the_block_by_its_parents_median_time() {
        // Regtest: BIP113 from height 1, so a block's cutoff is its parent's median time past.
        // A coinbase at height 1 (BIP34's push OP_1, then OP_0: a coinbase's script is at least
        // two bytes), its input not final, locked until `lock`.
        let block_at_1 = |lock: u32| {
            let mut cb = coinbase(b"\x51\x00", 50 * COIN);
            let sequence = 4 + 1 + 36 + 1 + 2;
            cb[sequence..sequence + 4].copy_from_slice(&0u32.to_le_bytes());
            let end = cb.len();
            cb[end - 4..].copy_from_slice(&lock.to_le_bytes());
            let chunk = Chunk::from_blocks(Network::Regtest, vec![(1, [1; 32], block(&[&cb]))]);
            let values = vec![None; chunk.needed.len()];
            move |times: &[u8]| chunk.apply(values.clone(), MedianTimes(times))
        };
        let parent_mtp = 1_600_000_000u32.to_le_bytes();
        // Without the parent's median time the block is an error, never a pass.
        let missing = block_at_1(0)(&[]).err().unwrap();
        assert!(matches!(
            missing,
            ChainStateError::MedianTimeMissing { height: 1 }
        ));
        assert!(block_at_1(0)(&parent_mtp).unwrap().failure.is_none());
        // A height lock: 1 is not below 1; a time lock: not below the median time.
        for lock in [1, 1_600_000_000] {
            let a = block_at_1(lock)(&parent_mtp).unwrap();
            assert_eq!(a.failure.map(|f| f.2), Some(Reject::TxnsNonFinal), "{lock}");
            assert_eq!(a.blocks, 0);
        }
        assert!(block_at_1(1_599_999_999)(&parent_mtp)
            .unwrap()
            .failure
            .is_none());
    }
}
