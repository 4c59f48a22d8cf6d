//! Dataset `headers`: one row per distinct block hash after linking, plus the RocksDB block-index
//! entries made from the same rows (so Parquet and RocksDB can never disagree).

use super::hex::{display_hex_into, forward_hex_into};
use crate::btc::link::{link, EntryState, LinkInput, LinkOutput};
use crate::btc::scan::RecordStatus;
use crate::store::{best_chain_key, IndexValue};
use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Int32Builder, StringBuilder, UInt32Builder, UInt64Builder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, BinaryArray, RecordBatch};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
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

pub struct Linked {
    pub headers: RecordBatch,
    pub index_keys: BinaryArray,
    pub index_values: BinaryArray,
    pub best_keys: BinaryArray,
    pub best_values: BinaryArray,
    pub link: LinkOutput,
    pub tip_hash: Option<[u8; 32]>,
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

/// Links every record copy (a `btc_records` batch in scan order) into the block tree.
pub fn build(records: &RecordBatch, root: [u8; 32]) -> Result<Linked, ArrowError> {
    let hashes = fixed32(records, "hash")?;
    let prevs = fixed32(records, "prev_hash")?;
    let merkles = fixed32(records, "merkle_root")?;
    let bits = col(records, "bits")?.as_primitive::<UInt32Type>();
    let status_col = col(records, "status")?.as_string::<i32>();
    let reason_col = col(records, "reason")?.as_string::<i32>();
    let version = col(records, "version")?.as_primitive::<Int32Type>();
    let time = col(records, "time")?.as_primitive::<UInt32Type>();
    let nonce = col(records, "nonce")?.as_primitive::<UInt32Type>();
    let n_tx = col(records, "n_tx")?.as_primitive::<UInt64Type>();
    let declared = col(records, "declared_size")?.as_primitive::<UInt32Type>();
    let file = col(records, "file")?.as_primitive::<UInt32Type>();
    let magic_offset = col(records, "magic_offset")?.as_primitive::<UInt64Type>();
    let checked = col(records, "body_checked")?.as_boolean();

    let statuses: Vec<RecordStatus> = (0..records.num_rows())
        .map(|i| status_of(status_col.value(i)))
        .collect();
    let out = link(&LinkInput {
        hashes,
        prevs,
        bits: bits.values(),
        status: &statuses,
        root,
    });
    let m = out.record.len();
    // Rows sorted by height (unlinked last), then first appearance: height ranges prune well.
    let mut order: Vec<u32> = (0..m as u32).collect();
    order.sort_by_key(|&e| (out.height[e as usize].unwrap_or(u32::MAX), e));

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
    let mut k_index = BinaryBuilder::with_capacity(m, m * 32);
    let mut v_index = BinaryBuilder::with_capacity(m, m * crate::store::INDEX_VALUE_LEN);
    let mut k_best = BinaryBuilder::new();
    let mut v_best = BinaryBuilder::new();
    let mut s = String::with_capacity(64);
    for &e in &order {
        let e = e as usize;
        let r = out.record[e] as usize;
        let state = out.state[e];
        let best = state == EntryState::Active;
        let linked = out.height[e].is_some();
        s.clear();
        display_hex_into(&hashes[r], &mut s);
        c_hash.append_value(&s);
        s.clear();
        display_hex_into(&prevs[r], &mut s);
        c_prev.append_value(&s);
        c_height.append_option(out.height[e]);
        c_best.append_value(best);
        let work = out.chainwork[e].to_big_endian();
        if linked {
            s.clear();
            forward_hex_into(&work, &mut s);
            c_work.append_value(&s);
        } else {
            c_work.append_null();
        }
        c_status.append_value(state.name());
        let reason = match (state, statuses[r]) {
            (EntryState::Invalid, RecordStatus::InvalidHeader | RecordStatus::InvalidBlock) => {
                reason_col.is_valid(r).then(|| reason_col.value(r))
            }
            (EntryState::Invalid, _) => out.invalid_reason[e],
            _ => None,
        };
        c_reason.append_option(reason);
        c_version.append_value(version.value(r));
        s.clear();
        display_hex_into(&merkles[r], &mut s);
        c_merkle.append_value(&s);
        c_time.append_value(time.value(r));
        c_bits.append_value(bits.value(r));
        c_nonce.append_value(nonce.value(r));
        let ntx = n_tx.is_valid(r).then(|| n_tx.value(r));
        c_ntx.append_option(ntx);
        c_size.append_value(declared.value(r));
        c_file.append_value(file.value(r));
        c_offset.append_value(magic_offset.value(r));
        c_datapos.append_value(magic_offset.value(r) + 8);
        c_copies.append_value(out.copies[e]);
        c_copy_status.append_value(statuses[r].name());
        c_checked.append_value(checked.value(r));

        if best {
            k_best.append_value(best_chain_key(out.height[e].unwrap()));
            v_best.append_value(hashes[r]);
        }
    }
    // The block index in key order, so it can be written as one sorted SST file and ingested.
    // Values are encoded in entry order (close to scan order, so column reads stay sequential),
    // then gathered in hash order.
    let len = crate::store::INDEX_VALUE_LEN;
    let mut values = Vec::with_capacity(m * len);
    for e in 0..m {
        let r = out.record[e] as usize;
        let ntx = n_tx.is_valid(r).then(|| n_tx.value(r));
        IndexValue {
            state: out.state[e] as u8,
            height: out.height[e],
            file: file.value(r),
            magic_offset: magic_offset.value(r),
            declared_size: declared.value(r),
            n_tx: ntx.map(|n| n.min(u32::MAX as u64 - 1) as u32),
            copies: out.copies[e],
            in_best_chain: out.state[e] == EntryState::Active,
            chainwork: out.chainwork[e].to_big_endian(),
            header: header_bytes(
                version.value(r),
                &prevs[r],
                &merkles[r],
                time.value(r),
                bits.value(r),
                nonce.value(r),
            ),
        }
        .encode_into(&mut values);
    }
    let mut by_hash: Vec<([u8; 32], u32)> = (0..m)
        .map(|e| (hashes[out.record[e] as usize], e as u32))
        .collect();
    by_hash.sort_unstable();
    for (hash, e) in &by_hash {
        let e = *e as usize;
        k_index.append_value(hash);
        v_index.append_value(&values[e * len..(e + 1) * len]);
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
    let tip_hash = out.tip.map(|t| hashes[out.record[t as usize] as usize]);
    Ok(Linked {
        headers: RecordBatch::try_new(schema(), cols)?,
        index_keys: k_index.finish(),
        index_values: v_index.finish(),
        best_keys: k_best.finish(),
        best_values: v_best.finish(),
        link: out,
        tip_hash,
    })
}
