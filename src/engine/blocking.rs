//! Running the rare decision that awaits something (a signal provider, a subject extractor, an
//! evaluator) for a caller that is not async.

use std::future::Future;

/// Runs a future to completion for a caller that is not async: on the caller's runtime when
/// there is one (a worker thread of a multi-threaded runtime), else on a small runtime of the
/// engine's own. `None` if no runtime could be started.
pub(crate) fn block_on<F>(fut: F) -> Option<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    static FALLBACK: std::sync::OnceLock<Option<tokio::runtime::Runtime>> =
        std::sync::OnceLock::new();
    let fallback = || {
        FALLBACK
            .get_or_init(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("toolgate-blocking")
                    .enable_all()
                    .build()
                    .ok()
            })
            .as_ref()
    };
    match tokio::runtime::Handle::try_current() {
        Err(_) => fallback().map(|rt| rt.block_on(fut)),
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            Some(tokio::task::block_in_place(|| h.block_on(fut)))
        }
        // A current-thread runtime cannot be blocked from its own thread: run elsewhere.
        Ok(_) => std::thread::scope(|s| {
            s.spawn(|| fallback().map(|rt| rt.block_on(fut)))
                .join()
                .ok()
                .flatten()
        }),
    }
}
