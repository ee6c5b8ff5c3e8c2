//! How a run ends ([`Run::end`], or a drop), how it is left open for another holder
//! ([`Run::leave`]) and what it does afterwards. A run that can decide nothing more has ended
//! (or was left), or its engine has shut down. Its decisions are refused — a block whose
//! `error` says why, and nothing is written into its chain — so an app that keeps using it (or
//! a decision racing its end) never gets an allowed call that the trail does not show.

use std::sync::atomic::Ordering;

use chrono::{DateTime, Utc};

use super::handle::{Run, RunShared};
use super::refused::RunClosed;
use crate::audit::EventKind;
use crate::engine::audit::body::RunEndedBody;
use crate::engine::audit::sealer::Body;

impl RunShared {
    /// The body of `run.ended`.
    pub(super) fn ended_body(
        &self,
        status: &str,
        final_response: Option<&str>,
        now: DateTime<Utc>,
    ) -> RunEndedBody {
        let t = &self.totals;
        RunEndedBody {
            status: status.to_string(),
            calls: t.calls.load(Ordering::Relaxed),
            allowed: t.allowed.load(Ordering::Relaxed),
            blocked: t.blocked.load(Ordering::Relaxed),
            hitl: t.hitl.load(Ordering::Relaxed),
            tokens_in: t.tokens_in.load(Ordering::Relaxed),
            tokens_out: t.tokens_out.load(Ordering::Relaxed),
            cost_usd: t.cost_micro_usd.load(Ordering::Relaxed) as f64 / 1e6,
            duration_ms: now.timestamp_millis() - self.facts.started_ms,
            aborted: self.aborted.load(Ordering::Acquire),
            final_response: final_response.map(str::to_string),
            evaluation: None,
        }
    }
}

impl Drop for RunShared {
    /// A run dropped without [`Run::end`] releases its run-scoped state and, with the audit
    /// trail on, ends its chain with a `run.ended` event of status `dropped`.
    fn drop(&mut self) {
        if self.audit.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        self.engine.decide.state.forget_scope(&self.facts.run_key);
        super::observe::each(&self.engine.observers, |o| {
            o.on_run_end(&self.facts.context, "dropped")
        });
        if self.engine.audit_enabled() {
            let now = self.engine.clock.now();
            let body = Body::RunEnded(self.ended_body("dropped", None, now));
            self.engine.emit_body(self, EventKind::RunEnded, body, now);
            // The run's state stays: the next holder continues its chain.
            self.engine.leave_chain_on_drop(self);
        }
    }
}

impl Run {
    /// Ends the run with a status (e.g. `success`, `error`) and, optionally, the agent's final
    /// response (evaluated by the run-level evaluators). Flushes the audit sinks, bounded by the
    /// engine's flush timeout. Ending twice does nothing.
    ///
    /// The run's own counters and metric windows (scope `run`) are released: they can never
    /// be read again, and a long-lived engine must not keep them. This costs the same whatever
    /// the size of the policies (the store knows the run's keys).
    pub async fn end(&self, status: &str, final_response: Option<&str>) {
        // Under the gate: a decision being written lands before `run.ended`, and every later
        // one sees the run ended.
        let was_ended = {
            let _closing = self.shared.gate.write();
            self.shared.audit.ended.swap(true, Ordering::AcqRel)
        };
        if was_ended {
            return;
        }
        self.engine
            .decide
            .state
            .forget_scope(&self.shared.facts.run_key);
        if let Some(store) = self.engine.shared.clone() {
            self.end_shared(&*store).await;
        }
        super::observe::each(&self.engine.observers, |o| {
            o.on_run_end(&self.shared.facts.context, status)
        });
        if self.engine.audit_enabled() {
            let now = self.engine.clock.now();
            let mut body = self.shared.ended_body(status, final_response, now);
            self.engine.await_background(&self.shared).await;
            let (evaluation, slow) = self
                .engine
                .evaluate_run(&self.shared, final_response, status)
                .await;
            let late_events = slow.is_some();
            body.evaluation = evaluation;
            self.engine.emit_with_evaluation(
                &self.shared,
                EventKind::RunEnded,
                Body::RunEnded(body),
                now,
                slow,
                None,
            );
            self.engine.await_background(&self.shared).await;
            if late_events {
                // Slow run evaluations land after the signed `run.ended`: sign them too.
                self.engine.emit_closing_checkpoint(&self.shared);
            }
            self.engine.leave_chain(&self.shared, true).await;
            self.engine.flush_run_audit(&self.shared).await;
        }
    }

    /// Why the run decides nothing more, if it does not: it has ended or been left, or its
    /// engine has shut down. Its `before_tool` / `after_tool` then refuse every call (block,
    /// `BLOCKED_FAILURE`, the reason as `error`) and write nothing.
    pub fn closed(&self) -> Option<RunClosed> {
        if self.shared.audit.ended.load(Ordering::Acquire) {
            Some(RunClosed::Ended)
        } else if self.engine.shut_down.load(Ordering::Acquire) {
            Some(RunClosed::EngineShutDown)
        } else {
            None
        }
    }
}

impl Run {
    /// Leaves the run open for another process (or a later [`start_run`] of the same id on
    /// this engine) to continue: what is left is written to the state store, the audit trail
    /// is flushed and the run's chain head is written where the next holder reads it (design
    /// §8); no `run.ended` is written and the run's state stays. The handle does nothing more
    /// afterwards (as after [`end`](Run::end)). A fork found now (another holder claimed the
    /// run meanwhile) is an `error` event.
    ///
    /// [`start_run`]: crate::engine::GovernanceEngine::start_run
    pub async fn leave(&self) {
        self.leave_flushing(true).await;
    }

    /// [`leave`](Run::leave) without flushing the audit trail: the chain head written to the
    /// store is what the next holder continues from, so handing a run over between calls (the
    /// shared MCP gateway) needs no sync of this process's trail; its events reach the sinks
    /// with their normal durability (handed to the OS at once, synced at the next run end,
    /// flush or shutdown), as those of any run still open do.
    #[cfg(all(feature = "mcp", feature = "http"))]
    pub(crate) async fn hand_over(&self) {
        self.leave_flushing(false).await;
    }

    async fn leave_flushing(&self, flush: bool) {
        let was_ended = {
            let _closing = self.shared.gate.write();
            self.shared.audit.ended.swap(true, Ordering::AcqRel)
        };
        if was_ended {
            return;
        }
        if let Some(store) = self.engine.shared.clone() {
            let now = self.engine.clock.now();
            self.settle_shared(&*store, Default::default(), now, "")
                .await;
        }
        super::observe::each(&self.engine.observers, |o| {
            o.on_run_end(&self.shared.facts.context, "open")
        });
        if self.engine.audit_enabled() {
            self.engine.await_background(&self.shared).await;
            self.engine.leave_chain(&self.shared, false).await;
            if flush {
                self.engine.flush_run_audit(&self.shared).await;
            }
        }
    }
}
