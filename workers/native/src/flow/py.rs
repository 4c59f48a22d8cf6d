//! Python bindings for the Flow ledger core (added to `rechain.workers._native` by
//! [`register`]). Byte work runs with the GIL released; batches cross as Arrow.
//!
//! * `flow_decode_segment(path, segment_no, strict=False) -> (wal_records batch, info)`
//! * `flow_list_segments(dir) -> [(number, path)]`
//! * `FlowForest(capacity=500, threads=None)`: `apply(batch)`, `replay_segment(path, no)`,
//!   `root_hex`, `register_count()`, `reg_size()`, `roots()`, `has_root()`, `payloads()`
//! * `flow_generate(outdir, updates, registers_per_update, seed=1, segment_size=32 MiB) -> dict`
//! * `flow_empty_root() -> str`
//! * exception `FlowWalError` with `.segment`, `.offset`, `.kind`, `.retryable`

use super::batches::{
    leaf_hashes_batch, registers_batch, rows_from_batch, AppliedBuilder, RecordsBuilder,
};
use super::gen::{generate, GenConfig};
use super::hash::{empty_root, Hash};
use super::mtrie::{Forest, LeafCursor, DEFAULT_CAPACITY};
use super::record::WalRecord;
use super::wal::{list_segments, Segment, DEFAULT_SEGMENT_SIZE};
use super::{decode_segment, visit_segment, ErrorKind, FlowError};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use pyo3_arrow::PyRecordBatch;
use std::path::PathBuf;

create_exception!(
    _native,
    FlowWalError,
    PyException,
    "A LedgerWAL problem; attributes: segment, offset, kind (snake_case name), retryable."
);

fn flow_err(py: Python<'_>, e: &FlowError) -> PyErr {
    let err = FlowWalError::new_err(e.to_string());
    let v = err.value(py);
    // Setting attributes on a fresh exception instance cannot fail in practice; if it did, the
    // message still carries segment and offset.
    let _ = v.setattr("segment", e.segment);
    let _ = v.setattr("offset", e.offset);
    let _ = v.setattr("kind", e.kind.name());
    let _ = v.setattr("retryable", e.kind.is_retryable());
    err
}

fn error_dict<'py>(py: Python<'py>, e: &FlowError) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("segment", e.segment)?;
    d.set_item("offset", e.offset)?;
    d.set_item("kind", e.kind.name())?;
    d.set_item("message", e.to_string())?;
    d.set_item("retryable", e.kind.is_retryable())?;
    Ok(d)
}

fn parse_root(s: &str) -> PyResult<Hash> {
    Hash::from_hex(s).ok_or_else(|| PyValueError::new_err(format!("not a 64-digit hex root: {s}")))
}

/// Decodes one WAL segment file into a `wal_records` batch (one row per record, list columns
/// per path; see `flow::batches`). Records before the first problem are returned; the problem
/// is described in `info["error"]` (or raised as `FlowWalError` when `strict`).
/// `info["torn"]` is true when the segment ends inside a record (a crash while writing).
#[pyfunction]
#[pyo3(signature = (path, segment_no, strict=false))]
fn flow_decode_segment<'py>(
    py: Python<'py>,
    path: PathBuf,
    segment_no: u64,
    strict: bool,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyDict>)> {
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

/// The `info` dict of a decoded or replayed segment (the same keys either way).
#[allow(clippy::too_many_arguments)]
fn segment_info<'py>(
    py: Python<'py>,
    segment_no: u64,
    file_len: u64,
    end: u64,
    error: &Option<FlowError>,
    updates: u64,
    deletes: u64,
    paths: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let info = PyDict::new(py);
    info.set_item("segment", segment_no)?;
    info.set_item("file_len", file_len)?;
    info.set_item("records", updates + deletes)?;
    info.set_item("updates", updates)?;
    info.set_item("deletes", deletes)?;
    info.set_item("paths", paths)?;
    info.set_item("end_offset", end)?;
    info.set_item(
        "torn",
        matches!(error, Some(e) if e.kind == ErrorKind::TornRecord),
    )?;
    match error {
        Some(e) => info.set_item("error", error_dict(py, e)?)?,
        None => info.set_item("error", py.None())?,
    }
    Ok(info)
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

/// Writes a deterministic LedgerWAL (same workload as the Go oracle's `gen`) into `outdir`.
#[pyfunction]
#[pyo3(signature = (outdir, updates, registers_per_update, seed=1, segment_size=DEFAULT_SEGMENT_SIZE))]
fn flow_generate<'py>(
    py: Python<'py>,
    outdir: PathBuf,
    updates: u64,
    registers_per_update: usize,
    seed: u64,
    segment_size: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let cfg = GenConfig {
        updates,
        registers_per_update,
        seed,
        segment_size,
    };
    let s = py
        .detach(|| generate(&cfg, &outdir))
        .map_err(|e| flow_err(py, &e))?;
    let d = PyDict::new(py);
    d.set_item("empty_root", s.empty_root.to_hex())?;
    d.set_item(
        "roots",
        s.roots.iter().map(|r| r.to_hex()).collect::<Vec<_>>(),
    )?;
    d.set_item("final_root", s.final_root.to_hex())?;
    d.set_item("updates", updates)?;
    d.set_item("registers", s.registers)?;
    d.set_item("reg_size", s.reg_size)?;
    d.set_item("segments", s.segments)?;
    d.set_item("segment_size", segment_size)?;
    d.set_item("bytes", s.bytes)?;
    Ok(d)
}

/// A forest of MTries, flow-go's `mtrie.Forest`: at most `capacity` tries (oldest evicted),
/// starting with the empty trie. `threads` (default: the machine's cores) bounds the threads
/// one large update may use.
#[pyclass(name = "FlowForest", module = "rechain.workers._native")]
pub struct FlowForest {
    forest: Forest,
    current: Hash,
    applied: u64,
}

#[pymethods]
impl FlowForest {
    #[new]
    #[pyo3(signature = (capacity=DEFAULT_CAPACITY, threads=None))]
    fn new(capacity: usize, threads: Option<usize>) -> Self {
        let threads =
            threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        FlowForest {
            forest: Forest::new(capacity, threads),
            current: empty_root(),
            applied: 0,
        }
    }

    /// Applies the rows of a `wal_records` batch in order. Returns, per row, the new root (hex)
    /// of an update, or None for a delete record (flow-go's replay ignores deletes). If an
    /// update's parent root is not in the forest, raises `FlowWalError`
    /// (`kind == "unknown_parent_root"`, with that row's segment/offset) after applying the rows
    /// before it; the exception's `roots` attribute lists their roots.
    fn apply<'py>(
        &mut self,
        py: Python<'py>,
        batch: PyRecordBatch,
    ) -> PyResult<Bound<'py, PyList>> {
        let batch = batch.into_inner();
        let forest = &mut self.forest;
        let current = &mut self.current;
        let applied = &mut self.applied;
        let (roots, failure) = py
            .detach(|| -> Result<_, String> {
                let rows = rows_from_batch(&batch)?;
                let mut roots: Vec<Option<String>> = Vec::with_capacity(rows.len());
                for row in rows {
                    match &row.record {
                        WalRecord::Update(u) => match forest.update(u) {
                            Ok(a) => {
                                *current = a.root;
                                *applied += 1;
                                roots.push(Some(a.root.to_hex()));
                            }
                            Err(kind) => {
                                return Ok((
                                    roots,
                                    Some(FlowError::new(row.segment, row.offset, kind)),
                                ))
                            }
                        },
                        WalRecord::Delete(_) => roots.push(None),
                    }
                }
                Ok((roots, None))
            })
            .map_err(PyValueError::new_err)?;
        let list = PyList::new(py, &roots)?;
        if let Some(e) = failure {
            let err = flow_err(py, &e);
            err.value(py).setattr("roots", list)?;
            return Err(err);
        }
        Ok(list)
    }

    /// Reads WAL segment `path` and applies its records in order as they are decoded, without
    /// an intermediate batch (the segment's bytes and the forest are all this holds). Returns
    /// `(applied, info)`: `applied` has one row per record applied (see
    /// `batches::AppliedBuilder`: the `wal_records` columns without the register lists, plus
    /// `root`), `info` the keys of `flow_decode_segment`'s info for the records applied; its
    /// `error` also reports an update whose parent root is not in the forest
    /// (`unknown_parent_root`), after which nothing is applied. Raises `FlowWalError` only
    /// when the file cannot be read.
    fn replay_segment<'py>(
        &mut self,
        py: Python<'py>,
        path: PathBuf,
        segment_no: u64,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyDict>)> {
        let forest = &mut self.forest;
        let current = &mut self.current;
        let applied = &mut self.applied;
        let result = py.detach(|| -> Result<_, FlowError> {
            let seg = Segment::open(&path, segment_no)?;
            let mut b = AppliedBuilder::default();
            let (mut updates, mut deletes, mut paths) = (0u64, 0u64, 0u64);
            let (end, error) = visit_segment(&seg, |index, offset, rec| {
                let root = match &rec {
                    WalRecord::Update(u) => {
                        let a = forest.update(u)?;
                        *current = a.root;
                        *applied += 1;
                        updates += 1;
                        paths += u.paths.len() as u64;
                        Some(a.root)
                    }
                    WalRecord::Delete(_) => {
                        deletes += 1;
                        None
                    }
                };
                b.push(segment_no, index, offset, &rec, root);
                Ok(())
            });
            Ok((
                b.finish(),
                seg.file_len,
                end,
                error,
                updates,
                deletes,
                paths,
            ))
        });
        let (batch, file_len, end, error, updates, deletes, paths) =
            result.map_err(|e| flow_err(py, &e))?;
        let info = segment_info(
            py, segment_no, file_len, end, &error, updates, deletes, paths,
        )?;
        Ok((PyRecordBatch::new(batch).into_pyarrow(py)?, info))
    }

    /// Root of the last update applied (the empty root before any).
    #[getter]
    fn root_hex(&self) -> String {
        self.current.to_hex()
    }

    /// Updates applied so far.
    #[getter]
    fn updates_applied(&self) -> u64 {
        self.applied
    }

    /// flow-go's `AllocatedRegCount` of a trie (default: the current root).
    #[pyo3(signature = (root=None))]
    fn register_count(&self, root: Option<&str>) -> PyResult<u64> {
        Ok(self.trie(root)?.reg_count)
    }

    /// flow-go's `AllocatedRegSize` of a trie (default: the current root).
    #[pyo3(signature = (root=None))]
    fn reg_size(&self, root: Option<&str>) -> PyResult<u64> {
        Ok(self.trie(root)?.reg_size)
    }

    /// Root hashes held, oldest first.
    fn roots(&self) -> Vec<String> {
        self.forest.roots().map(|r| r.to_hex()).collect()
    }

    fn has_root(&self, root: &str) -> PyResult<bool> {
        Ok(self.forest.get(&parse_root(root)?).is_some())
    }

    fn __len__(&self) -> usize {
        self.forest.len()
    }

    /// The registers (non-empty payloads) of a trie in path order, as an iterator of
    /// `registers` batches of at most `batch_rows` rows.
    #[pyo3(signature = (root=None, batch_rows=65_536))]
    fn payloads(&self, root: Option<&str>, batch_rows: usize) -> PyResult<FlowPayloads> {
        Ok(FlowPayloads {
            cursor: self.trie(root)?.leaves(),
            batch_rows: batch_rows.max(1),
        })
    }

    /// `register_hashes` batches of a trie (same rows and order as `payloads`): each register's
    /// leaf height, `HashLeaf` and compact node hash, which let a checkpoint writer skip the
    /// per-leaf hash chains.
    #[pyo3(signature = (root=None, batch_rows=65_536))]
    fn leaf_hashes(&self, root: Option<&str>, batch_rows: usize) -> PyResult<FlowLeafHashes> {
        Ok(FlowLeafHashes {
            cursor: self.trie(root)?.leaves(),
            batch_rows: batch_rows.max(1),
        })
    }
}

impl FlowForest {
    /// A forest holding `tries` (file order: the last one is the current state).
    pub(crate) fn from_tries(tries: Vec<super::mtrie::Trie>, threads: Option<usize>) -> Self {
        let mut f = FlowForest::new(DEFAULT_CAPACITY.max(tries.len() + 1), threads);
        if let Some(last) = tries.last() {
            f.current = last.root_hash();
        }
        for t in tries {
            f.forest.add(t);
        }
        f
    }

    /// The tries with these roots (default: the current one), for a checkpoint.
    pub(crate) fn tries_for(
        &self,
        roots: Option<Vec<String>>,
    ) -> PyResult<Vec<super::mtrie::Trie>> {
        match roots {
            None => Ok(vec![self.trie(None)?.clone()]),
            Some(rs) => rs.iter().map(|r| self.trie(Some(r)).cloned()).collect(),
        }
    }

    fn trie(&self, root: Option<&str>) -> PyResult<&super::mtrie::Trie> {
        let h = match root {
            Some(s) => parse_root(s)?,
            None => self.current,
        };
        self.forest.get(&h).ok_or_else(|| {
            PyValueError::new_err(format!("root {} is not in the forest", h.to_hex()))
        })
    }
}

/// Iterator over `registers` batches of one trie (holds the trie's nodes alive).
#[pyclass(module = "rechain.workers._native")]
pub struct FlowPayloads {
    cursor: LeafCursor,
    batch_rows: usize,
}

#[pymethods]
impl FlowPayloads {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let n = self.batch_rows;
        let cursor = &mut self.cursor;
        let batch = py.detach(|| {
            let chunk = cursor.next_chunk(n);
            (!chunk.is_empty()).then(|| registers_batch(&chunk))
        });
        batch
            .map(|b| PyRecordBatch::new(b).into_pyarrow(py))
            .transpose()
    }
}

/// Iterator over `register_hashes` batches of one trie (holds the trie's nodes alive).
#[pyclass(module = "rechain.workers._native")]
pub struct FlowLeafHashes {
    cursor: LeafCursor,
    batch_rows: usize,
}

#[pymethods]
impl FlowLeafHashes {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let n = self.batch_rows;
        let cursor = &mut self.cursor;
        let batch = py.detach(|| {
            let chunk = cursor.next_leaf_nodes(n);
            (!chunk.is_empty()).then(|| leaf_hashes_batch(&chunk))
        });
        batch
            .map(|b| PyRecordBatch::new(b).into_pyarrow(py))
            .transpose()
    }
}

/// Adds the Flow functions, classes and exception to the extension module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(flow_decode_segment, m)?)?;
    m.add_function(wrap_pyfunction!(flow_list_segments, m)?)?;
    m.add_function(wrap_pyfunction!(flow_empty_root, m)?)?;
    m.add_function(wrap_pyfunction!(flow_generate, m)?)?;
    m.add_class::<FlowForest>()?;
    m.add_class::<FlowPayloads>()?;
    m.add_class::<FlowLeafHashes>()?;
    m.add("FlowWalError", m.py().get_type::<FlowWalError>())?;
    super::checkpoint_py::register(m)
}
