//! The tokio runtime of this process, and the `pyo3-async-runtimes` glue that spawns on it.
//!
//! A forked child (gunicorn `--preload`, Celery prefork, `multiprocessing`) has none of its
//! parent's threads: a runtime built before the fork has no workers, timers or blocking pool
//! in the child, and anything spawned on it waits for ever. So the runtime is per process:
//! the first use in a process (the child's included) builds one, and the parent's is left
//! alone (never dropped: its threads are not ours to join). Engines and runs made before a
//! fork refuse to work in the child with a clear error (see `engine.rs`, `run.rs`).

use std::cell::OnceCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicPtr, Ordering};

use pyo3_async_runtimes::TaskLocals;
use pyo3_async_runtimes::generic::{ContextExt, Runtime};

/// Threads of the blocking pool (plain-function callbacks): bounded, so hung callbacks cannot
/// take the process's threads (see `callbacks.rs` for the per-callback bound).
pub(crate) const MAX_BLOCKING_THREADS: usize = 128;

/// A runtime and the process it was built in.
struct ProcessRt {
    pid: u32,
    rt: tokio::runtime::Runtime,
}

static CURRENT: AtomicPtr<ProcessRt> = AtomicPtr::new(std::ptr::null_mut());

/// The tokio runtime of this process (built on first use here, in a forked child too).
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    let pid = std::process::id();
    loop {
        let p = CURRENT.load(Ordering::Acquire);
        // SAFETY: every pointer stored in CURRENT comes from `Box::leak` and is never freed.
        if let Some(cur) = unsafe { p.as_ref() }
            && cur.pid == pid
        {
            return &cur.rt;
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("toolgate-rt")
            .max_blocking_threads(MAX_BLOCKING_THREADS)
            .build()
            .unwrap_or_else(|e| {
                // No runtime, no decisions: nothing sensible is left to do.
                panic!("toolgate: cannot start the tokio runtime: {e}")
            });
        let new = Box::into_raw(Box::new(ProcessRt { pid, rt }));
        match CURRENT.compare_exchange(p, new, Ordering::AcqRel, Ordering::Acquire) {
            // The previous one (the parent's, or none) is left as it is: leaked, not dropped.
            Ok(_) => {}
            Err(_) => {
                // Another thread of this process installed one first: ours goes.
                // SAFETY: `new` was never shared.
                let mine = unsafe { Box::from_raw(new) };
                mine.rt.shutdown_background();
            }
        }
    }
}

/// `pyo3-async-runtimes`' runtime trait over [`runtime`].
pub(crate) struct ProcessRuntime;

tokio::task_local! {
    static TASK_LOCALS: OnceCell<TaskLocals>;
}

impl Runtime for ProcessRuntime {
    type JoinError = tokio::task::JoinError;
    type JoinHandle = tokio::task::JoinHandle<()>;

    fn spawn<F>(fut: F) -> Self::JoinHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        runtime().spawn(fut)
    }

    fn spawn_blocking<F>(f: F) -> Self::JoinHandle
    where
        F: FnOnce() + Send + 'static,
    {
        runtime().spawn_blocking(f)
    }
}

impl ContextExt for ProcessRuntime {
    fn scope<F, R>(locals: TaskLocals, fut: F) -> Pin<Box<dyn Future<Output = R> + Send>>
    where
        F: Future<Output = R> + Send + 'static,
    {
        let cell = OnceCell::new();
        let _ = cell.set(locals);
        Box::pin(TASK_LOCALS.scope(cell, fut))
    }

    fn get_task_locals() -> Option<TaskLocals> {
        TASK_LOCALS
            .try_with(|c| c.get().cloned())
            .unwrap_or_default()
    }
}

/// A Rust future as a Python awaitable, run on this process's runtime.
pub(crate) fn future_into_py<'py, F, T>(
    py: pyo3::Python<'py>,
    fut: F,
) -> pyo3::PyResult<pyo3::Bound<'py, pyo3::PyAny>>
where
    F: Future<Output = pyo3::PyResult<T>> + Send + 'static,
    T: for<'a> pyo3::IntoPyObject<'a> + Send + 'static,
{
    pyo3_async_runtimes::generic::future_into_py::<ProcessRuntime, F, T>(py, fut)
}

/// Fails when `pid` (where an engine or run was made) is not this process: it was made
/// before a fork and its threads stayed in the parent.
pub(crate) fn same_process(py: pyo3::Python<'_>, pid: u32, what: &str) -> pyo3::PyResult<()> {
    let here = std::process::id();
    if pid == here {
        return Ok(());
    }
    Err(crate::error(
        py,
        "ToolgateError",
        format!(
            "this {what} was made in process {pid}, before a fork: its worker threads stayed \
             there, so it cannot be used in process {here}. Create the engine (and its runs) \
             in the child: gunicorn's post_fork hook, Celery's worker_process_init signal, or \
             the multiprocessing worker's own code."
        ),
        &[],
    ))
}
