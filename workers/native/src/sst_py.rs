//! Python entry point of the SST writer (`sst.rs`): `DataDir.write_sst` streams sorted
//! (keys, values) chunks into it, as Arrow binary arrays or lists of bytes.

use crate::binary_values;
use crate::sst;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use pyo3_arrow::PyArray;
use std::path::PathBuf;

fn sst_err(e: sst::SstError) -> PyErr {
    match e {
        sst::SstError::Io(e) => PyOSError::new_err(e.to_string()),
        e => PyValueError::new_err(e.to_string()),
    }
}

/// One chunk's column: Arrow arrays are read in place, lists of bytes through their buffers.
fn with_values<R>(
    column: &Bound<'_, PyAny>,
    f: impl FnOnce(&[&[u8]]) -> PyResult<R>,
) -> PyResult<R> {
    if let Ok(list) = column.cast::<PyList>() {
        let items: Vec<Bound<'_, PyBytes>> = list
            .iter()
            .map(|v| v.cast_into::<PyBytes>().map_err(PyErr::from))
            .collect::<PyResult<_>>()?;
        let values: Vec<&[u8]> = items.iter().map(|v| v.as_bytes()).collect();
        return f(&values);
    }
    let (array, _) = column.extract::<PyArray>()?.into_inner();
    f(&binary_values(&array)?)
}

#[pyclass(module = "rechain.workers._native")]
pub struct SstWriter {
    inner: Option<sst::SstWriter>,
    path: PathBuf,
}

impl SstWriter {
    fn writer(&mut self) -> PyResult<&mut sst::SstWriter> {
        self.inner.as_mut().ok_or_else(|| {
            PyValueError::new_err(format!("{}: already finished", self.path.display()))
        })
    }
}

#[pymethods]
impl SstWriter {
    #[new]
    fn new(path: PathBuf, compress: bool) -> PyResult<Self> {
        let inner = sst::SstWriter::create(&path, compress)
            .map_err(|e| PyOSError::new_err(format!("{}: {e}", path.display())))?;
        Ok(SstWriter {
            inner: Some(inner),
            path,
        })
    }

    /// Appends a chunk; its keys continue the strictly increasing order of the ones before.
    /// `sort`: the chunk's entries are sorted by key first (the chunk as a whole must still
    /// lie above the one before).
    #[pyo3(signature = (keys, values, sort=false))]
    fn add(
        &mut self,
        py: Python<'_>,
        keys: Bound<'_, PyAny>,
        values: Bound<'_, PyAny>,
        sort: bool,
    ) -> PyResult<()> {
        let writer = self.writer()?;
        with_values(&keys, |keys| {
            with_values(&values, |values| {
                if keys.len() != values.len() {
                    return Err(PyValueError::new_err(format!(
                        "{} keys but {} values",
                        keys.len(),
                        values.len()
                    )));
                }
                py.detach(|| {
                    if !sort {
                        return keys
                            .iter()
                            .zip(values)
                            .try_for_each(|(k, v)| writer.add(k, v));
                    }
                    let mut order: Vec<u32> = (0..keys.len() as u32).collect();
                    order.sort_unstable_by_key(|&i| keys[i as usize]);
                    order
                        .iter()
                        .try_for_each(|&i| writer.add(keys[i as usize], values[i as usize]))
                })
                .map_err(sst_err)
            })
        })
    }

    /// Closes the file: the number of entries (0: nothing written, the file is removed).
    fn finish(&mut self, py: Python<'_>) -> PyResult<u64> {
        let writer = self
            .inner
            .take()
            .ok_or_else(|| PyValueError::new_err("already finished"))?;
        let path = self.path.clone();
        py.detach(|| writer.finish())
            .map_err(|e| PyOSError::new_err(format!("{}: {e}", path.display())))
    }
}
