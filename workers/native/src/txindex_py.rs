//! Python entry point of the transaction index builder (`btc/txindex.rs`): the staged txid
//! files and the published headers in, one SST file out.

use crate::btc::txindex::{IndexBlock, TxIndexBuilder};
use crate::datasets::hex::parse_display_hex;
use arrow_array::cast::AsArray;
use arrow_array::types::UInt32Type;
use arrow_array::{Array, ArrayRef, RecordBatch};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3_arrow::{PyArray, PyRecordBatch};
use std::fs::File;
use std::path::{Path, PathBuf};

/// The columns of a staged part that the index reads (a `txids` file or an older part's
/// `transactions`).
const COLUMNS: [&str; 3] = ["txid", "block_hash", "position"];

fn hashes_of(column: &ArrayRef) -> Result<Vec<&[u8; 32]>, String> {
    let values: Vec<&[u8]> = if let Some(a) = column.as_fixed_size_binary_opt() {
        a.iter().map(Option::unwrap_or_default).collect()
    } else if let Some(a) = column.as_binary_opt::<i32>() {
        a.iter().map(Option::unwrap_or_default).collect()
    } else if let Some(a) = column.as_binary_opt::<i64>() {
        a.iter().map(Option::unwrap_or_default).collect()
    } else {
        return Err(format!("hashes of type {}", column.data_type()));
    };
    values
        .into_iter()
        .map(|v| {
            v.try_into()
                .map_err(|_| "a hash that is not 32 bytes".to_string())
        })
        .collect()
}

fn add_batch(b: &mut TxIndexBuilder, batch: &RecordBatch) -> Result<(), String> {
    let txids = hashes_of(batch.column(0))?;
    let blocks = hashes_of(batch.column(1))?;
    let positions = batch
        .column(2)
        .as_primitive_opt::<UInt32Type>()
        .ok_or("positions are not uint32")?;
    for ((t, h), p) in txids.into_iter().zip(blocks).zip(positions.values()) {
        b.add(t, h, *p).map_err(|e| e.to_string())?;
    }
    Ok(())
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

fn add_file(b: &mut TxIndexBuilder, path: &Path) -> Result<(), String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let file = File::open(path).map_err(|e| at(&e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| at(&e))?;
    let descr = builder.parquet_schema();
    let mask = ProjectionMask::columns(descr, COLUMNS);
    let reader = builder
        .with_projection(mask)
        .with_batch_size(65_536)
        .build()
        .map_err(|e| at(&e))?;
    for batch in reader {
        let batch = batch.map_err(|e| at(&e))?;
        // The projection keeps the file's column order: put the three in ours.
        add_batch(b, &in_our_order(&batch).map_err(|e| at(&e))?).map_err(|e| at(&e))?;
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
        for f in &txid_files {
            add_file(&mut builder, f)?;
        }
        for b in &batches {
            add_batch(&mut builder, &in_our_order(b)?)?;
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
