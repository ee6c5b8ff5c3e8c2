//! `Run`: one agent run; its before/after decisions (sync with the GIL released, or async on
//! the runtime without blocking the event loop) and its end.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3_async_runtimes::TaskLocals;
use serde_json::Value;
use toolgate::engine::{
    Decision, DecisionCode, Enduser, LlmCall, LlmUsage, Run, RunClosed, RunContext, ToolCall,
    ToolOutcome,
};
use toolgate::policy::{EffectType, Phase};

use crate::callbacks::CALLER_LOOP;
use crate::convert::to_json;
use crate::engine::PyEngine;
use crate::rt::{decide, future_into_py};
use crate::{CallId, PyDecision, error, json_text, runtime};

/// A run of an agent (subclassed by `toolgate.Run`).
#[pyclass(subclass, frozen, module = "toolgate._native", name = "Run")]
pub struct PyRun {
    run: Arc<Run>,
    calls: AtomicU64,
    /// Model calls numbered so far (`llm-<n>` ids of calls given without one).
    llm_calls: AtomicU64,
    /// The process the run was started in (a forked child cannot use it: see `rt.rs`).
    pid: u32,
    /// Whether a decision may be made holding the GIL: not when the engine's reviews are in a
    /// file or Redis (a hitl decision reads them on this thread; see `rt::decide`).
    at_once: bool,
}

fn enduser(e: &Bound<'_, PyAny>) -> PyResult<Enduser> {
    let d = e
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err("enduser: expected {\"id\": str, \"tags\": {...}}"))?;
    let id: String = d
        .get_item("id")?
        .ok_or_else(|| PyValueError::new_err("enduser: \"id\" is required"))?
        .extract()?;
    let mut tags = BTreeMap::new();
    if let Some(t) = d.get_item("tags")?
        && !t.is_none()
    {
        let Value::Object(map) = to_json(&t)? else {
            return Err(PyTypeError::new_err("enduser.tags: expected a dict"));
        };
        for (k, v) in map {
            tags.insert(k, json_text(&v));
        }
    }
    Ok(Enduser { id, tags })
}

fn tags_of(tags: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    // A list or a tuple is read as it is (no iterator object made for it).
    if let Ok(l) = tags.cast_exact::<pyo3::types::PyList>() {
        return l.iter().map(|t| t.extract::<String>()).collect();
    }
    if let Ok(t) = tags.cast_exact::<pyo3::types::PyTuple>() {
        return t.iter().map(|t| t.extract::<String>()).collect();
    }
    if tags.is_instance_of::<pyo3::types::PyString>() {
        return Ok(vec![tags.extract()?]);
    }
    tags.try_iter()?.map(|t| t?.extract::<String>()).collect()
}

/// The running event loop of the caller, so the coroutines of callbacks run there.
fn caller_loop(py: Python<'_>) -> PyResult<TaskLocals> {
    TaskLocals::with_running_loop(py)?.copy_context(py)
}

/// `toolgate.RunClosed`: the run has ended, or its engine has shut down.
fn closed_error(py: Python<'_>, why: RunClosed) -> PyErr {
    error(py, "RunClosed", why.message().to_string(), &[])
}

/// Raises `toolgate.RunClosed` for a decision the core refused because the run closed while
/// it was decided (see the core's `Run::closed`).
fn refused(py: Python<'_>, d: &Decision) -> PyResult<()> {
    for why in [RunClosed::Ended, RunClosed::EngineShutDown] {
        if d.code == DecisionCode::BlockedFailure && d.error.as_deref() == Some(why.message()) {
            return Err(closed_error(py, why));
        }
    }
    Ok(())
}

/// The after-phase decision when the core has none: no after-phase rule in play (allow), or
/// no call `call_id` waiting for its result in this run (block: its output was never allowed).
fn after_default(awaited: bool, call_id: &str) -> Decision {
    if awaited {
        return Decision::simple(Phase::After, EffectType::Allow, DecisionCode::Allowed, None);
    }
    let why = format!(
        "call {call_id:?} was not allowed in this run (or its result was recorded already): \
         its result is not recorded and must not reach the agent"
    );
    let mut d = Decision::simple(
        Phase::After,
        EffectType::Block,
        DecisionCode::BlockedFailure,
        Some(Arc::from(why.as_str())),
    );
    d.error = Some(why);
    d
}

impl PyRun {
    /// Fails in a forked child, or when the run can decide nothing more.
    fn open(&self, py: Python<'_>) -> PyResult<()> {
        crate::rt::same_process(py, self.pid, "toolgate.Run")?;
        match self.run.closed() {
            Some(why) => Err(closed_error(py, why)),
            None => Ok(()),
        }
    }

    /// The call, and its id for its decision.
    fn call(
        &self,
        name: String,
        args: Option<&Bound<'_, PyAny>>,
        tags: &Bound<'_, PyAny>,
        call_id: Option<String>,
    ) -> PyResult<(ToolCall, CallId)> {
        let args = match args {
            None => Value::Object(Default::default()),
            Some(a) => to_json(a)?,
        };
        let tags = tags_of(tags)?;
        let (id, of) = match call_id {
            Some(id) => (id.clone(), CallId::Given(id)),
            None => {
                let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
                (format!("call-{n}"), CallId::Numbered(n))
            }
        };
        Ok((ToolCall::new(id, name, args).with_tags(tags), of))
    }
}

impl PyRun {
    fn llm_call(
        &self,
        model: String,
        messages: Option<&Bound<'_, PyAny>>,
        call_id: Option<String>,
    ) -> PyResult<LlmCall> {
        let messages = match messages {
            None => Value::Array(Vec::new()),
            Some(m) if m.is_none() => Value::Array(Vec::new()),
            Some(m) => to_json(m)?,
        };
        let id = call_id.unwrap_or_else(|| {
            format!("llm-{}", self.llm_calls.fetch_add(1, Ordering::Relaxed) + 1)
        });
        Ok(LlmCall::new(model).with_messages(messages).with_id(id))
    }
}

/// A token count: a non-negative `int` (past 2**64 - 1 it counts as 2**64 - 1: a budget is
/// never under-counted).
fn tokens(what: &str, n: &Bound<'_, PyAny>) -> PyResult<u64> {
    if n.cast::<pyo3::types::PyBool>().is_ok() || n.cast::<pyo3::types::PyInt>().is_err() {
        return Err(PyTypeError::new_err(format!(
            "{what}: expected an int, found {}",
            n.get_type().name()?
        )));
    }
    if let Ok(v) = n.extract::<u64>() {
        return Ok(v);
    }
    if n.lt(0)? {
        return Err(PyValueError::new_err(format!(
            "{what} {n}: expected a non-negative number of tokens"
        )));
    }
    Ok(u64::MAX)
}

fn outcome(
    output: Option<&Bound<'_, PyAny>>,
    duration_ms: Option<f64>,
    error: Option<String>,
) -> PyResult<ToolOutcome> {
    let duration = match duration_ms {
        None => Duration::ZERO,
        Some(ms) if ms.is_finite() && ms >= 0.0 => Duration::from_secs_f64(ms / 1000.0),
        Some(ms) => {
            return Err(PyValueError::new_err(format!(
                "duration_ms {ms}: expected a non-negative number"
            )));
        }
    };
    let output = match output {
        None => Value::Null,
        Some(o) => to_json(o)?,
    };
    Ok(match error {
        Some(e) => ToolOutcome::err(e, duration),
        None => ToolOutcome::ok(output, duration),
    })
}

#[pymethods]
impl PyRun {
    #[new]
    #[pyo3(signature = (engine, agent_id, run_id, enduser=None, agent_tags=None))]
    fn new(
        engine: PyRef<'_, PyEngine>,
        agent_id: String,
        run_id: String,
        enduser: Option<&Bound<'_, PyAny>>,
        agent_tags: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut ctx = RunContext::new(run_id, agent_id);
        if let Some(t) = agent_tags
            && !t.is_none()
        {
            ctx = ctx.with_agent_tags(tags_of(t).map_err(|e| {
                PyTypeError::new_err(format!("agent_tags: expected an iterable of str ({e})"))
            })?);
        }
        if let Some(e) = enduser
            && !e.is_none()
        {
            ctx.enduser = Some(self::enduser(e)?);
        }
        let py = engine.py();
        engine.here(py)?;
        if engine.engine.is_shut_down() {
            return Err(closed_error(py, RunClosed::EngineShutDown));
        }
        let run = {
            let _rt = runtime().enter();
            engine.engine.start_run(ctx)
        };
        Ok(PyRun {
            run: Arc::new(run),
            calls: AtomicU64::new(0),
            llm_calls: AtomicU64::new(0),
            pid: crate::rt::pid(),
            at_once: !engine.stored_reviews,
        })
    }

    /// The run's id.
    #[getter]
    fn run_id(&self) -> &str {
        &self.run.context().run_id
    }

    /// The agent's id.
    #[getter]
    fn agent_id(&self) -> &str {
        &self.run.context().agent_id
    }

    /// Whether a hitl decision (or a failure) stopped the run.
    #[getter]
    fn aborted(&self) -> bool {
        self.run.is_aborted()
    }

    /// Decides a tool call (phase `tool.before`); the GIL is released while it awaits something
    /// (see `rt::decide`).
    #[pyo3(signature = (name, args=None, tags=None, call_id=None))]
    fn before_tool(
        &self,
        py: Python<'_>,
        name: String,
        args: Option<&Bound<'_, PyAny>>,
        tags: Option<&Bound<'_, PyAny>>,
        call_id: Option<String>,
    ) -> PyResult<PyDecision> {
        self.open(py)?;
        let empty = pyo3::types::PyTuple::empty(py);
        let (call, id) = self.call(name, args, tags.unwrap_or(empty.as_any()), call_id)?;
        // In this process's runtime: what the decision awaits runs there (not on a runtime a
        // fork left without threads).
        let d = decide(py, self.at_once, self.run.before_tool(call));
        refused(py, &d)?;
        Ok(PyDecision::new(id, d))
    }

    /// `before_tool` for asyncio: an awaitable of the decision; never blocks the event loop.
    #[pyo3(signature = (name, args=None, tags=None, call_id=None))]
    fn abefore_tool<'py>(
        &self,
        py: Python<'py>,
        name: String,
        args: Option<&Bound<'py, PyAny>>,
        tags: Option<&Bound<'py, PyAny>>,
        call_id: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.open(py)?;
        let empty = pyo3::types::PyTuple::empty(py);
        let (call, id) = self.call(name, args, tags.unwrap_or(empty.as_any()), call_id)?;
        let run = self.run.clone();
        let locals = caller_loop(py)?;
        future_into_py(
            py,
            CALLER_LOOP.scope(locals, async move {
                let d = run.before_tool(call).await;
                Python::attach(|py| refused(py, &d))?;
                Ok(PyDecision::new(id, d))
            }),
        )
    }

    /// Records the outcome of an allowed call and decides the after-phase rules. Always a
    /// decision: `ALLOWED` when no after-phase rule is in play; a block when `call_id` was not
    /// allowed in this run (its result is not recorded).
    #[pyo3(signature = (call_id, output=None, duration_ms=None, error=None))]
    fn after_tool(
        &self,
        py: Python<'_>,
        call_id: String,
        output: Option<&Bound<'_, PyAny>>,
        duration_ms: Option<f64>,
        error: Option<String>,
    ) -> PyResult<PyDecision> {
        self.open(py)?;
        let outcome = outcome(output, duration_ms, error)?;
        let run = &self.run;
        let id = call_id.as_str();
        let d = decide(py, self.at_once, async move {
            let awaited = run.awaits_result(id);
            run.after_tool(id, outcome)
                .await
                .unwrap_or_else(|| after_default(awaited, id))
        });
        refused(py, &d)?;
        Ok(PyDecision::new(call_id, d))
    }

    /// `after_tool` for asyncio.
    #[pyo3(signature = (call_id, output=None, duration_ms=None, error=None))]
    fn aafter_tool<'py>(
        &self,
        py: Python<'py>,
        call_id: String,
        output: Option<&Bound<'py, PyAny>>,
        duration_ms: Option<f64>,
        error: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.open(py)?;
        let outcome = outcome(output, duration_ms, error)?;
        let run = self.run.clone();
        let locals = caller_loop(py)?;
        future_into_py(
            py,
            CALLER_LOOP.scope(locals, async move {
                let awaited = run.awaits_result(&call_id);
                let d = run
                    .after_tool(&call_id, outcome)
                    .await
                    .unwrap_or_else(|| after_default(awaited, &call_id));
                Python::attach(|py| refused(py, &d))?;
                Ok(PyDecision::new(call_id, d))
            }),
        )
    }

    /// Ends the run (`run.ended`) and flushes its audit events (bounded).
    #[pyo3(signature = (status="success", output=None))]
    fn end(&self, py: Python<'_>, status: &str, output: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        crate::rt::same_process(py, self.pid, "toolgate.Run")?;
        let response = output.map(to_json).transpose()?.map(|v| json_text(&v));
        let run = self.run.clone();
        let status = status.to_string();
        py.detach(|| {
            runtime().block_on(async move { run.end(&status, response.as_deref()).await })
        });
        Ok(())
    }

    /// `end` for asyncio.
    #[pyo3(signature = (status="success", output=None))]
    fn aend<'py>(
        &self,
        py: Python<'py>,
        status: &str,
        output: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::rt::same_process(py, self.pid, "toolgate.Run")?;
        let response = output.map(to_json).transpose()?.map(|v| json_text(&v));
        let run = self.run.clone();
        let status = status.to_string();
        future_into_py(py, async move {
            run.end(&status, response.as_deref()).await;
            Ok(())
        })
    }

    /// Lifts the pause a hitl decision put on the run. For the adapters, once the review that
    /// paused it has been answered (it does not check that; a pending review still holds its
    /// own call, but other calls are decided again).
    fn _resume(&self, py: Python<'_>) -> PyResult<()> {
        self.open(py)?;
        self.run.resume();
        Ok(())
    }

    /// Why the run decides nothing more (`"ended"`, `"engine shut down"`), or `None`.
    #[getter]
    fn closed(&self) -> Option<&'static str> {
        self.run.closed().map(|c| match c {
            RunClosed::Ended => "ended",
            RunClosed::EngineShutDown => "engine shut down",
        })
    }

    /// Whether `before_llm` reads a call's messages (an `llm.before` rule in play, or the
    /// engine recording messages): adapters build them only then.
    #[getter]
    fn gates_llm(&self) -> bool {
        self.run.gates_llm()
    }

    /// Decides a model call (phase `llm.before`); the GIL is released while it awaits something.
    #[pyo3(signature = (model, messages=None, call_id=None))]
    fn before_llm(
        &self,
        py: Python<'_>,
        model: String,
        messages: Option<&Bound<'_, PyAny>>,
        call_id: Option<String>,
    ) -> PyResult<PyDecision> {
        self.open(py)?;
        // Without llm.before rules (nor recorded messages) the messages are not converted.
        let messages = messages.filter(|_| self.run.gates_llm());
        let call = self.llm_call(model, messages, call_id)?;
        let d = decide(py, self.at_once, self.run.before_llm(&call));
        refused(py, &d)?;
        Ok(PyDecision::new(call.id.unwrap_or_default(), d))
    }

    /// `before_llm` for asyncio: an awaitable of the decision; never blocks the event loop.
    #[pyo3(signature = (model, messages=None, call_id=None))]
    fn abefore_llm<'py>(
        &self,
        py: Python<'py>,
        model: String,
        messages: Option<&Bound<'py, PyAny>>,
        call_id: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.open(py)?;
        let messages = messages.filter(|_| self.run.gates_llm());
        let call = self.llm_call(model, messages, call_id)?;
        let run = self.run.clone();
        let locals = caller_loop(py)?;
        future_into_py(
            py,
            CALLER_LOOP.scope(locals, async move {
                let d = run.before_llm(&call).await;
                Python::attach(|py| refused(py, &d))?;
                Ok(PyDecision::new(call.id.unwrap_or_default(), d))
            }),
        )
    }

    /// Records a model call's usage (the `llm_tokens_in`, `llm_tokens_out` and `llm_cost_usd`
    /// metrics, and an `llm.result` event). Without `cost_usd` the cost comes from the
    /// engine's `prices` for `model` (none when the model has no price).
    #[pyo3(signature = (tokens_in, tokens_out, cost_usd=None, model=None, duration_ms=None, call_id=None))]
    fn record_llm(
        &self,
        tokens_in: &Bound<'_, PyAny>,
        tokens_out: &Bound<'_, PyAny>,
        cost_usd: Option<f64>,
        model: Option<String>,
        duration_ms: Option<f64>,
        call_id: Option<String>,
    ) -> PyResult<()> {
        let mut usage = LlmUsage::new(
            tokens("tokens_in", tokens_in)?,
            tokens("tokens_out", tokens_out)?,
        );
        usage.cost_usd = cost_usd;
        usage.model = model;
        usage.duration_ms = duration_ms;
        usage.call_id = call_id;
        self.run.record_llm_usage(usage);
        Ok(())
    }

    /// Records a custom metric.
    fn record_metric(&self, key: &str, value: f64) {
        self.run.record_metric(key, value);
    }
}
