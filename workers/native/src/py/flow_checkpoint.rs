//! Python bindings for Flow checkpoints (added to `rechain.workers._native` through
//! [`register`]). File work runs with the GIL released.
//!
//! * `flow_checkpoint_verify_part(dir, name, index) -> CheckpointPart` (one subtrie part, fully verified)
//! * `flow_checkpoint_version(dir, name) -> int`
//! * `flow_checkpoint_stream(dir, name, registers, hashes, ...) -> CheckpointStream` (bounded memory; with
//!   `sst_dir`, the register SST files too)
//! * `flow_checkpoint_verify(dir, name, threads=None, verify="full", batch_bytes)
//!   -> CheckpointScan`
//!   (the streamed read's checks, nothing kept)
//! * `flow_checkpoint_page_in(dir, name, store_dir, cache_bytes, hold_bytes, ...)
//!   -> (FlowForest, CheckpointScan)`: a forest paged out to a node store (bounded memory)
//! * `flow_checkpoint_stats(dir, name, spill_dir, ...) -> CheckpointStats` (`checkpoint stats`, streamed;
//!   its `owners` is a `FlowCheckpointOwners` iterator of record batches)
//! * `flow_checkpoint_load(dir, name, threads=None, verify_hashes=True, verify_leaves=True)
//!   -> (FlowForest, CheckpointLoad)`
//! * `flow_checkpoint_write(forest, dir, name, roots=None, threads=None)
//!   -> CheckpointWriteResult`
//! * `FlowCheckpointBuilder(dir, name, threads=None)`: `push(registers batch)`, `finish()`
//! * `flow_checkpoint_write_registers(registers, hashes, dir, name, ...)
//!   -> RegistersCheckpointWrite`
//! * `flow_register_split(values, version) -> (encoded_key, value)`: RocksDB values split
//! * `flow_keccak_throughput(threads=None, permutations_per_thread) -> KeccakThroughput`: the keccak floor
//! * exception `FlowCheckpointError` with `.file`, `.offset`, `.kind`, `.retryable`
//!
//! Results are frozen classes (`super::result`) with `as_dict()`.

use super::flow_types::{register_layouts, FlowForest};
use super::parquet_layout::ParquetLayout;
use super::result::result_class;
use crate::flow::batches::{
    checkpoint_depths_batch, checkpoint_kinds_batch, checkpoint_owners_batch,
    checkpoint_tries_batch,
};
use crate::flow::checkpoint::from_registers::{register_rows, write_from_registers};
use crate::flow::checkpoint::page_in::page_in;
use crate::flow::checkpoint::stats::{collect, OwnerMerge};
use crate::flow::checkpoint::stream::{
    stream, verify as verify_stream, StreamInfo, StreamOptions, Walk,
};
use crate::flow::checkpoint::{
    checkpoint_version, count_registers, load, verify_part, write_tries, CheckpointError, PartInfo,
    RegisterCheckpointBuilder, Verify, WriteInfo,
};
use crate::flow::hash::chain_throughput;
use crate::flow::hash::Hash;
use crate::flow::mtrie::{Forest, DEFAULT_CAPACITY};
use crate::flow::node_store::NodeStore;
use crate::flow::register_sst::{split_register_values, RegisterSst};
use crate::flow::replay::ReplayState;
use crate::flow::ErrorKind;
use arrow_array::{Array, ArrayRef, BinaryArray};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3_arrow::{PyArray, PyRecordBatch};
use std::path::PathBuf;
use std::sync::Arc;

create_exception!(
    _native,
    FlowCheckpointError,
    PyException,
    "A checkpoint problem; attributes: file, offset, kind (snake_case name), retryable."
);

fn cp_err(py: Python<'_>, e: &CheckpointError) -> PyErr {
    let err = FlowCheckpointError::new_err(e.to_string());
    let v = err.value(py);
    // Attribute assignment on a fresh exception cannot fail in practice; the message has it all.
    let _ = v.setattr("file", &e.file);
    let _ = v.setattr("offset", e.offset);
    let _ = v.setattr("kind", e.kind);
    let _ = v.setattr("retryable", e.is_retryable());
    err
}

fn threads_or_cores(threads: Option<usize>) -> usize {
    threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

result_class! {
    /// One subtrie part read and verified.
    CheckpointPart {
        index: usize,
        nodes: u64,
        leaves: u64,
        bytes: u64,
        permutations: u64,
    }
}

result_class! {
    /// A trie of a checkpoint: its root (hex) and the register count and size its record says.
    CheckpointTrie {
        root: String,
        reg_count: u64,
        reg_size: u64,
    }
}

result_class! {
    /// A checkpoint loaded whole (`flow_checkpoint_load`): its tries, parts and top nodes, and
    /// the registers the last trie really holds (walked).
    CheckpointLoad {
        tries: Vec<Py<CheckpointTrie>>,
        parts: Vec<Py<CheckpointPart>>,
        top_nodes: u64,
        last_trie_registers: u64,
    }
}

result_class! {
    /// A one-trie checkpoint streamed and checked (`flow_checkpoint_verify`,
    /// `flow_checkpoint_page_in`).
    CheckpointScan {
        tries: Vec<Py<CheckpointTrie>>,
        parts: Vec<Py<CheckpointPart>>,
        top_nodes: u64,
        rows: u64,
        registers: u64,
    }
}

result_class! {
    /// A one-trie checkpoint streamed into `registers` files (`flow_checkpoint_stream`): what
    /// `CheckpointScan` says, and the register SST files written (key order).
    CheckpointStream {
        tries: Vec<Py<CheckpointTrie>>,
        parts: Vec<Py<CheckpointPart>>,
        top_nodes: u64,
        rows: u64,
        registers: u64,
        sst_files: Vec<PathBuf>,
    }
}

result_class! {
    /// `checkpoint stats` gathered (`flow_checkpoint_stats`): what `CheckpointScan` says, the
    /// small stats tables as pyarrow record batches, and the owners iterator.
    CheckpointStats {
        tries: Vec<Py<CheckpointTrie>>,
        parts: Vec<Py<CheckpointPart>>,
        top_nodes: u64,
        rows: u64,
        registers: u64,
        trie_stats: Py<PyAny>,
        depths: Py<PyAny>,
        kinds: Py<PyAny>,
        owners: Py<FlowCheckpointOwners>,
    }
}

result_class! {
    /// A checkpoint written (`flow_checkpoint_write`, `FlowCheckpointBuilder.finish`).
    CheckpointWriteResult {
        tries: Vec<Py<CheckpointTrie>>,
        part_nodes: Vec<u64>,
        top_nodes: u64,
        bytes: u64,
        cached_leaves: u64,
        hashed_leaves: u64,
    }
}

result_class! {
    /// A checkpoint written from a data folder's `registers` files
    /// (`flow_checkpoint_write_registers`): `CheckpointWriteResult`'s fields and the rows read.
    RegistersCheckpointWrite {
        tries: Vec<Py<CheckpointTrie>>,
        part_nodes: Vec<u64>,
        top_nodes: u64,
        bytes: u64,
        cached_leaves: u64,
        hashed_leaves: u64,
        registers_read: u64,
    }
}

result_class! {
    /// The multi-lane keccak rate measured (`flow_keccak_throughput`).
    KeccakThroughput {
        backend: String,
        lanes: usize,
        threads: usize,
        permutations: u64,
        seconds: f64,
        permutations_per_s: f64,
    }
}

fn part_of(py: Python<'_>, p: &PartInfo) -> PyResult<Py<CheckpointPart>> {
    Py::new(
        py,
        CheckpointPart {
            index: p.index,
            nodes: p.nodes,
            leaves: p.leaves,
            bytes: p.bytes,
            permutations: p.permutations,
        },
    )
}

fn parts_of(py: Python<'_>, parts: &[PartInfo]) -> PyResult<Vec<Py<CheckpointPart>>> {
    parts.iter().map(|p| part_of(py, p)).collect()
}

fn trie_of(
    py: Python<'_>,
    root: &Hash,
    reg_count: u64,
    reg_size: u64,
) -> PyResult<Py<CheckpointTrie>> {
    Py::new(
        py,
        CheckpointTrie {
            root: root.to_hex(),
            reg_count,
            reg_size,
        },
    )
}

fn tries_of(py: Python<'_>, tries: &[(Hash, u64, u64)]) -> PyResult<Vec<Py<CheckpointTrie>>> {
    tries
        .iter()
        .map(|(h, c, s)| trie_of(py, h, *c, *s))
        .collect()
}

fn write_result(py: Python<'_>, w: &WriteInfo) -> PyResult<CheckpointWriteResult> {
    Ok(CheckpointWriteResult {
        tries: tries_of(py, &w.tries)?,
        part_nodes: w.part_nodes.clone(),
        top_nodes: w.top_nodes,
        bytes: w.bytes,
        cached_leaves: w.cached_leaves,
        hashed_leaves: w.hashed_leaves,
    })
}

fn scan_result(py: Python<'_>, info: &StreamInfo) -> PyResult<CheckpointScan> {
    Ok(CheckpointScan {
        tries: tries_of(py, &info.tries)?,
        parts: parts_of(py, &info.parts)?,
        top_nodes: info.top_nodes,
        rows: info.rows,
        registers: info.registers,
    })
}

/// Decodes one subtrie part and verifies it: magic, version, both CRCs, node order, every
/// interior hash recomputed from its children and, with `verify_leaves` (default), every leaf
/// hash from its value. Raises `FlowCheckpointError`.
#[pyfunction]
#[pyo3(signature = (dir, name, index, verify_leaves=true))]
fn flow_checkpoint_verify_part(
    py: Python<'_>,
    dir: PathBuf,
    name: String,
    index: usize,
    verify_leaves: bool,
) -> PyResult<CheckpointPart> {
    let mode = if verify_leaves {
        Verify::Full
    } else {
        Verify::Interior
    };
    let info = py
        .detach(|| verify_part(&dir, &name, index, mode))
        .map_err(|e| cp_err(py, &e))?;
    Ok(CheckpointPart {
        index: info.index,
        nodes: info.nodes,
        leaves: info.leaves,
        bytes: info.bytes,
        permutations: info.permutations,
    })
}

/// The version of checkpoint `name` in `dir` (6, or 1/3/4/5 for the single-file versions that
/// `flow_checkpoint_load` reads whole); raises `FlowCheckpointError` on a bad magic.
#[pyfunction]
fn flow_checkpoint_version(py: Python<'_>, dir: PathBuf, name: String) -> PyResult<u16> {
    checkpoint_version(&dir, &name).map_err(|e| cp_err(py, &e))
}

/// Loads checkpoint `name` from `dir` into a new `FlowForest` whose current root is the last
/// trie's, the subtrie parts read and verified on `threads` threads. `verify_hashes=False`
/// skips re-hashing the subtrie parts (when workers already ran `flow_checkpoint_verify_part`
/// on them); `verify_leaves=False` re-hashes only their interior nodes, trusting the stored
/// leaf hashes. CRCs, order and every trie root are checked always.
#[pyfunction]
#[pyo3(signature = (dir, name, threads=None, verify_hashes=true, verify_leaves=true))]
fn flow_checkpoint_load(
    py: Python<'_>,
    dir: PathBuf,
    name: String,
    threads: Option<usize>,
    verify_hashes: bool,
    verify_leaves: bool,
) -> PyResult<(FlowForest, CheckpointLoad)> {
    let n = threads_or_cores(threads);
    let mode = match (verify_hashes, verify_leaves) {
        (false, _) => Verify::None,
        (true, true) => Verify::Full,
        (true, false) => Verify::Interior,
    };
    let loaded = py
        .detach(|| load(&dir, &name, n, mode))
        .map_err(|e| cp_err(py, &e))?;
    let info = CheckpointLoad {
        tries: loaded
            .tries
            .iter()
            .map(|t| trie_of(py, &t.root_hash(), t.reg_count, t.reg_size))
            .collect::<PyResult<_>>()?,
        parts: parts_of(py, &loaded.parts)?,
        top_nodes: loaded.top_nodes,
        // Walked, not read from the trie record: the register count the last trie really holds.
        last_trie_registers: loaded
            .tries
            .last()
            .map_or(Ok(0), count_registers)
            .map_err(|e| cp_err(py, &e))?,
    };
    if loaded.tries.is_empty() {
        return Err(cp_err(py, &CheckpointError::no_tries(&dir.join(&name))));
    }
    Ok((FlowForest::from_tries(loaded.tries, threads), info))
}

/// Streams v6 checkpoint `name` of `dir` (one trie) into 16 `registers` and 16
/// `register_hashes` files (one per subtrie part, path order, laid out as `registers_layout` and
/// `hashes_layout` declare) on `threads` threads, in memory
/// bounded by `batch_bytes` per part: `verify` is `full`, `interior` (trust leaf hashes) or
/// `none` (trust every stored hash). With `sst_dir`, each part also writes RocksDB's
/// `flow_registers` entries (values of `sst_version`) as SST files there, each closed once it
/// holds `sst_memory` bytes. Returns `tries`, `parts`, `top_nodes`, `rows`, `registers` and
/// `sst_files` (key order). Raises `FlowCheckpointError` (kind `shared_node`: several tries;
/// read it with `flow_checkpoint_load`); the files are only valid if it returns.
#[pyfunction]
#[pyo3(signature = (
    dir, name, registers, hashes, registers_layout, hashes_layout, threads=None, verify="full",
    batch_bytes=1 << 20, sst_dir=None, sst_memory=1 << 20, sst_version=0
))]
#[allow(clippy::too_many_arguments)]
fn flow_checkpoint_stream(
    py: Python<'_>,
    dir: PathBuf,
    name: String,
    registers: Vec<PathBuf>,
    hashes: Vec<PathBuf>,
    registers_layout: PyRef<'_, ParquetLayout>,
    hashes_layout: PyRef<'_, ParquetLayout>,
    threads: Option<usize>,
    verify: &str,
    batch_bytes: usize,
    sst_dir: Option<PathBuf>,
    sst_memory: usize,
    sst_version: u8,
) -> PyResult<CheckpointStream> {
    let verify = parse_verify(verify)?;
    let opts = StreamOptions {
        threads: threads_or_cores(threads),
        verify,
        registers,
        hashes,
        layouts: register_layouts(&registers_layout, &hashes_layout),
        batch_bytes,
        sst: sst_dir.map(|dir| RegisterSst {
            dir,
            max_held: sst_memory,
            version: sst_version,
            compress: true,
        }),
    };
    let (info, sst_files) = py
        .detach(|| stream(&dir, &name, &opts))
        .map_err(|e| cp_err(py, &e))?;
    Ok(CheckpointStream {
        tries: tries_of(py, &info.tries)?,
        parts: parts_of(py, &info.parts)?,
        top_nodes: info.top_nodes,
        rows: info.rows,
        registers: info.registers,
        sst_files,
    })
}

/// Verifies v6 checkpoint `name` of `dir` (one trie) as `flow_checkpoint_stream` reads it
/// (`verify` alike), keeping nothing: leaf batches of `batch_bytes` per part. Returns
/// `tries`, `parts`, `top_nodes`, `rows` and `registers`. Raises `FlowCheckpointError` (kind
/// `shared_node`: several tries; verify it with `flow_checkpoint_load`).
#[pyfunction]
#[pyo3(signature = (dir, name, threads=None, verify="full", batch_bytes=1 << 20))]
fn flow_checkpoint_verify(
    py: Python<'_>,
    dir: PathBuf,
    name: String,
    threads: Option<usize>,
    verify: &str,
    batch_bytes: usize,
) -> PyResult<CheckpointScan> {
    let walk = walk_of(threads, verify, batch_bytes)?;
    let info = py
        .detach(|| verify_stream(&dir, &name, walk))
        .map_err(|e| cp_err(py, &e))?;
    scan_result(py, &info)
}

/// Pages v6 checkpoint `name` of `dir` (one trie) into a node store in the new folder
/// `store_dir` while streaming and checking it (`verify` as for `flow_checkpoint_stream`), and
/// returns a paged `FlowForest` holding its trie: loaded nodes cached up to `cache_bytes`,
/// new ones written out past `hold_bytes`, so a replay on top of it runs in about their sum
/// whatever the checkpoint's size. The folder is scratch, removed with the forest.
#[pyfunction]
#[pyo3(signature = (dir, name, store_dir, cache_bytes, hold_bytes, threads=None, verify="full"))]
#[allow(clippy::too_many_arguments)]
fn flow_checkpoint_page_in(
    py: Python<'_>,
    dir: PathBuf,
    name: String,
    store_dir: PathBuf,
    cache_bytes: usize,
    hold_bytes: u64,
    threads: Option<usize>,
    verify: &str,
) -> PyResult<(FlowForest, CheckpointScan)> {
    let walk = walk_of(threads, verify, (cache_bytes / 32).clamp(64 << 10, 4 << 20))?;
    let paged = py.detach(|| {
        let store = NodeStore::create(&store_dir, cache_bytes)
            .map_err(|e| CheckpointError::new(&e.file, e.offset, "io", e.message))?;
        let (info, trie) = page_in(&dir, &name, walk, &store)?;
        let forest = Forest::new(DEFAULT_CAPACITY, walk.threads)
            .with_paging(store, hold_bytes)
            .map_err(|e| CheckpointError::new(&e.file, e.offset, "io", e.message))?;
        Ok::<_, CheckpointError>((info, ReplayState::with_forest(forest, vec![trie])))
    });
    let (info, state) = paged.map_err(|e| cp_err(py, &e))?;
    Ok((FlowForest::from_state(state), scan_result(py, &info)?))
}

/// A streamed walk from the Python arguments (`threads`: default all cores).
fn walk_of(threads: Option<usize>, verify: &str, batch_bytes: usize) -> PyResult<Walk> {
    Ok(Walk {
        threads: threads_or_cores(threads),
        verify: parse_verify(verify)?,
        batch_bytes,
    })
}

fn parse_verify(verify: &str) -> PyResult<Verify> {
    match verify {
        "full" => Ok(Verify::Full),
        "interior" => Ok(Verify::Interior),
        "none" => Ok(Verify::None),
        other => Err(PyValueError::new_err(format!("verify={other:?}"))),
    }
}

/// `checkpoint stats` of v6 checkpoint `name` of `dir` (one trie), gathered with the streamed
/// read on `threads` threads (`verify` as `flow_checkpoint_stream`): leaf batches of
/// `batch_bytes` per part, owner counts spilled as sorted runs into `spill_dir` (the caller's
/// folder, removed by the caller) past `owner_bytes`. Returns what the streamed read does plus
/// `trie_stats`, `depths`, `kinds` (pyarrow record batches of the `flow_checkpoint_tries`,
/// `_depths`, `_register_kinds` tables) and `owners` (a `FlowCheckpointOwners`: record batches
/// of `flow_checkpoint_owners` in owner order). Raises `FlowCheckpointError`.
#[pyfunction]
#[pyo3(signature = (dir, name, spill_dir, threads=None, verify="full", batch_bytes=1 << 20, owner_bytes=64 << 20))]
#[allow(clippy::too_many_arguments)]
fn flow_checkpoint_stats(
    py: Python<'_>,
    dir: PathBuf,
    name: String,
    spill_dir: PathBuf,
    threads: Option<usize>,
    verify: &str,
    batch_bytes: usize,
    owner_bytes: usize,
) -> PyResult<CheckpointStats> {
    let walk = walk_of(threads, verify, batch_bytes)?;
    let stats = py
        .detach(|| collect(&dir, &name, walk, &spill_dir, owner_bytes))
        .map_err(|e| cp_err(py, &e))?;
    let batch = |b| -> PyResult<Py<PyAny>> { Ok(PyRecordBatch::new(b).into_pyarrow(py)?.unbind()) };
    let info = &stats.info;
    Ok(CheckpointStats {
        tries: tries_of(py, &info.tries)?,
        parts: parts_of(py, &info.parts)?,
        top_nodes: info.top_nodes,
        rows: info.rows,
        registers: info.registers,
        trie_stats: batch(checkpoint_tries_batch(std::slice::from_ref(&stats.trie)))?,
        depths: batch(checkpoint_depths_batch(&stats.trie))?,
        kinds: batch(checkpoint_kinds_batch(&stats.kinds))?,
        owners: Py::new(
            py,
            FlowCheckpointOwners {
                merge: Some(stats.owners),
                batch_rows: OWNER_BATCH_ROWS,
            },
        )?,
    })
}

/// Owners merged into one record batch (a few hundred KiB).
const OWNER_BATCH_ROWS: usize = 8192;

/// `flow_checkpoint_owners` record batches (up to `batch_rows` rows each, owner byte order),
/// merged from the spilled runs as they are asked for; the runs are removed once it is done
/// or dropped.
#[pyclass(name = "FlowCheckpointOwners", module = "rechain.workers._native")]
pub struct FlowCheckpointOwners {
    merge: Option<OwnerMerge>,
    batch_rows: usize,
}

#[pymethods]
impl FlowCheckpointOwners {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let Some(merge) = self.merge.as_mut() else {
            return Ok(None);
        };
        let rows = self.batch_rows;
        let rows = py
            .detach(|| merge.next_rows(rows))
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        if rows.is_empty() {
            self.merge = None; // removes the runs
            return Ok(None);
        }
        let batch = checkpoint_owners_batch(&rows);
        Ok(Some(PyRecordBatch::new(batch).into_pyarrow(py)?.unbind()))
    }

    /// Removes the runs without reading them.
    fn close(&mut self) {
        self.merge = None;
    }
}

/// Writes the tries of `forest` with these roots (default: its current root) as a v6
/// checkpoint, byte-identical to flow-go's `StoreCheckpointV6`.
#[pyfunction]
#[pyo3(signature = (forest, dir, name, roots=None, threads=None))]
fn flow_checkpoint_write<'py>(
    py: Python<'py>,
    forest: PyRef<'py, FlowForest>,
    dir: PathBuf,
    name: String,
    roots: Option<Vec<String>>,
    threads: Option<usize>,
) -> PyResult<CheckpointWriteResult> {
    let tries = forest.tries_for(roots)?;
    let n = threads_or_cores(threads);
    let info = py
        .detach(|| write_tries(&tries, &dir, &name, n))
        .map_err(|e| cp_err(py, &e))?;
    write_result(py, &info)
}

/// Writes the one-trie checkpoint `dir/name` from a data folder's `registers` files (table
/// order), each with its `register_hashes` file or None; the parts are folded on `threads`
/// threads. Returns what `FlowCheckpointBuilder.finish` does, and `registers_read`: the table's
/// rows.
#[pyfunction]
#[pyo3(signature = (registers, hashes, dir, name, threads=None, reg_size=None))]
fn flow_checkpoint_write_registers(
    py: Python<'_>,
    registers: Vec<PathBuf>,
    hashes: Vec<Option<PathBuf>>,
    dir: PathBuf,
    name: String,
    threads: Option<usize>,
    reg_size: Option<u64>,
) -> PyResult<RegistersCheckpointWrite> {
    if hashes.len() != registers.len() {
        return Err(PyValueError::new_err(
            "one register_hashes entry per registers file",
        ));
    }
    let files: Vec<(PathBuf, Option<PathBuf>)> = registers.into_iter().zip(hashes).collect();
    let n = threads_or_cores(threads);
    let (info, rows) = py
        .detach(|| write_from_registers(&files, &dir, &name, n, reg_size))
        .map_err(|e| cp_err(py, &e))?;
    Ok(RegistersCheckpointWrite {
        tries: tries_of(py, &info.tries)?,
        part_nodes: info.part_nodes,
        top_nodes: info.top_nodes,
        bytes: info.bytes,
        cached_leaves: info.cached_leaves,
        hashed_leaves: info.hashed_leaves,
        registers_read: rows,
    })
}

/// Streams registers in path order into a one-trie v6 checkpoint (bounded memory).
#[pyclass(name = "FlowCheckpointBuilder", module = "rechain.workers._native")]
pub struct FlowCheckpointBuilder {
    inner: Option<RegisterCheckpointBuilder>,
}

#[pymethods]
impl FlowCheckpointBuilder {
    #[new]
    #[pyo3(signature = (dir, name, threads=None))]
    fn new(py: Python<'_>, dir: PathBuf, name: String, threads: Option<usize>) -> PyResult<Self> {
        let b = RegisterCheckpointBuilder::new(&dir, &name, threads_or_cores(threads))
            .map_err(|e| cp_err(py, &e))?;
        Ok(FlowCheckpointBuilder { inner: Some(b) })
    }

    /// A builder that only computes the root, register count and size (writes nothing).
    #[staticmethod]
    #[pyo3(signature = (threads=None))]
    fn root_only(threads: Option<usize>) -> Self {
        FlowCheckpointBuilder {
            inner: Some(RegisterCheckpointBuilder::root_only(threads_or_cores(
                threads,
            ))),
        }
    }

    /// Adds a batch with columns `path`, `encoded_key`, `value` (paths strictly increasing
    /// across all batches), with the same rows of `register_hashes` when the data folder has
    /// them (leaves whose `HashLeaf` and height match take the stored compact hash).
    #[pyo3(signature = (batch, hashes=None))]
    fn push(
        &mut self,
        py: Python<'_>,
        batch: PyRecordBatch,
        hashes: Option<PyRecordBatch>,
    ) -> PyResult<()> {
        let b = self
            .inner
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("builder already finished"))?;
        let batch = batch.into_inner();
        let hashes = hashes.map(PyRecordBatch::into_inner);
        let r = py.detach(|| -> Result<Result<(), CheckpointError>, ErrorKind> {
            let rows = register_rows(&batch, hashes.as_ref(), None)?;
            Ok(b.push_cached(rows))
        });
        match r {
            Err(e) => Err(PyValueError::new_err(e.to_string())),
            Ok(Err(e)) => {
                self.inner = None; // dropping the builder removes its temporary files
                Err(cp_err(py, &e))
            }
            Ok(Ok(())) => Ok(()),
        }
    }

    /// Completes the checkpoint and renames its files into place. `reg_size`: the trie
    /// record's register size as flow-go accounted it (default: summed over the registers).
    #[pyo3(signature = (reg_size=None))]
    fn finish(&mut self, py: Python<'_>, reg_size: Option<u64>) -> PyResult<CheckpointWriteResult> {
        let b = self
            .inner
            .take()
            .ok_or_else(|| PyValueError::new_err("builder already finished"))?;
        let info = py
            .detach(|| b.finish_with(reg_size))
            .map_err(|e| cp_err(py, &e))?;
        write_result(py, &info)
    }

    /// Abandons the checkpoint (its temporary files are removed).
    fn abort(&mut self) {
        self.inner = None;
    }
}

/// Splits `flow_registers` values (`version u8 | key length u32 BE | encoded key | value`, the
/// layout of `schemas/flow.py`) into the `encoded_key` and `value` columns; a value that is not that layout is an error naming its row.
#[pyfunction]
fn flow_register_split(
    py: Python<'_>,
    values: PyArray,
    version: u8,
) -> PyResult<(Py<PyAny>, Py<PyAny>)> {
    let (arr, _) = values.into_inner();
    let (keys, vals) = py
        .detach(|| -> Result<(BinaryArray, BinaryArray), ErrorKind> {
            let values =
                arr.as_any()
                    .downcast_ref::<BinaryArray>()
                    .ok_or_else(|| ErrorKind::Config {
                        reason: "flow_registers values must be a binary array".into(),
                    })?;
            split_register_values(values, version)
        })
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let out = |a: BinaryArray| -> PyResult<Py<PyAny>> {
        let a: ArrayRef = Arc::new(a);
        Ok(PyArray::from_array_ref(a).to_pyarrow(py)?.unbind())
    };
    Ok((out(keys)?, out(vals)?))
}

/// This machine's multi-lane keccak rate: height-256 compact-leaf chains on `threads` threads
/// (default: all cores), `permutations_per_thread` each. Returns `backend`, `lanes`,
/// `threads`, `permutations`, `seconds`, `permutations_per_s`.
#[pyfunction]
#[pyo3(signature = (threads=None, permutations_per_thread=8_000_000))]
fn flow_keccak_throughput(
    py: Python<'_>,
    threads: Option<usize>,
    permutations_per_thread: u64,
) -> KeccakThroughput {
    let n = threads_or_cores(threads);
    let t = py.detach(|| chain_throughput(n, permutations_per_thread));
    KeccakThroughput {
        backend: format!("{:?}", t.backend).to_lowercase(),
        lanes: t.backend.lanes(),
        threads: t.threads,
        permutations: t.permutations,
        seconds: t.seconds,
        permutations_per_s: t.per_second(),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(flow_keccak_throughput, m)?)?;
    m.add_function(wrap_pyfunction!(flow_register_split, m)?)?;
    m.add_function(wrap_pyfunction!(flow_checkpoint_verify_part, m)?)?;
    m.add_function(wrap_pyfunction!(flow_checkpoint_load, m)?)?;
    m.add_function(wrap_pyfunction!(flow_checkpoint_version, m)?)?;
    m.add_function(wrap_pyfunction!(flow_checkpoint_stream, m)?)?;
    m.add_function(wrap_pyfunction!(flow_checkpoint_verify, m)?)?;
    m.add_function(wrap_pyfunction!(flow_checkpoint_page_in, m)?)?;
    m.add_function(wrap_pyfunction!(flow_checkpoint_stats, m)?)?;
    m.add_class::<FlowCheckpointOwners>()?;
    m.add_function(wrap_pyfunction!(flow_checkpoint_write, m)?)?;
    m.add_class::<FlowCheckpointBuilder>()?;
    m.add_class::<CheckpointPart>()?;
    m.add_class::<CheckpointTrie>()?;
    m.add_class::<CheckpointLoad>()?;
    m.add_class::<CheckpointScan>()?;
    m.add_class::<CheckpointStream>()?;
    m.add_class::<CheckpointStats>()?;
    m.add_class::<CheckpointWriteResult>()?;
    m.add_class::<RegistersCheckpointWrite>()?;
    m.add_class::<KeccakThroughput>()?;
    m.add_function(wrap_pyfunction!(flow_checkpoint_write_registers, m)?)?;
    m.add(
        "FlowCheckpointError",
        m.py().get_type::<FlowCheckpointError>(),
    )?;
    Ok(())
}
