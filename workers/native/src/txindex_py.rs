//! Python entry point of the transaction index builder (`btc/txindex.rs`): the staged txid
//! files and the published headers in, one SST file out; and the index's values
//! ([`TxPlace`]) written and read for the incremental update and lookups.

use crate::btc::txindex::{IndexBlock, TxIndexBuilder, TxPlace};
use crate::datasets::hex::{extend_hex, parse_display_hex, parse_hex32};
use arrow_array::builder::{BinaryBuilder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt32Type};
use arrow_array::{
    Array, ArrayRef, BooleanArray, FixedSizeBinaryArray, Int32Array, RecordBatch, UInt32Array,
};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ProjectionMask;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3_arrow::{PyArray, PyRecordBatch};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The columns of a staged part that the index reads (a `txids` file or an older part's
/// `transactions`).
const COLUMNS: [&str; 3] = ["txid", "block_hash", "position"];

/// The 32-byte hashes (display order) of a column: raw bytes, as the body pass stages them, or
/// display hex, as the chain state's `transactions` rows hold them.
fn hashes_of(column: &ArrayRef) -> Result<Vec<[u8; 32]>, String> {
    let not_32 = || "a hash that is not 32 bytes".to_string();
    let raw = |values: Vec<&[u8]>| -> Result<Vec<[u8; 32]>, String> {
        values
            .into_iter()
            .map(|v| v.try_into().map_err(|_| not_32()))
            .collect()
    };
    let hex = |values: Vec<&str>| -> Result<Vec<[u8; 32]>, String> {
        values
            .into_iter()
            .map(|v| parse_hex32(v.as_bytes()).ok_or_else(|| format!("hash {v:?}")))
            .collect()
    };
    if let Some(d) = column.as_any_dictionary_opt() {
        // A block's hash repeats on each of its rows: each distinct one is read once.
        let values = hashes_of(d.values())?;
        return d
            .normalized_keys()
            .into_iter()
            .map(|k| {
                values
                    .get(k)
                    .copied()
                    .ok_or_else(|| "a dictionary key past its values".to_string())
            })
            .collect();
    }
    if let Some(a) = column.as_fixed_size_binary_opt() {
        raw(a.iter().map(Option::unwrap_or_default).collect())
    } else if let Some(a) = column.as_binary_opt::<i32>() {
        raw(a.iter().map(Option::unwrap_or_default).collect())
    } else if let Some(a) = column.as_binary_opt::<i64>() {
        raw(a.iter().map(Option::unwrap_or_default).collect())
    } else if let Some(a) = column.as_string_opt::<i32>() {
        hex(a.iter().map(Option::unwrap_or_default).collect())
    } else if let Some(a) = column.as_string_opt::<i64>() {
        hex(a.iter().map(Option::unwrap_or_default).collect())
    } else {
        Err(format!("hashes of type {}", column.data_type()))
    }
}

/// A column of hashes (see `hashes_of`) as fixed_size_binary(32) in display order.
#[pyfunction]
pub fn hashes_from_hex<'py>(py: Python<'py>, hashes: PyArray) -> PyResult<Bound<'py, PyAny>> {
    let (array, _) = hashes.into_inner();
    let values = hashes_of(&array).map_err(PyValueError::new_err)?;
    let flat: Vec<u8> = values.concat();
    let out = FixedSizeBinaryArray::try_new(32, flat.into(), None)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let array = PyArray::from_array_ref(Arc::new(out))
        .to_pyarrow(py)?
        .unbind();
    Ok(array.into_bound(py))
}

/// Transaction copies: txids and block hashes (display order), positions.
#[derive(Default)]
struct Copies {
    txids: Vec<[u8; 32]>,
    blocks: Vec<[u8; 32]>,
    positions: Vec<u32>,
}

impl Copies {
    /// Appends `batch`'s copies (its three `COLUMNS`, in that order).
    fn extend(&mut self, batch: &RecordBatch) -> Result<(), String> {
        let positions = batch
            .column(2)
            .as_primitive_opt::<UInt32Type>()
            .ok_or("positions are not uint32")?;
        self.txids.extend(hashes_of(batch.column(0))?);
        self.blocks.extend(hashes_of(batch.column(1))?);
        self.positions.extend_from_slice(positions.values());
        if self.txids.len() != self.positions.len() || self.blocks.len() != self.positions.len() {
            return Err("columns of different lengths".into());
        }
        Ok(())
    }

    fn add_to(&self, b: &mut TxIndexBuilder) -> Result<(), String> {
        for ((t, h), p) in self.txids.iter().zip(&self.blocks).zip(&self.positions) {
            b.add(t, h, *p).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// `batch`'s three `COLUMNS`, in that order.
fn in_our_order(batch: &RecordBatch) -> Result<RecordBatch, String> {
    let schema = batch.schema();
    let cols = COLUMNS
        .iter()
        .map(|c| schema.index_of(c).map(|i| batch.column(i).clone()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    RecordBatch::try_from_iter(COLUMNS.iter().zip(cols).map(|(n, c)| (*n, c)))
        .map_err(|e| e.to_string())
}

/// The copies one staged file holds (a body part's `txids`, or a chain part's
/// `transactions` rows, whose block hashes are read as the dictionary they are written as).
fn read_copies(path: &Path) -> Result<Copies, String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let open = || File::open(path).map_err(|e| at(&e));
    let file_schema = ParquetRecordBatchReaderBuilder::try_new(open()?)
        .map_err(|e| at(&e))?
        .schema()
        .clone();
    let fields: Vec<Field> = file_schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Utf8 if f.name() == "block_hash" => Field::new(
                f.name(),
                DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
                f.is_nullable(),
            ),
            _ => f.as_ref().clone(),
        })
        .collect();
    let options = ArrowReaderOptions::new().with_schema(Arc::new(Schema::new(fields)));
    let builder = ParquetRecordBatchReaderBuilder::try_new_with_options(open()?, options)
        .map_err(|e| at(&e))?;
    let mask = ProjectionMask::columns(builder.parquet_schema(), COLUMNS);
    let reader = builder
        .with_projection(mask)
        .with_batch_size(65_536)
        .build()
        .map_err(|e| at(&e))?;
    let mut copies = Copies::default();
    for batch in reader {
        let batch = batch.map_err(|e| at(&e))?;
        // The projection keeps the file's column order: put the three in ours.
        copies
            .extend(&in_our_order(&batch).map_err(|e| at(&e))?)
            .map_err(|e| at(&e))?;
    }
    Ok(copies)
}

/// Adds the copies of `files` to `b`, reading `threads` files side by side (in order: at most
/// that many files' copies are held at once).
fn add_files(b: &mut TxIndexBuilder, files: &[PathBuf], threads: usize) -> Result<(), String> {
    for window in files.chunks(threads.max(1)) {
        let read: Vec<Result<Copies, String>> = std::thread::scope(|scope| {
            let running: Vec<_> = window
                .iter()
                .map(|f| scope.spawn(move || read_copies(f)))
                .collect();
            running
                .into_iter()
                .map(|h| h.join().expect("a staged file's reader panicked"))
                .collect()
        });
        for copies in read {
            copies?.add_to(b)?;
        }
    }
    Ok(())
}

/// The headers table's `hash` (display hex), `height` (uint32, null when unconnected) and
/// `in_best_chain` (bool), as the builder ranks blocks.
fn index_blocks(hashes: PyArray, heights: PyArray, best: PyArray) -> PyResult<Vec<IndexBlock>> {
    let bad = |what: &str| PyValueError::new_err(format!("write_txindex: {what}"));
    let (hashes, _) = hashes.into_inner();
    let (heights, _) = heights.into_inner();
    let (best, _) = best.into_inner();
    let hashes = hashes
        .as_string_opt::<i32>()
        .ok_or_else(|| bad("hashes must be strings"))?;
    let heights = heights
        .as_primitive_opt::<UInt32Type>()
        .ok_or_else(|| bad("heights must be uint32"))?;
    let best = best
        .as_boolean_opt()
        .ok_or_else(|| bad("in_best_chain must be bool"))?;
    if heights.len() != hashes.len() || best.len() != hashes.len() {
        return Err(bad("the header columns differ in length"));
    }
    let mut blocks = Vec::with_capacity(hashes.len());
    for i in 0..hashes.len() {
        let hex = if hashes.is_valid(i) {
            hashes.value(i)
        } else {
            ""
        };
        let mut hash = parse_display_hex(hex).ok_or_else(|| bad(&format!("hash {hex:?}")))?;
        hash.reverse(); // display order, as the staged hashes are
        blocks.push(IndexBlock {
            hash,
            height: heights.is_valid(i).then(|| heights.value(i)),
            best: best.is_valid(i).then(|| best.value(i)),
        });
    }
    Ok(blocks)
}

/// Builds `btc_txindex` whole as SST files in `sst_dir` (`txindex-RRR-NNNNNN.sst`, each closed
/// once it holds its share of `sst_memory` bytes, in key order; `threads` ranges of keys
/// written side by side) from the transaction copies in the staged txid
/// files `txid_files` and in `batches` (record batches with `txid`, `block_hash` and
/// `position`, as those files hold them: one range of the index built apart), and the
/// headers table's `hash` (display hex), `height` (uint32, null when unconnected) and
/// `in_best_chain` (bool), partitioning heights by `range_blocks`; the sorted runs hold at
/// most `memory` bytes, spilled beyond that to `spill_dir`. Returns (the files, entries,
/// transaction copies whose block the headers lack).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn write_txindex(
    py: Python<'_>,
    txid_files: Vec<PathBuf>,
    batches: Vec<PyRecordBatch>,
    hashes: PyArray,
    heights: PyArray,
    best: PyArray,
    range_blocks: u32,
    memory: usize,
    spill_dir: PathBuf,
    sst_dir: PathBuf,
    sst_memory: usize,
    compress: bool,
    threads: usize,
) -> PyResult<(Vec<PathBuf>, u64, u64)> {
    let blocks = index_blocks(hashes, heights, best)?;
    let batches: Vec<RecordBatch> = batches.into_iter().map(PyRecordBatch::into_inner).collect();
    py.detach(|| {
        let mut builder =
            TxIndexBuilder::with_ranges(blocks, range_blocks, memory, &spill_dir, threads);
        add_files(&mut builder, &txid_files, threads)?;
        for b in &batches {
            let mut copies = Copies::default();
            copies.extend(&in_our_order(b)?)?;
            copies.add_to(&mut builder)?;
        }
        let unknown = builder.unknown_blocks;
        std::fs::create_dir_all(&sst_dir).map_err(|e| format!("{}: {e}", sst_dir.display()))?;
        // Names sort in key order: by range, then by file within it.
        let name = |k: usize, i: usize| sst_dir.join(format!("txindex-{k:03}-{i:06}.sst"));
        let (files, entries) = builder
            .finish(name, sst_memory, compress)
            .map_err(|e| format!("{}: {e}", sst_dir.display()))?;
        Ok((files, entries, unknown))
    })
    .map_err(|e: String| PyOSError::new_err(e))
}

/// The `btc_txindex` values of transaction copies (`TxPlace`), one per row of the arrays:
/// `best` (bool: on the best chain), `height` (uint32), `height_range` (int64, the partition of
/// a copy off the best chain), `block_hash` (display hex) and `position` (uint32); null where
/// `position` is null (no copy).
#[pyfunction]
pub fn encode_txindex_places<'py>(
    py: Python<'py>,
    best: PyArray,
    height: PyArray,
    height_range: PyArray,
    block_hash: PyArray,
    position: PyArray,
) -> PyResult<Bound<'py, PyAny>> {
    let bad = |what: &str| PyValueError::new_err(format!("encode_txindex_places: {what}"));
    let (best, _) = best.into_inner();
    let (height, _) = height.into_inner();
    let (height_range, _) = height_range.into_inner();
    let (block_hash, _) = block_hash.into_inner();
    let (position, _) = position.into_inner();
    let best = best
        .as_boolean_opt()
        .ok_or_else(|| bad("best must be bool"))?;
    let height = height
        .as_primitive_opt::<UInt32Type>()
        .ok_or_else(|| bad("height must be uint32"))?;
    let height_range = height_range
        .as_primitive_opt::<Int64Type>()
        .ok_or_else(|| bad("height_range must be int64"))?;
    let block_hash = block_hash
        .as_string_opt::<i32>()
        .ok_or_else(|| bad("block_hash must be strings"))?;
    let position = position
        .as_primitive_opt::<UInt32Type>()
        .ok_or_else(|| bad("position must be uint32"))?;
    let n = position.len();
    if [
        best.len(),
        height.len(),
        height_range.len(),
        block_hash.len(),
    ] != [n; 4]
    {
        return Err(bad("the columns differ in length"));
    }
    let mut out = BinaryBuilder::with_capacity(n, n * 40);
    let mut value = Vec::with_capacity(40);
    for i in 0..n {
        if position.is_null(i) {
            out.append_null();
            continue;
        }
        let hex = block_hash.is_valid(i).then(|| block_hash.value(i));
        let mut block = parse_display_hex(hex.unwrap_or(""))
            .ok_or_else(|| bad(&format!("block hash {hex:?}")))?;
        block.reverse(); // display order
        let range =
            i32::try_from(height_range.value(i)).map_err(|_| bad("a height range past i32"))?;
        let place = TxPlace::new(
            best.is_valid(i).then(|| best.value(i)),
            height.is_valid(i).then(|| height.value(i)),
            range,
            block,
            position.value(i),
        );
        value.clear();
        place.encode_into(&mut value);
        out.append_value(&value);
    }
    let array = PyArray::from_array_ref(Arc::new(out.finish()))
        .to_pyarrow(py)?
        .unbind();
    Ok(array.into_bound(py))
}

/// `btc_txindex` values (None where a key has none) read back: a record batch of `best`,
/// `height` (null off the best chain), `height_range` (null on it: its height says), `block_hash`
/// (display hex, null on the best chain) and `position`, each null for a missing value.
#[pyfunction]
pub fn decode_txindex_places<'py>(
    py: Python<'py>,
    values: Vec<Option<Vec<u8>>>,
) -> PyResult<Bound<'py, PyAny>> {
    let n = values.len();
    let mut best = Vec::with_capacity(n);
    let mut height = Vec::with_capacity(n);
    let mut height_range = Vec::with_capacity(n);
    let mut block_hash = StringBuilder::with_capacity(n, 64 * n);
    let mut position = Vec::with_capacity(n);
    let mut hex = Vec::with_capacity(64);
    for v in &values {
        let place = match v {
            None => None,
            Some(v) => Some(TxPlace::decode(v).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "a btc_txindex value of {} bytes: an index of another format, \
                     rebuilt by rerunning the reindex",
                    v.len()
                ))
            })?),
        };
        match place {
            None => {
                best.push(None);
                height.push(None);
                height_range.push(None);
                block_hash.append_null();
                position.push(None);
            }
            Some(TxPlace::Best {
                height: h,
                position: p,
            }) => {
                best.push(Some(true));
                height.push(Some(h));
                height_range.push(None);
                block_hash.append_null();
                position.push(Some(p));
            }
            Some(TxPlace::Other {
                height_range: r,
                block,
                position: p,
            }) => {
                best.push(Some(false));
                height.push(None);
                height_range.push(Some(r));
                hex.clear();
                extend_hex(&mut hex, &block);
                block_hash.append_value(std::str::from_utf8(&hex).expect("hex is ASCII"));
                position.push(Some(p));
            }
        }
    }
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("best", DataType::Boolean, true),
            Field::new("height", DataType::UInt32, true),
            Field::new("height_range", DataType::Int32, true),
            Field::new("block_hash", DataType::Utf8, true),
            Field::new("position", DataType::UInt32, true),
        ])),
        vec![
            Arc::new(BooleanArray::from(best)),
            Arc::new(UInt32Array::from(height)),
            Arc::new(Int32Array::from(height_range)),
            Arc::new(block_hash.finish()),
            Arc::new(UInt32Array::from(position)),
        ],
    )
    .map_err(|e| PyValueError::new_err(e.to_string()))?;
    PyRecordBatch::new(batch).into_pyarrow(py)
}
