//! Replay of JSON Lines traces of agent activity (design §5), used by `toolgate replay` and
//! `toolgate test`.
//!
//! Each line is an object with `type`; its `at` (RFC 3339) sets the engine's clock for that
//! step. `signal` lines make a provider return a value (or fail, or be slow) from then on;
//! `review` lines approve or deny the review raised by a call.
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use toolgate::trace::{Replayer, TraceLine};
//! let policy = toolgate::policy::parse_policy(r#"[{"id": "no-rm", "name": "no rm",
//!   "selector": {"phase": "tool.before", "tool": {"name": "shell"}},
//!   "condition": {"kind": "toolArg", "type": "string", "op": "contains", "path": "cmd", "value": "rm "},
//!   "effect": {"type": "block"}}]"#, None).unwrap();
//! let mut r = Replayer::new(vec![policy], None).unwrap();
//! let trace = r#"{"type":"run.start","runId":"r1","agentId":"a","at":"2026-01-05T09:00:00Z"}
//! {"type":"tool.call","runId":"r1","id":"c1","tool":{"name":"shell"},"args":{"cmd":"rm -rf /"}}"#;
//! let rows = r.run_text(trace).await;
//! assert_eq!(rows[0].as_ref().unwrap().code, "BLOCKED_RULE");
//! # });
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use dashmap::DashMap;
use serde::Serialize;
use serde_json::Value;

use crate::engine::{
    Decision, EngineBuilder, EngineError, GovernanceEngine, LlmCall, LlmUsage, ManualClock, Run,
    RunContext, ToolCall, ToolOutcome,
};
use crate::policy::Policy;

mod line;
pub use line::{ReviewDecision, TraceLine, TraceTool};

/// One decision printed by a replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayRow {
    /// Trace line, from 1.
    pub line: usize,
    /// Run id.
    pub run_id: String,
    /// Call id.
    pub call_id: String,
    /// `tool.before`, `tool.after` or `llm.before`.
    pub phase: String,
    /// Tool name (the model's name for `llm.before`).
    pub tool: String,
    /// allow, block or hitl.
    pub effect: String,
    /// Decision code.
    pub code: String,
    /// Deciding rule.
    pub rule_id: Option<String>,
    /// Its reason.
    pub reason: Option<String>,
    /// What shadow rules would have done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow_effect: Option<String>,
    /// Whether the run must stop.
    pub abort_run: bool,
    /// The whole decision (not printed in the row format).
    #[serde(skip)]
    pub decision: Option<Decision>,
}

/// A problem with one trace line; the replay goes on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct TraceError {
    /// Trace line, from 1.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

#[derive(Debug, Clone)]
struct SignalBehaviour {
    value: Option<Value>,
    error: Option<String>,
    delay_ms: u64,
}

/// Drives an engine from trace lines, with a manual clock.
pub struct Replayer {
    engine: GovernanceEngine,
    clock: ManualClock,
    runs: HashMap<String, Run>,
    signals: Arc<DashMap<String, SignalBehaviour>>,
    reviews_by_call: HashMap<String, String>,
    tools_by_call: HashMap<(String, String), String>,
    /// `llm.call`s that were not allowed (run, id): their `llm` usage lines are ignored.
    llm_refused: std::collections::HashSet<(String, String)>,
    line: usize,
}

impl std::fmt::Debug for Replayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replayer")
            .field("line", &self.line)
            .finish()
    }
}

impl Replayer {
    /// A replayer over these policies, with an optional org timezone.
    pub fn new(
        policies: Vec<Policy>,
        org_timezone: Option<chrono_tz::Tz>,
    ) -> Result<Replayer, EngineError> {
        Self::with_builder(
            policies
                .into_iter()
                .fold(GovernanceEngine::builder(), |b, p| b.policy(p)),
            org_timezone,
        )
    }

    /// A replayer from a configured builder (policies, audit, evaluators...). Its clock is
    /// replaced by the trace's clock, and its audit events are sealed by one thread, so the
    /// trail of a replay lists its events in the trace's order (the same file every time).
    pub fn with_builder(
        builder: EngineBuilder,
        org_timezone: Option<chrono_tz::Tz>,
    ) -> Result<Replayer, EngineError> {
        let start: DateTime<Utc> = DateTime::from_timestamp(0, 0).unwrap_or_default();
        let clock = ManualClock::new(start);
        let mut builder = builder
            .clock(Arc::new(clock.clone()))
            .audit_sealer_threads(1);
        if let Some(tz) = org_timezone {
            builder = builder.org_timezone(tz);
        }
        Ok(Replayer {
            engine: builder.build()?,
            clock,
            runs: HashMap::new(),
            signals: Arc::new(DashMap::new()),
            reviews_by_call: HashMap::new(),
            tools_by_call: HashMap::new(),
            llm_refused: Default::default(),
            line: 0,
        })
    }

    /// The engine being driven.
    pub fn engine(&self) -> &GovernanceEngine {
        &self.engine
    }

    /// Replays a whole JSONL text; one entry per decision or per bad line.
    pub async fn run_text(&mut self, text: &str) -> Vec<Result<ReplayRow, TraceError>> {
        let mut out = Vec::new();
        for raw in text.lines() {
            out.extend(self.step_text(raw).await);
        }
        out
    }

    /// Replays one raw line (counted even when blank).
    pub async fn step_text(&mut self, raw: &str) -> Vec<Result<ReplayRow, TraceError>> {
        self.line += 1;
        if raw.trim().is_empty() {
            return Vec::new();
        }
        let value: Value = match crate::json::parse_strict(raw) {
            Ok(v) => v,
            Err(e) => {
                return vec![Err(TraceError {
                    line: self.line,
                    message: match e.kind {
                        crate::json::JsonErrorKind::Syntax => format!("not valid JSON: {e}"),
                        _ => e.to_string(),
                    },
                })];
            }
        };
        self.step_value_numbered(value).await
    }

    /// Replays one line given as a JSON value (counted as the next line).
    pub async fn step_value(&mut self, value: Value) -> Vec<Result<ReplayRow, TraceError>> {
        self.line += 1;
        self.step_value_numbered(value).await
    }

    async fn step_value_numbered(&mut self, value: Value) -> Vec<Result<ReplayRow, TraceError>> {
        let line = self.line;
        let parsed: TraceLine = match serde_json::from_value(value) {
            Ok(l) => l,
            Err(e) => {
                return vec![Err(TraceError {
                    line,
                    message: format!("not a trace line: {e}"),
                })];
            }
        };
        match self.step(parsed).await {
            Ok(rows) => rows.into_iter().map(Ok).collect(),
            Err(message) => vec![Err(TraceError { line, message })],
        }
    }

    fn run_for(&self, run_id: &Option<String>) -> Result<(String, Run), String> {
        match run_id {
            Some(id) => self
                .runs
                .get(id)
                .map(|r| (id.clone(), r.clone()))
                .ok_or_else(|| {
                    format!("no run \"{id}\" was started (add a run.start line before it)")
                }),
            None if self.runs.len() == 1 => {
                let (id, r) = self.runs.iter().next().ok_or("no run")?;
                Ok((id.clone(), r.clone()))
            }
            None => Err("the line has no runId and more than one (or no) run is live".to_string()),
        }
    }

    fn row(&self, run_id: &str, call_id: &str, tool: &str, d: Decision) -> ReplayRow {
        ReplayRow {
            line: self.line,
            run_id: run_id.to_string(),
            call_id: call_id.to_string(),
            phase: d.phase.as_str().to_string(),
            tool: tool.to_string(),
            effect: d.effect.as_str().to_string(),
            code: d.code.as_str().to_string(),
            rule_id: d.rule_id.as_deref().map(str::to_string),
            reason: d.reason.as_deref().map(str::to_string),
            shadow_effect: d.shadow_effect.map(|e| e.as_str().to_string()),
            abort_run: d.abort_run,
            decision: Some(d),
        }
    }

    /// Applies one parsed line.
    pub async fn step(&mut self, line: TraceLine) -> Result<Vec<ReplayRow>, String> {
        if let Some(at) = line.at() {
            self.clock.set(at);
        }
        match line {
            TraceLine::RunStart {
                run_id,
                agent_id,
                session_id,
                enduser,
                agent_tags,
                ..
            } => {
                if self.runs.contains_key(&run_id) {
                    return Err(format!("run \"{run_id}\" was already started"));
                }
                let ctx = RunContext {
                    run_id: run_id.clone(),
                    agent_id,
                    agent_tags,
                    session_id,
                    enduser,
                };
                let run = self.engine.start_run(ctx);
                self.runs.insert(run_id, run);
                Ok(Vec::new())
            }
            TraceLine::Signal {
                key,
                value,
                error,
                delay_ms,
                ..
            } => {
                if value.is_none() && error.is_none() {
                    return Err(format!(
                        "signal \"{key}\" needs a \"value\" or an \"error\""
                    ));
                }
                let fresh = !self.signals.contains_key(&key);
                self.signals.insert(
                    key.clone(),
                    SignalBehaviour {
                        value,
                        error,
                        delay_ms: delay_ms.unwrap_or(0),
                    },
                );
                if fresh {
                    let table = self.signals.clone();
                    let k = key.clone();
                    self.engine.register_signal(key, move |_args| {
                        let b = table.get(&k).map(|b| b.clone());
                        async move {
                            let Some(b) = b else {
                                return Err("no value".to_string());
                            };
                            if b.delay_ms > 0 {
                                tokio::time::sleep(Duration::from_millis(b.delay_ms)).await;
                            }
                            match (b.error, b.value) {
                                (Some(e), _) => Err(e),
                                (None, Some(v)) => Ok(v),
                                (None, None) => Err("no value".to_string()),
                            }
                        }
                    });
                }
                Ok(Vec::new())
            }
            TraceLine::ToolCall {
                run_id,
                id,
                tool,
                args,
                subjects,
                ..
            } => {
                let (run_id, run) = self.run_for(&run_id)?;
                let call = ToolCall {
                    id: id.clone(),
                    name: tool.name.clone(),
                    tags: tool.tags,
                    args,
                    subjects,
                };
                let d = run.before_tool(call).await;
                self.tools_by_call
                    .insert((run_id.clone(), id.clone()), tool.name.clone());
                if let Some(h) = &d.hitl {
                    self.reviews_by_call.insert(id.clone(), h.review_id.clone());
                }
                Ok(vec![self.row(&run_id, &id, &tool.name, d)])
            }
            TraceLine::ToolResult {
                run_id,
                id,
                output,
                duration_ms,
                error,
                ..
            } => {
                let duration = duration_from_ms(duration_ms.unwrap_or(0.0))?;
                let (run_id, run) = self.run_for(&run_id)?;
                let outcome = ToolOutcome {
                    output: if error.is_some() {
                        None
                    } else {
                        Some(output.unwrap_or(Value::Null))
                    },
                    error,
                    duration,
                };
                let tool = self
                    .tools_by_call
                    .get(&(run_id.clone(), id.clone()))
                    .cloned()
                    .unwrap_or_default();
                match run.after_tool(&id, outcome).await {
                    Some(d) => {
                        if let Some(h) = &d.hitl {
                            self.reviews_by_call.insert(id.clone(), h.review_id.clone());
                        }
                        Ok(vec![self.row(&run_id, &id, &tool, d)])
                    }
                    None => Ok(Vec::new()),
                }
            }
            TraceLine::Metric {
                run_id, key, value, ..
            } => {
                let (_, run) = self.run_for(&run_id)?;
                run.record_metric(&key, value);
                Ok(Vec::new())
            }
            TraceLine::LlmCall {
                run_id,
                id,
                model,
                messages,
                ..
            } => {
                let (run_id, run) = self.run_for(&run_id)?;
                let call = LlmCall::new(model.clone())
                    .with_messages(messages)
                    .with_id(id.clone());
                let d = run.before_llm(&call).await;
                if let Some(h) = &d.hitl {
                    self.reviews_by_call.insert(id.clone(), h.review_id.clone());
                }
                if d.is_allowed() {
                    self.llm_refused.remove(&(run_id.clone(), id.clone()));
                } else {
                    self.llm_refused.insert((run_id.clone(), id.clone()));
                }
                Ok(vec![self.row(&run_id, &id, &model, d)])
            }
            TraceLine::Llm {
                run_id,
                id,
                tokens_in,
                tokens_out,
                cost_usd,
                model,
                duration_ms,
                ..
            } => {
                if let Some(c) = cost_usd
                    && !(0.0..=MAX_COST_USD).contains(&c)
                {
                    return Err(format!(
                        "costUsd must be between 0 and {MAX_COST_USD:e}, found {c}"
                    ));
                }
                if let Some(ms) = duration_ms {
                    duration_from_ms(ms)?;
                }
                let (run_id, run) = self.run_for(&run_id)?;
                if let Some(id) = &id
                    && self.llm_refused.contains(&(run_id, id.clone()))
                {
                    // The call was not allowed: the model was not called.
                    return Ok(Vec::new());
                }
                let mut usage = LlmUsage::new(tokens_in, tokens_out);
                usage.cost_usd = cost_usd;
                usage.model = model;
                usage.duration_ms = duration_ms;
                usage.call_id = id;
                run.record_llm_usage(usage);
                Ok(Vec::new())
            }
            TraceLine::Review {
                fingerprint_of,
                decision,
                ..
            } => {
                let review_id = self
                    .reviews_by_call
                    .get(&fingerprint_of)
                    .ok_or_else(|| format!("call \"{fingerprint_of}\" raised no review"))?;
                let r = match decision {
                    ReviewDecision::Approved => self.engine.reviews().approve(review_id),
                    ReviewDecision::Denied => self.engine.reviews().deny(review_id),
                };
                r.map(|_| Vec::new()).map_err(|e| e.to_string())
            }
            TraceLine::RunEnd {
                run_id,
                status,
                final_response,
                ..
            } => {
                let (id, run) = self.run_for(&run_id)?;
                run.end(
                    status.as_deref().unwrap_or("success"),
                    final_response.as_deref(),
                )
                .await;
                self.runs.remove(&id);
                Ok(Vec::new())
            }
        }
    }

    /// Leaves every run still live open (see [`Run::leave`]): a run ends only at its trace's
    /// `run.end` line, and one still open at the end of the input is left for another process
    /// to continue (the audit trail is flushed; no `run.ended` is written).
    pub async fn finish(&mut self) {
        for (_, run) in self.runs.drain() {
            run.leave().await;
        }
    }
}

/// The largest `costUsd` an `llm` line may carry (the engine counts micro-dollars in a `u64`).
const MAX_COST_USD: f64 = 1e12;

/// A `durationMs` as a [`Duration`]: negative, non-finite or too large (above about 1.8e22 ms)
/// is an error, never a panic.
fn duration_from_ms(ms: f64) -> Result<Duration, String> {
    if ms < 0.0 {
        return Err(format!("durationMs must not be negative, found {ms}"));
    }
    Duration::try_from_secs_f64(ms / 1000.0)
        .map_err(|_| format!("durationMs is out of range, found {ms}"))
}
