//! `Engine`: builds a `GovernanceEngine` from Python arguments; signals, subjects, reviews,
//! reload and shutdown.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use toolgate::engine::{
    EngineBuilder, EngineError, FailureMode, FileReviewStore, GovernanceEngine,
};
use toolgate::policy::{Policy, PolicyErrors, parse_policy, parse_policy_value};

use crate::callbacks::{PyCallback, custom_condition, signal_provider, subject_extractor};
use crate::convert::{to_json, to_py};
use crate::{PyManualClock, error, runtime};

/// The engine (subclassed by `toolgate.Engine`).
#[pyclass(subclass, frozen, module = "toolgate._native", name = "Engine")]
pub struct PyEngine {
    pub(crate) engine: GovernanceEngine,
    /// The process it was built in (a forked child cannot use it: see `rt.rs`).
    pub(crate) pid: u32,
    /// Whether its reviews are read from a file or Redis (`reviews=`, `state=`): a hitl
    /// decision then reads and writes that store on the caller's thread, so its decisions
    /// are never made holding the GIL (see `rt::decide`).
    pub(crate) stored_reviews: bool,
}

impl PyEngine {
    /// Fails in a forked child of the process that built the engine.
    pub(crate) fn here(&self, py: Python<'_>) -> PyResult<()> {
        crate::rt::same_process(py, self.pid, "toolgate.Engine")
    }
}

/// What `policies` names: files/folders, or parsed documents.
enum Source {
    Path(PathBuf),
    Doc(Policy),
}

fn sources(py: Python<'_>, policies: &Bound<'_, PyAny>) -> PyResult<Vec<Source>> {
    let items: Vec<Bound<'_, PyAny>> =
        if policies.cast::<PyList>().is_ok() || policies.cast::<PyTuple>().is_ok() {
            policies.try_iter()?.collect::<PyResult<_>>()?
        } else {
            vec![policies.clone()]
        };
    let fspath = py.import("os")?.getattr("fspath")?;
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        if item.cast::<PyDict>().is_ok() {
            let v = to_json(item)?;
            let p = parse_policy_value(&v, None).map_err(|e| policy_error(py, e))?;
            out.push(Source::Doc(p));
        } else if let Ok(p) = fspath.call1((item,)) {
            let s: String = p.extract().map_err(|_| {
                PyTypeError::new_err(format!("policies[{i}]: expected a str path, not bytes"))
            })?;
            out.push(Source::Path(PathBuf::from(s)));
        } else {
            // A bare array of rules is a policy document too.
            if item.cast::<PyList>().is_ok() {
                let v = to_json(item)?;
                let p = parse_policy_value(&v, None).map_err(|e| policy_error(py, e))?;
                out.push(Source::Doc(p));
                continue;
            }
            return Err(PyTypeError::new_err(format!(
                "policies[{i}]: expected a path (str or os.PathLike) or a policy document (dict)"
            )));
        }
    }
    if out.is_empty() {
        return Err(PyValueError::new_err("policies: give at least one policy"));
    }
    Ok(out)
}

/// `toolgate.PolicyError` for these errors: the message lists them all; `.path` is the JSON
/// path of the first, `.file` its file.
pub(crate) fn policy_error(py: Python<'_>, e: PolicyErrors) -> PyErr {
    let first = e.errors().first();
    let path = first.map(|f| f.path.clone());
    let file = first.and_then(|f| f.file.as_ref().map(|p| p.display().to_string()));
    error(
        py,
        "PolicyError",
        e.to_string(),
        &[("path", path), ("file", file)],
    )
}

fn engine_error(py: Python<'_>, e: EngineError) -> PyErr {
    match e {
        EngineError::Policy(p) => policy_error(py, p),
        other => error(py, "ToolgateError", other.to_string(), &[]),
    }
}

/// The audit configuration from `audit=`: a folder path or a `toolgate.Audit`.
fn audit_config(
    py: Python<'_>,
    audit: &Bound<'_, PyAny>,
) -> PyResult<toolgate::audit::AuditConfig> {
    use toolgate::audit::{AuditConfig, FileSinkConfig, HttpSinkConfig, SinkConfig};
    let fspath = py.import("os")?.getattr("fspath")?;
    let path_of = |o: &Bound<'_, PyAny>| -> PyResult<PathBuf> {
        Ok(PathBuf::from(fspath.call1((o,))?.extract::<String>()?))
    };
    let mut config = AuditConfig::default();
    if audit.hasattr("collector")? && audit.hasattr("dir")? {
        let dir = audit.getattr("dir")?;
        if !dir.is_none() {
            config
                .sinks
                .push(SinkConfig::File(FileSinkConfig::in_dir(path_of(&dir)?)));
        }
        let collector = audit.getattr("collector")?;
        if !collector.is_none() {
            let mut c = HttpSinkConfig::new(collector.extract::<String>()?);
            c.token = audit.getattr("token")?.extract::<Option<String>>()?;
            config.sinks.push(SinkConfig::Http(c));
        }
        let key = audit.getattr("signing_key")?;
        if !key.is_none() {
            config.signing_key = Some(path_of(&key)?);
        }
        if config.sinks.is_empty() {
            return Err(PyValueError::new_err(
                "toolgate.Audit: give dir= or collector= (where the trail goes)",
            ));
        }
    } else {
        config
            .sinks
            .push(SinkConfig::File(FileSinkConfig::in_dir(path_of(audit)?)));
    }
    Ok(config)
}

fn compile(sources: Vec<Source>) -> EngineBuilder {
    sources
        .into_iter()
        .fold(GovernanceEngine::builder(), |b, s| match s {
            Source::Path(p) => b.policy_path(p),
            Source::Doc(d) => b.policy(d),
        })
}

#[pymethods]
impl PyEngine {
    #[new]
    #[pyo3(signature = (policies, audit=None, state=None, reviews=None, failure_mode="closed",
        org_timezone=None, signal_timeout_ms=100, clock=None, prices=None, record_messages=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        policies: &Bound<'_, PyAny>,
        audit: Option<&Bound<'_, PyAny>>,
        state: Option<String>,
        reviews: Option<&Bound<'_, PyAny>>,
        failure_mode: &str,
        org_timezone: Option<String>,
        signal_timeout_ms: u64,
        clock: Option<PyRef<'_, PyManualClock>>,
        prices: Option<&Bound<'_, PyAny>>,
        record_messages: bool,
    ) -> PyResult<Self> {
        let mut builder = compile(sources(py, policies)?);
        if let Some(p) = prices.filter(|p| !p.is_none()) {
            let table = toolgate::engine::Prices::from_json(&crate::convert::to_json(p)?)
                .map_err(PyValueError::new_err)?;
            builder = builder.prices(table);
        }
        builder = builder.record_messages(record_messages);
        builder = builder.failure_mode(match failure_mode {
            "closed" => FailureMode::Closed,
            "open" => FailureMode::Open,
            other => {
                return Err(PyValueError::new_err(format!(
                    "failure_mode {other:?}: expected \"closed\" or \"open\""
                )));
            }
        });
        if let Some(tz) = org_timezone {
            let parsed = tz.parse::<chrono_tz::Tz>().map_err(|_| {
                PyValueError::new_err(format!(
                    "org_timezone {tz:?}: not a known IANA timezone (e.g. Europe/London)"
                ))
            })?;
            builder = builder.org_timezone(parsed);
        }
        if signal_timeout_ms == 0 {
            return Err(PyValueError::new_err(
                "signal_timeout_ms must be at least 1",
            ));
        }
        builder = builder.signal_timeout(Duration::from_millis(signal_timeout_ms));
        if let Some(c) = clock {
            builder = builder.clock(Arc::new(c.clock.clone()));
        }
        if let Some(a) = audit {
            builder = builder.audit(audit_config(py, a)?);
        }
        if let Some(url) = &state {
            if !url.starts_with("redis://") && !url.starts_with("rediss://") {
                return Err(PyValueError::new_err(format!(
                    "state {}: expected redis://HOST:PORT/DB",
                    toolgate::state::redis::redact_url(url)
                )));
            }
            let config = toolgate::state::redis::RedisConfig::new(url.clone());
            if reviews.is_none() {
                let store = toolgate::state::redis::RedisReviewStore::new(&config)
                    .map_err(|e| error(py, "ToolgateError", format!("state: {e}"), &[]))?;
                builder = builder.review_store(Arc::new(store));
            }
            builder = builder.redis_state(config);
        }
        if let Some(r) = reviews {
            let path: String = py.import("os")?.getattr("fspath")?.call1((r,))?.extract()?;
            builder = builder.review_store(Arc::new(FileReviewStore::new(path)));
        }
        let stored_reviews = reviews.is_some() || state.is_some();
        let engine = py
            .detach(|| {
                let _rt = runtime().enter();
                builder.build()
            })
            .map_err(|e| engine_error(py, e))?;
        Ok(PyEngine {
            engine,
            pid: crate::rt::pid(),
            stored_reviews,
        })
    }

    /// Registers (or replaces) the provider of signal `key`: `fn(args: dict) -> JSON value`.
    fn register_signal(&self, key: String, func: &Bound<'_, PyAny>) -> PyResult<()> {
        self.here(func.py())?;
        let cb = PyCallback::new(func)?;
        self.engine.register_signal(key, signal_provider(cb));
        Ok(())
    }

    /// Registers (or replaces) the `custom` condition `name`: `fn(args, call: dict) -> bool`.
    fn register_condition(&self, name: String, func: &Bound<'_, PyAny>) -> PyResult<()> {
        self.here(func.py())?;
        let cb = PyCallback::new(func)?;
        self.engine.register_condition(name, custom_condition(cb));
        Ok(())
    }

    /// Registers a subject extractor for tools matching `tool_glob`:
    /// `fn(tool_name, args) -> [{"subjectType", "id", "idSystem"?, "role"?}]`.
    fn register_subjects(
        &self,
        py: Python<'_>,
        tool_glob: &str,
        func: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.here(py)?;
        let cb = PyCallback::new(func)?;
        self.engine
            .register_subject_extractor(tool_glob, subject_extractor(cb))
            .map_err(|e| engine_error(py, e))
    }

    /// Replaces the policies atomically; on error the old ones stay in place.
    fn reload(&self, py: Python<'_>, policies: &Bound<'_, PyAny>) -> PyResult<()> {
        self.here(py)?;
        let srcs = sources(py, policies)?;
        if srcs.iter().all(|s| matches!(s, Source::Path(_))) {
            let paths: Vec<PathBuf> = srcs
                .into_iter()
                .filter_map(|s| match s {
                    Source::Path(p) => Some(p),
                    Source::Doc(_) => None,
                })
                .collect();
            return py
                .detach(|| self.engine.reload_paths(&paths))
                .map_err(|e| engine_error(py, e));
        }
        let mut docs = Vec::new();
        for s in srcs {
            match s {
                Source::Doc(d) => docs.push(d),
                Source::Path(p) => docs.push(read_file(py, &p)?),
            }
        }
        py.detach(|| self.engine.reload(docs))
            .map_err(|e| engine_error(py, e))
    }

    /// Every review, as dicts (camelCase keys, as `toolgate review` shows them).
    fn _reviews_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.here(py)?;
        let all = py.detach(|| self.engine.reviews().list());
        let v = serde_json::to_value(all).map_err(|e| PyValueError::new_err(e.to_string()))?;
        to_py(py, &v)
    }

    /// Decides review `id`: `action` is approve, deny or expire.
    fn _reviews_decide<'py>(
        &self,
        py: Python<'py>,
        action: &str,
        id: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.here(py)?;
        let r = py.detach(|| {
            let reviews = self.engine.reviews();
            match action {
                "approve" => Some(reviews.approve(id)),
                "deny" => Some(reviews.deny(id)),
                "expire" => Some(reviews.expire(id)),
                _ => None,
            }
        });
        let review = r
            .ok_or_else(|| PyValueError::new_err(format!("unknown review action {action:?}")))?
            .map_err(|e| error(py, "ToolgateError", e.to_string(), &[]))?;
        let v = serde_json::to_value(review).map_err(|e| PyValueError::new_err(e.to_string()))?;
        to_py(py, &v)
    }

    /// Flushes the audit trail and shuts its sinks down (bounded by the flush timeout).
    fn shutdown(&self, py: Python<'_>) -> PyResult<()> {
        self.here(py)?;
        let engine = self.engine.clone();
        py.detach(|| runtime().block_on(engine.shutdown()))
            .map_err(|e| error(py, "ToolgateError", format!("audit trail: {e}"), &[]))
    }

    /// Flushes the audit trail (bounded by the flush timeout).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.here(py)?;
        let engine = self.engine.clone();
        py.detach(|| runtime().block_on(engine.flush()))
            .map_err(|e| error(py, "ToolgateError", format!("audit trail: {e}"), &[]))
    }

    /// Whether `shutdown()` was called (runs then decide nothing more).
    #[getter]
    fn is_shut_down(&self) -> bool {
        self.engine.is_shut_down()
    }

    /// Number of active rules.
    #[getter]
    fn active_rules(&self) -> usize {
        self.engine.policies().active_rules()
    }
}

fn read_file(py: Python<'_>, p: &Path) -> PyResult<Policy> {
    if p.is_dir() {
        return Err(PyValueError::new_err(format!(
            "{}: a folder cannot be mixed with policy documents in reload(); give its files",
            p.display()
        )));
    }
    let text = std::fs::read_to_string(p).map_err(|e| {
        error(
            py,
            "PolicyError",
            format!("{}: {e}", p.display()),
            &[
                ("path", Some(String::new())),
                ("file", Some(p.display().to_string())),
            ],
        )
    })?;
    parse_policy(&text, Some(p)).map_err(|e| policy_error(py, e))
}
