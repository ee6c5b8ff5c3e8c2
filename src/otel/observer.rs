//! The engine observer that turns decisions into spans and metrics.

use std::time::{Duration, SystemTime};

use dashmap::DashMap;
use opentelemetry::metrics::{Counter, Histogram, Meter};
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, Span};

use crate::engine::{Decision, DecisionObserver, RunContext, ToolCall, ToolOutcome};
use crate::policy::EffectType;

/// Histogram buckets of the decision duration, in seconds (1 µs to 1 s).
const DURATION_BUCKETS: [f64; 16] = [
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2,
    0.1, 1.0,
];

/// A run as the observer knows it: the parent of its tool spans.
struct RunEntry {
    /// The context tool spans are children of when the caller has none at call time.
    parent: Context,
    /// Whether `parent` holds the run's own span, started by toolgate (no caller context at
    /// run start).
    own: bool,
}

/// Turns engine events into OpenTelemetry spans and metrics.
pub(crate) struct OtelObserver {
    tracer: SdkTracer,
    decisions: Counter<u64>,
    duration: Histogram<f64>,
    runs: DashMap<String, RunEntry>,
    /// Spans of allowed calls waiting for their result, by (run id, call id).
    open: DashMap<(String, String), Span>,
}

impl OtelObserver {
    pub(crate) fn new(tracer: SdkTracer, meter: &Meter) -> OtelObserver {
        OtelObserver {
            tracer,
            decisions: meter
                .u64_counter("toolgate.decisions")
                .with_description("Decisions toolgate made about tool calls")
                .build(),
            duration: meter
                .f64_histogram("toolgate.decision.duration")
                .with_unit("s")
                .with_description("How long toolgate took to decide")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
            runs: DashMap::new(),
            open: DashMap::new(),
        }
    }

    /// Ends every span still open (on shutdown).
    pub(crate) fn end_all(&self) {
        let keys: Vec<(String, String)> = self.open.iter().map(|e| e.key().clone()).collect();
        for k in keys {
            if let Some((_, mut span)) = self.open.remove(&k) {
                span.end();
            }
        }
        let runs: Vec<String> = self.runs.iter().map(|e| e.key().clone()).collect();
        for r in runs {
            if let Some((_, entry)) = self.runs.remove(&r)
                && entry.own
            {
                entry.parent.span().end();
            }
        }
    }

    fn record(&self, d: &Decision) {
        let mut attrs = Vec::with_capacity(4);
        attrs.push(KeyValue::new("toolgate.phase", d.phase.as_str()));
        attrs.push(KeyValue::new("toolgate.effect", d.effect.as_str()));
        attrs.push(KeyValue::new("toolgate.code", d.code.as_str()));
        if let Some(rule) = &d.rule_id {
            attrs.push(KeyValue::new("toolgate.rule_id", rule.to_string()));
        }
        self.decisions.add(1, &attrs);
        self.duration
            .record(Duration::from_nanos(d.latency_ns).as_secs_f64(), &attrs);
    }
}

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

fn decision_attrs(d: &Decision, prefix: &str, out: &mut Vec<KeyValue>) {
    out.push(KeyValue::new(format!("{prefix}effect"), d.effect.as_str()));
    out.push(KeyValue::new(format!("{prefix}code"), d.code.as_str()));
    if let Some(rule) = &d.rule_id {
        out.push(KeyValue::new(format!("{prefix}rule_id"), rule.to_string()));
    }
    if let Some(reason) = &d.reason {
        out.push(KeyValue::new(format!("{prefix}reason"), reason.to_string()));
    }
    if let Some(shadow) = d.shadow_effect {
        out.push(KeyValue::new(
            format!("{prefix}shadow_effect"),
            shadow.as_str(),
        ));
    }
}

fn refusal(d: &Decision) -> Option<Status> {
    (d.effect != EffectType::Allow).then(|| {
        Status::error(match &d.reason {
            Some(r) => format!("{}: {r}", d.code.as_str()),
            None => d.code.as_str().to_string(),
        })
    })
}

impl DecisionObserver for OtelObserver {
    fn on_run_start(&self, run: &RunContext) {
        let entry = match ambient() {
            Some(parent) => RunEntry { parent, own: false },
            None => {
                let mut attrs = vec![
                    KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                    KeyValue::new("gen_ai.agent.name", run.agent_id.clone()),
                    KeyValue::new("toolgate.run_id", run.run_id.clone()),
                    KeyValue::new("toolgate.agent_id", run.agent_id.clone()),
                ];
                if let Some(s) = &run.session_id {
                    attrs.push(KeyValue::new("gen_ai.conversation.id", s.clone()));
                }
                let span = self
                    .tracer
                    .span_builder(format!("invoke_agent {}", run.agent_id))
                    .with_kind(SpanKind::Internal)
                    .with_attributes(attrs)
                    .start_with_context(&self.tracer, &Context::new());
                RunEntry {
                    parent: Context::new().with_span(span),
                    own: true,
                }
            }
        };
        self.runs.insert(run.run_id.clone(), entry);
    }

    fn on_decision(&self, run: &RunContext, call: &ToolCall, decision: &Decision) {
        self.record(decision);
        let end = SystemTime::now();
        let start = end
            .checked_sub(Duration::from_nanos(decision.latency_ns))
            .unwrap_or(end);
        let parent = ambient()
            .or_else(|| self.runs.get(&run.run_id).map(|r| r.parent.clone()))
            .unwrap_or_default();
        let mut attrs = Vec::with_capacity(10);
        attrs.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
        attrs.push(KeyValue::new("gen_ai.tool.name", call.name.clone()));
        attrs.push(KeyValue::new("gen_ai.tool.call.id", call.id.clone()));
        attrs.push(KeyValue::new("toolgate.run_id", run.run_id.clone()));
        attrs.push(KeyValue::new("toolgate.agent_id", run.agent_id.clone()));
        decision_attrs(decision, "toolgate.", &mut attrs);
        let mut span = self
            .tracer
            .span_builder(format!("execute_tool {}", call.name))
            .with_kind(SpanKind::Internal)
            .with_start_time(start)
            .with_attributes(attrs)
            .start_with_context(&self.tracer, &parent);
        match refusal(decision) {
            Some(status) => {
                span.set_status(status);
                span.end_with_timestamp(end);
            }
            None => {
                // The span stays open until the call's result is recorded.
                if let Some(mut old) = self
                    .open
                    .insert((run.run_id.clone(), call.id.clone()), span)
                {
                    old.end();
                }
            }
        }
    }

    fn on_result(
        &self,
        run: &RunContext,
        call_id: &str,
        outcome: &ToolOutcome,
        decision: Option<&Decision>,
    ) {
        if let Some(d) = decision {
            self.record(d);
        }
        let Some((_, mut span)) = self.open.remove(&(run.run_id.clone(), call_id.to_string()))
        else {
            return;
        };
        span.set_attribute(KeyValue::new(
            "toolgate.tool.duration_ms",
            outcome.duration.as_secs_f64() * 1000.0,
        ));
        if let Some(d) = decision {
            let mut attrs = Vec::new();
            decision_attrs(d, "toolgate.after.", &mut attrs);
            span.set_attributes(attrs);
        }
        if let Some(status) = decision.and_then(refusal) {
            span.set_status(status);
        } else if let Some(e) = &outcome.error {
            span.set_attribute(KeyValue::new("error.type", "tool_error"));
            span.set_status(Status::error(e.clone()));
        }
        span.end();
    }

    fn on_run_end(&self, run: &RunContext, status: &str) {
        let keys: Vec<(String, String)> = self
            .open
            .iter()
            .filter(|e| e.key().0 == run.run_id)
            .map(|e| e.key().clone())
            .collect();
        for k in keys {
            if let Some((_, mut span)) = self.open.remove(&k) {
                span.end();
            }
        }
        if let Some((_, entry)) = self.runs.remove(&run.run_id)
            && entry.own
        {
            let span = entry.parent.span();
            span.set_attribute(KeyValue::new("toolgate.run.status", status.to_string()));
            span.end();
        }
    }
}
