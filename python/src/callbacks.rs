//! Python callables as the engine's signal providers, subject extractors and `custom`
//! conditions.
//!
//! A callback may be a plain function or an `async def`. Plain functions run on the package's
//! callback threads (`toolgate._pool.submit`: Python threads, so one that sleeps never stalls a
//! decision of another call, the engine's timeout still applies, and one still running when
//! the interpreter exits is stopped cleanly by CPython instead of aborting the process); coroutines run on the event loop of the `await`ing caller
//! when the decision came from an async method, else on the package's own background loop.
//! Whatever the callback does — raise, hang past the signal timeout, return something that
//! is not JSON — the engine sees an `Err` (missing data, with the error in the decision).
//!
//! Hung plain functions: a Python thread cannot be stopped from outside, so one that hangs
//! keeps its thread until it returns. The threads are bounded
//! (`toolgate._pool.MAX_CALLBACK_THREADS`; idle ones leave after 30 s) and so is each callback: at most
//! [`MAX_RUNNING_PER_CALLBACK`] of its calls run at once. Past that its new calls are not
//! started (missing data at once, saying so), so a hung provider holds at most that many
//! threads and never starves the others' calls; its calls start again as the hung ones return.
//! A call the engine stopped waiting for is interrupted (`TimeoutError` raised in its thread):
//! one busy in Python code returns its thread at once; one blocked in a C call, when it returns.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use pyo3::prelude::*;

use pyo3_async_runtimes::TaskLocals;
use serde_json::{Map, Value};
use toolgate::engine::{CustomContext, SubjectInput, SubjectRef};

use crate::convert::{to_json, to_py};

tokio::task_local! {
    /// The event loop of the Python caller of an async method, for coroutines of callbacks.
    pub static CALLER_LOOP: TaskLocals;
}

/// The most calls of one plain-function callback that run at once (see the module doc).
pub const MAX_RUNNING_PER_CALLBACK: usize = 16;

/// A Python callable and whether calling it yields a coroutine.
pub struct PyCallback {
    func: Py<PyAny>,
    is_async: bool,
    /// Its calls running on callback threads now.
    running: AtomicUsize,
}

/// A slot of [`PyCallback::running`], given back when the call returns (however late).
struct Slot(Arc<PyCallback>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
    }
}

impl PyCallback {
    /// Wraps `func`; `TypeError` when it is not callable.
    pub fn new(func: &Bound<'_, PyAny>) -> PyResult<Arc<Self>> {
        if !func.is_callable() {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "expected a callable (a function or an async def)",
            ));
        }
        let inspect = func.py().import("inspect")?;
        let is_async = inspect
            .call_method1("iscoroutinefunction", (func,))?
            .is_truthy()?;
        Ok(Arc::new(PyCallback {
            func: func.clone().unbind(),
            is_async,
            running: AtomicUsize::new(0),
        }))
    }

    /// Calls it with the arguments `make_args` builds (under the GIL) and converts its result
    /// (awaited when it is awaitable) with `convert`.
    pub async fn call<T, A, C>(self: Arc<Self>, make_args: A, convert: C) -> Result<T, String>
    where
        T: Send + 'static,
        A: for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyTuple>>
            + Send
            + 'static,
        C: for<'py> FnOnce(&Bound<'py, PyAny>) -> PyResult<T> + Send + 'static,
    {
        let locals = CALLER_LOOP.try_with(|l| l.clone()).ok();
        let this = self.clone();
        // Plain functions run on a callback thread; an async def is only called (which creates
        // its coroutine without running it) right here.
        let returned: Py<PyAny> = if self.is_async {
            Python::attach(|py| {
                let args = make_args(py)?;
                this.func.bind(py).call1(args).map(Bound::unbind)
            })
            .map_err(describe)?
        } else {
            let taken = self.running.fetch_add(1, Ordering::AcqRel);
            let slot = Slot(self.clone());
            if taken >= MAX_RUNNING_PER_CALLBACK {
                return Err(format!(
                    "the callback was not called: {MAX_RUNNING_PER_CALLBACK} of its calls are \
                     still running (hung past their timeout?)"
                ));
            }
            // The thread running the call, while it runs (0 otherwise): written under the GIL.
            let running_on = Arc::new(AtomicU64::new(0));
            let (tx, rx) = tokio::sync::oneshot::channel();
            let job = Job {
                on: running_on.clone(),
                outcome: std::sync::Mutex::new(Some((tx, slot))),
            };
            // The call runs on one of the package's Python threads (`toolgate._pool.submit`),
            // never on a thread of the runtime: a callback still running as the interpreter
            // exits is stopped by CPython, which is clean only with no native frame below it.
            Python::try_attach(|py| -> PyResult<()> {
                let args = make_args(py)?;
                py.import("toolgate._pool")?
                    .call_method1("submit", (Py::new(py, job)?, this.func.bind(py), args))?;
                Ok(())
            })
            .ok_or_else(|| "the callback was not called: the interpreter is exiting".to_string())?
            .map_err(describe)?;
            let mut interrupt = Interrupt(Some(running_on));
            let done = rx.await;
            interrupt.0 = None; // finished: nothing to interrupt
            done.map_err(|_| "the callback did not finish".to_string())?
                .map_err(describe)?
        };
        let awaited = Python::attach(|py| -> PyResult<Option<_>> {
            let r = returned.bind(py);
            if !r.hasattr("__await__")? {
                return Ok(None);
            }
            let helpers = py.import("toolgate._loop")?;
            let locals = match &locals {
                Some(l) => l.clone(),
                None => TaskLocals::new(helpers.call_method0("background_loop")?),
            };
            let (coro, cancel): (Bound<'_, PyAny>, Bound<'_, PyAny>) =
                helpers.call_method1("cancellable", (r,))?.extract()?;
            let fut = pyo3_async_runtimes::into_future_with_locals(&locals, coro)?;
            Ok(Some((fut, CancelOnDrop(Some(cancel.unbind())))))
        })
        .map_err(describe)?;
        let value = match awaited {
            Some((fut, mut guard)) => {
                let v = fut.await;
                guard.0 = None; // finished: nothing to cancel
                v.map_err(describe)?
            }
            None => returned,
        };
        Python::attach(|py| convert(value.bind(py))).map_err(describe)
    }
}

/// A plain-function call handed to a callback thread (`toolgate._pool.submit`): the thread
/// says when the call starts and reports its outcome once (later reports do nothing); the
/// callback's slot is given back with the outcome.
#[pyclass(frozen, module = "toolgate._native", name = "_CallbackJob")]
struct Job {
    on: Arc<AtomicU64>,
    #[allow(clippy::type_complexity)]
    outcome: std::sync::Mutex<Option<(tokio::sync::oneshot::Sender<PyResult<Py<PyAny>>>, Slot)>>,
}

#[pymethods]
impl Job {
    /// The call starts on this thread: an interruption (the engine's timeout) targets it.
    fn started(&self) {
        // SAFETY: called from Python, with the GIL held, as the C API requires.
        let me = unsafe { pyo3::ffi::PyThread_get_thread_ident() };
        #[allow(clippy::useless_conversion)] // c_ulong is u32 on Windows
        self.on.store(u64::from(me), Ordering::Release);
    }

    /// The call's outcome: `ok` and what it returned, or not `ok` and the exception it raised.
    fn finish(&self, ok: bool, value: Bound<'_, PyAny>) {
        let outcome = if ok {
            Ok(value.unbind())
        } else {
            Err(PyErr::from_value(value))
        };
        self.report(outcome);
    }

    /// The call was interrupted (the engine's timeout) before it could report: the outcome,
    /// unless one was reported.
    fn abandon(&self) {
        self.report(Err(pyo3::exceptions::PyTimeoutError::new_err(
            "interrupted before it returned",
        )));
    }
}

impl Job {
    fn report(&self, outcome: PyResult<Py<PyAny>>) {
        let taken = self.outcome.lock().ok().and_then(|mut o| o.take());
        let Some((tx, _slot)) = taken else {
            return;
        };
        let me = self.on.swap(0, Ordering::AcqRel);
        if me != 0 {
            // An interruption that arrived as the call returned is not left pending for this
            // thread's next callback.
            // SAFETY: called from Python with the GIL held; a null exception clears the
            // thread's pending one.
            unsafe {
                pyo3::ffi::PyThreadState_SetAsyncExc(me as _, std::ptr::null_mut());
            }
        }
        let _ = tx.send(outcome);
    }
}

/// Interrupts a plain-function callback the engine stopped waiting for (its timeout): a
/// `TimeoutError` is raised in its thread at its next Python instruction, so a callback busy
/// in Python code gives its thread back. One blocked inside a C call (a socket read, a sleep)
/// sees it only when that call returns.
struct Interrupt(Option<Arc<AtomicU64>>);

impl Drop for Interrupt {
    fn drop(&mut self) {
        let Some(on) = self.0.take() else {
            return;
        };
        let _ = Python::try_attach(|py| {
            let thread = on.load(Ordering::Acquire);
            if thread == 0 {
                return; // not started yet, or finished
            }
            let exc = py.get_type::<pyo3::exceptions::PyTimeoutError>();
            // SAFETY: GIL held; `thread` is the ident of a thread inside the call (it clears
            // `on` under the GIL before it leaves), and the exception type outlives the call.
            unsafe {
                pyo3::ffi::PyThreadState_SetAsyncExc(thread as _, exc.as_ptr());
            }
        });
    }
}

/// Cancels a callback's coroutine task when the engine stops waiting for it (the signal
/// timeout dropped the future), so a hanging coroutine does not stay pending on its loop.
struct CancelOnDrop(Option<Py<PyAny>>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(cancel) = self.0.take() {
            // No interpreter any more (finalizing): nothing left to cancel.
            let _ = Python::try_attach(|py| {
                if let Err(e) = cancel.bind(py).call0() {
                    e.write_unraisable(py, None);
                }
            });
        }
    }
}

/// A Python exception as the error text of a decision: `Type: message`.
fn describe(e: PyErr) -> String {
    Python::try_attach(|py| {
        let ty = e
            .get_type(py)
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "Exception".into());
        format!("{ty}: {}", e.value(py))
    })
    .unwrap_or_else(|| "the interpreter is exiting".into())
}

/// The future a provider or extractor returns.
type BoxFut<T> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, String>> + Send>>;

/// A signal provider calling `cb(args: dict)`.
pub fn signal_provider(
    cb: Arc<PyCallback>,
) -> impl Fn(Map<String, Value>) -> BoxFut<Value> + Send + Sync + 'static {
    move |args: Map<String, Value>| {
        let cb = cb.clone();
        Box::pin(async move {
            cb.call(
                move |py| {
                    let d = to_py(py, &Value::Object(args))?;
                    pyo3::types::PyTuple::new(py, [d])
                },
                to_json,
            )
            .await
        })
    }
}

/// A subject extractor calling `cb(tool_name, args)`, which returns a list of
/// `{"subjectType", "id", "idSystem"?, "role"?}`.
pub fn subject_extractor(
    cb: Arc<PyCallback>,
) -> impl Fn(SubjectInput) -> BoxFut<Vec<SubjectRef>> + Send + Sync + 'static {
    move |input: SubjectInput| {
        let cb = cb.clone();
        Box::pin(async move {
            cb.call(
                move |py| {
                    let name = input.tool_name.into_pyobject(py)?.into_any();
                    let args = to_py(py, &input.args)?;
                    pyo3::types::PyTuple::new(py, [name, args])
                },
                subjects,
            )
            .await
        })
    }
}

/// A `custom` condition calling `cb(args, call: dict)`, which returns a bool. `args` is the
/// condition's `args` (`None` when absent); `call` is `{"toolName", "toolTags", "args", "runId",
/// "agentId", "agentTags", "sessionId", "enduser"}` (`enduser`: `{"id", "tags"}` or `None`).
pub fn custom_condition(
    cb: Arc<PyCallback>,
) -> impl Fn(Value, CustomContext) -> BoxFut<bool> + Send + Sync + 'static {
    move |args: Value, ctx: CustomContext| {
        let cb = cb.clone();
        Box::pin(async move {
            cb.call(
                move |py| {
                    let call = ctx.into_json();
                    let args = to_py(py, &args)?;
                    let call = to_py(py, &call)?;
                    pyo3::types::PyTuple::new(py, [args, call])
                },
                |r| {
                    r.cast::<pyo3::types::PyBool>()
                        .map(|b| b.is_true())
                        .map_err(|_| {
                            let ty = r
                                .get_type()
                                .name()
                                .map(|n| n.to_string())
                                .unwrap_or_else(|_| "object".into());
                            pyo3::exceptions::PyTypeError::new_err(format!(
                                "a custom condition returns a bool, not {ty}"
                            ))
                        })
                },
            )
            .await
        })
    }
}

fn subjects(r: &Bound<'_, PyAny>) -> PyResult<Vec<SubjectRef>> {
    SubjectRef::list_from_json(&to_json(r)?).map_err(pyo3::exceptions::PyValueError::new_err)
}
