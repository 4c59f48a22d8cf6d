//! The best-chain rows of the published `blocks`, `transactions`, `inputs` and `outputs`
//! tables, built from a chain-state chunk's blocks. `blocks`, `transactions` and `inputs` are
//! built by the chain state
//! from a chunk it has just applied: its spends are resolved, so every input's value and every
//! transaction's fee is known, and the rows are final when first written (no staged copy read
//! back and joined). `outputs` waits for the publish stage, which knows which outputs the best
//! chain has spent. Columns are built by name for the schema `schemas/tables.py` declares and
//! Python hands in, so the declaration stays the one source of the tables' shape.

use crate::btc::chain_state::{SpendRows, SpentScripts};
use crate::btc::columns::StrCol;
use crate::btc::decode::{coinbase_height, Spans, TxSpan};
use crate::btc::header::HEADER_LEN;
use crate::btc::link::EntryState;
use crate::btc::network::Network;
use crate::btc::script::{classify, AddressBatch, ScriptType};
use crate::datasets::btc_bodies::strings;
use crate::datasets::hex;
use arrow_array::{
    ArrayRef, BooleanArray, Int32Array, Int64Array, ListArray, RecordBatch, StringArray,
    UInt32Array, UInt64Array,
};
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use std::fmt;
use std::sync::Arc;

/// One applied best-chain block: its height, hash (internal order), bytes and parse.
pub(crate) struct ChainBlock<'a> {
    pub height: u32,
    pub hash: &'a [u8; 32],
    pub data: &'a [u8],
    pub spans: &'a Spans,
    /// The blk file and record offset the block was read from.
    pub file: u32,
    pub offset: u64,
}

/// A string column filled with lower-case hex without a per-value allocation.
#[derive(Default)]
pub(crate) struct HexCol {
    data: Vec<u8>,
    offsets: Vec<i32>,
}

impl HexCol {
    pub(crate) fn with_capacity(rows: usize, bytes: usize) -> HexCol {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        HexCol {
            data: Vec::with_capacity(2 * bytes),
            offsets,
        }
    }

    /// Bytes in order (scripts, witness items).
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        hex::extend_hex(&mut self.data, bytes);
        self.offsets.push(self.data.len() as i32);
    }

    /// A 32-byte hash in display (byte-reversed) order.
    pub(crate) fn push_display(&mut self, hash: &[u8]) {
        hex::extend_display_hex(&mut self.data, hash);
        self.offsets.push(self.data.len() as i32);
    }

    /// The same hex `n` times: a transaction's txid on each of its input or output rows, a
    /// block's hash on each of its rows, encoded once and copied.
    fn push_repeated(&mut self, hex: &[u8], n: usize) {
        let mut end = self.data.len() as i32;
        let width = hex.len() as i32;
        self.offsets.extend((0..n).map(|_| {
            end += width;
            end
        }));
        for _ in 0..n {
            self.data.extend_from_slice(hex);
        }
    }

    /// Text as it is (short names).
    pub(crate) fn push_str(&mut self, text: &str) {
        self.data.extend_from_slice(text.as_bytes());
        self.offsets.push(self.data.len() as i32);
    }

    fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub(crate) fn finish(self) -> StringArray {
        debug_assert!(std::str::from_utf8(&self.data).is_ok());
        // SAFETY: `data` holds only hex digits and whole `&str`s (`push_str`), so every
        // offset is a character boundary of valid UTF-8; the offsets only grow from 0 to
        // `data.len()`, so the pass over every byte that a checked build makes is skipped.
        unsafe {
            StringArray::new_unchecked(
                OffsetBuffer::new_unchecked(ScalarBuffer::from(self.offsets)),
                Buffer::from_vec(self.data),
                None,
            )
        }
    }
}

/// Where each input or output row sits: its transaction's txid, its index in that transaction
/// (`vin` or `vout`), the transaction's position in its block, the block's hash and height.
struct RowPlaces {
    txid: HexCol,
    index: Vec<u32>,
    tx_position: Vec<u32>,
    block_hash: HexCol,
    height: Vec<u32>,
    /// One hash's hex, encoded once and copied to each of its rows.
    hex: Vec<u8>,
}

impl RowPlaces {
    fn with_capacity(n: usize) -> RowPlaces {
        RowPlaces {
            txid: HexCol::with_capacity(n, 32 * n),
            index: Vec::with_capacity(n),
            tx_position: Vec::with_capacity(n),
            block_hash: HexCol::with_capacity(n, 32 * n),
            height: Vec::with_capacity(n),
            hex: Vec::with_capacity(64),
        }
    }

    /// The places of `b`'s `rows` rows, each transaction's being `range(tx)` of the block's
    /// (its `ins` or `outs`).
    fn push_block(
        &mut self,
        b: &ChainBlock,
        rows: usize,
        range: impl Fn(&TxSpan) -> (usize, usize),
    ) {
        self.hex.clear();
        hex::extend_display_hex(&mut self.hex, b.hash);
        self.block_hash.push_repeated(&self.hex, rows);
        self.height.extend(std::iter::repeat_n(b.height, rows));
        for (pos, t) in b.spans.txs.iter().enumerate() {
            let (first, end) = range(t);
            let n = end - first;
            self.hex.clear();
            hex::extend_display_hex(&mut self.hex, &t.txid);
            self.txid.push_repeated(&self.hex, n);
            self.index.extend(0..n as u32);
            self.tx_position.extend(std::iter::repeat_n(pos as u32, n));
        }
    }
}

/// The chain state's tables (`btc_chain_rows`) could not be built, or the spent
/// flags of a published `outputs` file could not be set.
#[derive(Debug)]
pub enum RowsError {
    /// The chain state writes no such table.
    UnknownTable(String),
    /// A declared column the table builder does not make.
    UnknownColumn { table: &'static str, column: String },
    /// The `inputs` table's `witness` column declared as something other than a list.
    WitnessType(arrow_schema::DataType),
    /// Another number of resolved spend values than the blocks have inputs.
    SpendCount {
        table: String,
        values: usize,
        inputs: usize,
    },
    /// More resolved spend values than the blocks have inputs.
    TooManySpends { table: &'static str },
    /// Fewer resolved spend values than the blocks have inputs.
    TooFewSpends { table: &'static str },
    /// A block shorter than its header.
    ShortBlock,
    /// Arrow refused the columns built (`table` names the table, or the table and column).
    Arrow {
        table: &'static str,
        source: arrow_schema::ArrowError,
    },
    /// The rows of an `outputs` file lack a column.
    OutputsColumn(String),
    /// A column of the rows of an `outputs` file is not of the type expected.
    OutputsColumnType {
        column: &'static str,
        expected: &'static str,
    },
    /// The rows of an `outputs` file are not in height order.
    OutputsOrder { height: u32, after: u32 },
    /// A spend that names no row of the `outputs` file.
    UnmatchedSpend { row: u32, height: u32 },
}

impl fmt::Display for RowsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RowsError::UnknownTable(t) => write!(f, "the chain state writes no table {t:?}"),
            RowsError::UnknownColumn { table, column } => {
                write!(f, "{table}: the chain state builds no column {column:?}")
            }
            RowsError::WitnessType(t) => write!(f, "inputs: witness is declared {t}"),
            RowsError::SpendCount {
                table,
                values,
                inputs,
            } => write!(f, "{table}: {values} resolved spends for {inputs} inputs"),
            RowsError::TooManySpends { table } => {
                write!(f, "{table}: more resolved spends than inputs")
            }
            RowsError::TooFewSpends { table } => {
                write!(f, "{table}: fewer resolved spends than inputs")
            }
            RowsError::ShortBlock => f.write_str("blocks: a block shorter than its header"),
            RowsError::Arrow { table, source } => write!(f, "{table}: {source}"),
            RowsError::OutputsColumn(name) => write!(f, "outputs rows without {name}"),
            RowsError::OutputsColumnType { column, expected } => {
                write!(f, "outputs.{column} is not {expected}")
            }
            RowsError::OutputsOrder { height, after } => {
                write!(
                    f,
                    "outputs rows out of height order: {height} after {after}"
                )
            }
            RowsError::UnmatchedSpend { row, height } => write!(
                f,
                "a spend of output row {row} of height {height} names no row of the outputs file"
            ),
        }
    }
}

impl std::error::Error for RowsError {}

/// Schema of the resolved best-chain spends the chain state stages for publishing.
pub fn spends_schema() -> Arc<Schema> {
    let u32f = |n: &str| Field::new(n, DataType::UInt32, false);
    Arc::new(Schema::new(vec![
        u32f("height"),
        u32f("pos"),
        u32f("vin"),
        Field::new("value", DataType::UInt64, false),
        u32f("prev_height"),
        u32f("prev_row"),
    ]))
}

/// The `btc_spends` rows of an applied chunk's resolved spends.
pub fn spends_batch(s: SpendRows) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(UInt32Array::from(s.height)),
        Arc::new(UInt32Array::from(s.pos)),
        Arc::new(UInt32Array::from(s.vin)),
        Arc::new(UInt64Array::from(s.value)),
        Arc::new(UInt32Array::from(s.prev_height)),
        Arc::new(UInt32Array::from(s.prev_row)),
    ];
    RecordBatch::try_new(spends_schema(), cols)
}

fn unknown(table: &'static str, column: &str) -> RowsError {
    RowsError::UnknownColumn {
        table,
        column: column.to_string(),
    }
}

fn batch(
    schema: SchemaRef,
    cols: Vec<ArrayRef>,
    table: &'static str,
) -> Result<RecordBatch, RowsError> {
    RecordBatch::try_new(schema, cols).map_err(|source| RowsError::Arrow { table, source })
}

/// Rows a table's batch is built for at a time (whole blocks, so a batch may hold more): its
/// hex is still in cache when the Parquet writer encodes and compresses it.
const BUILD_ROWS: usize = 16_384;

/// The rows of `table` ("blocks", "transactions", "inputs", or "outputs" unspent) for
/// `blocks`, as consecutive batches of about `BUILD_ROWS` rows; `values` as for
/// `transactions`, `scripts` the spent outputs' scripts in the same order (for `inputs`).
pub(crate) fn batches<'a>(
    table: &'a str,
    blocks: &'a [ChainBlock<'a>],
    values: &'a [u64],
    scripts: &'a SpentScripts,
    network: Network,
    schema: SchemaRef,
) -> impl Iterator<Item = Result<RecordBatch, RowsError>> + 'a {
    let rows_of = move |b: &ChainBlock| match table {
        "blocks" => 1,
        "transactions" => b.spans.txs.len(),
        "inputs" => b.spans.ins.len(),
        _ => b.spans.outs.len(),
    };
    // (first block, end block, first value, end value) of each batch.
    let mut cuts = Vec::new();
    let (mut first, mut rows, mut value_at) = (0, 0, 0);
    let mut first_value = 0;
    for (i, b) in blocks.iter().enumerate() {
        rows += rows_of(b);
        // A block's coinbase spends nothing: its other inputs each have a value.
        let coinbase_ins = b.spans.txs.first().map_or(0, |t| t.ins.1 - t.ins.0);
        value_at += b.spans.ins.len() - coinbase_ins;
        if rows >= BUILD_ROWS || i + 1 == blocks.len() {
            cuts.push((first, i + 1, first_value, value_at));
            (first, rows, first_value) = (i + 1, 0, value_at);
        }
    }
    let mismatch = (value_at != values.len() || scripts.len() != values.len()).then(|| {
        Err(RowsError::SpendCount {
            table: table.to_string(),
            values: values.len(),
            inputs: value_at,
        })
    });
    mismatch
        .into_iter()
        .chain(cuts.into_iter().map(move |(lo, hi, vlo, vhi)| {
            let (blocks, values) = (&blocks[lo..hi], values.get(vlo..vhi).unwrap_or_default());
            let schema = Arc::clone(&schema);
            match table {
                "blocks" => self::blocks(blocks, values, schema),
                "transactions" => transactions(blocks, values, schema),
                "inputs" => inputs(blocks, values, (scripts, vlo), network, schema),
                "outputs" => outputs(blocks, network, schema),
                other => Err(RowsError::UnknownTable(other.to_string())),
            }
        }))
}

/// The `blocks` rows of `blocks` (best-chain blocks the chain state applied: active, valid);
/// `values` as for `transactions`, from which each block's fees follow.
pub(crate) fn blocks(
    blocks: &[ChainBlock],
    values: &[u64],
    schema: SchemaRef,
) -> Result<RecordBatch, RowsError> {
    let n = blocks.len();
    let (mut hash, mut prev_hash, mut merkle_root) = (
        HexCol::with_capacity(n, 32 * n),
        HexCol::with_capacity(n, 32 * n),
        HexCol::with_capacity(n, 32 * n),
    );
    let mut status = HexCol::with_capacity(n, 8 * n);
    let (mut version, mut time, mut bits) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut size, mut stripped_size, mut weight) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut n_tx, mut n_inputs, mut n_outputs, mut output_value) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut fees, mut cb_heights) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut spent = values.iter();
    for b in blocks {
        let sp = b.spans;
        let header = b.data.get(..HEADER_LEN).ok_or(RowsError::ShortBlock)?;
        let u32_at = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().unwrap());
        hash.push_display(b.hash);
        status.push_str(EntryState::Active.name());
        version.push(u32_at(0) as i32);
        prev_hash.push_display(&header[4..36]);
        merkle_root.push_display(&header[36..68]);
        time.push(u32_at(68));
        bits.push(u32_at(72));
        // Stripped size: the header, the transaction count and each transaction without
        // its witness (a transaction's weight is 3 * stripped + size).
        let count_len = match b.data.get(HEADER_LEN) {
            Some(0xfd) => 3,
            Some(0xfe) => 5,
            Some(0xff) => 9,
            _ => 1,
        };
        let mut stripped = (HEADER_LEN + count_len) as u64;
        let (mut ins_total, mut outs_total, mut value_total) = (0u64, 0u64, 0u64);
        let mut block_fees: Option<i64> = None;
        let mut cb_height = None;
        for (pos, t) in sp.txs.iter().enumerate() {
            let (s, w, _) = t.sizes();
            stripped += u64::from((w - s) / 3);
            let ins = &sp.ins[t.ins.0..t.ins.1];
            let outs: u64 = sp.outs[t.outs.0..t.outs.1].iter().map(|o| o.value).sum();
            ins_total += ins.len() as u64;
            outs_total += (t.outs.1 - t.outs.0) as u64;
            value_total += outs;
            if pos == 0 {
                for i in ins {
                    cb_height = coinbase_height(&b.data[i.script.0..i.script.1]);
                }
                continue;
            }
            let mut total = 0u64;
            for _ in ins {
                total += *spent
                    .next()
                    .ok_or(RowsError::TooFewSpends { table: "blocks" })?;
            }
            *block_fees.get_or_insert(0) += total as i64 - outs as i64;
        }
        size.push(b.data.len() as u32);
        stripped_size.push(stripped as u32);
        weight.push(3 * stripped + b.data.len() as u64);
        n_tx.push(sp.txs.len() as u64);
        n_inputs.push(ins_total);
        n_outputs.push(outs_total);
        output_value.push(value_total);
        fees.push(block_fees);
        cb_heights.push(cb_height);
    }
    if spent.next().is_some() {
        return Err(RowsError::TooManySpends { table: "blocks" });
    }
    let mut hex = [Some(hash), Some(prev_hash), Some(merkle_root), Some(status)];
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for f in schema.fields() {
        let col: ArrayRef = match f.name().as_str() {
            "hash" => Arc::new(hex[0].take().expect("one hash column").finish()),
            "prev_hash" => Arc::new(hex[1].take().expect("one prev_hash column").finish()),
            "merkle_root" => Arc::new(hex[2].take().expect("one merkle_root").finish()),
            "status" => Arc::new(hex[3].take().expect("one status column").finish()),
            "height" => Arc::new(UInt32Array::from_iter_values(
                blocks.iter().map(|b| b.height),
            )),
            "in_best_chain" | "valid" => Arc::new(BooleanArray::from(vec![true; n])),
            "invalid_reason" => Arc::new(StringArray::new_null(n)),
            "version" => Arc::new(Int32Array::from(std::mem::take(&mut version))),
            "time" => Arc::new(UInt32Array::from(std::mem::take(&mut time))),
            "bits" => Arc::new(UInt32Array::from(std::mem::take(&mut bits))),
            "size" => Arc::new(UInt32Array::from(std::mem::take(&mut size))),
            "stripped_size" => Arc::new(UInt32Array::from(std::mem::take(&mut stripped_size))),
            "weight" => Arc::new(UInt64Array::from(std::mem::take(&mut weight))),
            "n_tx" => Arc::new(UInt64Array::from(std::mem::take(&mut n_tx))),
            "n_inputs" => Arc::new(UInt64Array::from(std::mem::take(&mut n_inputs))),
            "n_outputs" => Arc::new(UInt64Array::from(std::mem::take(&mut n_outputs))),
            "output_value" => Arc::new(UInt64Array::from(std::mem::take(&mut output_value))),
            "fees" => Arc::new(Int64Array::from(std::mem::take(&mut fees))),
            "coinbase_height" => Arc::new(Int64Array::from(std::mem::take(&mut cb_heights))),
            "file" => Arc::new(UInt32Array::from_iter_values(blocks.iter().map(|b| b.file))),
            "offset" => Arc::new(UInt64Array::from_iter_values(
                blocks.iter().map(|b| b.offset),
            )),
            other => return Err(unknown("blocks", other)),
        };
        cols.push(col);
    }
    batch(schema, cols, "blocks")
}

/// The `transactions` rows of `blocks`; `values` holds the value of every non-coinbase input,
/// in block, transaction and input order (the chain state's resolved spends).
pub(crate) fn transactions(
    blocks: &[ChainBlock],
    values: &[u64],
    schema: SchemaRef,
) -> Result<RecordBatch, RowsError> {
    let n: usize = blocks.iter().map(|b| b.spans.txs.len()).sum();
    let (mut txid, mut wtxid, mut block_hash) = (
        HexCol::with_capacity(n, 32 * n),
        HexCol::with_capacity(n, 32 * n),
        HexCol::with_capacity(n, 32 * n),
    );
    let (mut height, mut position, mut version, mut lock_time) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut size, mut vsize, mut weight, mut n_in, mut n_out) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut is_coinbase, mut has_witness) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut output_value, mut input_value, mut fee) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let mut spent = values.iter();
    let mut one_hash = Vec::with_capacity(64);
    // Column by column over each block's transactions: a row pushed into every column at
    // once reloads each column's length from memory.
    for b in blocks {
        let txs = &b.spans.txs;
        let outs = &b.spans.outs;
        one_hash.clear();
        hex::extend_display_hex(&mut one_hash, b.hash);
        block_hash.push_repeated(&one_hash, txs.len());
        for t in txs {
            txid.push_display(&t.txid);
            wtxid.push_display(&t.wtxid);
        }
        height.extend(std::iter::repeat_n(b.height, txs.len()));
        position.extend(0..txs.len() as u32);
        version.extend(txs.iter().map(|t| t.version));
        lock_time.extend(txs.iter().map(|t| t.lock_time));
        size.extend(txs.iter().map(|t| t.sizes().0));
        weight.extend(txs.iter().map(|t| t.sizes().1));
        vsize.extend(txs.iter().map(|t| t.sizes().2));
        n_in.extend(txs.iter().map(|t| (t.ins.1 - t.ins.0) as u32));
        n_out.extend(txs.iter().map(|t| (t.outs.1 - t.outs.0) as u32));
        is_coinbase.extend((0..txs.len()).map(|pos| pos == 0));
        has_witness.extend(txs.iter().map(|t| t.has_witness));
        let values_from = output_value.len();
        output_value.extend(txs.iter().map(|t| {
            outs[t.outs.0..t.outs.1]
                .iter()
                .map(|o| o.value)
                .sum::<u64>()
        }));
        for (pos, t) in txs.iter().enumerate() {
            if pos == 0 {
                input_value.push(None);
                fee.push(None);
                continue;
            }
            let mut total = 0u64;
            for _ in t.ins.0..t.ins.1 {
                total += *spent.next().ok_or(RowsError::TooFewSpends {
                    table: "transactions",
                })?;
            }
            input_value.push(Some(total));
            fee.push(Some(total as i64 - output_value[values_from + pos] as i64));
        }
    }
    if spent.next().is_some() {
        return Err(RowsError::TooManySpends {
            table: "transactions",
        });
    }
    let rows = txid.len();
    let (mut txid, mut wtxid, mut block_hash) = (Some(txid), Some(wtxid), Some(block_hash));
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for f in schema.fields() {
        let col: ArrayRef = match f.name().as_str() {
            "txid" => Arc::new(txid.take().expect("one txid column").finish()),
            "wtxid" => Arc::new(wtxid.take().expect("one wtxid column").finish()),
            "block_hash" => Arc::new(block_hash.take().expect("one block_hash").finish()),
            "height" => Arc::new(UInt32Array::from(std::mem::take(&mut height))),
            "in_best_chain" => Arc::new(BooleanArray::from(vec![true; rows])),
            "position" => Arc::new(UInt32Array::from(std::mem::take(&mut position))),
            "version" => Arc::new(Int32Array::from(std::mem::take(&mut version))),
            "lock_time" => Arc::new(UInt32Array::from(std::mem::take(&mut lock_time))),
            "size" => Arc::new(UInt32Array::from(std::mem::take(&mut size))),
            "vsize" => Arc::new(UInt32Array::from(std::mem::take(&mut vsize))),
            "weight" => Arc::new(UInt32Array::from(std::mem::take(&mut weight))),
            "n_in" => Arc::new(UInt32Array::from(std::mem::take(&mut n_in))),
            "n_out" => Arc::new(UInt32Array::from(std::mem::take(&mut n_out))),
            "is_coinbase" => Arc::new(BooleanArray::from(std::mem::take(&mut is_coinbase))),
            "has_witness" => Arc::new(BooleanArray::from(std::mem::take(&mut has_witness))),
            "output_value" => Arc::new(UInt64Array::from(std::mem::take(&mut output_value))),
            "input_value" => Arc::new(UInt64Array::from(std::mem::take(&mut input_value))),
            "fee" => Arc::new(Int64Array::from(std::mem::take(&mut fee))),
            other => return Err(unknown("transactions", other)),
        };
        cols.push(col);
    }
    batch(schema, cols, "transactions")
}

/// The `inputs` rows of `blocks`; `values` as for `transactions`, and the scripts they spend
/// from `scripts.0` on (`scripts.1` is where `values` starts among them).
pub(crate) fn inputs(
    blocks: &[ChainBlock],
    values: &[u64],
    scripts: (&SpentScripts, usize),
    network: Network,
    schema: SchemaRef,
) -> Result<RecordBatch, RowsError> {
    let n: usize = blocks.iter().map(|b| b.spans.ins.len()).sum();
    let sig_bytes: usize = blocks
        .iter()
        .flat_map(|b| b.spans.ins.iter().map(|i| i.script.1 - i.script.0))
        .sum();
    let (wit_n, wit_bytes) = blocks.iter().fold((0, 0), |(n, bytes), b| {
        let w = &b.spans.wit;
        (
            n + w.len(),
            bytes + w.iter().map(|(s, e)| e - s).sum::<usize>(),
        )
    });
    let mut places = RowPlaces::with_capacity(n);
    let mut prev_txid = HexCol::with_capacity(n, 32 * n);
    let mut script_sig = HexCol::with_capacity(n, sig_bytes);
    let mut witness = HexCol::with_capacity(wit_n, wit_bytes);
    let mut witness_offsets: Vec<i32> = Vec::with_capacity(n + 1);
    witness_offsets.push(0);
    let (mut prev_vout, mut sequence, mut witness_items) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let mut value = Vec::with_capacity(n);
    let mut spent = values.iter();
    // The spent output of each input: its script (hex), Core's type for it and its address,
    // as the `outputs` row of that output has them; null for a coinbase input.
    let (spent_scripts, first_spent) = scripts;
    let mut prev_script_pubkey = StrCol::default();
    let mut prev_script_type = StrCol::default();
    let mut prev_address = StrCol::default();
    let mut addresses = AddressBatch::default();
    let mut kinds: Vec<ScriptType> = Vec::new();
    let mut next_spent = first_spent;
    // Column by column, as `transactions`; `parse_tx_spans` appends a block's inputs and
    // witness items in block order, so the block's input rows are `spans.ins` whole.
    for b in blocks {
        let (sp, data) = (b.spans, b.data);
        places.push_block(b, sp.ins.len(), |t| t.ins);
        let coinbase_ins = sp.txs.first().map_or(0, |t| t.ins.1 - t.ins.0);
        let spent_here = sp.ins.len() - coinbase_ins;
        if next_spent + spent_here > spent_scripts.len() {
            return Err(RowsError::TooFewSpends { table: "inputs" });
        }
        let block_scripts = || (next_spent..next_spent + spent_here).map(|i| spent_scripts.get(i));
        kinds.clear();
        kinds.extend(block_scripts().map(classify));
        for _ in 0..coinbase_ins {
            prev_script_pubkey.push_with(|_| false);
            prev_script_type.push_with(|_| false);
            prev_address.push_with(|_| false);
        }
        for (script, kind) in block_scripts().zip(&kinds) {
            prev_script_pubkey.push_with(|out| {
                hex::extend_hex(out, script);
                true
            });
            prev_script_type.push_with(|out| {
                out.extend_from_slice(kind.name().as_bytes());
                true
            });
        }
        addresses.push_all(
            block_scripts().zip(kinds.iter().copied()),
            network,
            &mut prev_address,
        );
        next_spent += spent_here;
        for (pos, t) in sp.txs.iter().enumerate() {
            let n = t.ins.1 - t.ins.0;
            if pos == 0 {
                value.extend(std::iter::repeat_n(None, n));
                continue;
            }
            for _ in 0..n {
                let v = spent
                    .next()
                    .ok_or(RowsError::TooFewSpends { table: "inputs" })?;
                value.push(Some(*v));
            }
        }
        for inp in &sp.ins {
            let prev = &data[inp.prev..inp.prev + 36];
            prev_txid.push_display(&prev[..32]);
            prev_vout.push(u32::from_le_bytes(prev[32..36].try_into().unwrap()));
            script_sig.push(&data[inp.script.0..inp.script.1]);
            sequence.push(inp.sequence);
            witness_items.push(inp.wit_n as u32);
            for &(s, e) in &sp.wit[inp.wit_start..inp.wit_start + inp.wit_n] {
                witness.push(&data[s..e]);
            }
            witness_offsets.push(witness.len() as i32);
        }
    }
    if spent.next().is_some() {
        return Err(RowsError::TooManySpends { table: "inputs" });
    }
    let RowPlaces {
        txid,
        index: mut vin,
        mut tx_position,
        block_hash,
        mut height,
        ..
    } = places;
    let rows = txid.len();
    let (mut txid, mut prev_txid, mut block_hash) = (Some(txid), Some(prev_txid), Some(block_hash));
    let (mut script_sig, mut witness) = (Some(script_sig), Some(witness));
    let mut prev_script_pubkey = Some(prev_script_pubkey);
    let mut prev_script_type = Some(prev_script_type);
    let mut prev_address = Some(prev_address);
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for f in schema.fields() {
        let col: ArrayRef = match f.name().as_str() {
            "txid" => Arc::new(txid.take().expect("one txid column").finish()),
            "vin" => Arc::new(UInt32Array::from(std::mem::take(&mut vin))),
            "prev_txid" => Arc::new(prev_txid.take().expect("one prev_txid").finish()),
            "prev_vout" => Arc::new(UInt32Array::from(std::mem::take(&mut prev_vout))),
            "prev_script_pubkey" => strings(prev_script_pubkey.take().expect("one column")),
            "prev_script_type" => strings(prev_script_type.take().expect("one column")),
            "prev_address" => strings(prev_address.take().expect("one column")),
            "script_sig" => Arc::new(script_sig.take().expect("one script_sig").finish()),
            "sequence" => Arc::new(UInt32Array::from(std::mem::take(&mut sequence))),
            "witness_items" => Arc::new(UInt32Array::from(std::mem::take(&mut witness_items))),
            "witness" => {
                let DataType::List(item) = f.data_type() else {
                    return Err(RowsError::WitnessType(f.data_type().clone()));
                };
                let items = witness.take().expect("one witness column").finish();
                let offsets =
                    OffsetBuffer::new(ScalarBuffer::from(std::mem::take(&mut witness_offsets)));
                Arc::new(
                    ListArray::try_new(item.clone(), offsets, Arc::new(items), None).map_err(
                        |source| RowsError::Arrow {
                            table: "inputs: witness",
                            source,
                        },
                    )?,
                )
            }
            "value" => Arc::new(UInt64Array::from(std::mem::take(&mut value))),
            "block_hash" => Arc::new(block_hash.take().expect("one block_hash").finish()),
            "tx_position" => Arc::new(UInt32Array::from(std::mem::take(&mut tx_position))),
            "height" => Arc::new(UInt32Array::from(std::mem::take(&mut height))),
            "in_best_chain" => Arc::new(BooleanArray::from(vec![true; rows])),
            other => return Err(unknown("inputs", other)),
        };
        cols.push(col);
    }
    batch(schema, cols, "inputs")
}

/// The outputs the best chain spent, as `Respent` finds them: (height each was created at,
/// its row among that block's outputs) packed into one number each, sorted. Rows are in
/// height order and each block's in its outputs' order, so one merge pass over both sets the
/// flags: no txid is read, parsed or compared.
pub(crate) struct SpentOutputs(Vec<u64>);

fn spent_key(height: u32, row: u32) -> u64 {
    (height as u64) << 32 | row as u64
}

impl SpentOutputs {
    /// From each spent output's height and row among its block's outputs.
    pub(crate) fn new(spends: impl Iterator<Item = (u32, u32)>) -> Self {
        let mut keys: Vec<u64> = spends.map(|(h, r)| spent_key(h, r)).collect();
        keys.sort_unstable();
        keys.dedup();
        SpentOutputs(keys)
    }
}

/// The `spent` column of a file of published `outputs` rows, batch by batch (each at least
/// the rows' `height` and `spent` columns), for the spends in `spent`: true for an output in
/// it; otherwise, with `keep_old`, the row's old flag (a null stays null, as SQL's `OR`), else
/// false. Every spend must name a row of the file: `finish` says which did not.
pub(crate) struct Respent<'a> {
    spent: &'a SpentOutputs,
    keep_old: bool,
    /// The next spend not yet matched to a row.
    next: usize,
    /// The height of the last row seen, and its place among that block's rows.
    at: Option<(u32, u32)>,
}

impl<'a> Respent<'a> {
    pub(crate) fn new(spent: &'a SpentOutputs, keep_old: bool) -> Self {
        Respent {
            spent,
            keep_old,
            next: 0,
            at: None,
        }
    }

    fn missing(&self) -> RowsError {
        let k = self.spent.0[self.next];
        RowsError::UnmatchedSpend {
            row: k as u32,
            height: (k >> 32) as u32,
        }
    }

    pub(crate) fn batch(&mut self, rows: &RecordBatch) -> Result<ArrayRef, RowsError> {
        use arrow_array::cast::AsArray;
        use arrow_array::types::UInt32Type;
        use arrow_array::Array;
        let column = |name: &str| {
            rows.column_by_name(name)
                .ok_or_else(|| RowsError::OutputsColumn(name.to_string()))
        };
        let height = column("height")?.as_primitive_opt::<UInt32Type>().ok_or(
            RowsError::OutputsColumnType {
                column: "height",
                expected: "uint32",
            },
        )?;
        let old = column("spent")?
            .as_boolean_opt()
            .ok_or(RowsError::OutputsColumnType {
                column: "spent",
                expected: "boolean",
            })?;
        let keys = &self.spent.0;
        let mut out = arrow_array::builder::BooleanBuilder::with_capacity(rows.num_rows());
        for (i, &h) in height.values().iter().enumerate() {
            let row = match self.at {
                Some((at, row)) if at == h => row + 1,
                Some((at, _)) if at > h => {
                    return Err(RowsError::OutputsOrder {
                        height: h,
                        after: at,
                    })
                }
                _ => 0,
            };
            self.at = Some((h, row));
            let key = spent_key(h, row);
            if keys.get(self.next).is_some_and(|&k| k < key) {
                return Err(self.missing());
            }
            let hit = keys.get(self.next) == Some(&key);
            self.next += hit as usize;
            out.append_option(match (hit, self.keep_old) {
                (true, _) => Some(true),
                (false, true) => old.is_valid(i).then(|| old.value(i)),
                (false, false) => Some(false),
            });
        }
        Ok(Arc::new(out.finish()))
    }

    /// Ends the file: an error names the first spend that matched none of its rows.
    pub(crate) fn finish(self) -> Result<(), RowsError> {
        if self.next < self.spent.0.len() {
            return Err(self.missing());
        }
        Ok(())
    }
}

/// The `outputs` rows of `blocks`, unspent (`respent` sets the flags once the blocks that
/// spend them are applied).
pub(crate) fn outputs(
    blocks: &[ChainBlock],
    network: Network,
    schema: SchemaRef,
) -> Result<RecordBatch, RowsError> {
    let n: usize = blocks.iter().map(|b| b.spans.outs.len()).sum();
    let spk_bytes: usize = blocks
        .iter()
        .flat_map(|b| b.spans.outs.iter().map(|o| o.script.1 - o.script.0))
        .sum();
    let mut places = RowPlaces::with_capacity(n);
    let mut script_pubkey = HexCol::with_capacity(n, spk_bytes);
    let mut script_type = HexCol::with_capacity(n, 8 * n);
    let mut address = StrCol::default();
    let mut addresses = AddressBatch::default();
    let mut kinds = Vec::new();
    let mut value = Vec::with_capacity(n);
    // Column by column, as `transactions`; a block's output rows are `spans.outs` whole.
    for b in blocks {
        let (sp, data) = (b.spans, b.data);
        places.push_block(b, sp.outs.len(), |t| t.outs);
        value.extend(sp.outs.iter().map(|o| o.value));
        let scripts = || sp.outs.iter().map(|o| &data[o.script.0..o.script.1]);
        kinds.clear();
        kinds.extend(scripts().map(classify));
        for (script, kind) in scripts().zip(&kinds) {
            script_type.push_str(kind.name());
            script_pubkey.push(script);
        }
        addresses.push_all(scripts().zip(kinds.iter().copied()), network, &mut address);
    }
    let mut is_spent = vec![false; n];
    let RowPlaces {
        txid,
        index: mut vout,
        mut tx_position,
        block_hash,
        mut height,
        ..
    } = places;
    let rows = txid.len();
    let (mut txid, mut block_hash, mut script_pubkey) =
        (Some(txid), Some(block_hash), Some(script_pubkey));
    let (mut script_type, mut address) = (Some(script_type), Some(address));
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for f in schema.fields() {
        let col: ArrayRef = match f.name().as_str() {
            "txid" => Arc::new(txid.take().expect("one txid column").finish()),
            "vout" => Arc::new(UInt32Array::from(std::mem::take(&mut vout))),
            "value" => Arc::new(UInt64Array::from(std::mem::take(&mut value))),
            "script_type" => Arc::new(script_type.take().expect("one script_type").finish()),
            "address" => strings(address.take().expect("one address column")),
            "script_pubkey" => Arc::new(script_pubkey.take().expect("one script").finish()),
            "block_hash" => Arc::new(block_hash.take().expect("one block_hash").finish()),
            "tx_position" => Arc::new(UInt32Array::from(std::mem::take(&mut tx_position))),
            "height" => Arc::new(UInt32Array::from(std::mem::take(&mut height))),
            "in_best_chain" => Arc::new(BooleanArray::from(vec![true; rows])),
            "spent" => Arc::new(BooleanArray::from(std::mem::take(&mut is_spent))),
            other => return Err(unknown("outputs", other)),
        };
        cols.push(col);
    }
    batch(schema, cols, "outputs")
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::Array;
    use arrow_schema::{Field, Schema};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use std::collections::HashSet;

    /// `outputs` rows as `Respent` reads them: (height, old flag).
    fn rows(outs: &[(u32, Option<bool>)]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("height", DataType::UInt32, false),
            Field::new("spent", DataType::Boolean, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(UInt32Array::from_iter_values(outs.iter().map(|o| o.0))),
                Arc::new(BooleanArray::from_iter(outs.iter().map(|o| o.1))),
            ],
        )
        .unwrap()
    }

    /// Runs `Respent` over `outs` cut into batches of `step` rows.
    fn respend(
        outs: &[(u32, Option<bool>)],
        spends: &[(u32, u32)],
        keep_old: bool,
        step: usize,
    ) -> Result<Vec<Option<bool>>, RowsError> {
        let lookup = SpentOutputs::new(spends.iter().copied());
        let mut flags = Respent::new(&lookup, keep_old);
        let mut got = Vec::new();
        for chunk in outs.chunks(step) {
            let col = flags.batch(&rows(chunk))?;
            let col = col.as_boolean();
            got.extend((0..col.len()).map(|i| col.is_valid(i).then(|| col.value(i))));
        }
        flags.finish()?;
        Ok(got)
    }

    /// Flags from the merge equal a plain set's for blocks of several outputs cut into
    /// batches anywhere (a block's rows spanning two), with old flags (nulls included) kept
    /// or not, and a spend repeated.
    #[test]
    fn respent_matches_a_set_of_spends() {
        let mut rng = SmallRng::seed_from_u64(17);
        let mut outs = Vec::new();
        let mut places = Vec::new();
        for height in 3..300u32 {
            if rng.gen_bool(0.2) {
                continue;
            }
            for row in 0..rng.gen_range(1..9u32) {
                outs.push((height, [None, Some(true), Some(false)][rng.gen_range(0..3)]));
                places.push((height, row));
            }
        }
        let mut spends: Vec<(u32, u32)> = places
            .iter()
            .copied()
            .filter(|_| rng.gen_bool(0.6))
            .collect();
        spends.push(spends[5]);
        let set: HashSet<_> = spends.iter().copied().collect();
        for step in [1, 7, 64, outs.len()] {
            for keep_old in [false, true] {
                let got = respend(&outs, &spends, keep_old, step).unwrap();
                for (i, (o, place)) in outs.iter().zip(&places).enumerate() {
                    let want = match (set.contains(place), keep_old) {
                        (true, _) => Some(true),
                        (false, true) => o.1,
                        (false, false) => Some(false),
                    };
                    assert_eq!(got[i], want, "row {i} at {place:?}, step {step}");
                }
            }
        }
        assert!(set.len() > 300, "enough spends to cover many heights");
    }

    /// A spend that names no row (a row past its block's outputs, a height the file lacks,
    /// past the last row) and rows out of height order are errors, not flags lost.
    #[test]
    fn respent_refuses_spends_without_rows_and_unordered_rows() {
        let outs = [(4, None), (4, None), (6, None), (9, None)];
        for bad in [(4, 2), (5, 0), (6, 1), (9, 1), (10, 0), (1, 0)] {
            let err = respend(&outs, &[(4, 1), bad], false, 2).unwrap_err();
            assert!(err.to_string().contains("names no row"), "{bad:?}: {err}");
        }
        let err = respend(&[(6, None), (4, None)], &[], false, 2).unwrap_err();
        assert!(err.to_string().contains("out of height order"), "{err}");
        assert_eq!(
            respend(&outs, &[(4, 1), (9, 0)], false, 3).unwrap(),
            [Some(false), Some(true), Some(false), Some(true)]
        );
    }
}
