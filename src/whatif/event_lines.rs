//! One event of a run's audit trail as a replay trace line, with the decision that was
//! recorded for it and the signals that decision saw.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::Recorded;
use crate::audit::{AuditEvent, EventKind};
use crate::engine::{Enduser, RunContext, SubjectRef};
use crate::trace::{TraceLine, TraceTool};

/// An event's boxed stream.
pub(super) type Events = Box<dyn Iterator<Item = AuditEvent> + Send>;

/// A trace line at its time, with what goes with a rebuilt call.
pub(super) type RunLine = (DateTime<Utc>, TraceLine, Option<CallMeta>);

/// What goes with a rebuilt `tool.call` (or `llm.call`): the recorded decision and the
/// signals it saw.
pub(super) struct CallMeta {
    pub(super) recorded: Recorded,
    pub(super) signals: BTreeMap<String, (Option<Value>, Option<String>)>,
}

/// A JSON string field, owned.
pub(super) fn str_field(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::to_owned)
}

/// The trace line (with the recorded before-phase decision) of one of a run's events, if it
/// makes one.
pub(super) fn event_line(run_id: &str, e: &AuditEvent) -> Option<RunLine> {
    let run = Some(run_id.to_string());
    {
        let b = e.body();
        let at = e.ts();
        match e.kind() {
            EventKind::RunStarted => {
                let ctx: Option<RunContext> = b
                    .get("runContext")
                    .and_then(|c| serde_json::from_value(c.clone()).ok());
                let enduser: Option<Enduser> = ctx.as_ref().and_then(|c| c.enduser.clone());
                let enduser = enduser.or_else(|| {
                    e.enduser_id().map(|id| Enduser {
                        id: id.to_string(),
                        tags: BTreeMap::new(),
                    })
                });
                Some((
                    at,
                    TraceLine::RunStart {
                        run_id: run_id.to_string(),
                        agent_id: e.agent_id().to_string(),
                        agent_tags: ctx
                            .as_ref()
                            .map(|c| c.agent_tags.clone())
                            .unwrap_or_default(),
                        session_id: ctx.and_then(|c| c.session_id),
                        enduser,
                        at: Some(at),
                    },
                    None,
                ))
            }
            EventKind::ToolDecision
                if b.get("phase").and_then(Value::as_str) == Some("tool.before") =>
            {
                let call_id = str_field(b.get("callId"))?;
                let tool: TraceTool = match b.get("tool").map(|t| serde_json::from_value(t.clone()))
                {
                    Some(Ok(t)) => t,
                    _ => return None,
                };
                let decision = b.get("decision");
                let resolved = resolved_signals(decision);
                let subjects: Vec<SubjectRef> = b
                    .get("subjects")
                    .and_then(|s| serde_json::from_value(s.clone()).ok())
                    .unwrap_or_default();
                let recorded = recorded(e.agent_id(), &tool.name, at, decision);
                Some((
                    at,
                    TraceLine::ToolCall {
                        run_id: run.clone(),
                        id: call_id,
                        tool,
                        args: b.get("args").cloned().unwrap_or(Value::Null),
                        subjects,
                        at: Some(at),
                    },
                    Some(CallMeta {
                        recorded,
                        signals: resolved,
                    }),
                ))
            }
            EventKind::ToolResult => {
                let call_id = str_field(b.get("callId"))?;
                Some((
                    at,
                    TraceLine::ToolResult {
                        run_id: run.clone(),
                        id: call_id,
                        output: b.get("output").cloned(),
                        duration_ms: b.get("durationMs").and_then(Value::as_f64),
                        error: str_field(b.get("error")),
                        at: Some(at),
                    },
                    None,
                ))
            }
            EventKind::RunEnded => Some((
                at,
                TraceLine::RunEnd {
                    run_id: run.clone(),
                    status: str_field(b.get("status")),
                    final_response: str_field(b.get("finalResponse")),
                    at: Some(at),
                },
                None,
            )),
            _ => None,
        }
    }
}

/// The signal values a recorded decision saw.
pub(super) fn resolved_signals(
    decision: Option<&Value>,
) -> BTreeMap<String, (Option<Value>, Option<String>)> {
    let mut resolved = BTreeMap::new();
    for s in decision
        .and_then(|d| d.get("signals"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(key) = str_field(s.get("key")) else {
            continue;
        };
        let value = s.get("value").cloned();
        let error = match &value {
            Some(_) => None,
            None => {
                Some(str_field(s.get("error")).unwrap_or_else(|| "no value recorded".to_string()))
            }
        };
        resolved.insert(key, (value, error));
    }
    resolved
}

/// What was recorded for a call of `tool` (a tool, or a model) at `at`.
pub(super) fn recorded(
    agent_id: &str,
    tool: &str,
    at: DateTime<Utc>,
    decision: Option<&Value>,
) -> Recorded {
    Recorded {
        agent_id: agent_id.to_string(),
        tool: tool.to_string(),
        at,
        effect: decision
            .and_then(|d| str_field(d.get("effect")))
            .unwrap_or_default(),
        rule_id: decision.and_then(|d| str_field(d.get("ruleId"))),
        code: decision
            .and_then(|d| str_field(d.get("code")))
            .unwrap_or_default(),
        usage_only: false,
    }
}
