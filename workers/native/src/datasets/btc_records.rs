//! Dataset `btc_records`: one row per record candidate the scanner accepted (every copy, in file
//! and offset order). Shards return it to the committer, which keeps it as the scan log.

use crate::btc::scan::RecordColumns;
use arrow_array::{
    ArrayRef, BooleanArray, FixedSizeBinaryArray, Int32Array, RecordBatch, StringArray,
    UInt32Array, UInt64Array,
};
use arrow_buffer::Buffer;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use std::sync::Arc;

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("file", DataType::UInt32, false),
        Field::new("magic_offset", DataType::UInt64, false),
        Field::new("data_pos", DataType::UInt64, false),
        Field::new("declared_size", DataType::UInt32, false),
        Field::new("consumed", DataType::UInt32, true),
        Field::new("status", DataType::Utf8, false),
        Field::new("reason", DataType::Utf8, true),
        Field::new("hash", DataType::FixedSizeBinary(32), false),
        Field::new("prev_hash", DataType::FixedSizeBinary(32), false),
        Field::new("merkle_root", DataType::FixedSizeBinary(32), false),
        Field::new("version", DataType::Int32, false),
        Field::new("time", DataType::UInt32, false),
        Field::new("bits", DataType::UInt32, false),
        Field::new("nonce", DataType::UInt32, false),
        Field::new("n_tx", DataType::UInt64, true),
        Field::new("body_checked", DataType::Boolean, false),
    ]))
}

/// Turns scanned columns into a batch; the big columns move into Arrow buffers without copies.
pub fn build(file_no: u32, records: RecordColumns) -> RecordBatch {
    let n = records.len();
    let mut prev = Vec::with_capacity(n * 32);
    let mut merkle = Vec::with_capacity(n * 32);
    let mut version = Vec::with_capacity(n);
    let mut time = Vec::with_capacity(n);
    let mut bits = Vec::with_capacity(n);
    let mut nonce = Vec::with_capacity(n);
    for h in &records.header {
        let u32_at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().unwrap());
        prev.extend_from_slice(&h[4..36]);
        merkle.extend_from_slice(&h[36..68]);
        version.push(u32_at(0) as i32);
        time.push(u32_at(68));
        bits.push(u32_at(72));
        nonce.push(u32_at(76));
    }
    let data_pos: Vec<u64> = records.magic_offset.iter().map(|o| o + 8).collect();
    let fixed = |bytes: Vec<u8>| -> ArrayRef {
        Arc::new(FixedSizeBinaryArray::try_new(32, Buffer::from_vec(bytes), None).unwrap())
    };
    let cols: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from(vec![file_no; n])),
        Arc::new(UInt64Array::from(records.magic_offset)),
        Arc::new(UInt64Array::from(data_pos)),
        Arc::new(UInt32Array::from(records.declared_size)),
        Arc::new(UInt32Array::from(records.consumed)),
        Arc::new(StringArray::from_iter_values(
            records.status.iter().map(|s| s.name()),
        )),
        Arc::new(StringArray::from(records.reason)),
        fixed(records.hash.into_flattened()),
        fixed(prev),
        fixed(merkle),
        Arc::new(Int32Array::from(version)),
        Arc::new(UInt32Array::from(time)),
        Arc::new(UInt32Array::from(bits)),
        Arc::new(UInt32Array::from(nonce)),
        Arc::new(UInt64Array::from(records.n_tx)),
        Arc::new(BooleanArray::from(records.body_checked)),
    ];
    RecordBatch::try_new(schema(), cols).expect("btc_records columns match the schema")
}
