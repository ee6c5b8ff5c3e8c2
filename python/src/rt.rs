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
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};
use std::task::{Context, Poll, Waker};

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

/// This process's id, cached: `std::process::id()` is a system call (the C library no longer
/// caches it), and a decision asks twice (is its run of this process? its runtime?), which on
/// a VM cost more than the rest of the crossing. 0: not known (a fork clears it).
static PID: AtomicU32 = AtomicU32::new(0);

/// Set once `os.register_at_fork` took [`forked_child`] (at import): only then is the id
/// cached; otherwise [`pid`] asks the system every time.
static CACHING: AtomicBool = AtomicBool::new(false);

/// Python's `after_in_child` fork hook (`os.fork`, multiprocessing's fork start method): in a
/// child just forked the cached id is the parent's.
#[pyo3::pyfunction]
pub(crate) fn forked_child() {
    PID.store(0, Ordering::Relaxed);
}

/// Registers [`forked_child`] with `os.register_at_fork` (called once, at import). Without it
/// (a Python without the hook) the id is never cached.
pub(crate) fn cache_pid(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
    use pyo3::prelude::*;
    let py = m.py();
    let hook = pyo3::wrap_pyfunction!(forked_child, m)?;
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("after_in_child", hook)?;
    if let Ok(register) = py
        .import("os")
        .and_then(|os| os.getattr("register_at_fork"))
    {
        register.call((), Some(&kwargs))?;
        CACHING.store(true, Ordering::Relaxed);
    }
    Ok(())
}

/// This process's id (see [`PID`]).
pub(crate) fn pid() -> u32 {
    let p = PID.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    let p = std::process::id();
    if CACHING.load(Ordering::Relaxed) {
        PID.store(p, Ordering::Relaxed);
    }
    p
}

/// The tokio runtime of this process (built on first use here, in a forked child too).
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    let pid = pid();
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

/// Runs a decision for a caller that is not async. It is first polled once, on this thread and
/// holding the GIL: a decision with nothing to await (no signal, subject extractor or custom
/// condition in play, no shared store: the common case) finishes there, in less time than
/// releasing and taking back the GIL would cost. One that awaits something releases the GIL and
/// runs to completion on this thread, the runtime's workers driving its I/O and timers.
///
/// `at_once` false: the GIL is released from the start. So it is for an engine whose reviews
/// are in a file or Redis: a hitl decision reads (and may write) that store without awaiting,
/// which would otherwise freeze every other Python thread for as long as the file takes to
/// read and parse (seconds for a large review file, unbounded on a stuck filesystem).
pub(crate) fn decide<T: Send>(
    py: pyo3::Python<'_>,
    at_once: bool,
    fut: impl Future<Output = T> + Send,
) -> T {
    let rt = runtime();
    let mut fut = pin!(fut);
    let first = if at_once {
        let _rt = rt.enter();
        fut.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    } else {
        Poll::Pending
    };
    match first {
        Poll::Ready(v) => v,
        // Polled again with a real waker: a future registers its waker on every poll.
        Poll::Pending => py.detach(|| {
            let _rt = rt.enter();
            tokio::task::block_in_place(|| rt.handle().block_on(fut))
        }),
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
    let here = self::pid();
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
