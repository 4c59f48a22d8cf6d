//! `ParquetLayout`: a table's Parquet layout as `schemas/tables.py` declares it
//! (`Table.native_layout`), the one way a layout reaches the Rust writers from Python.

use crate::parquet_out::{parquet_codec, Layout, RowGroups};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// A declared table's codec, row groups and per-column encodings.
#[pyclass(name = "ParquetLayout", module = "rechain.workers._native", frozen)]
pub struct ParquetLayout {
    pub layout: Layout,
    pub groups: RowGroups,
}

#[pymethods]
impl ParquetLayout {
    #[new]
    #[pyo3(signature = (
        *, compression, row_group_rows, row_group_bytes, dictionary=vec![], unsorted=vec![],
        uncompressed=vec![], delta_length=vec![]
    ))]
    fn new(
        compression: &str,
        row_group_rows: usize,
        row_group_bytes: usize,
        dictionary: Vec<String>,
        unsorted: Vec<String>,
        uncompressed: Vec<String>,
        delta_length: Vec<String>,
    ) -> PyResult<Self> {
        let codec = parquet_codec(compression).ok_or_else(|| {
            PyValueError::new_err(format!(
                "no Parquet codec {compression:?} (zstd, snappy or none)"
            ))
        })?;
        if row_group_rows == 0 || row_group_bytes == 0 {
            return Err(PyValueError::new_err(
                "row groups need at least one row and byte",
            ));
        }
        Ok(ParquetLayout {
            layout: Layout {
                dictionary,
                unsorted,
                uncompressed,
                delta_length,
                compression: Some(codec),
            },
            groups: RowGroups {
                rows: row_group_rows,
                bytes: row_group_bytes,
            },
        })
    }

    #[getter]
    fn row_group_rows(&self) -> usize {
        self.groups.rows
    }

    #[getter]
    fn row_group_bytes(&self) -> usize {
        self.groups.bytes
    }

    fn __repr__(&self) -> String {
        format!(
            "ParquetLayout({:?}, rows={}, bytes={})",
            self.layout, self.groups.rows, self.groups.bytes
        )
    }
}
