//! The engine observer that turns decisions into spans and metrics.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::Context;
use opentelemetry::trace::TraceContextExt;

use super::spans::{CallView, DecisionView, ResultView, RunView, Telemetry};
use crate::engine::{Decision, DecisionObserver, RunContext, ToolCall, ToolOutcome};

/// Feeds [`Telemetry`] from the engine's hooks, timed by the system clock.
pub(crate) struct OtelObserver(pub(crate) Arc<Telemetry>);

/// The caller's current context, when it has a span: an OpenTelemetry context attached to the
/// task, else the current `tracing` span (through `tracing-opentelemetry`).
fn ambient() -> Option<Context> {
    let cx = Context::current();
    if cx.has_active_span() {
        return Some(cx);
    }
    let cx = tracing_opentelemetry::OpenTelemetrySpanExt::context(&tracing::Span::current());
    cx.span().span_context().is_valid().then_some(cx)
}

fn view(d: &Decision) -> DecisionView<'_> {
    DecisionView {
        phase: d.phase.as_str(),
        effect: d.effect.as_str(),
        code: d.code.as_str(),
        rule_id: d.rule_id.as_deref(),
        reason: d.reason.as_deref(),
        shadow_effect: d.shadow_effect.map(|e| e.as_str()),
        latency: Duration::from_nanos(d.latency_ns),
    }
}

fn run_view(run: &RunContext) -> RunView<'_> {
    RunView {
        run_id: &run.run_id,
        agent_id: &run.agent_id,
        session_id: run.session_id.as_deref(),
    }
}

impl DecisionObserver for OtelObserver {
    fn on_run_start(&self, run: &RunContext) {
        self.0
            .start_run(run_view(run), ambient(), SystemTime::now());
    }

    fn on_decision(&self, run: &RunContext, call: &ToolCall, decision: &Decision) {
        let end = SystemTime::now();
        let start = end
            .checked_sub(Duration::from_nanos(decision.latency_ns))
            .unwrap_or(end);
        let call = CallView {
            id: &call.id,
            tool: &call.name,
        };
        self.0
            .decision(run_view(run), call, &view(decision), ambient(), start, end);
    }

    fn on_result(
        &self,
        run: &RunContext,
        call_id: &str,
        outcome: &ToolOutcome,
        decision: Option<&Decision>,
    ) {
        let result = ResultView {
            duration_ms: Some(outcome.duration.as_secs_f64() * 1000.0),
            error: outcome.error.as_deref(),
        };
        let after = decision.map(view);
        self.0.result(
            &run.run_id,
            call_id,
            result,
            after.as_ref(),
            SystemTime::now(),
        );
    }

    fn on_run_end(&self, run: &RunContext, status: &str) {
        self.0.end_run(&run.run_id, Some(status), SystemTime::now());
    }
}
