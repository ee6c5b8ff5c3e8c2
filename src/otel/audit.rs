//! Spans and metrics from audit events, for a collector that receives the events of remote
//! engines (`toolgate collect --otel`). Times come from the events.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use serde_json::Value;

use super::Otel;
use super::spans::{CallView, DecisionView, ResultView, RunView, Telemetry};

/// How many event ids are remembered to skip events received twice.
const REMEMBERED_IDS: usize = 100_000;

/// Turns audit events (as JSON) into spans and metrics: `run.started` opens a run span,
/// `tool.decision` makes a tool span, `tool.result` ends it, `run.ended` ends the run's spans.
/// Events already seen (by `id`) are skipped.
pub struct AuditExport {
    telemetry: Arc<Telemetry>,
    seen: Mutex<(HashSet<String>, VecDeque<String>)>,
    /// `tool.after` decisions waiting for their `tool.result`, by (run id, call id).
    after: Mutex<HashMap<(String, String), Value>>,
}

impl std::fmt::Debug for AuditExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditExport").finish()
    }
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

fn decision_view(d: &Value) -> Option<DecisionView<'_>> {
    Some(DecisionView {
        phase: str_at(d, &["phase"]).unwrap_or("tool.before"),
        effect: str_at(d, &["effect"])?,
        code: str_at(d, &["code"])?,
        rule_id: str_at(d, &["ruleId"]),
        reason: str_at(d, &["reason"]),
        shadow_effect: str_at(d, &["shadowEffect"]),
        latency: Duration::from_nanos(d.get("latencyNs").and_then(Value::as_u64).unwrap_or(0)),
    })
}

impl AuditExport {
    /// Export through `otel`'s providers.
    pub fn new(otel: &Otel) -> AuditExport {
        AuditExport {
            telemetry: otel.telemetry.clone(),
            seen: Mutex::new((HashSet::new(), VecDeque::new())),
            after: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the event with this id is new (and remembers it).
    fn first_time(&self, id: &str) -> bool {
        let mut g = self.seen.lock();
        let (set, order) = &mut *g;
        if !set.insert(id.to_string()) {
            return false;
        }
        order.push_back(id.to_string());
        if order.len() > REMEMBERED_IDS
            && let Some(old) = order.pop_front()
        {
            set.remove(&old);
        }
        true
    }

    /// Takes the events of one batch, in order. Malformed events are skipped.
    pub fn events(&self, events: &[Value]) {
        for e in events {
            self.event(e);
        }
    }

    /// Takes one event. Events that are not objects with `id`, `kind`, `ts` and `runId` are
    /// skipped.
    pub fn event(&self, e: &Value) {
        let (Some(id), Some(kind), Some(ts), Some(run_id)) = (
            str_at(e, &["id"]),
            str_at(e, &["kind"]),
            str_at(e, &["ts"]),
            str_at(e, &["runId"]),
        ) else {
            return;
        };
        let Ok(at) = chrono::DateTime::parse_from_rfc3339(ts) else {
            return;
        };
        if !self.first_time(id) {
            return;
        }
        let at = SystemTime::from(at);
        let run = RunView {
            run_id,
            agent_id: str_at(e, &["agentId"]).unwrap_or(""),
            session_id: str_at(e, &["runContext", "sessionId"]),
        };
        let t = &self.telemetry;
        match kind {
            "run.started" => t.start_run(run, None, at),
            "run.ended" => t.end_run(run_id, str_at(e, &["status"]), at),
            "tool.decision" => {
                let (Some(call_id), Some(d)) = (str_at(e, &["callId"]), e.get("decision")) else {
                    return;
                };
                if str_at(e, &["phase"]) == Some("tool.after") {
                    self.after
                        .lock()
                        .insert((run_id.to_string(), call_id.to_string()), d.clone());
                    return;
                }
                let (Some(view), Some(tool)) = (decision_view(d), str_at(e, &["tool", "name"]))
                else {
                    return;
                };
                let start = at.checked_sub(view.latency).unwrap_or(at);
                let call = CallView { id: call_id, tool };
                t.decision(run, call, &view, None, start, at);
            }
            "tool.result" => {
                let Some(call_id) = str_at(e, &["callId"]) else {
                    return;
                };
                let after = self
                    .after
                    .lock()
                    .remove(&(run_id.to_string(), call_id.to_string()));
                let result = ResultView {
                    duration_ms: e.get("durationMs").and_then(Value::as_f64),
                    error: str_at(e, &["error"]),
                };
                let view = after.as_ref().and_then(decision_view);
                t.result(run_id, call_id, result, view.as_ref(), at);
            }
            _ => {}
        }
    }
}
