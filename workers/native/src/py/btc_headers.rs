//! Python entry point for linking the header scan log (`datasets::btc_headers::LinkedTree`):
//! the committer links once, then streams the `headers` table, the block index and the best
//! chain out in slices (each built with the GIL released).

use super::result::result_class;
use crate::datasets::btc_headers::LinkedTree;
use crate::datasets::hex::{display_hex, parse_display_hex};
use crate::{binary, network};
use arrow_array::{ArrayRef, RecordBatch, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3_arrow::PyRecordBatch;
use std::sync::Arc;

fn arrow_err(e: arrow_schema::ArrowError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

result_class! {
    /// A header that failed its checks: its hash and why.
    InvalidHeader {
        hash: String,
        reason: Option<String>,
    }
}

result_class! {
    /// The linked tree's summary (`HeaderTree.summary()`): tip, its height and chainwork,
    /// counts, orphans and invalid headers (table order).
    LinkSummary {
        tip_hash: Option<String>,
        tip_height: Option<u32>,
        chainwork: Option<String>,
        blocks_indexed: usize,
        duplicates: u64,
        distinct: usize,
        orphans: Vec<String>,
        invalid: Vec<Py<InvalidHeader>>,
    }
}

/// The block tree linked from every record copy of the scan log (batches in scan order).
#[pyclass(module = "rechain.workers._native", frozen)]
struct HeaderTree {
    inner: LinkedTree,
}

#[pymethods]
impl HeaderTree {
    #[new]
    #[pyo3(signature = (records, network_name, root_hash=None))]
    fn new(
        py: Python<'_>,
        records: Vec<PyRecordBatch>,
        network_name: &str,
        root_hash: Option<&str>,
    ) -> PyResult<HeaderTree> {
        let net = network(network_name)?;
        let root = match root_hash {
            Some(h) => parse_display_hex(h)
                .ok_or_else(|| PyValueError::new_err(format!("bad root hash {h}")))?,
            None => net.genesis_hash(),
        };
        let chunks: Vec<_> = records.into_iter().map(|b| b.into_inner()).collect();
        let inner = py
            .detach(|| LinkedTree::new(chunks, root, net))
            .map_err(arrow_err)?;
        Ok(HeaderTree { inner })
    }

    /// Distinct hashes (rows of the `headers` table, entries of the block index).
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Blocks on the best chain.
    fn best_len(&self) -> usize {
        self.inner.best_len()
    }

    /// Entries of the best-chain column family (buckets of heights, see `store.rs`).
    fn best_buckets(&self) -> usize {
        self.inner.best_buckets()
    }

    /// Tip, its height and chainwork, counts, orphans and invalid headers (table order).
    fn summary(&self, py: Python<'_>) -> PyResult<LinkSummary> {
        let out = &self.inner.link;
        let tip = out.tip.map(|t| t as usize);
        let (orphans, invalid) = py
            .detach(|| self.inner.orphans_and_invalid())
            .map_err(arrow_err)?;
        let tip_hash = match tip {
            Some(t) => Some(display_hex(&self.inner.hash(t).map_err(arrow_err)?)),
            None => None,
        };
        Ok(LinkSummary {
            tip_hash,
            tip_height: tip.and_then(|t| out.height[t]),
            chainwork: tip.map(|t| crate::hex_be(out.chainwork[t])),
            blocks_indexed: out.height.iter().filter(|h| h.is_some()).count(),
            duplicates: out.duplicates,
            distinct: out.record.len(),
            orphans: orphans.iter().map(|h| display_hex(h)).collect(),
            invalid: invalid
                .iter()
                .map(|(h, reason)| {
                    Py::new(
                        py,
                        InvalidHeader {
                            hash: display_hex(h),
                            reason: reason.clone(),
                        },
                    )
                })
                .collect::<PyResult<_>>()?,
        })
    }

    /// Rows `lo..hi` of the `headers` table.
    fn headers<'py>(&self, py: Python<'py>, lo: usize, hi: usize) -> PyResult<Bound<'py, PyAny>> {
        let batch = py
            .detach(|| self.inner.headers(lo, hi))
            .map_err(arrow_err)?;
        PyRecordBatch::new(batch).into_pyarrow(py)
    }

    /// The table's `file`, `offset` and `height` columns as one record batch.
    fn positions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (file, offset, height) = py.detach(|| self.inner.positions()).map_err(arrow_err)?;
        let schema = Schema::new(vec![
            Field::new("file", DataType::UInt32, false),
            Field::new("offset", DataType::UInt64, false),
            Field::new("height", DataType::UInt32, true),
        ]);
        let cols: Vec<ArrayRef> = vec![
            Arc::new(UInt32Array::from(file)),
            Arc::new(UInt64Array::from(offset)),
            Arc::new(UInt32Array::from(height)),
        ];
        let batch = RecordBatch::try_new(Arc::new(schema), cols).map_err(arrow_err)?;
        PyRecordBatch::new(batch).into_pyarrow(py)
    }

    /// Block-index entries `lo..hi` in key order: (keys, values) binary arrays.
    fn index_entries<'py>(
        &self,
        py: Python<'py>,
        lo: usize,
        hi: usize,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let (k, v) = py
            .detach(|| self.inner.index_entries(lo, hi))
            .map_err(arrow_err)?;
        Ok((binary(py, k)?, binary(py, v)?))
    }

    /// Best-chain buckets `lo..hi`: (keys, values) binary arrays, the values each height's hash
    /// (`btc_best`) or, with `median_times`, its median time past (`btc_best_mtp`).
    #[pyo3(signature = (lo, hi, median_times=false))]
    fn best_entries<'py>(
        &self,
        py: Python<'py>,
        lo: usize,
        hi: usize,
        median_times: bool,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let (k, v) = py
            .detach(|| {
                if median_times {
                    self.inner.best_mtp_entries(lo, hi)
                } else {
                    self.inner.best_entries(lo, hi)
                }
            })
            .map_err(arrow_err)?;
        Ok((binary(py, k)?, binary(py, v)?))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<HeaderTree>()?;
    m.add_class::<LinkSummary>()?;
    m.add_class::<InvalidHeader>()?;
    Ok(())
}
