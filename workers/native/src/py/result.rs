//! Results crossing to Python: frozen classes with a read-only attribute per field, declared
//! with [`result_class!`] in the binding module of their domain. Each has `as_dict()` (the
//! fields in declaration order, nested results and lists of them as dicts and lists) for the
//! places that write a result as JSON or merge it into a report, and a `repr` naming its fields.
//!
//! Shared by every binding module; it holds no domain types.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

/// Declares a result class: `#[pyclass(frozen, get_all)]`, its fields public to Rust, with
/// `as_dict()` and `__repr__`. A field of a nested result class is `Py<Class>` (or a `Vec` of
/// them); a pyarrow object or another Python value is `Py<PyAny>`. Fields listed after the
/// body as `omit_none: [field, ...]` (each an `Option`) are left out of `as_dict()` when None.
macro_rules! result_class {
    (
        $(#[$meta:meta])*
        $name:ident {
            $( $(#[$fmeta:meta])* $field:ident : $ty:ty ),* $(,)?
        }
        $( omit_none: [ $($opt:ident),* $(,)? ] )?
    ) => {
        $(#[$meta])*
        #[pyclass(module = "rechain.workers._native", frozen, get_all)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        #[pymethods]
        impl $name {
            /// The fields as a dict, nested results as dicts.
            fn as_dict<'py>(
                slf: &Bound<'py, Self>,
            ) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
                $crate::py::result::fields_dict(
                    slf.as_any(),
                    &[$(stringify!($field)),*],
                    &[$($(stringify!($opt)),*)?],
                )
            }

            fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
                $crate::py::result::fields_repr(
                    stringify!($name),
                    slf.as_any(),
                    &[$(stringify!($field)),*],
                )
            }
        }
    };
}
pub(crate) use result_class;

/// `obj`'s attributes `names` as a dict, in that order (see [`plain`]); those of `omit_none`
/// are left out when they are None (a key the dict this replaced set only when it applied).
pub(crate) fn fields_dict<'py>(
    obj: &Bound<'py, PyAny>,
    names: &[&str],
    omit_none: &[&str],
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(obj.py());
    for name in names {
        let v = obj.getattr(name)?;
        if v.is_none() && omit_none.contains(name) {
            continue;
        }
        d.set_item(name, plain(v)?)?;
    }
    Ok(d)
}

/// A field's value as plain Python data: a nested result as its dict, a list of values as a
/// list of plain values; anything else (numbers, strings, tuples, dicts, pyarrow objects) as
/// it is.
fn plain(v: Bound<'_, PyAny>) -> PyResult<Bound<'_, PyAny>> {
    if let Ok(list) = v.cast::<PyList>() {
        let items = list.iter().map(plain).collect::<PyResult<Vec<_>>>()?;
        return Ok(PyList::new(v.py(), items)?.into_any());
    }
    if v.is_instance_of::<PyTuple>() {
        return Ok(v);
    }
    match v.getattr_opt("as_dict")? {
        Some(as_dict) if as_dict.is_callable() && !v.is_instance_of::<PyDict>() => {
            Ok(as_dict.call0()?)
        }
        _ => Ok(v),
    }
}

/// `Name(field=value, ...)`.
pub(crate) fn fields_repr(name: &str, obj: &Bound<'_, PyAny>, names: &[&str]) -> PyResult<String> {
    let fields = names
        .iter()
        .map(|n| Ok(format!("{n}={}", obj.getattr(n)?.repr()?)))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(format!("{name}({})", fields.join(", ")))
}
