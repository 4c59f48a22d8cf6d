//! Datasets of the full decode: `body_blocks`, `body_transactions`, `body_inputs`,
//! `body_outputs` (`build`), to which the publish stage adds chain context (height,
//! `in_best_chain`, fees) for blocks off the best chain, and what the body pass stages per unit
//! (`build_verdicts`): `body_blocks` and `body_txids` (each transaction's txid, block, position).
//! Hashes are given as 32 raw bytes in display order (`fixed_size_binary(32)`), scripts and
//! witness items as raw bytes (`large_binary`): half the size of hex and no hex pass in the
//! workers. The publish stage's SQL (`pipeline/bitcoin/stages/publish.py`) reads the hashes as
//! display hex, as Core's RPC shows them, and publishes scripts and witness items as hex.

use crate::btc::columns::{BinCol, StrCol};
use crate::btc::decode::{BlockCols, BodyColumns};
use crate::btc::script::ScriptType;
use crate::datasets::hex::reversed32;
use arrow_array::{
    ArrayRef, BooleanArray, DictionaryArray, FixedSizeBinaryArray, Int32Array, Int64Array,
    LargeBinaryArray, ListArray, RecordBatch, StringArray, UInt32Array, UInt64Array, UInt8Array,
};
use arrow_buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use std::sync::Arc;

pub const BLOCKS: &str = "body_blocks";
pub const TRANSACTIONS: &str = "body_transactions";
pub const INPUTS: &str = "body_inputs";
pub const OUTPUTS: &str = "body_outputs";
pub const TXIDS: &str = "body_txids";

fn utf8(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Utf8, nullable)
}

fn hash(name: &str) -> Field {
    Field::new(name, DataType::FixedSizeBinary(32), false)
}

fn bytes(name: &str) -> Field {
    Field::new(name, DataType::LargeBinary, false)
}

/// A witness stack: a list of raw items.
fn witness_item() -> Arc<Field> {
    Arc::new(bytes("item"))
}

fn script_type_field() -> Field {
    Field::new(
        "script_type",
        DataType::Dictionary(Box::new(DataType::UInt8), Box::new(DataType::Utf8)),
        false,
    )
}

pub fn schema(dataset: &str) -> Option<SchemaRef> {
    let u32f = |n: &str| Field::new(n, DataType::UInt32, false);
    let u64f = |n: &str| Field::new(n, DataType::UInt64, false);
    let fields = match dataset {
        BLOCKS => vec![
            hash("hash"),
            u32f("file"),
            u64f("offset"),
            u32f("size"),
            u32f("stripped_size"),
            u64f("weight"),
            Field::new("n_tx", DataType::UInt64, true),
            Field::new("valid", DataType::Boolean, false),
            utf8("invalid_reason", true),
            Field::new("coinbase_height", DataType::Int64, true),
            u64f("n_inputs"),
            u64f("n_outputs"),
            u64f("output_value"),
        ],
        TRANSACTIONS => vec![
            hash("txid"),
            hash("wtxid"),
            hash("block_hash"),
            u32f("position"),
            Field::new("version", DataType::Int32, false),
            u32f("lock_time"),
            u32f("size"),
            u32f("vsize"),
            u32f("weight"),
            u32f("n_in"),
            u32f("n_out"),
            Field::new("is_coinbase", DataType::Boolean, false),
            Field::new("has_witness", DataType::Boolean, false),
            u64f("output_value"),
        ],
        INPUTS => vec![
            hash("txid"),
            u32f("vin"),
            hash("prev_txid"),
            u32f("prev_vout"),
            bytes("script_sig"),
            u32f("sequence"),
            u32f("witness_items"),
            Field::new("witness", DataType::List(witness_item()), false),
            hash("block_hash"),
            u32f("tx_position"),
        ],
        TXIDS => vec![hash("txid"), hash("block_hash"), u32f("position")],
        OUTPUTS => vec![
            hash("txid"),
            u32f("vout"),
            u64f("value"),
            script_type_field(),
            utf8("address", true),
            bytes("script_pubkey"),
            hash("block_hash"),
            u32f("tx_position"),
        ],
        _ => return None,
    };
    Some(Arc::new(Schema::new(fields)))
}

pub(crate) fn strings(col: StrCol) -> ArrayRef {
    let mut offsets = col.offsets;
    if offsets.is_empty() {
        offsets.push(0);
    }
    let nulls = if col.valid.iter().all(|v| *v) {
        None
    } else {
        Some(NullBuffer::from(col.valid))
    };
    let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
    // The checked constructor decodes the data as UTF-8 and tests every offset for a
    // character boundary; ASCII, which a `StrCol` holds, is both, and a word-wide test.
    assert!(col.data.is_ascii(), "a StrCol holds ASCII");
    // SAFETY: `OffsetBuffer::new` checked the offsets (non-negative, monotonic), the data is
    // ASCII, so UTF-8 with a character boundary at every offset, and `valid` has a flag per
    // value.
    Arc::new(unsafe { StringArray::new_unchecked(offsets, Buffer::from_vec(col.data), nulls) })
}

fn binaries(col: BinCol) -> ArrayRef {
    let mut offsets = col.offsets;
    if offsets.is_empty() {
        offsets.push(0);
    }
    Arc::new(
        LargeBinaryArray::try_new(
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            Buffer::from_vec(col.data),
            None,
        )
        .expect("monotonic offsets within the data"),
    )
}

/// 32-byte hashes in display (byte-reversed) order, optionally gathered through `rows`.
fn hashes(values: &[[u8; 32]], rows: Option<&[u32]>) -> ArrayRef {
    let data: Vec<[u8; 32]> = match rows {
        Some(rows) => rows
            .iter()
            .map(|&r| reversed32(&values[r as usize]))
            .collect(),
        None => values.iter().map(reversed32).collect(),
    };
    Arc::new(
        FixedSizeBinaryArray::try_new(32, Buffer::from_vec(data.into_flattened()), None)
            .expect("32 bytes per hash"),
    )
}

fn script_types(kinds: Vec<ScriptType>) -> ArrayRef {
    let keys = UInt8Array::from(kinds.into_iter().map(|k| k as u8).collect::<Vec<u8>>());
    let values = StringArray::from_iter_values(ScriptType::ALL.iter().map(|k| k.name()));
    Arc::new(DictionaryArray::try_new(keys, Arc::new(values)).expect("keys index ScriptType::ALL"))
}

/// The four batches of a full decode of one unit of `file_no`.
pub fn build(file_no: u32, cols: BodyColumns) -> [RecordBatch; 4] {
    let BodyColumns {
        blocks: b,
        txs: t,
        inputs: i,
        outputs: o,
        ..
    } = cols;
    let tx_block_rows: Vec<u32> = t.block.clone();
    let in_block_rows: Vec<u32> = i.tx.iter().map(|&r| t.block[r as usize]).collect();
    let out_block_rows: Vec<u32> = o.tx.iter().map(|&r| t.block[r as usize]).collect();
    let in_positions: Vec<u32> = i.tx.iter().map(|&r| t.position[r as usize]).collect();
    let out_positions: Vec<u32> = o.tx.iter().map(|&r| t.position[r as usize]).collect();
    let txs: Vec<ArrayRef> = vec![
        hashes(&t.txid, None),
        hashes(&t.wtxid, None),
        hashes(&b.hash, Some(&tx_block_rows)),
        Arc::new(UInt32Array::from(t.position)),
        Arc::new(Int32Array::from(t.version)),
        Arc::new(UInt32Array::from(t.lock_time)),
        Arc::new(UInt32Array::from(t.size)),
        Arc::new(UInt32Array::from(t.vsize)),
        Arc::new(UInt32Array::from(t.weight)),
        Arc::new(UInt32Array::from(t.n_in)),
        Arc::new(UInt32Array::from(t.n_out)),
        Arc::new(BooleanArray::from(t.is_coinbase)),
        Arc::new(BooleanArray::from(t.has_witness)),
        Arc::new(UInt64Array::from(t.output_value)),
    ];
    let mut witness_offsets = i.witness_offsets;
    if witness_offsets.is_empty() {
        witness_offsets.push(0);
    }
    let witness = ListArray::new(
        witness_item(),
        OffsetBuffer::new(ScalarBuffer::from(witness_offsets)),
        binaries(i.witness),
        None,
    );
    let inputs: Vec<ArrayRef> = vec![
        hashes(&t.txid, Some(&i.tx)),
        Arc::new(UInt32Array::from(i.vin)),
        hashes(&i.prev_txid, None),
        Arc::new(UInt32Array::from(i.prev_vout)),
        binaries(i.script_sig),
        Arc::new(UInt32Array::from(i.sequence)),
        Arc::new(UInt32Array::from(i.witness_items)),
        Arc::new(witness),
        hashes(&b.hash, Some(&in_block_rows)),
        Arc::new(UInt32Array::from(in_positions)),
    ];
    let outputs: Vec<ArrayRef> = vec![
        hashes(&t.txid, Some(&o.tx)),
        Arc::new(UInt32Array::from(o.vout)),
        Arc::new(UInt64Array::from(o.value)),
        script_types(o.script_type),
        strings(o.address),
        binaries(o.script_pubkey),
        hashes(&b.hash, Some(&out_block_rows)),
        Arc::new(UInt32Array::from(out_positions)),
    ];
    [
        batch(BLOCKS, block_columns(file_no, b)),
        batch(TRANSACTIONS, txs),
        batch(INPUTS, inputs),
        batch(OUTPUTS, outputs),
    ]
}

/// The two staged batches of one unit of `file_no` (`body_blocks`, `body_txids`), from
/// columns a `Rows::Verdicts` decoder filled (or a full one: the other rows are left out).
pub fn build_verdicts(file_no: u32, cols: BodyColumns) -> [RecordBatch; 2] {
    let BodyColumns {
        blocks: b, txs: t, ..
    } = cols;
    let txids: Vec<ArrayRef> = vec![
        hashes(&t.txid, None),
        hashes(&b.hash, Some(&t.block)),
        Arc::new(UInt32Array::from(t.position)),
    ];
    [
        batch(BLOCKS, block_columns(file_no, b)),
        batch(TXIDS, txids),
    ]
}

fn batch(name: &str, cols: Vec<ArrayRef>) -> RecordBatch {
    RecordBatch::try_new(schema(name).unwrap(), cols).expect("columns match the schema")
}

fn block_columns(file_no: u32, b: BlockCols) -> Vec<ArrayRef> {
    let n_blocks = b.hash.len();
    vec![
        hashes(&b.hash, None),
        Arc::new(UInt32Array::from(vec![file_no; n_blocks])),
        Arc::new(UInt64Array::from(b.offset)),
        Arc::new(UInt32Array::from(b.size)),
        Arc::new(UInt32Array::from(b.stripped_size)),
        Arc::new(UInt64Array::from(b.weight)),
        Arc::new(UInt64Array::from(b.n_tx)),
        Arc::new(BooleanArray::from(b.valid)),
        Arc::new(StringArray::from(b.reason)),
        Arc::new(Int64Array::from(b.coinbase_height)),
        Arc::new(UInt64Array::from(b.n_inputs)),
        Arc::new(UInt64Array::from(b.n_outputs)),
        Arc::new(UInt64Array::from(b.output_value)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Array;

    #[test]
    fn hashes_are_in_display_order() {
        let h: [u8; 32] = std::array::from_fn(|i| i as u8 * 7 + 1);
        let mut reversed = h;
        reversed.reverse();
        let gathered = hashes(&[h, [0; 32]], Some(&[1, 0, 0]));
        let gathered = gathered
            .as_any()
            .downcast_ref::<FixedSizeBinaryArray>()
            .unwrap();
        assert_eq!(gathered.len(), 3);
        assert_eq!(gathered.value(0), &[0; 32]);
        assert_eq!(gathered.value(1), &reversed);
        assert_eq!(gathered.value(2), &reversed);
    }

    #[test]
    fn addresses_become_a_string_array() {
        let mut col = StrCol::default();
        col.push_with(|out| {
            out.extend_from_slice(b"bcrt1qabc");
            true
        });
        col.push_with(|out| {
            out.extend_from_slice(b"dropped");
            false
        });
        col.push_with(|out| {
            out.extend_from_slice(b"1A1z");
            true
        });
        let array = strings(col);
        let array = array.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(array.len(), 3);
        assert_eq!(array.value(0), "bcrt1qabc");
        assert!(array.is_null(1));
        assert_eq!(array.value(2), "1A1z");
    }

    #[test]
    #[should_panic(expected = "a StrCol holds ASCII")]
    fn non_ascii_addresses_are_refused() {
        let mut col = StrCol::default();
        col.push_with(|out| {
            out.extend_from_slice("bcrt1é".as_bytes());
            true
        });
        strings(col);
    }
}
