//! Python values <-> JSON values.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

/// Nesting past which a value is refused: toolgate's one limit for values (the outermost
/// dict or list is level 1).
const MAX_DEPTH: usize = toolgate::json::MAX_VALUE_DEPTH;

/// A Python value as JSON: `None`, `bool`, `int`, `float` (finite), `str`, `dict` with `str`
/// keys, `list` and `tuple`. Anything else is a `TypeError` naming where it sits.
pub fn to_json(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    // The common case (a value that converts) keeps no path; a value that does not is
    // converted again, tracking where it is, for the error to name the place.
    match plain(obj, 0) {
        Some(v) => Ok(v),
        None => to_json_at(obj, 0, &mut String::from("$")),
    }
}

/// [`to_json_at`] without the path: `None` where that fails (same checks, same values).
fn plain(obj: &Bound<'_, PyAny>, depth: usize) -> Option<Value> {
    if let Ok(s) = obj.cast_exact::<PyString>() {
        return Some(Value::String(s.to_cow().ok()?.into_owned()));
    }
    if let Ok(d) = obj.cast_exact::<PyDict>() {
        if depth >= MAX_DEPTH {
            return None;
        }
        let mut map = Map::new();
        for (k, v) in d.iter() {
            let key = k.cast::<PyString>().ok()?.to_cow().ok()?.into_owned();
            let value = plain(&v, depth + 1)?;
            map.insert(key, value);
        }
        return Some(Value::Object(map));
    }
    if obj.is_none() {
        return Some(Value::Null);
    }
    if let Ok(l) = obj.cast_exact::<PyList>() {
        if depth >= MAX_DEPTH {
            return None;
        }
        let mut out = Vec::with_capacity(l.len());
        for v in l.iter() {
            out.push(plain(&v, depth + 1)?);
        }
        return Some(Value::Array(out));
    }
    // Anything else (numbers, bools, tuples, subclasses): as `to_json_at` does it.
    to_json_at(obj, depth, &mut String::new()).ok()
}

fn to_json_at(obj: &Bound<'_, PyAny>, depth: usize, at: &mut String) -> PyResult<Value> {
    // `depth` containers enclose `obj`: one more is one too many past the limit.
    if depth >= MAX_DEPTH
        && (obj.cast::<PyDict>().is_ok()
            || obj.cast::<PyList>().is_ok()
            || obj.cast::<PyTuple>().is_ok())
    {
        return Err(PyValueError::new_err(format!(
            "{at}: nested deeper than {MAX_DEPTH} levels"
        )));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(s.to_cow()?.into_owned()));
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.cast::<PyInt>().is_ok() {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Value::Number(i.into()));
        }
        if let Ok(u) = obj.extract::<u64>() {
            return Ok(Value::Number(u.into()));
        }
        return Err(PyValueError::new_err(format!(
            "{at}: integer out of the 64-bit range"
        )));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Number::from_f64(f.value())
            .map(Value::Number)
            .ok_or_else(|| {
                PyValueError::new_err(format!("{at}: {} is not a JSON number", f.value()))
            });
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut map = Map::new();
        for (k, v) in d.iter() {
            let key = k
                .cast::<PyString>()
                .map_err(|_| PyTypeError::new_err(format!("{at}: dict keys must be str")))?
                .to_cow()?
                .into_owned();
            let len = at.len();
            at.push('.');
            at.push_str(&key);
            let value = to_json_at(&v, depth + 1, at)?;
            at.truncate(len);
            map.insert(key, value);
        }
        return Ok(Value::Object(map));
    }
    if let Ok(l) = obj.cast::<PyList>() {
        return seq(l.iter(), depth, at);
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return seq(t.iter(), depth, at);
    }
    let ty = obj
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    Err(PyTypeError::new_err(format!(
        "{at}: a {ty} is not a JSON value (use None, bool, int, float, str, list or dict)"
    )))
}

fn seq<'py>(
    items: impl Iterator<Item = Bound<'py, PyAny>>,
    depth: usize,
    at: &mut String,
) -> PyResult<Value> {
    let mut out = Vec::new();
    for (i, v) in items.enumerate() {
        let len = at.len();
        at.push_str(&format!("[{i}]"));
        out.push(to_json_at(&v, depth + 1, at)?);
        at.truncate(len);
    }
    Ok(Value::Array(out))
}

/// A JSON value as a Python value (dicts keep the JSON's key order).
pub fn to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(a) => {
            let l = PyList::empty(py);
            for x in a {
                l.append(to_py(py, x)?)?;
            }
            l.into_any()
        }
        Value::Object(o) => {
            let d = PyDict::new(py);
            for (k, x) in o {
                d.set_item(k, to_py(py, x)?)?;
            }
            d.into_any()
        }
    })
}
