//! Audit event bodies as the caller's thread captures them (typed: the call, decision and
//! outcome moved or shared, not turned into JSON), and how the sealer writes each one.
//!
//! A typed body is written straight to canonical text, unless a redaction rule may apply to
//! its kind: then it is turned into a JSON map, redacted, and written. Both give the same
//! bytes (`sealer_tests.rs` holds them equal).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};
use smallvec::SmallVec;
use uuid::Uuid;

use crate::audit::event::canonical::{
    Keys, write_canonical, write_int, write_members, write_sorted_members, write_string,
    write_value,
};
use crate::audit::event::ser::{CanonError, to_canonical};
use crate::audit::event::{EnvelopeRef, Member, Members};
use crate::audit::{AuditEvent, EventKind, Redactor, RunChain};
use crate::engine::decide::call::RunContext;
use crate::engine::decide::call::SubjectRef;
use crate::engine::decide::decision::Decision;
use crate::policy::{InbuiltMetric, json_number as num};

/// A tool call as the run keeps it: what its result and its audit events need.
#[derive(Debug)]
pub(crate) struct CallRecord {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) tags: Vec<String>,
    pub(crate) args: Value,
    /// The arguments as the audit trail writes them, when `sensitiveData` detected something.
    pub(crate) redaction: Option<Box<crate::engine::decide::conditions::Redaction>>,
}

impl CallRecord {
    /// The arguments as audit events carry them (detected strings redacted).
    pub(crate) fn audit_args(&self) -> &Value {
        self.redaction.as_ref().map_or(&self.args, |r| &r.args)
    }
}

/// `v`'s members when it is an object, none otherwise: an event body from `json!({..})`.
pub(crate) fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// The inbuilt metrics of a call's result, in the order they are recorded.
pub(crate) type CallMetrics = SmallVec<[(InbuiltMetric, f64); 5]>;

/// An event body as captured on the caller's thread.
// Not boxed: the queue holds bodies by value, and a box would cost the caller an allocation.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Body {
    /// Built as JSON already (rare events: errors, after-phase decisions, LLM results,
    /// checkpoints, late evaluations, changed tools).
    Json(Map<String, Value>),
    /// Nothing: what a body leaves behind once sealed (the sealer drops each body in place,
    /// and this is cheaper to drop than an empty map).
    Taken,
    /// `run.started`: the run's context.
    RunStarted(Arc<RunContext>),
    /// A `tool.before` decision.
    BeforeDecision {
        call: Arc<CallRecord>,
        subjects: Vec<SubjectRef>,
        decision: Decision,
    },
    /// `run.ended`.
    RunEnded(RunEndedBody),
    /// A `tool.result`.
    ToolResult {
        call: Arc<CallRecord>,
        duration_ms: f64,
        metrics: CallMetrics,
        /// The output, or the error the tool reported.
        outcome: Result<Value, String>,
        /// The fast evaluators' result.
        evaluation: Option<Value>,
    },
}

impl Body {
    /// The body as a JSON map (the path redaction works on).
    pub(crate) fn into_map(self) -> Map<String, Value> {
        match self {
            Body::Json(m) => m,
            Body::Taken => Map::new(),
            Body::RunStarted(ctx) => {
                let ctx = serde_json::to_value(&*ctx).unwrap_or(Value::Null);
                obj(json!({ "runContext": ctx }))
            }
            Body::BeforeDecision {
                call,
                subjects,
                decision,
            } => obj(json!({
                "phase": "tool.before",
                "callId": call.id,
                "tool": {"name": call.name, "tags": call.tags},
                "args": call.audit_args(),
                "subjects": subjects,
                "decision": decision,
            })),
            Body::RunEnded(b) => {
                let mut body = obj(json!({
                    "status": b.status,
                    "totals": b.totals(),
                    "aborted": b.aborted,
                }));
                if let Some(r) = b.final_response {
                    body.insert("finalResponse".into(), Value::String(r));
                }
                if let Some(e) = b.evaluation {
                    body.insert("evaluation".into(), e);
                }
                body
            }
            Body::ToolResult {
                call,
                duration_ms,
                metrics,
                outcome,
                evaluation,
            } => {
                let metrics_json: Map<String, Value> = metrics
                    .iter()
                    .map(|(m, v)| (m.key().to_string(), num(*v)))
                    .collect();
                let mut body = obj(json!({
                    "callId": call.id,
                    "tool": {"name": call.name, "tags": call.tags},
                    "durationMs": num(duration_ms),
                    "metrics": metrics_json,
                }));
                match outcome {
                    Err(e) => body.insert("error".into(), Value::String(e)),
                    Ok(v) => body.insert("output".into(), v),
                };
                if let Some(e) = evaluation {
                    body.insert("evaluation".into(), e);
                }
                body
            }
        }
    }
}

/// The body of `run.ended`: the run's status and totals.
pub(crate) struct RunEndedBody {
    pub(crate) status: String,
    pub(crate) calls: u64,
    pub(crate) allowed: u64,
    pub(crate) blocked: u64,
    pub(crate) hitl: u64,
    pub(crate) tokens_in: u64,
    pub(crate) tokens_out: u64,
    pub(crate) cost_usd: f64,
    pub(crate) duration_ms: i64,
    pub(crate) aborted: bool,
    pub(crate) final_response: Option<String>,
    /// The run evaluators' result.
    pub(crate) evaluation: Option<Value>,
}

impl RunEndedBody {
    fn totals(&self) -> Value {
        json!({
            "calls": self.calls,
            "allowed": self.allowed,
            "blocked": self.blocked,
            "hitl": self.hitl,
            "llmTokensIn": self.tokens_in,
            "llmTokensOut": self.tokens_out,
            "llmCostUsd": num(self.cost_usd),
            "durationMs": self.duration_ms,
        })
    }
}

/// Writes `{"name":…,"tags":[…]}` into `out`.
fn write_tool(name: &str, tags: &[String], out: &mut String) {
    out.push_str("{\"name\":");
    write_string(name, out);
    out.push_str(",\"tags\":[");
    for (i, t) in tags.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(t, out);
    }
    out.push_str("]}");
}

/// A `tool.decision` body's parts, its nested values already in canonical text.
struct BeforeParts<'a> {
    args: &'a Value,
    call_id: &'a str,
    decision: &'a str,
    subjects: &'a str,
    tool: &'a str,
}

/// A whole `tool.decision` event (envelope and body, without `hash`) in canonical form: its
/// keys come in this fixed byte order, so the text between values is written in constant
/// pieces (`sealer_tests.rs` holds it equal to the JSON path's bytes). Returns where `hash`
/// goes: before `id`.
fn write_before(env: &EnvelopeRef<'_>, p: &BeforeParts<'_>, out: &mut String) -> Option<usize> {
    out.push_str("{\"agentId\":");
    write_value(env.agent_id, out);
    out.push_str(",\"args\":");
    write_canonical(p.args, out);
    out.push_str(",\"callId\":");
    write_string(p.call_id, out);
    out.push_str(",\"decision\":");
    out.push_str(p.decision);
    let at = write_envelope_middle(env, out, |_| {});
    out.push_str("\",\"phase\":\"tool.before\",\"prevHash\":");
    write_envelope_tail(env, out);
    out.push_str(",\"subjects\":");
    out.push_str(p.subjects);
    out.push_str(",\"tool\":");
    out.push_str(p.tool);
    write_ts(env, out);
    Some(at)
}

/// A `tool.result` body's parts.
struct ResultParts<'a> {
    call_id: &'a str,
    duration: &'a Value,
    error: Option<&'a str>,
    evaluation: Option<&'a Value>,
    metrics: &'a str,
    output: Option<&'a Value>,
    tool: &'a str,
}

/// A whole `tool.result` event, as [`write_before`] writes a `tool.decision`.
fn write_result(env: &EnvelopeRef<'_>, p: &ResultParts<'_>, out: &mut String) -> Option<usize> {
    out.push_str("{\"agentId\":");
    write_value(env.agent_id, out);
    out.push_str(",\"callId\":");
    write_string(p.call_id, out);
    out.push_str(",\"durationMs\":");
    write_canonical(p.duration, out);
    // `enduserId` < `error` < `evaluation` < `hash`.
    let at = write_envelope_middle(env, out, |out| {
        if let Some(e) = p.error {
            out.push_str(",\"error\":");
            write_string(e, out);
        }
        if let Some(e) = p.evaluation {
            out.push_str(",\"evaluation\":");
            write_canonical(e, out);
        }
    });
    out.push_str("\",\"metrics\":");
    out.push_str(p.metrics);
    if let Some(o) = p.output {
        out.push_str(",\"output\":");
        write_canonical(o, out);
    }
    out.push_str(",\"prevHash\":");
    write_envelope_tail(env, out);
    out.push_str(",\"tool\":");
    out.push_str(p.tool);
    write_ts(env, out);
    Some(at)
}

/// `enduserId` (if any), the body's members that sort between it and `hash`
/// (`before_hash`), then `id` and `kind` up to the closing quote of the kind; returns where
/// `hash` goes (just before `id`).
fn write_envelope_middle(
    env: &EnvelopeRef<'_>,
    out: &mut String,
    before_hash: impl FnOnce(&mut String),
) -> usize {
    if let Some(u) = env.enduser_id {
        out.push_str(",\"enduserId\":");
        write_value(u, out);
    }
    before_hash(out);
    out.push(',');
    let at = out.len();
    out.push_str("\"id\":\"");
    out.push_str(env.id);
    out.push_str("\",\"kind\":\"");
    out.push_str(env.kind.as_str());
    at
}

/// The value of `prevHash`, then `runId`, `schema` and `seq`.
fn write_envelope_tail(env: &EnvelopeRef<'_>, out: &mut String) {
    write_value(env.prev_hash, out);
    out.push_str(",\"runId\":");
    write_value(env.run_id, out);
    out.push_str(SCHEMA_MEMBER);
    write_int(env.seq, out);
}

/// `ts` and the closing brace.
fn write_ts(env: &EnvelopeRef<'_>, out: &mut String) {
    out.push_str(",\"ts\":\"");
    out.push_str(env.ts_text);
    out.push_str("\"}");
}

/// `schema`'s member, and the key of `seq` that follows it.
pub(crate) const SCHEMA_MEMBER: &str = ",\"schema\":\"toolgate.audit.v1\",\"seq\":";

/// A run's context in canonical form, as `to_canonical` writes it (without serde's detour
/// through sorted maps): keys in byte order, `agentId`, `enduser` {`id`, `tags`}, `runId`,
/// `sessionId`; the absent optional ones left out.
pub(crate) fn write_run_context(ctx: &RunContext, out: &mut String) {
    out.push_str("{\"agentId\":");
    write_string(&ctx.agent_id, out);
    if !ctx.agent_tags.is_empty() {
        out.push_str(",\"agentTags\":[");
        for (i, t) in ctx.agent_tags.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_string(t, out);
        }
        out.push(']');
    }
    if let Some(u) = &ctx.enduser {
        out.push_str(",\"enduser\":{\"id\":");
        write_string(&u.id, out);
        out.push_str(",\"tags\":");
        // A BTreeMap of strings iterates in byte order of its keys: canonical order.
        let tags = u.tags.iter().map(|(k, v)| (k.as_str(), Member::Str(v)));
        write_sorted_members(tags, "", Keys::Escape, out);
        out.push('}');
    }
    out.push_str(",\"runId\":");
    write_string(&ctx.run_id, out);
    if let Some(s) = &ctx.session_id {
        out.push_str(",\"sessionId\":");
        write_string(s, out);
    }
    out.push('}');
}

/// Seals `body` on `chain`: a typed body straight to canonical text when no redaction rule
/// may apply to `kind` (and the writer takes it); otherwise through a JSON map, redacted (the
/// body is then taken, leaving [`Body::Taken`]). It is read where it lies in the sealer's
/// batch, not moved out first. `scratch` is reused between events.
pub(crate) fn seal_body(
    chain: &mut RunChain,
    redactor: &Redactor,
    kind: EventKind,
    at: DateTime<Utc>,
    id: Uuid,
    body: &mut Body,
    scratch: &mut String,
) -> AuditEvent {
    if !redactor.applies_to(kind) {
        scratch.clear();
        match seal_typed(chain, kind, at, id, body, scratch) {
            Ok(Some(event)) => return event,
            Ok(None) => {}
            Err(e) => tracing::debug!("audit: typed body not written directly ({e}); through JSON"),
        }
    }
    let mut map = std::mem::replace(body, Body::Taken).into_map();
    redactor.redact(kind, &mut map);
    chain.seal_with_id(kind, at, id, map)
}

/// Seals a typed body, its parts written into `scratch` first; `None` for a JSON body.
fn seal_typed(
    chain: &mut RunChain,
    kind: EventKind,
    at: DateTime<Utc>,
    id: Uuid,
    body: &Body,
    scratch: &mut String,
) -> Result<Option<AuditEvent>, CanonError> {
    match body {
        Body::Json(_) | Body::Taken => Ok(None),
        Body::RunStarted(ctx) => {
            write_run_context(ctx, scratch);
            let members = [("runContext", Member::Raw(scratch))];
            Ok(Some(chain.seal_typed(kind, at, id, &members)))
        }
        Body::BeforeDecision {
            call,
            subjects,
            decision,
        } => {
            write_tool(&call.name, &call.tags, scratch);
            let tool = 0..scratch.len();
            let subjects_at = scratch.len();
            to_canonical(subjects, scratch)?;
            let subjects = subjects_at..scratch.len();
            let decision_at = scratch.len();
            decision.write_canonical(scratch);
            let decision = decision_at..scratch.len();
            let parts = BeforeParts {
                args: call.audit_args(),
                call_id: &call.id,
                decision: &scratch[decision],
                subjects: &scratch[subjects],
                tool: &scratch[tool],
            };
            let write = |env: &EnvelopeRef<'_>, out: &mut String| write_before(env, &parts, out);
            Ok(Some(chain.seal_whole(kind, at, id, &write)))
        }
        Body::RunEnded(b) => {
            let cost = num(b.cost_usd);
            let duration = Value::from(b.duration_ms);
            let mut totals: Members<'_> = Members::new();
            totals.extend([
                ("allowed", Member::U64(b.allowed)),
                ("blocked", Member::U64(b.blocked)),
                ("calls", Member::U64(b.calls)),
                ("durationMs", Member::Json(&duration)),
                ("hitl", Member::U64(b.hitl)),
                ("llmCostUsd", Member::Json(&cost)),
                ("llmTokensIn", Member::U64(b.tokens_in)),
                ("llmTokensOut", Member::U64(b.tokens_out)),
            ]);
            write_members(&mut totals, "", scratch);
            let mut members: SmallVec<[(&str, Member<'_>); 5]> = SmallVec::new();
            // In key order (then merged with the envelope's without sorting).
            let aborted = if b.aborted { "true" } else { "false" };
            members.push(("aborted", Member::Raw(aborted)));
            if let Some(e) = &b.evaluation {
                members.push(("evaluation", Member::Json(e)));
            }
            if let Some(r) = &b.final_response {
                members.push(("finalResponse", Member::Str(r)));
            }
            members.push(("status", Member::Str(&b.status)));
            members.push(("totals", Member::Raw(scratch)));
            Ok(Some(chain.seal_typed(kind, at, id, &members)))
        }
        Body::ToolResult {
            call,
            duration_ms,
            metrics,
            outcome,
            evaluation,
        } => {
            write_tool(&call.name, &call.tags, scratch);
            let tool = 0..scratch.len();
            let values: SmallVec<[Value; 5]> = metrics.iter().map(|(_, v)| num(*v)).collect();
            let mut metric_members: Members<'_> = metrics
                .iter()
                .zip(&values)
                .map(|((m, _), v)| (m.key(), Member::Json(v)))
                .collect();
            let metrics_at = scratch.len();
            write_members(&mut metric_members, "", scratch);
            let metrics_text = metrics_at..scratch.len();
            let duration = num(*duration_ms);
            let parts = ResultParts {
                call_id: &call.id,
                duration: &duration,
                error: outcome.as_ref().err().map(String::as_str),
                evaluation: evaluation.as_ref(),
                metrics: &scratch[metrics_text],
                output: outcome.as_ref().ok(),
                tool: &scratch[tool],
            };
            let write = |env: &EnvelopeRef<'_>, out: &mut String| write_result(env, &parts, out);
            Ok(Some(chain.seal_whole(kind, at, id, &write)))
        }
    }
}
