//! Dataset `btc_events`: what the scanner skipped or noticed, with file, offset and reason.

use crate::btc::scan::Event;
use arrow_array::builder::{StringBuilder, UInt32Builder, UInt64Builder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use std::sync::Arc;

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("file", DataType::UInt32, false),
        Field::new("offset", DataType::UInt64, false),
        Field::new("end", DataType::UInt64, true),
        Field::new("kind", DataType::Utf8, false),
        Field::new("declared", DataType::UInt64, true),
        Field::new("consumed", DataType::UInt64, true),
        Field::new("reason", DataType::Utf8, true),
    ]))
}

pub fn build(file_no: u32, events: &[Event]) -> RecordBatch {
    let mut file = UInt32Builder::new();
    let mut offset = UInt64Builder::new();
    let mut end = UInt64Builder::new();
    let mut kind = StringBuilder::new();
    let mut declared = UInt64Builder::new();
    let mut consumed = UInt64Builder::new();
    let mut reason = StringBuilder::new();
    for e in events {
        file.append_value(file_no);
        offset.append_value(e.offset);
        end.append_option(e.end);
        kind.append_value(e.kind.name());
        declared.append_option(e.declared);
        consumed.append_option(e.consumed);
        reason.append_option(e.reason.as_deref());
    }
    let cols: Vec<ArrayRef> = vec![
        Arc::new(file.finish()),
        Arc::new(offset.finish()),
        Arc::new(end.finish()),
        Arc::new(kind.finish()),
        Arc::new(declared.finish()),
        Arc::new(consumed.finish()),
        Arc::new(reason.finish()),
    ];
    RecordBatch::try_new(schema(), cols).expect("btc_events columns match the schema")
}
