//! Dataset `headers`: one row per distinct block hash after linking, plus the RocksDB block-index
//! entries made from the same rows (so Parquet and RocksDB can never disagree).
//!
//! `LinkedTree` links the scan log once and then hands out the table, the block index and the
//! best chain in slices, so the caller streams them to Parquet and SST files without holding
//! every output at once. The scan log stays in its chunks (no concatenated copy).

use super::hex::{display_hex_into, forward_hex_into};
use crate::btc::link::{link, EntryState, HeaderContext, LinkInput, LinkOutput};
use crate::btc::locktime::{median_time_past, MEDIAN_TIME_SPAN};
use crate::btc::network::Network;
use crate::btc::scan::RecordStatus;
use crate::store::{best_chain_key, IndexValue, BEST_CHAIN_BUCKET};
use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Int32Builder, StringBuilder, UInt32Builder, UInt64Builder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt32Type, UInt64Type};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, PrimitiveArray, RecordBatch, StringArray,
};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use std::collections::VecDeque;
use std::sync::Arc;

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("hash", DataType::Utf8, false),
        Field::new("prev_hash", DataType::Utf8, false),
        Field::new("height", DataType::UInt32, true),
        Field::new("in_best_chain", DataType::Boolean, false),
        Field::new("chainwork", DataType::Utf8, true),
        Field::new("status", DataType::Utf8, false),
        Field::new("invalid_reason", DataType::Utf8, true),
        Field::new("version", DataType::Int32, false),
        Field::new("merkle_root", DataType::Utf8, false),
        Field::new("time", DataType::UInt32, false),
        Field::new("bits", DataType::UInt32, false),
        Field::new("nonce", DataType::UInt32, false),
        Field::new("n_tx", DataType::UInt64, true),
        Field::new("size", DataType::UInt32, false),
        Field::new("file", DataType::UInt32, false),
        Field::new("offset", DataType::UInt64, false),
        Field::new("data_pos", DataType::UInt64, false),
        Field::new("copies", DataType::UInt32, false),
        Field::new("copy_status", DataType::Utf8, false),
        Field::new("body_checked", DataType::Boolean, false),
    ]))
}

fn fixed32<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a [[u8; 32]], ArrowError> {
    let col = batch
        .column_by_name(name)
        .ok_or_else(|| ArrowError::SchemaError(format!("missing column {name}")))?;
    let arr = col.as_fixed_size_binary_opt().ok_or_else(|| {
        ArrowError::SchemaError(format!("column {name} is not FixedSizeBinary(32)"))
    })?;
    let values = arr.value_data();
    let start = arr.offset() * 32;
    let bytes = &values[start..start + arr.len() * 32];
    // SAFETY-free reinterpretation: [[u8; 32]] has alignment 1.
    Ok(unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const [u8; 32], arr.len()) })
}

fn col<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef, ArrowError> {
    batch
        .column_by_name(name)
        .ok_or_else(|| ArrowError::SchemaError(format!("missing column {name}")))
}

fn status_of(s: &str) -> RecordStatus {
    match s {
        "ok" => RecordStatus::Ok,
        "body_error" => RecordStatus::BodyError,
        "invalid_body" => RecordStatus::InvalidBody,
        "invalid_block" => RecordStatus::InvalidBlock,
        _ => RecordStatus::InvalidHeader,
    }
}

fn header_bytes(
    version: i32,
    prev: &[u8; 32],
    merkle: &[u8; 32],
    time: u32,
    bits: u32,
    nonce: u32,
) -> [u8; 80] {
    let mut h = [0u8; 80];
    h[0..4].copy_from_slice(&version.to_le_bytes());
    h[4..36].copy_from_slice(prev);
    h[36..68].copy_from_slice(merkle);
    h[68..72].copy_from_slice(&time.to_le_bytes());
    h[72..76].copy_from_slice(&bits.to_le_bytes());
    h[76..80].copy_from_slice(&nonce.to_le_bytes());
    h
}

/// The typed columns of one scan-log chunk.
struct ChunkView<'a> {
    hashes: &'a [[u8; 32]],
    prevs: &'a [[u8; 32]],
    merkles: &'a [[u8; 32]],
    bits: &'a PrimitiveArray<UInt32Type>,
    reason: &'a StringArray,
    version: &'a PrimitiveArray<Int32Type>,
    time: &'a PrimitiveArray<UInt32Type>,
    nonce: &'a PrimitiveArray<UInt32Type>,
    n_tx: &'a PrimitiveArray<UInt64Type>,
    declared: &'a PrimitiveArray<UInt32Type>,
    file: &'a PrimitiveArray<UInt32Type>,
    magic_offset: &'a PrimitiveArray<UInt64Type>,
    checked: &'a BooleanArray,
}

impl<'a> ChunkView<'a> {
    fn new(records: &'a RecordBatch) -> Result<ChunkView<'a>, ArrowError> {
        Ok(ChunkView {
            hashes: fixed32(records, "hash")?,
            prevs: fixed32(records, "prev_hash")?,
            merkles: fixed32(records, "merkle_root")?,
            bits: primitive(records, "bits")?,
            reason: col(records, "reason")?
                .as_string_opt::<i32>()
                .ok_or_else(|| ArrowError::SchemaError("reason is not Utf8".into()))?,
            version: primitive(records, "version")?,
            time: primitive(records, "time")?,
            nonce: primitive(records, "nonce")?,
            n_tx: primitive(records, "n_tx")?,
            declared: primitive(records, "declared_size")?,
            file: primitive(records, "file")?,
            magic_offset: primitive(records, "magic_offset")?,
            checked: col(records, "body_checked")?
                .as_boolean_opt()
                .ok_or_else(|| ArrowError::SchemaError("body_checked is not Boolean".into()))?,
        })
    }

    fn header(&self, i: usize) -> [u8; 80] {
        header_bytes(
            self.version.value(i),
            &self.prevs[i],
            &self.merkles[i],
            self.time.value(i),
            self.bits.value(i),
            self.nonce.value(i),
        )
    }

    fn n_tx(&self, i: usize) -> Option<u64> {
        self.n_tx.is_valid(i).then(|| self.n_tx.value(i))
    }
}

fn primitive<'a, T: arrow_array::ArrowPrimitiveType>(
    batch: &'a RecordBatch,
    name: &str,
) -> Result<&'a PrimitiveArray<T>, ArrowError> {
    col(batch, name)?
        .as_primitive_opt::<T>()
        .ok_or_else(|| ArrowError::SchemaError(format!("column {name} has the wrong type")))
}

/// Sorts distinct hashes into key order. Hashes are uniformly random, so ordering by their first
/// eight bytes as an integer settles almost every comparison without a 32-byte compare; runs
/// sharing a prefix are then put in full order.
fn sort_by_hash(entries: &mut Vec<([u8; 32], u32)>) {
    let prefix = |h: &[u8; 32]| u64::from_be_bytes(h[..8].try_into().unwrap());
    let mut keyed: Vec<(u64, u32)> = entries
        .iter()
        .enumerate()
        .map(|(i, (h, _))| (prefix(h), i as u32))
        .collect();
    keyed.sort_unstable();
    let mut sorted: Vec<([u8; 32], u32)> =
        keyed.iter().map(|&(_, i)| entries[i as usize]).collect();
    let mut lo = 0;
    while lo < keyed.len() {
        let mut hi = lo + 1;
        while hi < keyed.len() && keyed[hi].0 == keyed[lo].0 {
            hi += 1;
        }
        if hi - lo > 1 {
            sorted[lo..hi].sort_unstable();
        }
        lo = hi;
    }
    *entries = sorted;
}

/// (chunk, row in chunk) of global record `r` (`starts`: where each chunk begins).
fn locate_record(starts: &[usize], r: usize) -> (usize, usize) {
    let c = starts.partition_point(|&s| s <= r) - 1;
    (c, r - starts[c])
}

/// Block-index values of every entry in entry order, encoded walking the scan log in order
/// (gathering them by hash later reads one row per key instead of every column).
fn encode_index_values(
    chunks: &[RecordBatch],
    starts: &[usize],
    out: &LinkOutput,
) -> Result<Vec<u8>, ArrowError> {
    let views: Vec<ChunkView<'_>> = chunks
        .iter()
        .map(ChunkView::new)
        .collect::<Result<_, _>>()?;
    let mut values = Vec::with_capacity(out.record.len() * crate::store::INDEX_VALUE_LEN);
    for (e, &r) in out.record.iter().enumerate() {
        let (c, i) = locate_record(starts, r as usize);
        let v = &views[c];
        IndexValue {
            state: out.state[e] as u8,
            height: out.height[e],
            file: v.file.value(i),
            magic_offset: v.magic_offset.value(i),
            declared_size: v.declared.value(i),
            n_tx: v.n_tx(i).map(|n| n.min(u32::MAX as u64 - 1) as u32),
            copies: out.copies[e],
            in_best_chain: out.state[e] == EntryState::Active,
            chainwork: out.chainwork[e].to_big_endian(),
            header: v.header(i),
        }
        .encode_into(&mut values);
    }
    Ok(values)
}

/// Per table row: file, record offset, height (None when not linked to the root).
pub type Positions = (Vec<u32>, Vec<u64>, Vec<Option<u32>>);

/// The scan log (every record copy, in scan order, as one or more chunks) linked into the tree.
pub struct LinkedTree {
    chunks: Vec<RecordBatch>,
    /// Global row number where each chunk starts, plus the total.
    starts: Vec<usize>,
    statuses: Vec<RecordStatus>,
    pub link: LinkOutput,
    /// Entries in table order: by height (unlinked last), then first appearance, so height
    /// ranges prune well.
    order: Vec<u32>,
    /// (hash, entry) in block-index key order.
    by_hash: Vec<([u8; 32], u32)>,
    /// Best-chain entries by height.
    best: Vec<u32>,
    /// Block-index values of every entry in entry order (encoded walking the scan log in
    /// order; gathering them by hash later reads one row per key instead of every column).
    index_values: Vec<u8>,
}

impl LinkedTree {
    /// The tree of `network`'s records from `root`; Core's contextual header checks run when
    /// the root is the network's genesis.
    pub fn new(
        chunks: Vec<RecordBatch>,
        root: [u8; 32],
        network: Network,
    ) -> Result<LinkedTree, ArrowError> {
        let mut starts = vec![0usize];
        let mut hashes: Vec<[u8; 32]> = Vec::new();
        let mut prevs: Vec<[u8; 32]> = Vec::new();
        let mut bits: Vec<u32> = Vec::new();
        let mut times: Vec<u32> = Vec::new();
        let mut versions: Vec<i32> = Vec::new();
        let mut statuses: Vec<RecordStatus> = Vec::new();
        for chunk in &chunks {
            let v = ChunkView::new(chunk)?;
            hashes.extend_from_slice(v.hashes);
            prevs.extend_from_slice(v.prevs);
            bits.extend_from_slice(v.bits.values());
            times.extend_from_slice(v.time.values());
            versions.extend_from_slice(v.version.values());
            let status = col(chunk, "status")?
                .as_string_opt::<i32>()
                .ok_or_else(|| ArrowError::SchemaError("status is not Utf8".into()))?;
            statuses.extend(status.iter().map(|s| status_of(s.unwrap_or(""))));
            starts.push(hashes.len());
        }
        let link = link(&LinkInput {
            hashes: &hashes,
            prevs: &prevs,
            bits: &bits,
            status: &statuses,
            root,
            context: (root == network.genesis_hash()).then_some(HeaderContext {
                network,
                times: &times,
                versions: &versions,
            }),
        });
        drop((prevs, bits, times, versions));
        let m = link.record.len();
        // Three independent products of the linked tree, built side by side.
        let (order, by_hash, index_values) = std::thread::scope(|s| {
            let by_hash = s.spawn(|| {
                let mut by_hash: Vec<([u8; 32], u32)> = (0..m)
                    .map(|e| (hashes[link.record[e] as usize], e as u32))
                    .collect();
                sort_by_hash(&mut by_hash);
                by_hash
            });
            let index_values = s.spawn(|| encode_index_values(&chunks, &starts, &link));
            let mut order: Vec<u32> = (0..m as u32).collect();
            order.sort_unstable_by_key(|&e| (link.height[e as usize].unwrap_or(u32::MAX), e));
            (
                order,
                by_hash.join().expect("hash sort thread"),
                index_values.join().expect("index value thread"),
            )
        });
        drop(hashes);
        let best = order
            .iter()
            .copied()
            .filter(|&e| link.state[e as usize] == EntryState::Active)
            .collect();
        Ok(LinkedTree {
            chunks,
            starts,
            statuses,
            link,
            order,
            by_hash,
            best,
            index_values: index_values?,
        })
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    pub fn best_len(&self) -> usize {
        self.best.len()
    }

    /// Values of the `btc_best` column family (buckets of heights).
    pub fn best_buckets(&self) -> usize {
        self.best.len().div_ceil(BEST_CHAIN_BUCKET as usize)
    }

    fn views(&self) -> Result<Vec<ChunkView<'_>>, ArrowError> {
        self.chunks.iter().map(ChunkView::new).collect()
    }

    /// (chunk, row in chunk) of an entry's chosen record.
    fn locate(&self, e: usize) -> (usize, usize) {
        locate_record(&self.starts, self.link.record[e] as usize)
    }

    fn status(&self, e: usize) -> RecordStatus {
        self.statuses[self.link.record[e] as usize]
    }

    /// The `invalid_reason` of an entry's row.
    fn row_reason<'a>(&self, views: &[ChunkView<'a>], e: usize) -> Option<&'a str> {
        match (self.link.state[e], self.status(e)) {
            (EntryState::Invalid, RecordStatus::InvalidHeader | RecordStatus::InvalidBlock) => {
                let (c, i) = self.locate(e);
                let reason = views[c].reason;
                reason.is_valid(i).then(|| reason.value(i))
            }
            (EntryState::Invalid, _) => self.link.invalid_reason[e],
            _ => None,
        }
    }

    pub fn hash(&self, e: usize) -> Result<[u8; 32], ArrowError> {
        let (c, i) = self.locate(e);
        Ok(fixed32(&self.chunks[c], "hash")?[i])
    }

    /// Orphans and invalid entries (hash, reason), in table order.
    #[allow(clippy::type_complexity)]
    pub fn orphans_and_invalid(
        &self,
    ) -> Result<(Vec<[u8; 32]>, Vec<([u8; 32], Option<String>)>), ArrowError> {
        let views = self.views()?;
        let mut orphans = Vec::new();
        let mut invalid = Vec::new();
        for &e in &self.order {
            let e = e as usize;
            let (c, i) = self.locate(e);
            match self.link.state[e] {
                EntryState::Orphan => orphans.push(views[c].hashes[i]),
                EntryState::Invalid => invalid.push((
                    views[c].hashes[i],
                    self.row_reason(&views, e).map(str::to_string),
                )),
                _ => {}
            }
        }
        Ok((orphans, invalid))
    }

    /// The `file`, `offset` and `height` columns of the whole `headers` table (the guided
    /// reindex compares them with the index without reading the table back).
    pub fn positions(&self) -> Result<Positions, ArrowError> {
        let views = self.views()?;
        let n = self.len();
        let (mut file, mut offset, mut height) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for &e in &self.order {
            let (c, i) = self.locate(e as usize);
            file.push(views[c].file.value(i));
            offset.push(views[c].magic_offset.value(i));
            height.push(self.link.height[e as usize]);
        }
        Ok((file, offset, height))
    }

    /// Rows `lo..hi` of the `headers` table.
    pub fn headers(&self, lo: usize, hi: usize) -> Result<RecordBatch, ArrowError> {
        let views = self.views()?;
        let rows = &self.order[lo.min(self.len())..hi.min(self.len())];
        let m = rows.len();
        let mut c_hash = StringBuilder::with_capacity(m, m * 64);
        let mut c_prev = StringBuilder::with_capacity(m, m * 64);
        let mut c_height = UInt32Builder::with_capacity(m);
        let mut c_best = BooleanBuilder::with_capacity(m);
        let mut c_work = StringBuilder::with_capacity(m, m * 64);
        let mut c_status = StringBuilder::with_capacity(m, m * 8);
        let mut c_reason = StringBuilder::new();
        let mut c_version = Int32Builder::with_capacity(m);
        let mut c_merkle = StringBuilder::with_capacity(m, m * 64);
        let mut c_time = UInt32Builder::with_capacity(m);
        let mut c_bits = UInt32Builder::with_capacity(m);
        let mut c_nonce = UInt32Builder::with_capacity(m);
        let mut c_ntx = UInt64Builder::with_capacity(m);
        let mut c_size = UInt32Builder::with_capacity(m);
        let mut c_file = UInt32Builder::with_capacity(m);
        let mut c_offset = UInt64Builder::with_capacity(m);
        let mut c_datapos = UInt64Builder::with_capacity(m);
        let mut c_copies = UInt32Builder::with_capacity(m);
        let mut c_copy_status = StringBuilder::with_capacity(m, m * 2);
        let mut c_checked = BooleanBuilder::with_capacity(m);
        let mut s = String::with_capacity(64);
        let out = &self.link;
        for &e in rows {
            let e = e as usize;
            let (c, i) = self.locate(e);
            let v = &views[c];
            let state = out.state[e];
            s.clear();
            display_hex_into(&v.hashes[i], &mut s);
            c_hash.append_value(&s);
            s.clear();
            display_hex_into(&v.prevs[i], &mut s);
            c_prev.append_value(&s);
            c_height.append_option(out.height[e]);
            c_best.append_value(state == EntryState::Active);
            if out.height[e].is_some() {
                s.clear();
                forward_hex_into(&out.chainwork[e].to_big_endian(), &mut s);
                c_work.append_value(&s);
            } else {
                c_work.append_null();
            }
            c_status.append_value(state.name());
            c_reason.append_option(self.row_reason(&views, e));
            c_version.append_value(v.version.value(i));
            s.clear();
            display_hex_into(&v.merkles[i], &mut s);
            c_merkle.append_value(&s);
            c_time.append_value(v.time.value(i));
            c_bits.append_value(v.bits.value(i));
            c_nonce.append_value(v.nonce.value(i));
            c_ntx.append_option(v.n_tx(i));
            c_size.append_value(v.declared.value(i));
            c_file.append_value(v.file.value(i));
            c_offset.append_value(v.magic_offset.value(i));
            c_datapos.append_value(v.magic_offset.value(i) + 8);
            c_copies.append_value(out.copies[e]);
            c_copy_status.append_value(self.status(e).name());
            c_checked.append_value(v.checked.value(i));
        }
        let cols: Vec<ArrayRef> = vec![
            Arc::new(c_hash.finish()),
            Arc::new(c_prev.finish()),
            Arc::new(c_height.finish()),
            Arc::new(c_best.finish()),
            Arc::new(c_work.finish()),
            Arc::new(c_status.finish()),
            Arc::new(c_reason.finish()),
            Arc::new(c_version.finish()),
            Arc::new(c_merkle.finish()),
            Arc::new(c_time.finish()),
            Arc::new(c_bits.finish()),
            Arc::new(c_nonce.finish()),
            Arc::new(c_ntx.finish()),
            Arc::new(c_size.finish()),
            Arc::new(c_file.finish()),
            Arc::new(c_offset.finish()),
            Arc::new(c_datapos.finish()),
            Arc::new(c_copies.finish()),
            Arc::new(c_copy_status.finish()),
            Arc::new(c_checked.finish()),
        ];
        RecordBatch::try_new(schema(), cols)
    }

    /// Block-index entries `lo..hi` in key (hash) order: (keys, values).
    pub fn index_entries(
        &self,
        lo: usize,
        hi: usize,
    ) -> Result<(BinaryArray, BinaryArray), ArrowError> {
        let entries = &self.by_hash[lo.min(self.len())..hi.min(self.len())];
        let len = crate::store::INDEX_VALUE_LEN;
        let mut keys = BinaryBuilder::with_capacity(entries.len(), entries.len() * 32);
        let mut values = BinaryBuilder::with_capacity(entries.len(), entries.len() * len);
        for (hash, e) in entries {
            let e = *e as usize;
            keys.append_value(hash);
            values.append_value(&self.index_values[e * len..(e + 1) * len]);
        }
        Ok((keys.finish(), values.finish()))
    }

    /// Best-chain buckets `lo..hi` (see `store.rs`) as (bucket keys, values): `value` appends
    /// the `width` bytes of each height (in order, from the bucket's first) to its bucket's.
    fn best_buckets_of(
        &self,
        lo: usize,
        hi: usize,
        width: usize,
        mut value: impl FnMut(usize, &mut Vec<u8>),
    ) -> (BinaryArray, BinaryArray) {
        let per = BEST_CHAIN_BUCKET as usize;
        let (lo, hi) = (lo.min(self.best_buckets()), hi.min(self.best_buckets()));
        let heights = (lo * per).min(self.best.len())..(hi * per).min(self.best.len());
        let mut keys = BinaryBuilder::with_capacity(hi - lo, (hi - lo) * 4);
        let mut values = BinaryBuilder::with_capacity(hi - lo, heights.len() * width);
        let mut bucket = Vec::with_capacity(per * width);
        for (k, start) in heights.clone().step_by(per).enumerate() {
            bucket.clear();
            for h in start..(start + per).min(heights.end) {
                value(h, &mut bucket);
            }
            keys.append_value(best_chain_key(((lo + k) * per) as u32));
            values.append_value(&bucket);
        }
        (keys.finish(), values.finish())
    }

    /// Best-chain buckets `lo..hi`: (bucket keys, concatenated hashes).
    pub fn best_entries(
        &self,
        lo: usize,
        hi: usize,
    ) -> Result<(BinaryArray, BinaryArray), ArrowError> {
        let views = self.views()?;
        Ok(self.best_buckets_of(lo, hi, 32, |h, bucket| {
            let (c, i) = self.locate(self.best[h] as usize);
            bucket.extend_from_slice(&views[c].hashes[i]);
        }))
    }

    /// Best-chain median times past, buckets `lo..hi` (the keys of `best_entries`): each
    /// height's as u32 little-endian, the median of its block's time and the ten before.
    pub fn best_mtp_entries(
        &self,
        lo: usize,
        hi: usize,
    ) -> Result<(BinaryArray, BinaryArray), ArrowError> {
        let views = self.views()?;
        let time = |h: usize| {
            let (c, i) = self.locate(self.best[h] as usize);
            views[c].time.value(i)
        };
        // The last eleven times, oldest first, each read once (the first height's ten before
        // it read up front).
        let first = (lo * BEST_CHAIN_BUCKET as usize).min(self.best.len());
        let mut last: VecDeque<u32> = (first.saturating_sub(MEDIAN_TIME_SPAN - 1)..first)
            .map(time)
            .collect();
        let mut window = [0u32; MEDIAN_TIME_SPAN];
        Ok(self.best_buckets_of(lo, hi, 4, |h, bucket| {
            if last.len() == MEDIAN_TIME_SPAN {
                last.pop_front();
            }
            last.push_back(time(h));
            let n = last.len();
            for (slot, t) in window.iter_mut().zip(&last) {
                *slot = *t;
            }
            bucket.extend_from_slice(&median_time_past(&mut window[..n]).to_le_bytes());
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::sort_by_hash;

    #[test]
    fn sort_by_hash_equals_a_full_sort_with_shared_prefixes() {
        let mut entries: Vec<([u8; 32], u32)> = (0..500u32)
            .map(|i| {
                let mut h = [0u8; 32];
                // Few distinct eight-byte prefixes, so runs must be ordered by the rest.
                h[..8].copy_from_slice(&((i * 7919) % 5).to_be_bytes().repeat(2));
                h[8..12].copy_from_slice(&(i.wrapping_mul(2_654_435_761)).to_be_bytes());
                h[31] = (i % 3) as u8;
                (h, i)
            })
            .collect();
        let mut expected = entries.clone();
        expected.sort_unstable();
        sort_by_hash(&mut entries);
        assert_eq!(entries, expected);
    }
}
