//! Dataset `btc_records`: one row per record candidate the scanner accepted (every copy, in file
//! and offset order). Shards return it to the committer, which keeps it as the scan log.

use crate::btc::scan::Record;
use arrow_array::builder::{
    BooleanBuilder, FixedSizeBinaryBuilder, Int32Builder, StringBuilder, UInt32Builder,
    UInt64Builder,
};
use arrow_array::{ArrayRef, RecordBatch};
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

pub fn build(file_no: u32, records: &[Record]) -> RecordBatch {
    let n = records.len();
    let mut file = UInt32Builder::with_capacity(n);
    let mut magic_offset = UInt64Builder::with_capacity(n);
    let mut data_pos = UInt64Builder::with_capacity(n);
    let mut declared = UInt32Builder::with_capacity(n);
    let mut consumed = UInt32Builder::with_capacity(n);
    let mut status = StringBuilder::with_capacity(n, n * 2);
    let mut reason = StringBuilder::new();
    let mut hash = FixedSizeBinaryBuilder::with_capacity(n, 32);
    let mut prev = FixedSizeBinaryBuilder::with_capacity(n, 32);
    let mut merkle = FixedSizeBinaryBuilder::with_capacity(n, 32);
    let mut version = Int32Builder::with_capacity(n);
    let mut time = UInt32Builder::with_capacity(n);
    let mut bits = UInt32Builder::with_capacity(n);
    let mut nonce = UInt32Builder::with_capacity(n);
    let mut n_tx = UInt64Builder::with_capacity(n);
    let mut checked = BooleanBuilder::with_capacity(n);
    for r in records {
        let h = &r.header;
        let u32_at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().unwrap());
        file.append_value(file_no);
        magic_offset.append_value(r.magic_offset);
        data_pos.append_value(r.magic_offset + 8);
        declared.append_value(r.declared_size);
        consumed.append_option(r.consumed);
        status.append_value(r.status.name());
        reason.append_option(r.reason.as_deref());
        hash.append_value(r.hash).unwrap();
        prev.append_value(&h[4..36]).unwrap();
        merkle.append_value(&h[36..68]).unwrap();
        version.append_value(u32_at(0) as i32);
        time.append_value(u32_at(68));
        bits.append_value(u32_at(72));
        nonce.append_value(u32_at(76));
        n_tx.append_option(r.n_tx);
        checked.append_value(r.body_checked);
    }
    let cols: Vec<ArrayRef> = vec![
        Arc::new(file.finish()),
        Arc::new(magic_offset.finish()),
        Arc::new(data_pos.finish()),
        Arc::new(declared.finish()),
        Arc::new(consumed.finish()),
        Arc::new(status.finish()),
        Arc::new(reason.finish()),
        Arc::new(hash.finish()),
        Arc::new(prev.finish()),
        Arc::new(merkle.finish()),
        Arc::new(version.finish()),
        Arc::new(time.finish()),
        Arc::new(bits.finish()),
        Arc::new(nonce.finish()),
        Arc::new(n_tx.finish()),
        Arc::new(checked.finish()),
    ];
    RecordBatch::try_new(schema(), cols).expect("btc_records columns match the schema")
}
