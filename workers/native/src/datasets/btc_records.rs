//! Dataset `btc_records`: one row per record candidate the scanner accepted (every copy, in file
//! and offset order). Shards return it to the committer, which keeps it as the scan log.

use crate::btc::scan::{RecordColumns, RecordStatus};
use arrow_array::builder::StringBuilder;
use arrow_array::{
    ArrayRef, BooleanArray, FixedSizeBinaryArray, Int32Array, RecordBatch, StringArray,
    UInt32Array, UInt64Array,
};
use arrow_buffer::{BooleanBufferBuilder, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
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

/// Turns scanned columns into a batch: every column but `data_pos`, `file` and `status` moves
/// into its Arrow buffer without a copy.
pub fn build(file_no: u32, records: RecordColumns) -> RecordBatch {
    let n = records.len();
    let data_pos: Vec<u64> = records.magic_offset.iter().map(|o| o + 8).collect();
    let fixed = |bytes: Vec<u8>| -> ArrayRef {
        Arc::new(FixedSizeBinaryArray::try_new(32, Buffer::from_vec(bytes), None).unwrap())
    };
    let cols: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from(vec![file_no; n])),
        Arc::new(UInt64Array::from(records.magic_offset)),
        Arc::new(UInt64Array::from(data_pos)),
        Arc::new(UInt32Array::from(records.declared_size)),
        Arc::new(UInt32Array::new(
            records.consumed.into(),
            nulls_at(n, &records.consumed_absent),
        )),
        Arc::new(status_array(&records.status)),
        Arc::new(reason_array(n, &records.reasons)),
        fixed(records.hash),
        fixed(records.prev_hash),
        fixed(records.merkle_root),
        Arc::new(Int32Array::from(records.version)),
        Arc::new(UInt32Array::from(records.time)),
        Arc::new(UInt32Array::from(records.bits)),
        Arc::new(UInt32Array::from(records.nonce)),
        Arc::new(UInt64Array::new(
            records.n_tx.into(),
            nulls_at(n, &records.n_tx_absent),
        )),
        Arc::new(BooleanArray::from(records.body_checked)),
    ];
    RecordBatch::try_new(schema(), cols).expect("btc_records columns match the schema")
}

/// A validity buffer with `rows` (ascending) null, or none when every row is valid.
fn nulls_at(n: usize, rows: &[usize]) -> Option<NullBuffer> {
    if rows.is_empty() {
        return None;
    }
    let mut valid = BooleanBufferBuilder::new(n);
    valid.append_n(n, true);
    for &r in rows {
        valid.set_bit(r, false);
    }
    Some(NullBuffer::new(valid.finish()))
}

/// Status names written straight into one offsets and one values buffer.
fn status_array(status: &[RecordStatus]) -> StringArray {
    let mut offsets = Vec::with_capacity(status.len() + 1);
    let mut values = Vec::with_capacity(status.len() * 2);
    offsets.push(0i32);
    for s in status {
        values.extend_from_slice(s.name().as_bytes());
        offsets.push(values.len() as i32);
    }
    StringArray::new(
        OffsetBuffer::new(ScalarBuffer::from(offsets)),
        Buffer::from_vec(values),
        None,
    )
}

/// Reasons of the listed rows (ascending); every other row is null.
fn reason_array(n: usize, reasons: &[(usize, String)]) -> StringArray {
    if reasons.is_empty() {
        return StringArray::new_null(n);
    }
    let mut b = StringBuilder::with_capacity(n, reasons.iter().map(|(_, r)| r.len()).sum());
    let mut row = 0;
    for (r, reason) in reasons {
        b.append_nulls(r - row);
        b.append_value(reason);
        row = r + 1;
    }
    b.append_nulls(n - row);
    b.finish()
}
