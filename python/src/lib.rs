//! `toolgate._native`: the Python binding of the toolgate engine (PyO3, abi3).
//!
//! This module only translates: every decision, rule, review and audit event is the Rust
//! crate's. The Python package (`toolgate/__init__.py`) adds the pure-Python conveniences
//! (decorators, context managers, `guard`, adapters) on top of the classes here.

mod callbacks;
mod convert;
mod engine;
mod rt;
mod run;

use chrono::{DateTime, SecondsFormat, Utc};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde_json::Value;

use crate::convert::to_py;

pub(crate) use rt::runtime;

/// Raises `toolgate.<name>(message, **kwargs)` (the exception classes live in Python).
pub(crate) fn error(
    py: Python<'_>,
    name: &str,
    message: String,
    kwargs: &[(&str, Option<String>)],
) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let class = py.import("toolgate._errors")?.getattr(name)?;
        let kw = pyo3::types::PyDict::new(py);
        for (k, v) in kwargs {
            kw.set_item(*k, v)?;
        }
        let exc = class.call((message.clone(),), Some(&kw))?;
        Ok(PyErr::from_value(exc))
    })();
    made.unwrap_or_else(|e| e)
}

/// The id of a decided call: as the caller gave it, or `call-<n>` as the run numbered it
/// (made into text when read: most decisions' ids are never read).
pub(crate) enum CallId {
    /// Given by the caller.
    Given(String),
    /// `call-<n>`.
    Numbered(u64),
}

impl From<String> for CallId {
    fn from(id: String) -> Self {
        CallId::Given(id)
    }
}

impl CallId {
    fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            CallId::Given(id) => id.as_str().into(),
            CallId::Numbered(n) => format!("call-{n}").into(),
        }
    }
}

/// One decision of the engine.
#[pyclass(frozen, module = "toolgate._native", name = "Decision")]
pub struct PyDecision {
    call_id: CallId,
    d: toolgate::engine::Decision,
}

impl PyDecision {
    pub(crate) fn new(call_id: impl Into<CallId>, d: toolgate::engine::Decision) -> Self {
        PyDecision {
            call_id: call_id.into(),
            d,
        }
    }
}

#[pymethods]
impl PyDecision {
    /// The id of the call decided.
    #[getter]
    fn call_id(&self) -> std::borrow::Cow<'_, str> {
        self.call_id.text()
    }
    /// `"tool.before"` or `"tool.after"`.
    #[getter]
    fn phase(&self) -> &'static str {
        self.d.phase.as_str()
    }
    /// `"allow"`, `"block"` or `"hitl"`.
    #[getter]
    fn effect(&self) -> &'static str {
        self.d.effect.as_str()
    }
    /// The decision code, e.g. `"BLOCKED_RULE"`.
    #[getter]
    fn code(&self) -> &'static str {
        self.d.code.as_str()
    }
    /// The deciding rule's reason.
    #[getter]
    fn reason(&self) -> Option<&str> {
        self.d.reason.as_deref()
    }
    /// The deciding rule's id.
    #[getter]
    fn rule_id(&self) -> Option<&str> {
        self.d.rule_id.as_deref()
    }
    /// Whether the call may proceed.
    #[getter]
    fn allowed(&self) -> bool {
        self.d.is_allowed()
    }
    /// The review's id when the effect is hitl (or a review decided this call).
    #[getter]
    fn review_id(&self) -> Option<&str> {
        self.d.hitl.as_ref().map(|h| h.review_id.as_str())
    }
    /// Whether the agent must stop the run.
    #[getter]
    fn abort_run(&self) -> bool {
        self.d.abort_run
    }
    /// The effect a shadow-mode rule would have had.
    #[getter]
    fn shadow_effect(&self) -> Option<&'static str> {
        self.d.shadow_effect.map(|e| e.as_str())
    }
    /// How long the engine took, in nanoseconds.
    #[getter]
    fn latency_ns(&self) -> u64 {
        self.d.latency_ns
    }
    /// The internal error behind a failure-mode decision, if any.
    #[getter]
    fn error(&self) -> Option<&str> {
        self.d.error.as_deref()
    }
    /// The decision as the Rust `Decision` serialises it (camelCase keys).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let v = serde_json::to_value(&self.d)
            .map_err(|e| PyValueError::new_err(format!("decision: {e}")))?;
        to_py(py, &v)
    }
    fn __repr__(&self) -> String {
        format!(
            "Decision(call_id={:?}, effect={:?}, code={:?}, rule_id={}, reason={})",
            self.call_id.text(),
            self.d.effect.as_str(),
            self.d.code.as_str(),
            opt(self.d.rule_id.as_deref()),
            opt(self.d.reason.as_deref()),
        )
    }
    fn __bool__(&self) -> bool {
        self.d.is_allowed()
    }
}

fn opt(s: Option<&str>) -> String {
    s.map_or("None".into(), |s| format!("{s:?}"))
}

/// A clock that moves only when told to (tests, replays).
#[pyclass(frozen, module = "toolgate._native", name = "ManualClock")]
pub struct PyManualClock {
    pub(crate) clock: toolgate::engine::ManualClock,
}

/// A `datetime` as UTC (a naive one is taken as UTC).
fn utc(dt: &Bound<'_, PyAny>) -> PyResult<DateTime<Utc>> {
    let mut text: String = dt.call_method0("isoformat")?.extract()?;
    if dt.call_method0("utcoffset")?.is_none() {
        text.push_str("+00:00");
    }
    DateTime::parse_from_rfc3339(&text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| PyValueError::new_err(format!("{text}: not a date and time: {e}")))
}

#[pymethods]
impl PyManualClock {
    #[new]
    fn new(start: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(PyManualClock {
            clock: toolgate::engine::ManualClock::new(utc(start)?),
        })
    }
    /// Sets the time.
    fn set(&self, dt: &Bound<'_, PyAny>) -> PyResult<()> {
        self.clock.set(utc(dt)?);
        Ok(())
    }
    /// Moves the time by `seconds` (negative: back).
    fn advance(&self, seconds: f64) -> PyResult<()> {
        if !seconds.is_finite() {
            return Err(PyValueError::new_err("seconds must be finite"));
        }
        let micros = (seconds * 1e6).round() as i64;
        self.clock.advance(chrono::Duration::microseconds(micros));
        Ok(())
    }
    /// The clock's time, an aware `datetime` in UTC.
    fn now<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        use toolgate::engine::Clock;
        let text = self
            .clock
            .now()
            .to_rfc3339_opts(SecondsFormat::Micros, false);
        py.import("datetime")?
            .getattr("datetime")?
            .call_method1("fromisoformat", (text,))
    }
}

/// JSON text of a Python value (for `run.end(output=...)`).
pub(crate) fn json_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDecision>()?;
    m.add_class::<PyManualClock>()?;
    m.add_class::<engine::PyEngine>()?;
    m.add_class::<run::PyRun>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    rt::cache_pid(m)?;
    Ok(())
}
