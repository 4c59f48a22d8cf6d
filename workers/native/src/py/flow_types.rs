//! Binding types shared by the Flow bindings ([`super::flow`], [`super::flow_checkpoint`]):
//! the `FlowForest` class (the replay state) with its payload iterator, the `FlowWalError`
//! exception it raises, and the segment result it returns. Registered by `super::flow`; a
//! binding module imports these rather than another binding module.

use super::parquet_layout::ParquetLayout;
use super::result::result_class;
use crate::flow::batches::{registers_batch, rows_from_batch, RegisterLayouts};
use crate::flow::hash::Hash;
use crate::flow::mtrie::{Forest, LeafCursor, DEFAULT_CAPACITY};
use crate::flow::node_store::NodeStore;
use crate::flow::paging::StoreError;
use crate::flow::register_sst::RegisterSst;
use crate::flow::replay::ReplayState;
use crate::flow::{ErrorKind, FlowError};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use pyo3_arrow::PyRecordBatch;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

create_exception!(
    _native,
    FlowWalError,
    PyException,
    "A LedgerWAL problem; attributes: segment, offset, kind (snake_case name), retryable."
);

pub(crate) fn flow_err(py: Python<'_>, e: &FlowError) -> PyErr {
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

/// A paged forest's node store failed (its scratch files: the disk, not the input).
pub(crate) fn store_err(e: StoreError) -> PyErr {
    pyo3::exceptions::PyOSError::new_err(e.to_string())
}

fn parse_root(s: &str) -> PyResult<Hash> {
    Hash::from_hex(s).ok_or_else(|| PyValueError::new_err(format!("not a 64-digit hex root: {s}")))
}

result_class! {
    /// The first problem of a WAL segment: where (segment, offset), what (`kind`, snake_case),
    /// the message, and whether reading again may help.
    WalProblem {
        segment: u64,
        offset: u64,
        kind: String,
        message: String,
        retryable: bool,
    }
}

result_class! {
    /// A WAL segment decoded or replayed (`flow_decode_segment`, `FlowForest.replay_segment`):
    /// its counts, where decoding ended, whether it ends inside a record (`torn`) and its first
    /// problem (`error`, None when it has none).
    SegmentInfo {
        segment: u64,
        file_len: u64,
        records: u64,
        updates: u64,
        deletes: u64,
        paths: u64,
        end_offset: u64,
        torn: bool,
        error: Option<Py<WalProblem>>,
    }
}

result_class! {
    /// A paged forest's node store traffic (`FlowForest.node_store()`).
    NodeStoreStats {
        nodes_written: u64,
        disk_bytes: u64,
        loads: u64,
        cache_hits: u64,
        cached_bytes: usize,
    }
}

/// The info of a decoded or replayed segment (the same fields either way).
#[allow(clippy::too_many_arguments)]
pub(crate) fn segment_info(
    py: Python<'_>,
    segment_no: u64,
    file_len: u64,
    end: u64,
    error: &Option<FlowError>,
    updates: u64,
    deletes: u64,
    paths: u64,
) -> PyResult<SegmentInfo> {
    let torn = matches!(error, Some(e) if e.kind == ErrorKind::TornRecord);
    let error = match error {
        Some(e) => Some(Py::new(
            py,
            WalProblem {
                segment: e.segment,
                offset: e.offset,
                kind: e.kind.name().to_string(),
                message: e.to_string(),
                retryable: e.kind.is_retryable(),
            },
        )?),
        None => None,
    };
    Ok(SegmentInfo {
        segment: segment_no,
        file_len,
        records: updates + deletes,
        updates,
        deletes,
        paths,
        end_offset: end,
        torn,
        error,
    })
}

/// A forest of MTries, flow-go's `mtrie.Forest` (the replay state, `flow::replay`): at most
/// `capacity` tries (oldest evicted), starting with the empty trie. `threads` (default: the
/// machine's cores) bounds the threads one large update may use.
#[pyclass(name = "FlowForest", module = "rechain.workers._native")]
pub struct FlowForest {
    state: ReplayState,
}

fn resolve_threads(threads: Option<usize>) -> usize {
    threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

#[pymethods]
impl FlowForest {
    /// With `node_store` (a new folder, scratch: removed with the forest) the forest is paged:
    /// loaded nodes cached up to `cache_bytes`, new ones written out past `hold_bytes`.
    #[new]
    #[pyo3(signature = (capacity=DEFAULT_CAPACITY, threads=None, node_store=None, cache_bytes=0, hold_bytes=0))]
    fn new(
        capacity: usize,
        threads: Option<usize>,
        node_store: Option<PathBuf>,
        cache_bytes: usize,
        hold_bytes: u64,
    ) -> PyResult<Self> {
        let threads = resolve_threads(threads);
        let Some(dir) = node_store else {
            return Ok(FlowForest {
                state: ReplayState::new(capacity, threads),
            });
        };
        let forest = NodeStore::create(&dir, cache_bytes)
            .and_then(|store| Forest::new(capacity, threads).with_paging(store, hold_bytes))
            .map_err(store_err)?;
        Ok(FlowForest {
            state: ReplayState::with_forest(forest, Vec::new()),
        })
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
        let state = &mut self.state;
        let (roots, failure) = py
            .detach(|| -> Result<_, ErrorKind> { Ok(state.apply_rows(rows_from_batch(&batch)?)) })
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let hex: Vec<Option<String>> = roots.iter().map(|r| r.map(|h| h.to_hex())).collect();
        let list = PyList::new(py, &hex)?;
        if let Some(e) = failure {
            let err = flow_err(py, &e);
            err.value(py).setattr("roots", list)?;
            return Err(err);
        }
        Ok(list)
    }

    /// Reads WAL segment `path` (streamed) and applies its records in order as they are
    /// decoded, without an intermediate batch (a window of the segment and the forest are all
    /// this holds); each record applied goes to the update log. Returns `(records, info)`:
    /// the number of records applied and the keys of `flow_decode_segment`'s info for them;
    /// its `error` also reports an update whose parent root is not in the forest
    /// (`unknown_parent_root`), after which nothing is applied. Raises `FlowWalError` only
    /// when the file cannot be opened.
    fn replay_segment(
        &mut self,
        py: Python<'_>,
        path: PathBuf,
        segment_no: u64,
    ) -> PyResult<(u64, SegmentInfo)> {
        let state = &mut self.state;
        let r = py
            .detach(|| state.replay_segment(&path, segment_no))
            .map_err(|e| flow_err(py, &e))?;
        let info = segment_info(
            py, segment_no, r.file_len, r.end, &r.error, r.updates, r.deletes, r.paths,
        )?;
        Ok((r.updates + r.deletes, info))
    }

    /// Records applied so far (the rows of `trie_updates`).
    #[getter]
    fn log_len(&self) -> usize {
        self.state.log().len()
    }

    /// Writes the update log as a `trie_updates` Parquet file laid out as `layout` (the
    /// declared `ParquetLayout`); returns its rows.
    fn write_trie_updates(
        &self,
        py: Python<'_>,
        path: PathBuf,
        layout: PyRef<'_, ParquetLayout>,
    ) -> PyResult<u64> {
        let (columns, groups) = (layout.layout.clone(), layout.groups);
        let state = &self.state;
        py.detach(|| state.write_trie_updates(&path, &columns, groups))
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// Writes a trie's registers (default: the current trie) as a `registers` Parquet file and
    /// their `register_hashes` file beside it, laid out as declared (`registers_layout` and
    /// `hashes_layout`), with the registers' row groups in both (a checkpoint writer reads them
    /// group by group), and, with `sst_dir`, RocksDB's `flow_registers` entries
    /// (values of `sst_version`) as SST files there, each closed once it holds `sst_memory`
    /// bytes, from the same walk of the trie. Returns the rows of each table and the SST files.
    #[pyo3(signature = (
        registers_path, hashes_path, registers_layout, hashes_layout, root=None,
        sst_dir=None, sst_memory=1 << 20, sst_version=0, sst_compress=true
    ))]
    #[allow(clippy::too_many_arguments)]
    fn write_registers(
        &self,
        py: Python<'_>,
        registers_path: PathBuf,
        hashes_path: PathBuf,
        registers_layout: PyRef<'_, ParquetLayout>,
        hashes_layout: PyRef<'_, ParquetLayout>,
        root: Option<&str>,
        sst_dir: Option<PathBuf>,
        sst_memory: usize,
        sst_version: u8,
        sst_compress: bool,
    ) -> PyResult<(u64, Vec<PathBuf>)> {
        let root = root.map(parse_root).transpose()?;
        let layouts = register_layouts(&registers_layout, &hashes_layout);
        let sst = sst_dir.map(|dir| RegisterSst {
            dir,
            max_held: sst_memory,
            version: sst_version,
            compress: sst_compress,
        });
        let state = &self.state;
        py.detach(|| state.write_registers(root, &registers_path, &hashes_path, &layouts, sst))
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// `flow_roots` entries for log rows `lo..hi`: `(keys, values)` lists of bytes, one per
    /// update (key: its `seq` as u64 big-endian; value: its 32-byte root); deletes have none.
    fn root_entries<'py>(
        &self,
        py: Python<'py>,
        lo: usize,
        hi: usize,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
        let (keys, values) = (PyList::empty(py), PyList::empty(py));
        for (seq, root) in self.state.root_entries(lo, hi) {
            keys.append(PyBytes::new(py, &seq.to_be_bytes()))?;
            values.append(PyBytes::new(py, &root.0))?;
        }
        Ok((keys, values))
    }

    /// Root of the last update applied (the empty root before any).
    #[getter]
    fn root_hex(&self) -> String {
        self.state.current().to_hex()
    }

    /// Updates applied so far.
    #[getter]
    fn updates_applied(&self) -> u64 {
        self.state.updates_applied()
    }

    /// Keccak-f[1600] permutations the updates so far ran (new leaves' compact-value chains
    /// and new interior nodes): the hashing floor of the replay.
    #[getter]
    fn hash_permutations(&self) -> u64 {
        self.state
            .forest()
            .stats()
            .permutations
            .load(Ordering::Relaxed)
    }

    /// Subtries that updates so far updated and hashed on a thread of their own.
    #[getter]
    fn parallel_subtries(&self) -> u64 {
        self.state
            .forest()
            .stats()
            .parallel_subtries
            .load(Ordering::Relaxed)
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
        self.state.forest().roots().map(|r| r.to_hex()).collect()
    }

    fn has_root(&self, root: &str) -> PyResult<bool> {
        Ok(self.state.forest().get(&parse_root(root)?).is_some())
    }

    fn __len__(&self) -> usize {
        self.state.forest().len()
    }

    /// A paged forest's node store traffic (`nodes_written`, `disk_bytes`, `loads`,
    /// `cache_hits`, `cached_bytes`); None for a forest in memory.
    fn node_store(&self) -> Option<NodeStoreStats> {
        let store = self.state.forest().store()?;
        let s = &store.stats;
        Some(NodeStoreStats {
            nodes_written: s.nodes_written.load(Ordering::Relaxed),
            disk_bytes: store.disk_bytes(),
            loads: s.loads.load(Ordering::Relaxed),
            cache_hits: s.cache_hits.load(Ordering::Relaxed),
            cached_bytes: store.cached_bytes(),
        })
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
}

impl FlowForest {
    /// A forest of `state`.
    pub(crate) fn from_state(state: ReplayState) -> Self {
        FlowForest { state }
    }

    /// A forest holding `tries` (file order: the last one is the current state).
    pub(crate) fn from_tries(tries: Vec<crate::flow::mtrie::Trie>, threads: Option<usize>) -> Self {
        FlowForest {
            state: ReplayState::from_tries(tries, resolve_threads(threads)),
        }
    }

    /// The tries with these roots (default: the current one), for a checkpoint.
    pub(crate) fn tries_for(
        &self,
        roots: Option<Vec<String>>,
    ) -> PyResult<Vec<crate::flow::mtrie::Trie>> {
        let roots = roots
            .map(|rs| {
                rs.iter()
                    .map(|r| parse_root(r))
                    .collect::<PyResult<Vec<_>>>()
            })
            .transpose()?;
        self.state
            .tries_for(roots)
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    fn trie(&self, root: Option<&str>) -> PyResult<&crate::flow::mtrie::Trie> {
        let root = root.map(parse_root).transpose()?;
        self.state
            .trie(root)
            .map_err(|e| PyValueError::new_err(e.to_string()))
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
            let chunk = cursor.next_chunk(n)?;
            Ok::<_, StoreError>((!chunk.is_empty()).then(|| registers_batch(&chunk)))
        });
        batch
            .map_err(store_err)?
            .map(|b| PyRecordBatch::new(b).into_pyarrow(py))
            .transpose()
    }
}

/// The declared layouts of a `registers` file and of the `register_hashes` file written beside
/// it, with the registers' row groups for both (the files' row groups line up).
pub(crate) fn register_layouts(
    registers: &ParquetLayout,
    hashes: &ParquetLayout,
) -> RegisterLayouts {
    RegisterLayouts {
        registers: registers.layout.clone(),
        hashes: hashes.layout.clone(),
        groups: registers.groups,
    }
}
