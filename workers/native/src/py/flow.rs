//! Python bindings for the Flow ledger core (added to `rechain.workers._native` by
//! [`register`]). Byte work runs with the GIL released; batches cross as Arrow.
//!
//! * `flow_decode_segment(path, segment_no, strict=False) -> (wal_records batch, SegmentInfo)`
//! * `flow_list_segments(dir) -> [(number, path)]`
//! * `FlowForest(capacity=500, threads=None, node_store=None, cache_bytes=0, hold_bytes=0)`
//!   (paged with a node store folder): `apply(batch)`, `replay_segment(path, no)`,
//!   `node_store()` (a paged forest's store traffic),
//!   `root_hex`, `register_count()`, `reg_size()`, `roots()`, `has_root()`, `payloads()`,
//!   `hash_permutations`, `parallel_subtries` (the updates' hashing work, and how much ran split);
//!   publication without pyarrow: `write_trie_updates()`, `write_registers()` (Parquet files
//!   and, from the same walk, RocksDB's register SST file), `write_register_hashes()`,
//!   `root_entries()` (RocksDB key/value slices as Python bytes)
//! * `flow_table_schema(name) -> pyarrow.Schema` of a published Flow table
//! * `flow_generate(outdir, updates, registers_per_update, seed=1, segment_size=32 MiB) -> FlowGenSummary`
//! * `flow_empty_root() -> str`
//! * exception `FlowWalError` with `.segment`, `.offset`, `.kind`, `.retryable`
//!
//! `FlowForest`, `FlowWalError` and the segment results are defined in `super::flow_types`
//! (shared with `super::flow_checkpoint`) and registered here.

use super::flow_types::{
    flow_err, segment_info, FlowForest, FlowPayloads, FlowWalError, NodeStoreStats, SegmentInfo,
    WalProblem,
};
use super::result::result_class;
use crate::flow::batches::{
    leaf_hashes_schema, registers_schema, trie_updates_schema, RecordsBuilder,
};
use crate::flow::gen::{generate, GenConfig};
use crate::flow::hash::empty_root;
use crate::flow::record::WalRecord;
use crate::flow::wal::{list_segments, Segment, DEFAULT_SEGMENT_SIZE};
use crate::flow::{decode_segment, FlowError};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3_arrow::{PyRecordBatch, PySchema};
use std::path::PathBuf;

/// Decodes one WAL segment file into a `wal_records` batch (one row per record, list columns
/// per path; see `flow::batches`). Records before the first problem are returned; the problem
/// is described in `info.error` (or raised as `FlowWalError` when `strict`).
/// `info.torn` is true when the segment ends inside a record (a crash while writing).
#[pyfunction]
#[pyo3(signature = (path, segment_no, strict=false))]
fn flow_decode_segment<'py>(
    py: Python<'py>,
    path: PathBuf,
    segment_no: u64,
    strict: bool,
) -> PyResult<(Bound<'py, PyAny>, SegmentInfo)> {
    let result = py.detach(|| -> Result<_, FlowError> {
        let seg = Segment::open(&path, segment_no)?;
        let dec = decode_segment(&seg);
        let mut b = RecordsBuilder::new();
        let (mut updates, mut deletes, mut paths) = (0u64, 0u64, 0u64);
        for (i, off, rec) in &dec.records {
            match rec {
                WalRecord::Update(u) => {
                    updates += 1;
                    paths += u.paths.len() as u64;
                }
                WalRecord::Delete(_) => deletes += 1,
            }
            b.push(segment_no, *i, *off, rec);
        }
        Ok((
            b.finish(),
            seg.file_len,
            dec.end,
            dec.error,
            updates,
            deletes,
            paths,
        ))
    });
    let (batch, file_len, end, error, updates, deletes, paths) =
        result.map_err(|e| flow_err(py, &e))?;
    if strict {
        if let Some(e) = &error {
            return Err(flow_err(py, e));
        }
    }
    let info = segment_info(
        py, segment_no, file_len, end, &error, updates, deletes, paths,
    )?;
    Ok((PyRecordBatch::new(batch).into_pyarrow(py)?, info))
}

/// WAL segments of a directory as onflow/wal lists them; raises `FlowWalError`
/// (`kind == "segment_gap"`) when the numbers are not consecutive.
#[pyfunction]
fn flow_list_segments(py: Python<'_>, dir: PathBuf) -> PyResult<Vec<(u64, PathBuf)>> {
    list_segments(&dir).map_err(|e| flow_err(py, &e))
}

/// Root hash of the empty trie (lower-case hex).
#[pyfunction]
fn flow_empty_root() -> String {
    empty_root().to_hex()
}

result_class! {
    /// A generated LedgerWAL (`flow_generate`): the roots it passes through and its size.
    FlowGenSummary {
        empty_root: String,
        roots: Vec<String>,
        final_root: String,
        updates: u64,
        registers: u64,
        reg_size: u64,
        segments: Vec<String>,
        segment_size: usize,
        bytes: u64,
    }
}

/// Writes a deterministic LedgerWAL (same workload as the Go oracle's `gen`) into `outdir`.
#[pyfunction]
#[pyo3(signature = (outdir, updates, registers_per_update, seed=1, segment_size=DEFAULT_SEGMENT_SIZE))]
fn flow_generate(
    py: Python<'_>,
    outdir: PathBuf,
    updates: u64,
    registers_per_update: usize,
    seed: u64,
    segment_size: usize,
) -> PyResult<FlowGenSummary> {
    let cfg = GenConfig {
        updates,
        registers_per_update,
        seed,
        segment_size,
    };
    let s = py
        .detach(|| generate(&cfg, &outdir))
        .map_err(|e| flow_err(py, &e))?;
    Ok(FlowGenSummary {
        empty_root: s.empty_root.to_hex(),
        roots: s.roots.iter().map(|r| r.to_hex()).collect(),
        final_root: s.final_root.to_hex(),
        updates,
        registers: s.registers,
        reg_size: s.reg_size,
        segments: s.segments,
        segment_size,
        bytes: s.bytes,
    })
}

/// The Arrow schema (pyarrow) of a published Flow table: `trie_updates`, `registers`,
/// `register_hashes` or a `flow_checkpoint_*` stats table (see `flow::batches`).
#[pyfunction]
fn flow_table_schema<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let schema = match name {
        "trie_updates" => trie_updates_schema(),
        "registers" => registers_schema(),
        "register_hashes" => leaf_hashes_schema(),
        "flow_checkpoint_tries" => crate::flow::batches::checkpoint_tries_schema(),
        "flow_checkpoint_depths" => crate::flow::batches::checkpoint_depths_schema(),
        "flow_checkpoint_register_kinds" => crate::flow::batches::checkpoint_kinds_schema(),
        "flow_checkpoint_owners" => crate::flow::batches::checkpoint_owners_schema(),
        _ => return Err(PyValueError::new_err(format!("no Flow table named {name}"))),
    };
    PySchema::new(schema).into_pyarrow(py)
}

/// Adds the Flow functions, classes and exception to the extension module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(flow_decode_segment, m)?)?;
    m.add_function(wrap_pyfunction!(flow_list_segments, m)?)?;
    m.add_function(wrap_pyfunction!(flow_empty_root, m)?)?;
    m.add_function(wrap_pyfunction!(flow_generate, m)?)?;
    m.add_class::<FlowGenSummary>()?;
    m.add_class::<FlowForest>()?;
    m.add_class::<FlowPayloads>()?;
    m.add_class::<SegmentInfo>()?;
    m.add_class::<WalProblem>()?;
    m.add_class::<NodeStoreStats>()?;
    m.add_function(wrap_pyfunction!(flow_table_schema, m)?)?;
    m.add("FlowWalError", m.py().get_type::<FlowWalError>())?;
    Ok(())
}
