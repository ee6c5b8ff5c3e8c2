//! What a run asks of the audit trail: the engine's `AuditState` (audit/) with the run's
//! `RunAudit`; nothing when the engine keeps no audit trail. audit/ knows neither the engine
//! nor the run: these are the only places the two are tied to it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::handle::{RunShared, ToolOutcome};
use crate::audit::EventKind;
use crate::engine::audit::audit_hook::{ChainProblems, ChainStart};
use crate::engine::audit::evaluations::SlowEvaluation;
use crate::engine::audit::run_audit::RunAudit;
use crate::engine::audit::sealer::Body;
use crate::engine::decide::call::RunContext;
use crate::engine::run::inner::EngineInner;
use crate::state::LeaseHold;

impl EngineInner {
    #[inline]
    pub(crate) fn audit_enabled(&self) -> bool {
        self.audit.is_some()
    }

    /// The run's audit state (see `AuditState::audit_for_run`); without an audit trail, one
    /// with no chain.
    pub(crate) fn audit_for_run(
        &self,
        ctx: &Arc<RunContext>,
        run_key: &Arc<str>,
    ) -> (RunAudit, ChainProblems, ChainStart) {
        match &self.audit {
            Some(a) => a.audit_for_run(ctx, run_key),
            None => (
                RunAudit::off(ctx.clone(), run_key.clone()),
                ChainProblems::new(),
                ChainStart::Started,
            ),
        }
    }

    /// Queues an event of the run for sealing (see `AuditState::emit`).
    #[inline]
    pub(crate) fn emit(
        &self,
        run: &RunShared,
        kind: EventKind,
        body: Map<String, Value>,
        at: DateTime<Utc>,
    ) {
        if let Some(a) = &self.audit {
            a.emit(&run.audit, kind, body, at);
        }
    }

    /// [`emit`](Self::emit) with a typed body, turned into JSON by the sealer.
    #[inline]
    pub(crate) fn emit_body(
        &self,
        run: &RunShared,
        kind: EventKind,
        body: Body,
        at: DateTime<Utc>,
    ) {
        if let Some(a) = &self.audit {
            a.emit_body(&run.audit, kind, body, at);
        }
    }

    /// An event with its slow evaluations to follow (see `AuditState::emit_with_evaluation`).
    pub(crate) fn emit_with_evaluation(
        &self,
        run: &Arc<RunShared>,
        kind: EventKind,
        body: Body,
        at: DateTime<Utc>,
        slow: Option<SlowEvaluation>,
        call_id: Option<&str>,
    ) {
        if let Some(a) = &self.audit {
            a.emit_with_evaluation(&run.audit, run, kind, body, at, slow, call_id);
        }
    }

    /// See `AuditState::emit_closing_checkpoint`.
    pub(crate) fn emit_closing_checkpoint(&self, run: &RunShared) {
        if let Some(a) = &self.audit {
            a.emit_closing_checkpoint(&run.audit);
        }
    }

    /// Waits (bounded by the flush timeout) for the run's background evaluations.
    pub(crate) async fn await_background(&self, run: &RunShared) {
        if let Some(a) = &self.audit {
            a.await_background(&run.audit).await;
        }
    }

    /// Seals what the run queued and flushes the sinks (see `AuditState::flush_run_audit`).
    pub(crate) async fn flush_run_audit(&self, run: &RunShared) {
        if let Some(a) = &self.audit {
            a.flush_run_audit(&run.audit).await;
        }
    }

    /// Runs the evaluators configured for this tool over its output.
    pub(crate) async fn evaluate_tool_output(
        &self,
        run: &RunShared,
        tool: &str,
        args: &Value,
        outcome: &ToolOutcome,
    ) -> (Option<Value>, Option<SlowEvaluation>) {
        self.evals
            .evaluate_tool_output(&*self.clock, &run.audit, tool, args, outcome)
            .await
    }

    /// Runs the run-level evaluators over the final response.
    pub(crate) async fn evaluate_run(
        &self,
        run: &RunShared,
        final_response: Option<&str>,
        status: &str,
    ) -> (Option<Value>, Option<SlowEvaluation>) {
        self.evals
            .evaluate_run(&*self.clock, &run.audit, final_response, status)
            .await
    }

    /// Leaves the run's chain (see `AuditState::leave_chain`).
    pub(crate) async fn leave_chain(&self, run: &RunShared, ended: bool) {
        if let Some(a) = &self.audit {
            a.leave_chain(&run.audit, ended).await;
        }
    }

    /// Leaves the chain of a dropped run (see `AuditState::leave_chain_on_drop`).
    pub(crate) fn leave_chain_on_drop(&self, run: &RunShared) {
        if let Some(a) = &self.audit {
            a.leave_chain_on_drop(&run.audit);
        }
    }

    /// The lease to renew with a reservation of `run` (`None`: the run is not held under one).
    pub(crate) fn lease_hold(&self, run: &RunShared) -> Option<LeaseHold> {
        self.audit.as_ref()?.lease_hold(&run.audit)
    }

    /// The run's lease was taken over (see `AuditState::lose_lease`). Without an audit trail
    /// the handle only marks it lost.
    pub(crate) fn lose_lease(&self, run: &RunShared, holder: Option<&str>) {
        match &self.audit {
            Some(a) => a.lose_lease(&run.audit, holder),
            None => {
                run.audit.lost.swap(true, Ordering::AcqRel);
            }
        }
    }
}
