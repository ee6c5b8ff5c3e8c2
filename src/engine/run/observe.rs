//! Observers: code told of every decision, tool result and run end (e.g. OpenTelemetry export).
//!
//! An observer is called synchronously on the decision path, once per event, after the decision
//! is made: it must be quick and must not block (hand work to a queue or a background thread).
//! A panic in an observer is caught and logged; the decision stands. With no observer
//! registered the engine does nothing extra.

use std::sync::Arc;

use crate::engine::decide::call::{RunContext, ToolCall, ToolOutcome};
use crate::engine::decide::decision::Decision;

/// Told of what the engine decides. Every method has an empty default.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use toolgate::engine::{Decision, DecisionObserver, GovernanceEngine, RunContext, ToolCall};
///
/// #[derive(Default)]
/// struct Count(AtomicU64);
/// impl DecisionObserver for Count {
///     fn on_decision(&self, _run: &RunContext, _call: &ToolCall, _d: &Decision) {
///         self.0.fetch_add(1, Ordering::Relaxed);
///     }
/// }
/// let count = Arc::new(Count::default());
/// let engine = GovernanceEngine::builder().observer(count.clone()).build().unwrap();
/// ```
pub trait DecisionObserver: Send + Sync + 'static {
    /// A run started.
    fn on_run_start(&self, run: &RunContext) {
        let _ = run;
    }

    /// A `tool.before` decision was made about `call` (whatever its effect).
    fn on_decision(&self, run: &RunContext, call: &ToolCall, decision: &Decision) {
        let _ = (run, call, decision);
    }

    /// The result of the allowed call `call_id` was recorded; `decision` is the `tool.after`
    /// decision when after-phase rules were in play.
    fn on_result(
        &self,
        run: &RunContext,
        call_id: &str,
        outcome: &ToolOutcome,
        decision: Option<&Decision>,
    ) {
        let _ = (run, call_id, outcome, decision);
    }

    /// The run ended with `status`.
    fn on_run_end(&self, run: &RunContext, status: &str) {
        let _ = (run, status);
    }
}

/// The observers of an engine (usually none).
pub(crate) type Observers = Box<[Arc<dyn DecisionObserver>]>;

/// Calls `f` with each observer. An observer that panics is logged and skipped: the decision
/// stands. With no observer this does nothing.
#[inline]
pub(crate) fn each(observers: &Observers, f: impl Fn(&dyn DecisionObserver)) {
    for o in observers.iter() {
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(o.as_ref()))).is_err() {
            tracing::error!("a decision observer panicked; the decision stands");
        }
    }
}
