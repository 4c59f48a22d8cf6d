//! Python entry point of the transaction index builder (`btc/txindex.rs`): the staged txid
//! files and the published headers in, one SST file out; and the index's values
//! ([`TxPlace`]) written and read for the incremental update and lookups.

use crate::btc::txindex::{IndexBlock, TxIndexBuilder, TxPlace};
use crate::datasets::btc_txids::{add_files, hashes_of, in_our_order, Copies};
use crate::datasets::hex::{extend_hex, parse_display_hex};
use arrow_array::builder::{BinaryBuilder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt32Type};
use arrow_array::{
    Array, BooleanArray, FixedSizeBinaryArray, Int32Array, RecordBatch, UInt32Array,
};
use arrow_schema::{DataType, Field, Schema};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3_arrow::{PyArray, PyRecordBatch};
use std::path::PathBuf;
use std::sync::Arc;

/// A column of hashes (see `hashes_of`) as fixed_size_binary(32) in display order.
#[pyfunction]
pub fn hashes_from_hex<'py>(py: Python<'py>, hashes: PyArray) -> PyResult<Bound<'py, PyAny>> {
    let (array, _) = hashes.into_inner();
    let values = hashes_of(&array).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let flat: Vec<u8> = values.concat();
    let out = FixedSizeBinaryArray::try_new(32, flat.into(), None)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let array = PyArray::from_array_ref(Arc::new(out))
        .to_pyarrow(py)?
        .unbind();
    Ok(array.into_bound(py))
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
    // Every error here is the OSError (its message) Python has always received.
    let os = |e: &dyn std::fmt::Display| PyOSError::new_err(e.to_string());
    py.detach(|| {
        let mut builder =
            TxIndexBuilder::with_ranges(blocks, range_blocks, memory, &spill_dir, threads);
        add_files(&mut builder, &txid_files, threads).map_err(|e| os(&e))?;
        for b in &batches {
            let mut copies = Copies::default();
            copies
                .extend(&in_our_order(b).map_err(|e| os(&e))?)
                .map_err(|e| os(&e))?;
            copies.add_to(&mut builder).map_err(|e| os(&e))?;
        }
        let unknown = builder.unknown_blocks;
        std::fs::create_dir_all(&sst_dir)
            .map_err(|e| os(&format!("{}: {e}", sst_dir.display())))?;
        // Names sort in key order: by range, then by file within it.
        let name = |k: usize, i: usize| sst_dir.join(format!("txindex-{k:03}-{i:06}.sst"));
        let (files, entries) = builder
            .finish(name, sst_memory, compress)
            .map_err(|e| os(&format!("{}: {e}", sst_dir.display())))?;
        Ok((files, entries, unknown))
    })
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
