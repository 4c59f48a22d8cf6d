//! Full block decode for `--mode full`: every transaction, input and output of a block into
//! column buffers, with the per-block checks Core's `CheckBlock` / `ContextualCheckBlock` make
//! that need no UTXO set (merkle root and CVE-2012-2459 mutation, coinbase rules, transaction
//! sanity, legacy sigop limit, witness commitment, weight). BIP34 needs the linked height: the coinbase height is
//! extracted here and compared by the committer.
//!
//! A block is parsed into reusable span buffers first and only copied into the columns once it
//! checks out, so an invalid block leaves a `blocks` row with its reason and no transactions.
//!
//! `Rows::Verdicts` (the body pass's staging) parses and checks every block exactly as
//! `Rows::Full` does and fills the same `blocks` columns, but of the rows below them keeps only
//! each transaction's txid, block and position: the later stages write the other rows from
//! the blocks themselves.

use super::block::{check_merkle, check_witness_and_weight, TxInfo, MAX_BLOCK_WEIGHT};
use super::columns::{BinCol, StrCol};
use super::encode::{Cursor, DecodeError};
use super::header::HEADER_LEN;
use super::network::Network;
use super::script::{classify, legacy_sigops, AddressBatch, ScriptType};
use super::sha256::{sha256d, sha256d_each, Parts};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Core's MAX_BLOCK_SIGOPS_COST; legacy sigops count WITNESS_SCALE_FACTOR (4) each.
pub const MAX_BLOCK_SIGOPS_COST: u64 = 80_000;
const WITNESS_SCALE_FACTOR: u64 = 4;
/// Core's MAX_MONEY in satoshis.
pub const MAX_MONEY: u64 = 21_000_000 * 100_000_000;
/// Bytes read per refill when the blocks are smaller: small enough that what was just copied
/// out of the page cache is still in the core's cache when the decoder reads it, large
/// enough that the syscalls do not count.
const READ_WINDOW: usize = 256 << 10;

#[derive(Clone, Copy, Default)]
pub(crate) struct InSpan {
    /// Where the input's prevout (txid 32 | vout u32 LE) starts.
    pub(crate) prev: usize,
    pub(crate) script: (usize, usize),
    pub(crate) sequence: u32,
    pub(crate) wit_start: usize,
    pub(crate) wit_n: usize,
}

#[derive(Clone, Copy, Default)]
pub(crate) struct OutSpan {
    pub(crate) value: u64,
    pub(crate) script: (usize, usize),
}

#[derive(Clone, Copy, Default)]
pub(crate) struct TxSpan {
    start: usize,
    end: usize,
    pub(crate) version: i32,
    pub(crate) lock_time: u32,
    pub(crate) ins: (usize, usize),
    pub(crate) outs: (usize, usize),
    stripped_size: usize,
    /// The inputs and outputs (the stripped form less version and lock time); `None` for a
    /// transaction in the legacy form, whose txid is the hash of all of it.
    segwit_body: Option<(usize, usize)>,
    pub(crate) has_witness: bool,
    pub(crate) txid: [u8; 32],
    pub(crate) wtxid: [u8; 32],
}

impl TxSpan {
    /// Where the serialized transaction lies in its block: [start, end).
    pub(crate) fn bounds(&self) -> (usize, usize) {
        (self.start, self.end)
    }

    /// (size, weight, vsize) as Core counts them: serialized bytes, 3 * stripped + size, and
    /// weight / 4 rounded up.
    pub(crate) fn sizes(&self) -> (u32, u32, u32) {
        let size = (self.end - self.start) as u32;
        let weight = 3 * self.stripped_size as u32 + size;
        (size, weight, weight.div_ceil(4))
    }
}

/// Reusable parse buffers (cleared per block, never shrunk).
#[derive(Default)]
pub(crate) struct Spans {
    pub(crate) txs: Vec<TxSpan>,
    pub(crate) ins: Vec<InSpan>,
    pub(crate) outs: Vec<OutSpan>,
    pub(crate) wit: Vec<(usize, usize)>,
    /// Rows in `txs` of the transactions in the segwit form (their wtxid is hashed apart).
    segwit: Vec<u32>,
    digests: Vec<[u8; 32]>,
}

impl Spans {
    /// Frames a whole block (header first) into these buffers; returns (bytes consumed,
    /// weight).
    pub(crate) fn parse_block(&mut self, data: &[u8]) -> Result<(usize, u64), DecodeError> {
        self.txs.clear();
        self.ins.clear();
        self.outs.clear();
        self.wit.clear();
        self.segwit.clear();
        let mut c = Cursor::new(data);
        c.skip(HEADER_LEN)?;
        let n_tx = c.compact_size()?;
        let mut stripped = c.pos();
        for _ in 0..n_tx {
            let tx = parse_tx_spans(&mut c, self)?;
            stripped += tx.stripped_size;
            if tx.segwit_body.is_some() {
                self.segwit.push(self.txs.len() as u32);
            }
            self.txs.push(tx);
        }
        let consumed = c.pos();
        self.hash_txs(data);
        Ok((consumed, 3 * stripped as u64 + consumed as u64))
    }

    /// Every txid, then every segwit wtxid, through the SHA-256 lanes at once (a legacy
    /// transaction's wtxid is its txid).
    fn hash_txs(&mut self, data: &[u8]) {
        let (txs, segwit) = (&self.txs, &self.segwit);
        sha256d_each(
            txs.len() + segwit.len(),
            |i| match txs.get(i) {
                Some(t) => match t.segwit_body {
                    Some((s, e)) => Parts::three(
                        &data[t.start..t.start + 4],
                        &data[s..e],
                        &data[t.end - 4..t.end],
                    ),
                    None => Parts::one(&data[t.start..t.end]),
                },
                None => {
                    let t = &txs[segwit[i - txs.len()] as usize];
                    Parts::one(&data[t.start..t.end])
                }
            },
            &mut self.digests,
        );
        let (txids, wtxids) = self.digests.split_at(self.txs.len());
        for (t, id) in self.txs.iter_mut().zip(txids) {
            t.txid = *id;
            t.wtxid = *id;
        }
        for (&row, wtxid) in self.segwit.iter().zip(wtxids) {
            self.txs[row as usize].wtxid = *wtxid;
        }
    }
}

#[derive(Default)]
pub struct BlockCols {
    pub hash: Vec<[u8; 32]>,
    pub offset: Vec<u64>,
    pub size: Vec<u32>,
    pub stripped_size: Vec<u32>,
    pub weight: Vec<u64>,
    pub n_tx: Vec<Option<u64>>,
    pub valid: Vec<bool>,
    pub reason: Vec<Option<String>>,
    pub coinbase_height: Vec<Option<i64>>,
    pub n_inputs: Vec<u64>,
    pub n_outputs: Vec<u64>,
    pub output_value: Vec<u64>,
}

#[derive(Default)]
pub struct TxCols {
    pub txid: Vec<[u8; 32]>,
    pub wtxid: Vec<[u8; 32]>,
    /// Row of the block in `BlockCols`.
    pub block: Vec<u32>,
    pub position: Vec<u32>,
    pub version: Vec<i32>,
    pub lock_time: Vec<u32>,
    pub size: Vec<u32>,
    pub vsize: Vec<u32>,
    pub weight: Vec<u32>,
    pub n_in: Vec<u32>,
    pub n_out: Vec<u32>,
    pub is_coinbase: Vec<bool>,
    pub has_witness: Vec<bool>,
    pub output_value: Vec<u64>,
}

#[derive(Default)]
pub struct InputCols {
    /// Row of the transaction in `TxCols`.
    pub tx: Vec<u32>,
    pub vin: Vec<u32>,
    pub prev_txid: Vec<[u8; 32]>,
    pub prev_vout: Vec<u32>,
    pub script_sig: BinCol,
    pub sequence: Vec<u32>,
    pub witness_items: Vec<u32>,
    /// Flattened witness items with per-input list offsets.
    pub witness: BinCol,
    pub witness_offsets: Vec<i32>,
}

#[derive(Default)]
pub struct OutputCols {
    pub tx: Vec<u32>,
    pub vout: Vec<u32>,
    pub value: Vec<u64>,
    pub script_type: Vec<ScriptType>,
    pub address: StrCol,
    pub script_pubkey: BinCol,
}

#[derive(Default)]
pub struct BodyColumns {
    pub blocks: BlockCols,
    pub txs: TxCols,
    pub inputs: InputCols,
    pub outputs: OutputCols,
    /// Bytes of block data decoded (for throughput figures).
    pub bytes: u64,
}

impl BodyColumns {
    /// Grows every row column once for a parsed block (amortised like `Vec::reserve`), so
    /// the per-output and per-input pushes never reallocate; `blocks` times the block's rows
    /// and bytes, so that a unit's first block can make room for the whole unit (no column
    /// then moves as it grows).
    fn reserve_block(&mut self, sp: &Spans, blocks: usize) {
        let (n_tx, n_in, n_out, n_wit) = (sp.txs.len(), sp.ins.len(), sp.outs.len(), sp.wit.len());
        let (n_tx, n_in, n_out, n_wit) =
            (n_tx * blocks, n_in * blocks, n_out * blocks, n_wit * blocks);
        let span_bytes = |(s, e): (usize, usize)| (e - s) * blocks;
        let t = &mut self.txs;
        for v in [&mut t.block, &mut t.position, &mut t.lock_time] {
            v.reserve(n_tx);
        }
        for v in [
            &mut t.size,
            &mut t.vsize,
            &mut t.weight,
            &mut t.n_in,
            &mut t.n_out,
        ] {
            v.reserve(n_tx);
        }
        t.txid.reserve(n_tx);
        t.wtxid.reserve(n_tx);
        t.version.reserve(n_tx);
        t.is_coinbase.reserve(n_tx);
        t.has_witness.reserve(n_tx);
        t.output_value.reserve(n_tx);
        let i = &mut self.inputs;
        for v in [&mut i.tx, &mut i.vin, &mut i.prev_vout, &mut i.sequence] {
            v.reserve(n_in);
        }
        i.witness_items.reserve(n_in);
        i.prev_txid.reserve(n_in);
        i.witness_offsets.reserve(n_in + 1);
        let sig_bytes = sp.ins.iter().map(|x| span_bytes(x.script)).sum();
        i.script_sig.reserve(n_in, sig_bytes);
        let wit_bytes = sp.wit.iter().map(|&x| span_bytes(x)).sum();
        i.witness.reserve(n_wit, wit_bytes);
        let o = &mut self.outputs;
        o.tx.reserve(n_out);
        o.vout.reserve(n_out);
        o.value.reserve(n_out);
        o.script_type.reserve(n_out);
        let spk_bytes = sp.outs.iter().map(|x| span_bytes(x.script)).sum();
        o.script_pubkey.reserve(n_out, spk_bytes);
        // Addresses are at most 90 characters; most outputs have a 34 to 62 character one.
        o.address.offsets.reserve(n_out + 1);
        o.address.valid.reserve(n_out);
        o.address.data.reserve(n_out * 64);
    }
}

/// Which rows a `BodyDecoder` builds below the `blocks` verdict rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rows {
    /// Every transaction, input and output column.
    Full,
    /// Of the transaction columns only `txid`, `block` and `position`; no input or output rows.
    Verdicts,
}

pub struct BodyDecoder {
    network: Network,
    rows: Rows,
    /// Where the blocks still to come end, until the first valid one has made room for them
    /// all (`expect_end`).
    expect_end: Option<u64>,
    spans: Spans,
    addresses: AddressBatch,
    pub cols: BodyColumns,
}

/// Parses one transaction into spans; framing exactly as `block::parse_tx`. Its txid and wtxid
/// are left for `Spans::hash_txs`.
fn parse_tx_spans(c: &mut Cursor, sp: &mut Spans) -> Result<TxSpan, DecodeError> {
    let start = c.pos();
    let version = c.u32()? as i32;
    let mut n_in = c.compact_size()?;
    let mut flags = 0u8;
    let mut body_start = start + 4;
    let mut inputs_read = false;
    if n_in == 0 {
        flags = c.u8()?;
        if flags != 0 {
            body_start = c.pos();
            n_in = c.compact_size()?;
        } else {
            // Zero inputs and zero outputs: Core's reading of an ambiguous 00 00.
            inputs_read = true;
        }
    }
    let in_first = sp.ins.len();
    let out_first = sp.outs.len();
    if !inputs_read || flags != 0 {
        for _ in 0..n_in {
            let prev = c.pos();
            c.skip(36)?;
            let len = c.compact_size()? as usize;
            let s = c.pos();
            c.skip(len)?;
            let sequence = c.u32()?;
            sp.ins.push(InSpan {
                prev,
                script: (s, s + len),
                sequence,
                ..Default::default()
            });
        }
        let n_out = c.compact_size()?;
        for _ in 0..n_out {
            let value = c.u64()?;
            let len = c.compact_size()? as usize;
            let s = c.pos();
            c.skip(len)?;
            sp.outs.push(OutSpan {
                value,
                script: (s, s + len),
            });
        }
    }
    let body_end = c.pos();
    let mut has_witness = false;
    if flags & 1 != 0 {
        flags ^= 1;
        for i in in_first..sp.ins.len() {
            let items = c.compact_size()? as usize;
            sp.ins[i].wit_start = sp.wit.len();
            sp.ins[i].wit_n = items;
            has_witness |= items > 0;
            for _ in 0..items {
                let len = c.compact_size()? as usize;
                let s = c.pos();
                c.skip(len)?;
                sp.wit.push((s, s + len));
            }
        }
        if !has_witness {
            return Err(DecodeError::SuperfluousWitness);
        }
    }
    if flags != 0 {
        return Err(DecodeError::UnknownOptionalData);
    }
    let lock_time = c.u32()?;
    let end = c.pos();
    let segwit_body = (body_start != start + 4).then_some((body_start, body_end));
    let stripped_size = match segwit_body {
        Some((s, e)) => 8 + e - s,
        None => end - start,
    };
    Ok(TxSpan {
        start,
        end,
        version,
        lock_time,
        ins: (in_first, sp.ins.len()),
        outs: (out_first, sp.outs.len()),
        stripped_size,
        segwit_body,
        has_witness,
        txid: [0; 32],
        wtxid: [0; 32],
    })
}

/// Whether two inputs spend the same outpoint: pairwise for the usual few inputs, by sorting
/// (no hashing, no allocation once `scratch` has grown) for many.
fn has_duplicate_prevout<'a>(data: &'a [u8], ins: &[InSpan], scratch: &mut Vec<&'a [u8]>) -> bool {
    let prevout = |inp: &InSpan| &data[inp.prev..inp.prev + 36];
    if ins.len() <= 8 {
        return ins
            .iter()
            .enumerate()
            .any(|(k, a)| ins[k + 1..].iter().any(|b| prevout(a) == prevout(b)));
    }
    scratch.clear();
    scratch.extend(ins.iter().map(prevout));
    scratch.sort_unstable();
    scratch.windows(2).any(|w| w[0] == w[1])
}

pub(crate) fn is_null_prevout(p: &[u8]) -> bool {
    p[..32].iter().all(|&b| b == 0) && p[32..36] == [0xff; 4]
}

/// The height a coinbase scriptSig starts with, when it is pushed the way BIP34 requires
/// (`CScript() << height`: OP_0, OP_1..OP_16, or a minimal little-endian number push).
pub fn coinbase_height(script_sig: &[u8]) -> Option<i64> {
    let first = *script_sig.first()?;
    match first {
        0x00 => Some(0),
        0x51..=0x60 => Some((first - 0x50) as i64),
        1..=8 => {
            let n = script_sig.get(1..1 + first as usize)?;
            if n.last()? & 0x80 != 0 {
                return None; // negative
            }
            let mut v: i64 = 0;
            for (i, b) in n.iter().enumerate() {
                v |= (*b as i64) << (8 * i);
            }
            // Minimal: no needless trailing zero byte, and not a number OP_n would push.
            let minimal = n.len() == 1 || n[n.len() - 1] != 0 || n[n.len() - 2] & 0x80 != 0;
            (minimal && v > 16).then_some(v)
        }
        _ => None,
    }
}

impl BodyDecoder {
    pub fn new(network: Network) -> Self {
        Self::with_rows(network, Rows::Full)
    }

    pub fn with_rows(network: Network, rows: Rows) -> Self {
        BodyDecoder {
            network,
            rows,
            expect_end: None,
            spans: Spans::default(),
            addresses: AddressBatch::default(),
            cols: BodyColumns::default(),
        }
    }

    /// Decodes one block record (`data` = the block bytes, header first, cut at the declared
    /// size) found at `offset` (the record's magic) and appends its rows.
    pub fn push_block(&mut self, offset: u64, data: &[u8]) {
        let hash = if data.len() >= HEADER_LEN {
            sha256d(&data[..HEADER_LEN])
        } else {
            [0u8; 32]
        };
        let b = &mut self.cols.blocks;
        b.hash.push(hash);
        b.offset.push(offset);
        b.size.push(data.len() as u32);
        self.cols.bytes += data.len() as u64;
        match frame_and_check(&mut self.spans, data) {
            (None, reason) => self.finish_block(None, reason, 0, 0),
            (Some((consumed, weight)), reason) => {
                let stripped = (weight - consumed as u64) / 3;
                self.finish_block(Some(data), reason, stripped as u32, weight);
            }
        }
    }

    /// The blocks to come end about at file offset `end`: the next valid block reserves its
    /// rows and bytes scaled to the blocks like it that fit before there (an estimate; the
    /// columns still grow past it if need be).
    pub fn expect_end(&mut self, end: u64) {
        self.expect_end = Some(end);
    }

    /// A record whose bytes are not where the index says: an invalid row with the reason.
    pub fn push_unreadable(&mut self, offset: u64, reason: &str) {
        self.push_block(offset, &[]);
        *self.cols.blocks.reason.last_mut().unwrap() = Some(reason.to_string());
    }

    fn finish_block(&mut self, data: Option<&[u8]>, reason: Option<String>, stripped: u32, w: u64) {
        let block_row = (self.cols.blocks.hash.len() - 1) as u32;
        let valid = reason.is_none() && data.is_some();
        let mut n_in_total = 0u64;
        let mut n_out_total = 0u64;
        let mut value_total = 0u64;
        let mut cb_height = None;
        if let (true, Some(data), Rows::Verdicts) = (valid, data, self.rows) {
            let sp = &self.spans;
            let t = &mut self.cols.txs;
            t.txid.reserve(sp.txs.len());
            t.block.reserve(sp.txs.len());
            t.position.reserve(sp.txs.len());
            for (pos, tx) in sp.txs.iter().enumerate() {
                t.txid.push(tx.txid);
                t.block.push(block_row);
                t.position.push(pos as u32);
            }
            n_in_total = sp.ins.len() as u64;
            n_out_total = sp.outs.len() as u64;
            value_total = sp.outs.iter().map(|o| o.value).sum();
            if let Some(inp) = sp.txs.first().and_then(|t| sp.ins.get(t.ins.0..t.ins.1)) {
                // The coinbase height comes from its (only) input, as the full rows read it.
                cb_height = inp
                    .last()
                    .and_then(|i| coinbase_height(&data[i.script.0..i.script.1]));
            }
        } else if let (true, Some(data)) = (valid, data) {
            let sp = &self.spans;
            let c = &mut self.cols;
            let offset = *c.blocks.offset.last().unwrap();
            let blocks = match self.expect_end.take() {
                // The blocks up to the last one's start, the last one, and an eighth more
                // for blocks larger than this one.
                Some(end) => (end.saturating_sub(offset) / data.len().max(1) as u64 + 1) * 9 / 8,
                None => 1,
            };
            c.reserve_block(sp, blocks.clamp(1, 1 << 16) as usize);
            // Column by column, each a tight loop over the block's rows: pushing a row into
            // some thirty columns at a time reloads every column's length from memory.
            let first_tx = c.txs.txid.len() as u32;
            let txs = &sp.txs;
            let t = &mut c.txs;
            t.txid.extend(txs.iter().map(|x| x.txid));
            t.wtxid.extend(txs.iter().map(|x| x.wtxid));
            t.block.extend(std::iter::repeat_n(block_row, txs.len()));
            t.position.extend(0..txs.len() as u32);
            t.version.extend(txs.iter().map(|x| x.version));
            t.lock_time.extend(txs.iter().map(|x| x.lock_time));
            t.size.extend(txs.iter().map(|x| x.sizes().0));
            t.weight.extend(txs.iter().map(|x| x.sizes().1));
            t.vsize.extend(txs.iter().map(|x| x.sizes().2));
            t.n_in
                .extend(txs.iter().map(|x| (x.ins.1 - x.ins.0) as u32));
            t.n_out
                .extend(txs.iter().map(|x| (x.outs.1 - x.outs.0) as u32));
            t.is_coinbase.extend((0..txs.len()).map(|pos| pos == 0));
            t.has_witness.extend(txs.iter().map(|x| x.has_witness));
            let values_from = t.output_value.len();
            t.output_value.extend(txs.iter().map(|x| {
                sp.outs[x.outs.0..x.outs.1]
                    .iter()
                    .map(|o| o.value)
                    .sum::<u64>()
            }));
            value_total = t.output_value[values_from..].iter().sum();
            n_in_total = sp.ins.len() as u64;
            n_out_total = sp.outs.len() as u64;
            // `parse_tx_spans` appends each transaction's inputs, outputs and witness items in
            // block order, so the block's rows are these slices whole.
            let ins = || sp.ins.iter();
            let outs = || sp.outs.iter();
            let i = &mut c.inputs;
            for (pos, x) in txs.iter().enumerate() {
                let n = x.ins.1 - x.ins.0;
                i.tx.extend(std::iter::repeat_n(first_tx + pos as u32, n));
                i.vin.extend(0..n as u32);
            }
            i.prev_txid.extend(
                ins().map(|x| -> [u8; 32] { data[x.prev..x.prev + 32].try_into().unwrap() }),
            );
            i.prev_vout.extend(
                ins().map(|x| {
                    u32::from_le_bytes(data[x.prev + 32..x.prev + 36].try_into().unwrap())
                }),
            );
            i.script_sig
                .extend(ins().map(|x| &data[x.script.0..x.script.1]));
            i.sequence.extend(ins().map(|x| x.sequence));
            i.witness_items.extend(ins().map(|x| x.wit_n as u32));
            if i.witness_offsets.is_empty() {
                i.witness_offsets.push(0);
            }
            let mut items = i.witness.len() as i32;
            i.witness_offsets.extend(ins().map(|x| {
                items += x.wit_n as i32;
                items
            }));
            i.witness.extend(sp.wit.iter().map(|&(s, e)| &data[s..e]));
            // The coinbase height comes from its last (only, if valid) input.
            if let Some(x) = txs.first().and_then(|x| sp.ins[x.ins.0..x.ins.1].last()) {
                cb_height = coinbase_height(&data[x.script.0..x.script.1]);
            }
            let o = &mut c.outputs;
            for (pos, x) in txs.iter().enumerate() {
                let n = x.outs.1 - x.outs.0;
                o.tx.extend(std::iter::repeat_n(first_tx + pos as u32, n));
                o.vout.extend(0..n as u32);
            }
            o.value.extend(outs().map(|x| x.value));
            let kinds_from = o.script_type.len();
            o.script_type
                .extend(outs().map(|x| classify(&data[x.script.0..x.script.1])));
            self.addresses.push_all(
                outs()
                    .map(|x| &data[x.script.0..x.script.1])
                    .zip(o.script_type[kinds_from..].iter().copied()),
                self.network,
                &mut o.address,
            );
            o.script_pubkey
                .extend(outs().map(|x| &data[x.script.0..x.script.1]));
        }
        let b = &mut self.cols.blocks;
        b.n_tx.push(data.map(|_| self.spans.txs.len() as u64));
        b.stripped_size.push(stripped);
        b.weight.push(w);
        b.valid.push(valid);
        b.reason.push(reason);
        b.coinbase_height.push(cb_height);
        b.n_inputs.push(n_in_total);
        b.n_outputs.push(n_out_total);
        b.output_value.push(value_total);
    }
}

/// Frames a block record's bytes into `sp` and makes the context-free checks: (bytes consumed
/// and weight, if it framed at all; the reject reason, if it fails). The body pass stages this
/// verdict per copy; the chain state makes it again of each best-chain block it reads.
pub(crate) fn frame_and_check(
    sp: &mut Spans,
    data: &[u8],
) -> (Option<(usize, u64)>, Option<String>) {
    match sp.parse_block(data) {
        Err(e) => (None, Some(e.to_string())),
        Ok((consumed, weight)) => {
            let reason = if consumed != data.len() {
                Some(format!(
                    "block size {} but its transactions end at {consumed}",
                    data.len()
                ))
            } else {
                check_block(sp, data, weight).map(str::to_string)
            };
            (Some((consumed, weight)), reason)
        }
    }
}

/// Context-free checks of a block framed into `sp`, in Core's order; the reject reason of the
/// first that fails. `weight`: as `Spans::parse_block` returned it.
pub(crate) fn check_block(sp: &Spans, data: &[u8], weight: u64) -> Option<&'static str> {
    let infos: Vec<TxInfo> = sp
        .txs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut info = TxInfo {
                txid: t.txid,
                wtxid: t.wtxid,
                has_witness: t.has_witness,
                size: t.end - t.start,
                stripped_size: t.stripped_size,
                ..Default::default()
            };
            if i == 0 {
                info.commitment = sp.outs[t.outs.0..t.outs.1]
                    .iter()
                    .rev()
                    .map(|o| &data[o.script.0..o.script.1])
                    .find(|s| s.len() >= 38 && s[..6] == [0x6a, 0x24, 0xaa, 0x21, 0xa9, 0xed])
                    .map(|s| s[6..38].try_into().unwrap());
                if t.ins.1 > t.ins.0 {
                    let first = sp.ins[t.ins.0];
                    let item = (first.wit_n > 0).then(|| sp.wit[first.wit_start]);
                    let item32 = item
                        .filter(|(s, e)| e - s == 32)
                        .map(|(s, e)| data[s..e].try_into().unwrap());
                    info.first_input_witness = (first.wit_n as u64, item32);
                }
            }
            info
        })
        .collect();
    // Merkle root and mutation come first in Core; the rest of check_body (witness
    // commitment, weight) is contextual and runs after the transaction checks.
    if let Some(reason) = check_merkle(data, &infos) {
        return Some(reason);
    }
    let stripped_block = (weight as usize - data.len()) / 3;
    if sp.txs.is_empty()
        || sp.txs.len() * 4 > MAX_BLOCK_WEIGHT as usize
        || stripped_block * 4 > MAX_BLOCK_WEIGHT as usize
    {
        return Some("bad-blk-length");
    }
    let is_coinbase =
        |t: &TxSpan| t.ins.1 - t.ins.0 == 1 && is_null_prevout(&data[sp.ins[t.ins.0].prev..]);
    if !is_coinbase(&sp.txs[0]) {
        return Some("bad-cb-missing");
    }
    if sp.txs[1..].iter().any(is_coinbase) {
        return Some("bad-cb-multiple");
    }
    let mut prevouts: Vec<&[u8]> = Vec::new();
    for (i, t) in sp.txs.iter().enumerate() {
        if t.ins.1 == t.ins.0 {
            return Some("bad-txns-vin-empty");
        }
        if t.outs.1 == t.outs.0 {
            return Some("bad-txns-vout-empty");
        }
        if t.stripped_size * 4 > MAX_BLOCK_WEIGHT as usize {
            return Some("bad-txns-oversize");
        }
        let mut total: u64 = 0;
        for o in &sp.outs[t.outs.0..t.outs.1] {
            if o.value > MAX_MONEY {
                return Some(if (o.value as i64) < 0 {
                    "bad-txns-vout-negative"
                } else {
                    "bad-txns-vout-toolarge"
                });
            }
            total += o.value;
            if total > MAX_MONEY {
                return Some("bad-txns-txouttotal-toolarge");
            }
        }
        let ins = &sp.ins[t.ins.0..t.ins.1];
        if has_duplicate_prevout(data, ins, &mut prevouts) {
            return Some("bad-txns-inputs-duplicate");
        }
        if i == 0 {
            let len = ins[0].script.1 - ins[0].script.0;
            if !(2..=100).contains(&len) {
                return Some("bad-cb-length");
            }
        } else if ins.iter().any(|inp| is_null_prevout(&data[inp.prev..])) {
            return Some("bad-txns-prevout-null");
        }
    }
    // CheckBlock's last context-free rule: legacy sigops of every scriptSig and output.
    let span = |(s, e): (usize, usize)| &data[s..e];
    let sigops: u64 = sp
        .ins
        .iter()
        .map(|i| legacy_sigops(span(i.script)) as u64)
        .sum::<u64>()
        + sp.outs
            .iter()
            .map(|o| legacy_sigops(span(o.script)) as u64)
            .sum::<u64>();
    if sigops * WITNESS_SCALE_FACTOR > MAX_BLOCK_SIGOPS_COST {
        return Some("bad-blk-sigops");
    }
    check_witness_and_weight(&infos, weight)
}

/// Reads and decodes the records at `offsets` (magic positions, ascending) of one blk file.
/// A record that cannot be read (file shrank, size field changed) becomes an invalid row.
pub fn decode_file_records(
    path: &Path,
    key: [u8; 8],
    network: Network,
    offsets: &[u64],
) -> io::Result<BodyColumns> {
    decode_file_rows(path, key, network, offsets, Rows::Full)
}

/// `decode_file_records` building only the `rows` asked for.
pub fn decode_file_rows(
    path: &Path,
    key: [u8; 8],
    network: Network,
    offsets: &[u64],
    rows: Rows,
) -> io::Result<BodyColumns> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let magic = network.magic();
    let mut dec = BodyDecoder::with_rows(network, rows);
    let mut buf: Vec<u8> = Vec::new();
    let mut buf_pos = 0u64;
    if let Some(&last) = offsets.last() {
        dec.expect_end(last.min(len));
    }
    for &off in offsets {
        let head_end = off + 8;
        if !covers(buf_pos, &buf, off, head_end) {
            refill(&file, len, off, 8, &mut buf, &mut buf_pos, key)?;
        }
        let at = (off - buf_pos) as usize;
        let head = buf.get(at..at + 8).unwrap_or(&[]);
        if head.len() < 8 || head[..4] != magic {
            let reason = if head.len() < 8 {
                "record lies past the end of the file"
            } else {
                "no block magic at the indexed offset (file changed?)"
            };
            dec.push_unreadable(off, reason);
            continue;
        }
        let size = u32::from_le_bytes(head[4..8].try_into().unwrap()) as u64;
        let end = (head_end + size).min(len);
        if !covers(buf_pos, &buf, head_end, end) {
            refill(
                &file,
                len,
                off,
                (end - off) as usize,
                &mut buf,
                &mut buf_pos,
                key,
            )?;
        }
        let s = (head_end - buf_pos) as usize;
        let e = (end - buf_pos) as usize;
        dec.push_block(off, &buf[s..e]);
    }
    Ok(dec.cols)
}

fn covers(buf_pos: u64, buf: &[u8], start: u64, end: u64) -> bool {
    start >= buf_pos && end <= buf_pos + buf.len() as u64
}

fn refill(
    file: &File,
    len: u64,
    pos: u64,
    need: usize,
    buf: &mut Vec<u8>,
    buf_pos: &mut u64,
    key: [u8; 8],
) -> io::Result<()> {
    let n = (need.max(READ_WINDOW) as u64).min(len.saturating_sub(pos)) as usize;
    buf.resize(n, 0);
    file.read_exact_at(buf, pos)?;
    if key != [0u8; 8] {
        super::scan::xor_in_place(buf, key, pos);
    }
    *buf_pos = pos;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coinbase_heights() {
        assert_eq!(coinbase_height(&[0x00]), Some(0));
        assert_eq!(coinbase_height(&[0x51, 7]), Some(1));
        assert_eq!(coinbase_height(&[0x60]), Some(16));
        assert_eq!(coinbase_height(&[1, 17]), Some(17));
        assert_eq!(coinbase_height(&[1, 5]), None); // OP_5 is the minimal form
        assert_eq!(coinbase_height(&[2, 128, 0]), Some(128));
        assert_eq!(coinbase_height(&[2, 17, 0]), None); // needless zero byte
        assert_eq!(coinbase_height(&[3, 0x8d, 0xb9, 0x0a]), Some(702_861));
        assert_eq!(coinbase_height(&[1, 0x81]), None);
        assert_eq!(coinbase_height(&[3, 1]), None);
    }
}
