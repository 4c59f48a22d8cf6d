//! Python bindings of the Ethereum history import (`eth::import`, `eth::tables`).

use super::result::result_class;
use crate::eth::chain_config::ChainConfig;
use crate::eth::freezer::Freezer;
use crate::eth::import::{self, Options, Source};
use crate::eth::rules::Violation;
use crate::eth::tables;
use crate::eth::U256;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use pyo3_arrow::{PyArray, PyRecordBatch, PySchema};
use std::path::PathBuf;

fn config(network: &str) -> PyResult<ChainConfig> {
    ChainConfig::by_name(network)
        .ok_or_else(|| PyValueError::new_err(format!("unknown Ethereum network {network:?}")))
}

fn parse_td(td: Option<&str>) -> PyResult<Option<U256>> {
    td.map(|s| {
        s.parse::<U256>()
            .map_err(|e| PyValueError::new_err(format!("total difficulty {s:?}: {e}")))
    })
    .transpose()
}

fn violations_list(v: &[Violation]) -> Vec<(u64, &'static str, String)> {
    v.iter()
        .map(|x| (x.block, x.rule.name(), x.detail.clone()))
        .collect()
}

/// The declared Arrow schema (pyarrow) of an Ethereum table.
#[pyfunction]
fn eth_table_schema<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let schema = tables::schema(name)
        .ok_or_else(|| PyValueError::new_err(format!("no Ethereum table named {name}")))?;
    PySchema::new(schema).into_pyarrow(py)
}

result_class! {
    /// What an import unit read (`eth_import_unit`): its violations (number, rule, detail),
    /// blocks `first..end`, its first and last headers (raw RLP) with their TDs (decimal;
    /// relative when `td_relative`), accumulator, counts, and its RocksDB index entries
    /// (`index`: {column family: (keys, values)}, as `eth_index_entries`).
    ImportUnitInfo {
        violations: Vec<(u64, &'static str, String)>,
        first: Option<u64>,
        end: u64,
        blocks: u64,
        first_header: Option<Py<PyBytes>>,
        first_td: Option<String>,
        last_header: Option<Py<PyBytes>>,
        last_td: Option<String>,
        td_relative: bool,
        accumulator: Option<String>,
        transactions: u64,
        pow_checked: u64,
        proofs: u64,
        proofs_checked: u64,
        unrecovered_senders: u64,
        bytes: u64,
        index: Py<PyDict>,
    }
}

/// Reads, checks and converts one import unit (an era1 file, or freezer blocks `first..end`).
/// Returns ({table: batch}, `ImportUnitInfo`); raises ValueError when the source cannot be opened at all.
#[pyfunction]
#[pyo3(signature = (kind, path, first, end, network, pow, from_block, to_block, pow_threads=1))]
#[allow(clippy::too_many_arguments)]
fn eth_import_unit<'py>(
    py: Python<'py>,
    kind: &str,
    path: PathBuf,
    first: u64,
    end: u64,
    network: &str,
    pow: bool,
    from_block: u64,
    to_block: u64,
    pow_threads: usize,
) -> PyResult<(Bound<'py, PyDict>, ImportUnitInfo)> {
    let source = match kind {
        "era1" => Source::Era1(path),
        "ere" => Source::Ere(path),
        "freezer" => Source::Freezer {
            dir: path,
            first,
            end,
        },
        _ => return Err(PyValueError::new_err(format!("unknown unit kind {kind:?}"))),
    };
    let opts = Options {
        cfg: config(network)?,
        pow,
        pow_threads,
        from: from_block,
        to: to_block,
        list: import::historical_roots(network),
    };
    let (unit, index) = py
        .detach(|| {
            let unit = import::run(&source, &opts)?;
            let index = import::index_entries(&unit.batches[0]).map_err(|e| {
                crate::eth::Error::new(crate::eth::ErrorKind::Layout(e.to_string()))
            })?;
            Ok::<_, crate::eth::Error>((unit, index))
        })
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let batches = PyDict::new(py);
    for (name, batch) in tables::TABLES.iter().zip(unit.batches) {
        batches.set_item(*name, PyRecordBatch::new(batch).into_pyarrow(py)?)?;
    }
    let header = |h: &Option<(Vec<u8>, Option<U256>)>| match h {
        Some((raw, td)) => (
            Some(PyBytes::new(py, raw).unbind()),
            td.map(|t| t.to_string()),
        ),
        None => (None, None),
    };
    let (first_header, first_td) = header(&unit.first_header);
    let (last_header, last_td) = header(&unit.last_header);
    let info = ImportUnitInfo {
        violations: violations_list(&unit.violations),
        first: unit.first,
        end: unit.end,
        blocks: unit.blocks,
        first_header,
        first_td,
        last_header,
        last_td,
        td_relative: unit.td_relative,
        accumulator: unit.accumulator.map(|a| tables::hex0x(a.as_slice())),
        transactions: unit.transactions,
        pow_checked: unit.pow_checked,
        proofs: unit.proofs,
        proofs_checked: unit.proofs_checked,
        unrecovered_senders: unit.unrecovered_senders,
        bytes: unit.bytes,
        index: index_dict(py, index)?.unbind(),
    };
    Ok((batches, info))
}

/// Violations between the last block of a unit and the first of the next.
#[pyfunction]
#[pyo3(signature = (network, parent, parent_td, child, child_td))]
fn eth_link_violations(
    py: Python<'_>,
    network: &str,
    parent: &[u8],
    parent_td: Option<&str>,
    child: &[u8],
    child_td: Option<&str>,
) -> PyResult<Vec<(u64, &'static str, String)>> {
    let cfg = config(network)?;
    let (ptd, ctd) = (parse_td(parent_td)?, parse_td(child_td)?);
    let v = py.detach(|| import::link_violations(&cfg, parent, ptd, child, ctd));
    Ok(violations_list(&v))
}

/// `eth_blocks` with its relative `total_difficulty` rebased on `base` (decimal string).
#[pyfunction]
fn eth_rebase_td<'py>(
    py: Python<'py>,
    blocks: PyRecordBatch,
    base: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let base = parse_td(Some(base))?.unwrap_or_default();
    let batch = import::rebase_total_difficulty(blocks.as_ref(), base)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    PyRecordBatch::new(batch).into_pyarrow(py)
}

/// RocksDB entries of an `eth_blocks` batch: {column family: (keys, values)}, Arrow binary
/// arrays in key order.
#[pyfunction]
fn eth_index_entries<'py>(py: Python<'py>, blocks: PyRecordBatch) -> PyResult<Bound<'py, PyDict>> {
    let e = py
        .detach(|| import::index_entries(blocks.as_ref()))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    index_dict(py, e)
}

fn index_dict(py: Python<'_>, e: import::IndexEntries) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for (cf, (k, v)) in [
        ("eth_numbers", e.numbers),
        ("eth_canonical", e.canonical),
        ("eth_td", e.td),
    ] {
        let keys = PyArray::from_array_ref(std::sync::Arc::new(k));
        let values = PyArray::from_array_ref(std::sync::Arc::new(v));
        d.set_item(cf, (keys.to_pyarrow(py)?, values.to_pyarrow(py)?))?;
    }
    Ok(d)
}

/// `(first block, one past the last, accumulator hex)` of an era1 file, from its layout.
#[pyfunction]
fn eth_era1_extent(path: PathBuf) -> PyResult<(u64, u64, String)> {
    let (first, end, acc) =
        import::era1_extent(&path).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((first, end, tables::hex0x(acc.as_slice())))
}

/// `(headers, last hash hex)` of an era1 file after only decompressing and hashing its headers
/// (the floor `benchmarks/eth_headers.py` sets an import against).
#[pyfunction]
fn eth_era1_header_hashes(py: Python<'_>, path: PathBuf) -> PyResult<(u64, String)> {
    let (n, last) = py
        .detach(|| import::era1_header_hashes(&path))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((n, tables::hex0x(last.as_slice())))
}

/// `(first block, one past the last)` of an Ere file, from its index.
#[pyfunction]
fn eth_ere_extent(path: PathBuf) -> PyResult<(u64, u64)> {
    import::ere_extent(&path).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// `(headers, last hash hex)` of an Ere file after only decompressing and hashing its headers.
#[pyfunction]
fn eth_ere_header_hashes(py: Python<'_>, path: PathBuf) -> PyResult<(u64, String)> {
    let (n, last) = py
        .detach(|| import::ere_header_hashes(&path))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((n, tables::hex0x(last.as_slice())))
}

/// `(tail, head)` of a geth freezer: the blocks `tail..head` it holds headers for, and the
/// chain folder it resolved to.
#[pyfunction]
fn eth_freezer_extent(path: PathBuf) -> PyResult<(u64, u64, String)> {
    let f = Freezer::open(&path).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let head = f
        .check_lengths()
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((
        f.headers.tail(),
        head,
        f.dir().to_string_lossy().into_owned(),
    ))
}

/// Writes era1 files of blocks `from_block..to_block` of an import's source (`kind` "era1":
/// `paths` are its files in block order; "freezer": `paths[0]` is the freezer) into `out`.
/// Returns [(path, first block, blocks, accumulator hex)].
#[pyfunction]
#[pyo3(signature = (kind, paths, network, out, from_block, to_block, td_before=None))]
#[allow(clippy::too_many_arguments)]
fn eth_export_era1(
    py: Python<'_>,
    kind: &str,
    paths: Vec<PathBuf>,
    network: &str,
    out: PathBuf,
    from_block: u64,
    to_block: u64,
    td_before: Option<&str>,
) -> PyResult<Vec<(String, u64, u64, String)>> {
    use crate::eth::export::export_era1;
    let source = export_source(kind, &paths)?;
    let td = parse_td(td_before)?;
    let written = py
        .detach(|| export_era1(&source, network, &out, from_block, to_block, td))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(written
        .into_iter()
        .map(|w| {
            (
                w.path.to_string_lossy().into_owned(),
                w.first_block,
                w.blocks,
                tables::hex0x(w.accumulator.as_slice()),
            )
        })
        .collect())
}

/// An import's source as an export reads it: `kind` "era1" or "ere" (`paths`: the archives in
/// block order, either format), "freezer" (`paths[0]`).
fn export_source(kind: &str, paths: &[PathBuf]) -> PyResult<crate::eth::export::ExportSource> {
    use crate::eth::export::ExportSource;
    match (kind, paths.first()) {
        ("era1" | "ere", _) => Ok(ExportSource::Archives(paths.to_vec())),
        ("freezer", Some(p)) => Ok(ExportSource::Freezer(p.clone())),
        _ => Err(PyValueError::new_err(format!(
            "cannot export from {kind:?}"
        ))),
    }
}

/// An Ere file written: (path, first block, blocks, last hash hex, accumulator hex or None).
type WrittenEreRow = (String, u64, u64, String, Option<String>);

/// Writes Ere files of blocks `from_block..to_block` of an import's source (as
/// [`eth_export_era1`]) of `profile` (noproofs, noreceipts, full) into `out`. Returns
/// [(path, first block, blocks, last hash hex, accumulator hex or None)].
#[pyfunction]
#[pyo3(signature = (kind, paths, network, out, from_block, to_block, td_before=None, profile="noproofs"))]
#[allow(clippy::too_many_arguments)]
fn eth_export_ere(
    py: Python<'_>,
    kind: &str,
    paths: Vec<PathBuf>,
    network: &str,
    out: PathBuf,
    from_block: u64,
    to_block: u64,
    td_before: Option<&str>,
    profile: &str,
) -> PyResult<Vec<WrittenEreRow>> {
    use crate::eth::ere_writer::EreProfile;
    use crate::eth::export::export_ere;
    let source = export_source(kind, &paths)?;
    let td = parse_td(td_before)?;
    let profile = EreProfile::by_name(profile).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown Ere profile {profile:?} (noproofs, noreceipts, full)"
        ))
    })?;
    let written = py
        .detach(|| export_ere(&source, network, &out, from_block, to_block, td, profile))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(written
        .into_iter()
        .map(|w| {
            (
                w.path.to_string_lossy().into_owned(),
                w.first_block,
                w.blocks,
                tables::hex0x(w.last_hash.as_slice()),
                w.accumulator.map(|a| tables::hex0x(a.as_slice())),
            )
        })
        .collect())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(eth_export_era1, m)?)?;
    m.add_function(wrap_pyfunction!(eth_export_ere, m)?)?;
    m.add_function(wrap_pyfunction!(eth_ere_extent, m)?)?;
    m.add_function(wrap_pyfunction!(eth_ere_header_hashes, m)?)?;
    m.add_function(wrap_pyfunction!(eth_table_schema, m)?)?;
    m.add_function(wrap_pyfunction!(eth_import_unit, m)?)?;
    m.add_function(wrap_pyfunction!(eth_link_violations, m)?)?;
    m.add_function(wrap_pyfunction!(eth_rebase_td, m)?)?;
    m.add_function(wrap_pyfunction!(eth_index_entries, m)?)?;
    m.add_function(wrap_pyfunction!(eth_era1_extent, m)?)?;
    m.add_function(wrap_pyfunction!(eth_era1_header_hashes, m)?)?;
    m.add_function(wrap_pyfunction!(eth_freezer_extent, m)?)?;
    m.add_class::<ImportUnitInfo>()?;
    Ok(())
}
