//! Python entry points for the chain state (`btc::chain_state`): a chunk of best-chain blocks
//! applied to coins the caller read from RocksDB, and unwinding by undo records (the set's
//! commitments are `btc_utxo`'s).

use super::btc_error::{chain_state_error, store_error, write_error};
use super::parquet_layout::ParquetLayout;
use super::result::result_class;
use crate::bounded::map_bounded;
use crate::btc::chain_state::{self, Chunk, SourceBlock, SpentScripts};
use crate::btc::coin::Key;
use crate::btc::error::{ChainStateError, StoreError};
use crate::btc::locktime::MedianTimes;
use crate::btc::spend_resolve;
use crate::btc::undo;
use crate::datasets::btc_chain_rows::{self, ChainBlock};
use crate::datasets::hex::display_hex;
use crate::parquet_out::{write_batch, write_batches, Layout, RowGroups, WriteError};
use crate::{key8, network};
use arrow_schema::SchemaRef;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use pyo3_arrow::{PyArray, PyRecordBatch, PySchema};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

fn bytes_list<'py, T: AsRef<[u8]>>(
    py: Python<'py>,
    items: impl Iterator<Item = T>,
) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, items.map(|b| PyBytes::new(py, b.as_ref())))
}

/// A library error as the `ValueError` (its message) Python has always received.
fn value_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// An applied chunk's puts and deletes (each sorted by key).
type SetChanges = (Vec<(Key, Vec<u8>)>, Vec<Key>);

/// Consecutive best-chain blocks read from their blk files, and the coins they need.
#[pyclass(module = "rechain.workers._native", frozen)]
struct ChainStateChunk {
    inner: Chunk,
    /// Each block's blk file number and record offset (its place in the `blocks` table).
    places: Vec<(u32, u64)>,
    /// What the last `apply` resolved: blocks applied, and each of their non-coinbase
    /// inputs' value in order (for `write_rows`).
    resolved: Mutex<Option<(usize, Vec<u64>, SpentScripts)>>,
    /// The set changes of the last `apply` (puts, deletes; sorted), for `overlay` while this
    /// chunk is applied but not committed.
    changes: Mutex<SetChanges>,
}

impl ChainStateChunk {
    /// The chunk's first `n` blocks, as the table builders take them.
    fn chain_blocks(&self, n: usize) -> Vec<ChainBlock<'_>> {
        self.inner
            .blocks()
            .zip(&self.places)
            .take(n)
            .map(
                |((height, hash, data, spans), &(file, offset))| ChainBlock {
                    height,
                    hash,
                    data,
                    spans,
                    file,
                    offset,
                },
            )
            .collect()
    }

    /// What `apply` returns, and what `write_rows` needs of it kept.
    fn applied(&self, py: Python<'_>, a: chain_state::Applied) -> PyResult<ChunkApplied> {
        let mut a = a;
        let scripts = std::mem::take(&mut a.spends.prev_script);
        *self.resolved.lock().expect("not poisoned") =
            Some((a.blocks as usize, a.spends.value.clone(), scripts));
        let failure = a.first_failure();
        let failure = failure.map(|f| (f.height, display_hex(&f.hash), f.reason, f.kind.name()));
        let out = ChunkApplied {
            blocks: a.blocks,
            tip: a.tip.map(|(h, hash)| (h, display_hex(&hash))),
            puts: (
                bytes_list(py, a.puts.iter().map(|p| &p.0))?,
                bytes_list(py, a.puts.iter().map(|p| &p.1))?,
            )
                .into_pyobject(py)?
                .into_any()
                .unbind(),
            deletes: bytes_list(py, a.deletes.iter())?.into_any().unbind(),
            undo: (
                bytes_list(py, a.undo.iter().map(|u| u.0.to_be_bytes()))?,
                bytes_list(py, a.undo.iter().map(|u| &u.1))?,
            )
                .into_pyobject(py)?
                .into_any()
                .unbind(),
            spends: PyRecordBatch::new(
                btc_chain_rows::spends_batch(a.spends).map_err(value_error)?,
            )
            .into_pyarrow(py)?
            .unbind(),
            count_delta: a.count_delta,
            amount_delta: a.amount_delta,
            failure: failure.into_pyobject(py)?.into_any().unbind(),
        };
        *self.changes.lock().expect("not poisoned") = (a.puts, a.deletes);
        Ok(out)
    }
}

#[pymethods]
impl ChainStateChunk {
    /// `hashes` in internal order; `paths`, `files` (their blk file numbers) and `offsets`
    /// (of each record's magic) from the block index; heights consecutive from
    /// `first_height`.
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        network_name: &str,
        xor_key: &[u8],
        first_height: u32,
        hashes: Vec<Vec<u8>>,
        paths: Vec<PathBuf>,
        files: Vec<u32>,
        offsets: Vec<u64>,
    ) -> PyResult<Self> {
        let net = network(network_name)?;
        let key = key8(xor_key)?;
        let blocks = SourceBlock::run(first_height, &hashes, paths, &offsets)
            .filter(|_| files.len() == hashes.len())
            .ok_or_else(|| {
                PyValueError::new_err(
                    "hashes, paths, files and offsets differ in length, or a hash is not 32 \
                     bytes (internal order)",
                )
            })?;
        let places = files.into_iter().zip(offsets.iter().copied()).collect();
        let inner = py
            .detach(|| Chunk::load(net, key, blocks))
            .map_err(|e| chain_state_error(py, &e))?;
        Ok(ChainStateChunk {
            inner,
            places,
            resolved: Mutex::new(None),
            changes: Mutex::new((Vec::new(), Vec::new())),
        })
    }

    /// The `btc_utxo` keys to read before `apply` (a list, for RocksDB's multi-get).
    fn needed<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        bytes_list(py, self.inner.needed.iter())
    }

    /// `values` (the stored values of `needed`, None where absent) as they are once the set
    /// changes of `before` (chunks applied and not yet committed, oldest first) are written.
    fn overlay<'py>(
        &self,
        py: Python<'py>,
        values: Vec<Option<Vec<u8>>>,
        before: Vec<PyRef<'py, ChainStateChunk>>,
    ) -> PyResult<Bound<'py, PyList>> {
        if values.len() != self.inner.needed.len() {
            return Err(PyValueError::new_err(format!(
                "{} values for {} needed coins",
                values.len(),
                self.inner.needed.len()
            )));
        }
        let guards: Vec<_> = before
            .iter()
            .map(|c| c.changes.lock().expect("not poisoned"))
            .collect();
        let pending: Vec<_> = guards
            .iter()
            .map(|g| chain_state::Pending {
                puts: &g.0,
                deletes: &g.1,
            })
            .collect();
        let mut values = values;
        chain_state::overlay(&self.inner.needed, &mut values, &pending);
        PyList::new(
            py,
            values
                .iter()
                .map(|v| v.as_deref().map(|b| PyBytes::new(py, b))),
        )
    }

    /// Applies the chunk to the stored values of `needed` (None where absent). Returns a
    /// `ChunkApplied`: blocks, tip (height, display hash) or None, puts (keys, values), deletes,
    /// undo (keys, values), spends (record batch), count_delta, amount_delta, failure
    /// (height, display hash, reason, "block" for a consensus rule the block breaks or
    /// "body" for a copy that failed its body checks) or None. `median_times` holds the best
    /// chain's median times past by height, 4 bytes (u32 LE) each (`btc_best_mtp`), at least
    /// up to the chunk's last block's parent.
    fn apply(
        &self,
        py: Python<'_>,
        values: Vec<Option<Vec<u8>>>,
        median_times: &[u8],
    ) -> PyResult<ChunkApplied> {
        let a = py
            .detach(|| self.inner.apply(values, MedianTimes(median_times)))
            .map_err(|e| chain_state_error(py, &e))?;
        self.applied(py, a)
    }

    /// This chunk's events for the spend resolution, one buffer per partition
    /// (`btc::spend_resolve`).
    fn events<'py>(&self, py: Python<'py>, partitions: usize) -> PyResult<Bound<'py, PyList>> {
        let bufs = py.detach(|| self.inner.events(partitions));
        bytes_list(py, bufs.iter())
    }

    /// `apply` to the coins the spend resolution gave this chunk (`resolved`: its records
    /// from every partition) and the stored values of the keys it left to the set
    /// (`stored_keys`, `stored_values`: None where absent), with `median_times` as `apply`'s.
    fn apply_resolved(
        &self,
        py: Python<'_>,
        resolved: Vec<Vec<u8>>,
        stored_keys: Vec<Vec<u8>>,
        stored_values: Vec<Option<Vec<u8>>>,
        median_times: &[u8],
    ) -> PyResult<ChunkApplied> {
        if stored_keys.len() != stored_values.len() {
            return Err(PyValueError::new_err(
                "stored keys and values differ in length",
            ));
        }
        let a = py
            .detach(|| -> Result<_, ChainStateError> {
                let mut stored = rustc_hash::FxHashMap::default();
                for (k, v) in stored_keys.iter().zip(stored_values) {
                    let key = Key::from_slice(k).ok_or(StoreError::UtxoKey { len: k.len() })?;
                    stored.insert(key, v);
                }
                let bufs: Vec<&[u8]> = resolved.iter().map(Vec::as_slice).collect();
                let values = self.inner.coins_from(&bufs, &stored)?;
                self.inner.apply(values, MedianTimes(median_times))
            })
            .map_err(|e| chain_state_error(py, &e))?;
        self.applied(py, a)
    }

    /// Writes the rows of each table named in `specs` ("blocks", "transactions", "inputs",
    /// "outputs", the last with every `spent` flag false) for
    /// the blocks the last `apply` applied, on at most `threads` threads (the tables are
    /// started in the order given, so put the largest first). A spec is (table, its
    /// declared schema, the Parquet file to write, its declared `ParquetLayout`). Beside them,
    /// `spends` (the batch `apply` returned) goes to `spends_path` with `spends_layout` (the
    /// declared `btc_spends`). Returns the rows written: the spends', then each spec's.
    fn write_rows(
        &self,
        py: Python<'_>,
        specs: Vec<(String, PySchema, PathBuf, PyRef<'_, ParquetLayout>)>,
        spends: PyRecordBatch,
        spends_path: PathBuf,
        spends_layout: PyRef<'_, ParquetLayout>,
        threads: usize,
    ) -> PyResult<Vec<u64>> {
        let spends = spends.into_inner();
        let guard = self.resolved.lock().expect("not poisoned");
        let Some((applied, values, scripts)) = guard.as_ref() else {
            return Err(PyValueError::new_err("write_rows before apply"));
        };
        let specs: Vec<TableFile> = specs
            .into_iter()
            .map(|(table, schema, path, layout)| TableFile {
                table,
                schema: schema.into_inner(),
                path,
                layout: layout.layout.clone(),
                groups: layout.groups,
            })
            .collect();
        let (spends_layout, spends_groups) = (spends_layout.layout.clone(), spends_layout.groups);
        py.detach(|| {
            let blocks = self.chain_blocks(*applied);
            let write = |spec: &TableFile| {
                // Which outputs later blocks spend is known only once they are applied:
                // `outputs` is written unspent here, the publish stage sets `spent`.
                let network = self.inner.network();
                let batches = btc_chain_rows::batches(
                    &spec.table,
                    &blocks,
                    values,
                    scripts,
                    network,
                    Arc::clone(&spec.schema),
                );
                let batches = batches.map(|b| b.map_err(WriteError::rows));
                let schema = Arc::clone(&spec.schema);
                write_batches(&spec.path, schema, batches, &spec.layout, spec.groups)
            };
            // The spends are staged for the publish stage, which reads them back once.
            let write_spends = || write_batch(&spends_path, &spends, &spends_layout, spends_groups);
            // The tables in the order given, then the spends.
            let mut written = map_bounded(specs.len() + 1, threads, |i| match specs.get(i) {
                Some(spec) => write(spec),
                None => write_spends(),
            });
            written.rotate_right(1);
            written
                .into_iter()
                .collect::<Result<Vec<u64>, WriteError>>()
        })
        .map_err(|e| write_error(py, &e))
    }
}

/// A table `ChainStateChunk.write_rows` writes: its name, declared schema, Parquet file and
/// declared layout.
struct TableFile {
    table: String,
    schema: SchemaRef,
    path: PathBuf,
    layout: Layout,
    groups: RowGroups,
}

/// The outputs the best chain spent, given as two equal-length uint32 arrays: the height each
/// was created at and its row among that block's outputs.
fn spent_outputs(
    heights: &arrow_array::ArrayRef,
    rows: &arrow_array::ArrayRef,
) -> PyResult<btc_chain_rows::SpentOutputs> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::UInt32Type;
    use arrow_array::Array;
    let u32s = |a: &'_ arrow_array::ArrayRef, what: &str| {
        a.as_primitive_opt::<UInt32Type>()
            .filter(|a| a.null_count() == 0)
            .map(|a| a.values().clone())
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "spent outputs: {what} must be uint32 without nulls"
                ))
            })
    };
    let (heights, rows) = (u32s(heights, "heights")?, u32s(rows, "rows")?);
    if heights.len() != rows.len() {
        return Err(PyValueError::new_err(
            "spent outputs: arrays differ in length",
        ));
    }
    Ok(btc_chain_rows::SpentOutputs::new(
        heights.iter().copied().zip(rows.iter().copied()),
    ))
}

/// Copies a published `outputs` file from `src` to `dest` with its `spent` column set from
/// the spends given (see `spent_outputs`; each must name a row of the file): with `keep_old`,
/// flags already set stay set (the spends are only new ones). Only that column is encoded
/// again; the others are copied as they are. Returns the rows.
#[pyfunction]
fn respend_outputs(
    py: Python<'_>,
    src: PathBuf,
    dest: PathBuf,
    spent_heights: PyArray,
    spent_rows: PyArray,
    keep_old: bool,
) -> PyResult<u64> {
    let (heights, _) = spent_heights.into_inner();
    let (rows, _) = spent_rows.into_inner();
    let copied = py.detach(|| -> PyResult<Result<u64, WriteError>> {
        let spent = spent_outputs(&heights, &rows)?;
        let mut flags = btc_chain_rows::Respent::new(&spent, keep_old);
        let n = match crate::parquet_out::replace_column(
            &src,
            &dest,
            "spent",
            &["height", "spent"],
            |batch| flags.batch(batch).map_err(WriteError::rows),
        ) {
            Ok(n) => n,
            Err(e) => return Ok(Err(e)),
        };
        flags
            .finish()
            .map_err(|e| PyValueError::new_err(format!("{}: {e}", src.display())))?;
        Ok(Ok(n))
    })?;
    copied.map_err(|e| write_error(py, &e))
}

result_class! {
    /// An applied chunk (`ChainStateChunk.apply`, `.apply_resolved`): blocks applied, the tip
    /// (height, display hash), the set's puts (keys, values) and deletes, the undo records
    /// (height keys, values), the spends (a pyarrow record batch), the count and amount
    /// deltas, and the first failure (height, display hash, reason, kind) or None.
    ChunkApplied {
        blocks: u32,
        tip: Option<(u32, String)>,
        puts: Py<PyAny>,
        deletes: Py<PyAny>,
        undo: Py<PyAny>,
        spends: Py<PyAny>,
        count_delta: i64,
        amount_delta: i128,
        failure: Py<PyAny>,
    }
}

result_class! {
    /// The net change that unwinds blocks (`unwind_chain_state`): puts (keys, values),
    /// deletes, count and amount deltas, and each record's block hash (display).
    UnwindChange {
        puts: Py<PyAny>,
        deletes: Py<PyAny>,
        count_delta: i64,
        amount_delta: i128,
        hashes: Vec<String>,
    }
}

/// The net change that unwinds blocks given their undo records, highest first.
#[pyfunction]
fn unwind_chain_state(py: Python<'_>, undos: Vec<Vec<u8>>) -> PyResult<UnwindChange> {
    let hashes = undos
        .iter()
        .map(|u| undo::decode_undo(u).map(|x| display_hex(&x.hash)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| store_error(py, &e))?;
    let (puts, deletes, count, amount) = py
        .detach(|| undo::unwind(&undos))
        .map_err(|e| store_error(py, &e))?;
    Ok(UnwindChange {
        puts: (
            bytes_list(py, puts.iter().map(|p| &p.0))?,
            bytes_list(py, puts.iter().map(|p| &p.1))?,
        )
            .into_pyobject(py)?
            .into_any()
            .unbind(),
        deletes: bytes_list(py, deletes.iter())?.into_any().unbind(),
        count_delta: count,
        amount_delta: amount,
        hashes,
    })
}

/// The block hash (display) an undo record belongs to.
#[pyfunction]
fn undo_block_hash(py: Python<'_>, undo: &[u8]) -> PyResult<String> {
    undo::decode_undo(undo)
        .map(|u| display_hex(&u.hash))
        .map_err(|e| store_error(py, &e))
}

/// One partition's spend resolution: `events` holds that partition's buffer of every chunk
/// (`ChainStateChunk.events`), chunks in height order; returns each chunk's records for
/// `ChainStateChunk.apply_resolved`.
#[pyfunction]
fn resolve_spends<'py>(py: Python<'py>, events: Vec<Vec<u8>>) -> PyResult<Bound<'py, PyList>> {
    let out = py
        .detach(|| {
            let bufs: Vec<&[u8]> = events.iter().map(Vec::as_slice).collect();
            spend_resolve::resolve(&bufs)
        })
        .map_err(|e| store_error(py, &e))?;
    bytes_list(py, out.iter())
}

/// The keys a chunk's records from `resolve_spends` leave to the stored set: read them from
/// it, as the range found it, for `ChainStateChunk.apply_resolved`.
#[pyfunction]
fn resolved_stored_keys<'py>(py: Python<'py>, resolved: &[u8]) -> PyResult<Bound<'py, PyList>> {
    let keys = spend_resolve::stored_keys(resolved).map_err(|e| store_error(py, &e))?;
    bytes_list(py, keys.iter())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ChainStateChunk>()?;
    m.add_class::<ChunkApplied>()?;
    m.add_class::<UnwindChange>()?;
    m.add_function(wrap_pyfunction!(unwind_chain_state, m)?)?;
    m.add_function(wrap_pyfunction!(respend_outputs, m)?)?;
    m.add_function(wrap_pyfunction!(undo_block_hash, m)?)?;
    m.add_function(wrap_pyfunction!(resolve_spends, m)?)?;
    m.add_function(wrap_pyfunction!(resolved_stored_keys, m)?)?;
    Ok(())
}
