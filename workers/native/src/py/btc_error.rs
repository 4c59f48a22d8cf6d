//! The one exception Bitcoin errors reach Python as: `BtcError`, shared by the Bitcoin
//! bindings (`lib.rs`'s scan, decode and generator functions, `btc_core_index`,
//! `btc_chain_state`), a shared binding type like `flow_types`.
//!
//! `BtcError` subclasses both `OSError` and `ValueError`: the bindings raised `OSError` for
//! blk files that cannot be read and `ValueError` for stored bytes that do not decode, and
//! every handler of either still catches it. Its message is the text Python always received;
//! its attributes say what went wrong where: `kind` (`io`, `read`, `record`, `store`,
//! `value_count`, `no_transactions`, `write`), and where known `block_hash` (display hex),
//! `height`, `file`, `offset` and `reason` (None where not known). A block that breaks a
//! consensus rule is not an error but a result (`ChunkApplied.failure`).

use crate::btc::error::{ChainStateError, ReadError, StoreError};
use crate::datasets::hex::display_hex;
use crate::parquet_out::WriteError;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use std::path::Path;

const DOC: &str = "A Bitcoin error from the Rust core (an OSError and a ValueError); attributes: \
kind, block_hash, height, file, offset, reason (None where not known).";

static BTC_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// The `BtcError` class, made once: `type("BtcError", (OSError, ValueError), ...)`.
pub(crate) fn btc_error_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    BTC_ERROR
        .get_or_try_init(py, || -> PyResult<Py<PyType>> {
            let bases = PyTuple::new(
                py,
                [py.get_type::<PyOSError>(), py.get_type::<PyValueError>()],
            )?;
            let namespace = PyDict::new(py);
            namespace.set_item("__module__", "rechain.workers._native")?;
            namespace.set_item("__doc__", DOC)?;
            let class = py
                .get_type::<PyType>()
                .call1(("BtcError", bases, namespace))?;
            Ok(class.cast_into::<PyType>()?.unbind())
        })
        .map(|t| t.bind(py))
}

/// What a `BtcError` says beyond its message.
#[derive(Default)]
pub(crate) struct Where {
    pub block_hash: Option<String>,
    pub height: Option<u32>,
    pub file: Option<String>,
    pub offset: Option<u64>,
    pub reason: Option<String>,
}

/// A `BtcError` of `kind` with `message` (its `str`) and the attributes of `at`.
pub(crate) fn btc_error(py: Python<'_>, kind: &str, message: String, at: Where) -> PyErr {
    let class = match btc_error_type(py) {
        Ok(class) => class.clone(),
        Err(e) => return e,
    };
    let err = PyErr::from_type(class, (message,));
    let v = err.value(py);
    // Attributes on a fresh instance of a Python class cannot fail in practice; the message
    // says it all if they did.
    let _ = v.setattr("kind", kind);
    let _ = v.setattr("block_hash", at.block_hash);
    let _ = v.setattr("height", at.height);
    let _ = v.setattr("file", at.file);
    let _ = v.setattr("offset", at.offset);
    let _ = v.setattr("reason", at.reason);
    err
}

/// A blk file (or the generator's output folder) that could not be read or written:
/// `path: error`, kind `io`.
pub(crate) fn io_error(py: Python<'_>, path: &Path, e: &std::io::Error) -> PyErr {
    btc_error(
        py,
        "io",
        format!("{}: {e}", path.display()),
        Where {
            file: Some(path.display().to_string()),
            reason: Some(e.to_string()),
            ..Where::default()
        },
    )
}

/// Stored bytes that do not decode: kind `store`.
pub(crate) fn store_error(py: Python<'_>, e: &StoreError) -> PyErr {
    btc_error(
        py,
        "store",
        e.to_string(),
        Where {
            reason: Some(e.to_string()),
            ..Where::default()
        },
    )
}

/// A best-chain block that cannot be read: kind `read` (the file), or `record` (the record
/// at its indexed place, with the block's hash, height, file and offset).
pub(crate) fn read_error(py: Python<'_>, e: &ReadError) -> PyErr {
    let at = match e {
        ReadError::Open { path, source } => Where {
            file: Some(path.display().to_string()),
            reason: Some(source.to_string()),
            ..Where::default()
        },
        ReadError::Metadata(source) => Where {
            reason: Some(source.to_string()),
            ..Where::default()
        },
        ReadError::Record { block, problem } => Where {
            block_hash: Some(display_hex(&block.hash)),
            height: Some(block.height),
            file: Some(block.path.display().to_string()),
            offset: Some(block.offset),
            reason: Some(problem.to_string()),
        },
    };
    let kind = match e {
        ReadError::Record { .. } => "record",
        _ => "read",
    };
    btc_error(py, kind, e.to_string(), at)
}

/// The chain state could not load or apply a chunk.
pub(crate) fn chain_state_error(py: Python<'_>, e: &ChainStateError) -> PyErr {
    match e {
        ChainStateError::Read(r) => read_error(py, r),
        ChainStateError::Store(s) => store_error(py, s),
        ChainStateError::ValueCount { .. } => btc_error(
            py,
            "value_count",
            e.to_string(),
            Where {
                reason: Some(e.to_string()),
                ..Where::default()
            },
        ),
        ChainStateError::MedianTimeMissing { height } => btc_error(
            py,
            "median_time_missing",
            e.to_string(),
            Where {
                height: Some(*height),
                reason: Some(e.to_string()),
                ..Where::default()
            },
        ),
        ChainStateError::NoTransactions { hash } => btc_error(
            py,
            "no_transactions",
            e.to_string(),
            Where {
                block_hash: Some(display_hex(hash)),
                reason: Some("no transactions".into()),
                ..Where::default()
            },
        ),
    }
}

/// A chain-state part (or an `outputs` copy) that could not be written: kind `write`.
pub(crate) fn write_error(py: Python<'_>, e: &WriteError) -> PyErr {
    let file = match e {
        WriteError::At { path, .. } => Some(path.display().to_string()),
        _ => None,
    };
    btc_error(
        py,
        "write",
        e.to_string(),
        Where {
            file,
            reason: Some(e.to_string()),
            ..Where::default()
        },
    )
}
