//! Spans and metrics of decisions, from whichever source (the engine or audit events), with
//! explicit times.

use std::time::{Duration, SystemTime};

use dashmap::DashMap;
use opentelemetry::metrics::{Counter, Histogram, Meter};
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, Span};

/// Histogram buckets of the decision duration, in seconds (1 µs to 1 s).
const DURATION_BUCKETS: [f64; 16] = [
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2,
    0.1, 1.0,
];

/// Phases, effects and codes: attribute values that need no allocation.
const KNOWN: [&str; 13] = [
    "tool.before",
    "tool.after",
    "allow",
    "block",
    "hitl",
    "ALLOWED",
    "ALLOWED_HITL_APPROVED",
    "BLOCKED_RULE",
    "BLOCKED_HITL_REQUESTED",
    "BLOCKED_HITL_PENDING",
    "BLOCKED_HITL_DENIED",
    "BLOCKED_RUN_ABORTED",
    "BLOCKED_FAILURE",
];

/// `s` as an attribute value, borrowed from [`KNOWN`] when it is one of those.
fn known(s: &str) -> opentelemetry::Value {
    match KNOWN.iter().find(|k| **k == s) {
        Some(k) => opentelemetry::Value::from(*k),
        None => opentelemetry::Value::from(s.to_string()),
    }
}

/// A decision as the telemetry needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DecisionView<'a> {
    pub(crate) phase: &'a str,
    pub(crate) effect: &'a str,
    pub(crate) code: &'a str,
    pub(crate) rule_id: Option<&'a str>,
    pub(crate) reason: Option<&'a str>,
    pub(crate) shadow_effect: Option<&'a str>,
    pub(crate) latency: Duration,
}

impl DecisionView<'_> {
    fn refused(&self) -> bool {
        self.effect != "allow"
    }

    fn status(&self) -> Status {
        Status::error(match self.reason {
            Some(r) => format!("{}: {r}", self.code),
            None => self.code.to_string(),
        })
    }

    /// The span attributes of the decision: `toolgate.*`, or `toolgate.after.*` for the
    /// after phase's decision on the same span.
    fn attributes(&self, after: bool, out: &mut Vec<KeyValue>) {
        let keys: [&'static str; 5] = if after {
            [
                "toolgate.after.effect",
                "toolgate.after.code",
                "toolgate.after.rule_id",
                "toolgate.after.reason",
                "toolgate.after.shadow_effect",
            ]
        } else {
            [
                "toolgate.effect",
                "toolgate.code",
                "toolgate.rule_id",
                "toolgate.reason",
                "toolgate.shadow_effect",
            ]
        };
        out.push(KeyValue::new(keys[0], known(self.effect)));
        out.push(KeyValue::new(keys[1], known(self.code)));
        if let Some(rule) = self.rule_id {
            out.push(KeyValue::new(keys[2], rule.to_string()));
        }
        if let Some(reason) = self.reason {
            out.push(KeyValue::new(keys[3], reason.to_string()));
        }
        if let Some(shadow) = self.shadow_effect {
            out.push(KeyValue::new(keys[4], known(shadow)));
        }
    }
}

/// Who runs: the attributes every span of a run carries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunView<'a> {
    pub(crate) run_id: &'a str,
    pub(crate) agent_id: &'a str,
    pub(crate) session_id: Option<&'a str>,
}

/// A tool call as the telemetry needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallView<'a> {
    pub(crate) id: &'a str,
    pub(crate) tool: &'a str,
}

/// A tool's result as the telemetry needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ResultView<'a> {
    pub(crate) duration_ms: Option<f64>,
    pub(crate) error: Option<&'a str>,
}

/// A run: the parent of its tool spans.
struct RunEntry {
    /// The context tool spans are children of when the caller has none at call time.
    parent: Context,
    /// Whether `parent` holds the run's own span, started here.
    own: bool,
}

/// Open spans and the instruments.
pub(crate) struct Telemetry {
    tracer: SdkTracer,
    decisions: Counter<u64>,
    duration: Histogram<f64>,
    runs: DashMap<String, RunEntry>,
    /// Spans of allowed calls waiting for their result, by (run id, call id).
    open: DashMap<(String, String), Span>,
}

impl Telemetry {
    pub(crate) fn new(tracer: SdkTracer, meter: &Meter) -> Telemetry {
        Telemetry {
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

    /// Counts a decision in the metrics.
    pub(crate) fn record(&self, d: &DecisionView<'_>) {
        let phase = KeyValue::new("toolgate.phase", known(d.phase));
        let effect = KeyValue::new("toolgate.effect", known(d.effect));
        let code = KeyValue::new("toolgate.code", known(d.code));
        match d.rule_id {
            Some(rule) => {
                let rule = KeyValue::new("toolgate.rule_id", rule.to_string());
                self.decisions
                    .add(1, &[phase.clone(), effect.clone(), code, rule]);
            }
            None => self
                .decisions
                .add(1, &[phase.clone(), effect.clone(), code]),
        }
        self.duration
            .record(d.latency.as_secs_f64(), &[phase, effect]);
    }

    /// A run started: its tool spans get `parent` when given, else a run span opened now.
    pub(crate) fn start_run(&self, run: RunView<'_>, parent: Option<Context>, at: SystemTime) {
        let entry = match parent {
            Some(parent) => RunEntry { parent, own: false },
            None => {
                let mut attrs = vec![
                    KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                    KeyValue::new("gen_ai.agent.name", run.agent_id.to_string()),
                    KeyValue::new("toolgate.run_id", run.run_id.to_string()),
                    KeyValue::new("toolgate.agent_id", run.agent_id.to_string()),
                ];
                if let Some(s) = run.session_id {
                    attrs.push(KeyValue::new("gen_ai.conversation.id", s.to_string()));
                }
                let span = self
                    .tracer
                    .span_builder(format!("invoke_agent {}", run.agent_id))
                    .with_kind(SpanKind::Internal)
                    .with_start_time(at)
                    .with_attributes(attrs)
                    .start_with_context(&self.tracer, &Context::new());
                RunEntry {
                    parent: Context::new().with_span(span),
                    own: true,
                }
            }
        };
        if let Some(old) = self.runs.insert(run.run_id.to_string(), entry)
            && old.own
        {
            old.parent.span().end_with_timestamp(at);
        }
    }

    /// A `tool.before` decision made between `start` and `end`. The span of an allowed call
    /// stays open until [`result`](Self::result) or the end of the run.
    pub(crate) fn decision(
        &self,
        run: RunView<'_>,
        call: CallView<'_>,
        d: &DecisionView<'_>,
        parent: Option<Context>,
        start: SystemTime,
        end: SystemTime,
    ) {
        self.record(d);
        let parent = parent
            .or_else(|| self.runs.get(run.run_id).map(|r| r.parent.clone()))
            .unwrap_or_default();
        let mut attrs = Vec::with_capacity(10);
        attrs.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
        attrs.push(KeyValue::new("gen_ai.tool.name", call.tool.to_string()));
        attrs.push(KeyValue::new("gen_ai.tool.call.id", call.id.to_string()));
        attrs.push(KeyValue::new("toolgate.run_id", run.run_id.to_string()));
        attrs.push(KeyValue::new("toolgate.agent_id", run.agent_id.to_string()));
        d.attributes(false, &mut attrs);
        let mut span = self
            .tracer
            .span_builder(format!("execute_tool {}", call.tool))
            .with_kind(SpanKind::Internal)
            .with_start_time(start)
            .with_attributes(attrs)
            .start_with_context(&self.tracer, &parent);
        if d.refused() {
            span.set_status(d.status());
            span.end_with_timestamp(end);
        } else if let Some(mut old) = self
            .open
            .insert((run.run_id.to_string(), call.id.to_string()), span)
        {
            old.end_with_timestamp(end);
        }
    }

    /// The result of an allowed call (and the `tool.after` decision, if any) at `at`.
    pub(crate) fn result(
        &self,
        run_id: &str,
        call_id: &str,
        result: ResultView<'_>,
        after: Option<&DecisionView<'_>>,
        at: SystemTime,
    ) {
        if let Some(d) = after {
            self.record(d);
        }
        let Some((_, mut span)) = self.open.remove(&(run_id.to_string(), call_id.to_string()))
        else {
            return;
        };
        if let Some(ms) = result.duration_ms {
            span.set_attribute(KeyValue::new("toolgate.tool.duration_ms", ms));
        }
        if let Some(d) = after {
            let mut attrs = Vec::new();
            d.attributes(true, &mut attrs);
            span.set_attributes(attrs);
        }
        match (after.filter(|d| d.refused()), result.error) {
            (Some(d), _) => span.set_status(d.status()),
            (None, Some(e)) => {
                span.set_attribute(KeyValue::new("error.type", "tool_error"));
                span.set_status(Status::error(e.to_string()));
            }
            (None, None) => {}
        }
        span.end_with_timestamp(at);
    }

    /// The run ended: its open spans end now.
    pub(crate) fn end_run(&self, run_id: &str, status: Option<&str>, at: SystemTime) {
        let keys: Vec<(String, String)> = self
            .open
            .iter()
            .filter(|e| e.key().0 == run_id)
            .map(|e| e.key().clone())
            .collect();
        for k in keys {
            if let Some((_, mut span)) = self.open.remove(&k) {
                span.end_with_timestamp(at);
            }
        }
        if let Some((_, entry)) = self.runs.remove(run_id)
            && entry.own
        {
            let span = entry.parent.span();
            if let Some(status) = status {
                span.set_attribute(KeyValue::new("toolgate.run.status", status.to_string()));
            }
            span.end_with_timestamp(at);
        }
    }

    /// Ends every span still open (on shutdown).
    pub(crate) fn end_all(&self) {
        let now = SystemTime::now();
        let runs: Vec<String> = self.runs.iter().map(|e| e.key().clone()).collect();
        for r in runs {
            self.end_run(&r, None, now);
        }
        let keys: Vec<(String, String)> = self.open.iter().map(|e| e.key().clone()).collect();
        for k in keys {
            if let Some((_, mut span)) = self.open.remove(&k) {
                span.end_with_timestamp(now);
            }
        }
    }
}
