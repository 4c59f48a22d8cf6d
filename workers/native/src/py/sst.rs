//! Python entry point of the SST writer (`sst.rs`): `DataDir.write_sst` streams sorted
//! (keys, values) chunks into it, as Arrow binary arrays or lists of bytes.

use crate::binary_values;
use crate::sst;
use arrow_array::BinaryArray;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use pyo3_arrow::PyArray;
use std::path::{Path, PathBuf};

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

type Files = sst::SstFiles<Box<dyn Fn(usize) -> PathBuf + Send + Sync>>;

/// `path` for the first file, then `<stem>-NNNNNN.sst` beside it.
fn part_name(path: &Path, i: usize) -> PathBuf {
    if i == 0 {
        return path.to_path_buf();
    }
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!("{stem}-{i:06}.sst"))
}

/// Sorted entries into SST files: `path`, then `<stem>-NNNNNN.sst` beside it, each closed once
/// it holds `max_held` bytes (its filter's key hashes and index; default: no limit).
#[pyclass(module = "rechain.workers._native")]
pub struct SstWriter {
    inner: Option<Files>,
    path: PathBuf,
    files: Vec<PathBuf>,
}

impl SstWriter {
    fn writer(&mut self) -> PyResult<&mut Files> {
        self.inner.as_mut().ok_or_else(|| {
            PyValueError::new_err(format!("{}: already finished", self.path.display()))
        })
    }
}

#[pymethods]
impl SstWriter {
    #[new]
    #[pyo3(signature = (path, compress, max_held=usize::MAX))]
    fn new(path: PathBuf, compress: bool, max_held: usize) -> PyResult<Self> {
        let base = path.clone();
        let name: Box<dyn Fn(usize) -> PathBuf + Send + Sync> =
            Box::new(move |i| part_name(&base, i));
        let inner = sst::SstFiles::create(name, max_held, compress)
            .map_err(|e| PyOSError::new_err(format!("{}: {e}", path.display())))?;
        Ok(SstWriter {
            inner: Some(inner),
            path,
            files: Vec::new(),
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

    /// Closes the last file: the number of entries (0: nothing written, no file is left).
    fn finish(&mut self, py: Python<'_>) -> PyResult<u64> {
        let writer = self
            .inner
            .take()
            .ok_or_else(|| PyValueError::new_err("already finished"))?;
        let path = self.path.clone();
        let (files, entries) = py
            .detach(|| writer.finish())
            .map_err(|e| PyOSError::new_err(format!("{}: {e}", path.display())))?;
        self.files = files;
        Ok(entries)
    }

    /// The files `finish` left, in key order.
    #[getter]
    fn files(&self) -> Vec<PathBuf> {
        self.files.clone()
    }
}

/// Key-sorted runs of (keys, values) merged into one key-sorted run, as Arrow binary arrays
/// (an SST file takes each key once, in order). A key found more than once keeps its last
/// value: the later run's, or the later position within a run.
#[pyfunction]
pub fn merge_sorted_runs<'py>(
    py: Python<'py>,
    runs: Vec<(PyArray, PyArray)>,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let arrays: Vec<_> = runs
        .into_iter()
        .map(|(k, v)| (k.into_inner().0, v.into_inner().0))
        .collect();
    let mut columns = Vec::with_capacity(arrays.len());
    for (k, v) in &arrays {
        let (keys, values) = (binary_values(k)?, binary_values(v)?);
        if keys.len() != values.len() {
            return Err(PyValueError::new_err(format!(
                "{} keys but {} values",
                keys.len(),
                values.len()
            )));
        }
        columns.push((keys, values));
    }
    let (keys, values) = py.detach(|| merge_runs(&columns));
    Ok((crate::binary(py, keys)?, crate::binary(py, values)?))
}

/// One run's keys and values.
type Run<'a> = (Vec<&'a [u8]>, Vec<&'a [u8]>);

fn merge_runs(runs: &[Run<'_>]) -> (BinaryArray, BinaryArray) {
    let entries = runs
        .iter()
        .flat_map(|(k, v)| k.iter().copied().zip(v.iter().copied()));
    let in_order = entries
        .clone()
        .zip(entries.clone().skip(1))
        .all(|((a, _), (b, _))| a < b);
    let mut all: Vec<(&[u8], &[u8])> = entries.collect();
    if !in_order {
        // Stable: equal keys stay in run order, and the last of each is kept.
        all.sort_by(|a, b| a.0.cmp(b.0));
        let mut kept: Vec<(&[u8], &[u8])> = Vec::with_capacity(all.len());
        for e in all {
            match kept.last_mut() {
                Some(last) if last.0 == e.0 => *last = e,
                _ => kept.push(e),
            }
        }
        all = kept;
    }
    (
        BinaryArray::from_iter_values(all.iter().map(|e| e.0)),
        BinaryArray::from_iter_values(all.iter().map(|e| e.1)),
    )
}

#[cfg(test)]
mod tests {
    use super::{merge_runs, Run};
    use arrow_array::Array;

    #[test]
    fn merge_keeps_the_last_value_of_a_key() {
        let a: Run<'_> = (vec![b"a", b"c", b"e"], vec![b"1", b"2", b"3"]);
        let b: Run<'_> = (vec![b"b", b"c"], vec![b"4", b"5"]);
        let (k, v) = merge_runs(&[a.clone(), b]);
        let k: Vec<&[u8]> = k.iter().map(Option::unwrap).collect();
        let v: Vec<&[u8]> = v.iter().map(Option::unwrap).collect();
        assert_eq!(k, [&b"a"[..], b"b", b"c", b"e"]);
        assert_eq!(v, [&b"1"[..], b"4", b"5", b"3"]);
        let c: Run<'_> = (vec![b"f"], vec![b"6"]);
        let (k, _) = merge_runs(&[a, c]);
        assert_eq!(k.len(), 4);
    }
}
