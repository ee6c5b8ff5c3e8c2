//! Runs: one agent run's context, history and decisions.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::decision::{Decision, DecisionCode, HitlInfo, ReviewStatus};
use super::evaluate::{
    CallView, DecisionCtx, base_decision, evaluate_rules, extract_subjects, rules_in_play,
};
use super::hitl::{Review, fingerprint};
use super::subjects::SubjectRef;
use super::{EngineInner, FailureMode};
use crate::audit::EventKind;
use crate::policy::{
    CompiledPolicies, EffectType, InbuiltMetric, Phase, Scope, json_number as num,
};
use crate::state::StateKey;

/// The end user an agent acts for.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Enduser {
    /// Their id.
    pub id: String,
    /// Their tags (e.g. `tz`, `role`), values as strings.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// Who runs and for whom.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunContext {
    /// Unique id of the run.
    pub run_id: String,
    /// The agent.
    pub agent_id: String,
    /// A session grouping runs, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The end user, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enduser: Option<Enduser>,
}

impl RunContext {
    /// A context for `run_id` of `agent_id`, without an end user.
    pub fn new(run_id: impl Into<String>, agent_id: impl Into<String>) -> Self {
        RunContext {
            run_id: run_id.into(),
            agent_id: agent_id.into(),
            session_id: None,
            enduser: None,
        }
    }

    /// Sets the end user.
    pub fn with_enduser(
        mut self,
        id: impl Into<String>,
        tags: impl IntoIterator<Item = (String, String)>,
    ) -> Self {
        self.enduser = Some(Enduser {
            id: id.into(),
            tags: tags.into_iter().collect(),
        });
        self
    }
}

/// A tool call the agent wants to make.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolCall {
    /// Id of the call, unique in the run.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Tool tags.
    pub tags: Vec<String>,
    /// Arguments (any JSON).
    pub args: Value,
    /// Subjects known by the caller (extractors add to these).
    pub subjects: Vec<SubjectRef>,
}

impl ToolCall {
    /// A call of `name` with `args`.
    pub fn new(id: impl Into<String>, name: impl Into<String>, args: Value) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            tags: Vec::new(),
            args,
            subjects: Vec::new(),
        }
    }

    /// Sets the tags.
    pub fn with_tags<S: Into<String>>(mut self, tags: impl IntoIterator<Item = S>) -> Self {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }
}

/// What a tool call produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolOutcome {
    /// The output, when it succeeded.
    pub output: Option<Value>,
    /// The error, when it failed.
    pub error: Option<String>,
    /// How long it ran.
    pub duration: Duration,
}

impl ToolOutcome {
    /// A success.
    pub fn ok(output: Value, duration: Duration) -> Self {
        ToolOutcome {
            output: Some(output),
            error: None,
            duration,
        }
    }

    /// A failure.
    pub fn err(error: impl Into<String>, duration: Duration) -> Self {
        ToolOutcome {
            output: None,
            error: Some(error.into()),
            duration,
        }
    }
}

/// A completed, allowed call in the run's history.
#[derive(Debug, Clone)]
pub(crate) struct HistoryEntry {
    pub(crate) name_lc: String,
    pub(crate) tags_lc: Vec<String>,
}

#[derive(Debug, Clone)]
pub(crate) struct PendingCall {
    name: String,
    tags: Vec<String>,
    args: Value,
}

#[derive(Debug, Default)]
pub(crate) struct Totals {
    pub(crate) calls: AtomicU64,
    pub(crate) allowed: AtomicU64,
    pub(crate) blocked: AtomicU64,
    pub(crate) hitl: AtomicU64,
    pub(crate) tokens_in: AtomicU64,
    pub(crate) tokens_out: AtomicU64,
    pub(crate) cost_micro_usd: AtomicU64,
}

/// State shared by every handle of one run.
pub(crate) struct RunShared {
    pub(crate) context: Arc<RunContext>,
    pub(crate) started_ms: i64,
    pub(crate) aborted: AtomicBool,
    pub(crate) ended: AtomicBool,
    pub(crate) history: Mutex<Vec<HistoryEntry>>,
    pub(crate) pending: Mutex<HashMap<String, PendingCall>>,
    pub(crate) tool_calls: Mutex<Vec<crate::eval::ToolCallRecord>>,
    pub(crate) totals: Totals,
    run_key: Arc<str>,
    agent_key: Arc<str>,
    agent_user_key: Arc<str>,
    pub(crate) audit: super::audit_hook::RunAudit,
}

impl RunShared {
    pub(crate) fn state_key(&self, slot: u64, scope: Scope) -> StateKey {
        StateKey {
            slot,
            scope: match scope {
                Scope::Run => self.run_key.clone(),
                Scope::Agent => self.agent_key.clone(),
                Scope::AgentUser => self.agent_user_key.clone(),
            },
        }
    }
}

/// A live agent run. Cheap to clone; use it from as many tasks as you like.
#[derive(Clone)]
pub struct Run {
    pub(crate) engine: Arc<EngineInner>,
    pub(crate) shared: Arc<RunShared>,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("context", &self.shared.context)
            .finish()
    }
}

/// Whether lowercasing `s` leaves it unchanged, cheaply: ASCII without uppercase letters.
fn is_lower_ascii(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii() && !b.is_ascii_uppercase())
}

/// `s` lowercased, borrowed when it already is (the common case for tool names).
fn lower_cow(s: &str) -> Cow<'_, str> {
    if is_lower_ascii(s) {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(s.to_lowercase())
    }
}

/// The tags lowercased, borrowed when they already are.
fn lower_all_cow(v: &[String]) -> Cow<'_, [String]> {
    if v.iter().all(|s| is_lower_ascii(s)) {
        Cow::Borrowed(v)
    } else {
        Cow::Owned(v.iter().map(|s| s.to_lowercase()).collect())
    }
}

impl Run {
    pub(crate) fn new(engine: Arc<EngineInner>, context: RunContext) -> Run {
        let now = engine.clock.now();
        let agent_user = format!(
            "{}\u{1f}{}",
            context.agent_id,
            context.enduser.as_ref().map_or("", |u| u.id.as_str())
        );
        let audit = engine.audit_for_run(&context);
        let shared = Arc::new(RunShared {
            run_key: Arc::from(format!("run\u{1f}{}", context.run_id)),
            agent_key: Arc::from(format!("agent\u{1f}{}", context.agent_id)),
            agent_user_key: Arc::from(format!("user\u{1f}{agent_user}")),
            context: Arc::new(context),
            started_ms: now.timestamp_millis(),
            aborted: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            history: Mutex::new(Vec::new()),
            pending: Mutex::new(HashMap::new()),
            tool_calls: Mutex::new(Vec::new()),
            totals: Totals::default(),
            audit,
        });
        let run = Run { engine, shared };
        let ctx = serde_json::to_value(&*run.shared.context).unwrap_or(Value::Null);
        run.emit(
            EventKind::RunStarted,
            obj(json!({ "runContext": ctx })),
            now,
        );
        run
    }

    /// The run's context.
    pub fn context(&self) -> &RunContext {
        &self.shared.context
    }

    /// Whether a hitl decision aborted the run.
    pub fn is_aborted(&self) -> bool {
        self.shared.aborted.load(Ordering::Acquire)
    }

    /// Lifts the pause a hitl decision put on the run (see [`is_aborted`](Run::is_aborted)),
    /// e.g. once its review is resolved: later calls are decided by the rules again.
    pub fn resume(&self) {
        self.shared.aborted.store(false, Ordering::Release);
    }

    /// Records a `tool.changed` audit event: the definition of `tool` (hashed to `sha256`)
    /// differs from its pinned one. `call_id` names the call it blocked, if any.
    pub fn record_tool_changed(&self, tool: &str, sha256: &str, call_id: Option<&str>) {
        let mut body = obj(json!({"tool": {"name": tool}, "sha256": sha256}));
        if let Some(c) = call_id {
            body.insert("callId".into(), Value::String(c.to_string()));
        }
        self.emit(EventKind::ToolChanged, body, self.engine.clock.now());
    }

    fn emit(&self, kind: EventKind, body: Map<String, Value>, at: chrono::DateTime<chrono::Utc>) {
        self.engine.emit(&self.shared, kind, body, at);
    }

    /// Decides whether a tool call may proceed (phase `tool.before`).
    ///
    /// Never fails: an internal fault yields a decision by the engine's failure mode.
    pub async fn before_tool(&self, call: ToolCall) -> Decision {
        let started = Instant::now();
        let now = self.engine.clock.now();
        // Whether the rules allowed the call: it then waits in `pending` for its result.
        let mut proceeds = false;
        let mut decision = if self.is_aborted() {
            Decision::simple(
                Phase::Before,
                EffectType::Block,
                DecisionCode::BlockedRunAborted,
                Some(Arc::from(
                    "the run was aborted by an earlier human-review request",
                )),
            )
        } else {
            let fut = std::panic::AssertUnwindSafe(self.decide_before(&call, now));
            match futures::FutureExt::catch_unwind(fut).await {
                Ok(d) => {
                    proceeds = d.effect == EffectType::Allow;
                    d
                }
                Err(_) => self.failure(
                    Phase::Before,
                    &call.id,
                    now,
                    "internal error while deciding",
                ),
            }
        };
        let t = &self.shared.totals;
        t.calls.fetch_add(1, Ordering::Relaxed);
        match decision.effect {
            EffectType::Allow => t.allowed.fetch_add(1, Ordering::Relaxed),
            EffectType::Block => t.blocked.fetch_add(1, Ordering::Relaxed),
            EffectType::Hitl => t.hitl.fetch_add(1, Ordering::Relaxed),
        };
        decision.latency_ns = started.elapsed().as_nanos() as u64;
        if self.engine.audit_enabled() {
            let body = json!({
                "phase": "tool.before",
                "callId": call.id,
                "tool": {"name": call.name, "tags": call.tags},
                "args": call.args,
                "subjects": call.subjects,
                "decision": decision,
            });
            self.emit(EventKind::ToolDecision, obj(body), now);
        }
        if proceeds {
            // The call is ours: move it into `pending` rather than cloning its arguments.
            let ToolCall {
                id,
                name,
                tags,
                args,
                ..
            } = call;
            self.shared
                .pending
                .lock()
                .insert(id, PendingCall { name, tags, args });
        }
        decision
    }

    fn failure(
        &self,
        phase: Phase,
        call_id: &str,
        now: chrono::DateTime<chrono::Utc>,
        msg: &str,
    ) -> Decision {
        let (effect, code) = match self.engine.failure_mode {
            FailureMode::Open => (EffectType::Allow, DecisionCode::Allowed),
            FailureMode::Closed => (EffectType::Block, DecisionCode::BlockedFailure),
        };
        self.emit(
            EventKind::Error,
            obj(json!({"message": msg, "callId": call_id, "phase": phase})),
            now,
        );
        let mut d = Decision::simple(phase, effect, code, Some(Arc::from(msg)));
        d.error = Some(msg.to_string());
        d
    }

    async fn decide_before(&self, call: &ToolCall, now: chrono::DateTime<chrono::Utc>) -> Decision {
        let policies = self.engine.policies.load_full();
        let name_lc = lower_cow(&call.name);
        let tags_lc = lower_all_cow(&call.tags);
        let rules = rules_in_play(&policies, Phase::Before, &name_lc, &tags_lc);
        let view = CallView {
            name: &call.name,
            name_lc: &name_lc,
            tags: &call.tags,
            tags_lc: &tags_lc,
            args: &call.args,
            duration_ms: None,
        };
        let subjects = call.subjects.clone();
        let mut ctx = DecisionCtx::new(&self.engine, &policies, &self.shared, view, now, subjects);
        if !rules.is_empty() {
            extract_subjects(&mut ctx, &rules).await;
        }
        let verdict = evaluate_rules(&mut ctx, &rules).await;
        let mut d = base_decision(Phase::Before, &verdict, &policies);
        d.evaluated = verdict.evaluated;
        if d.effect == EffectType::Hitl {
            self.resolve_hitl(&mut d, call, now);
        }
        let signals = std::mem::take(&mut ctx.signals);
        if d.effect == EffectType::Allow {
            count_allowed(
                &self.engine,
                &policies,
                &self.shared,
                &name_lc,
                &tags_lc,
                &ctx.permits,
                ctx.now_ms,
            );
        } else {
            for (_, key, permit) in ctx.permits.drain(..) {
                self.engine.state.release(&key, permit);
            }
        }
        d.signals = signals;
        d
    }

    fn resolve_hitl(&self, d: &mut Decision, call: &ToolCall, now: chrono::DateTime<chrono::Utc>) {
        let ctx = &self.shared.context;
        let rule_id = d.rule_id.as_deref().unwrap_or("");
        let enduser = ctx.enduser.as_ref().map(|u| u.id.as_str());
        let fp = fingerprint(&ctx.agent_id, rule_id, &call.name, &call.args, enduser);
        let store = &self.engine.reviews;
        let existing = store.get(&fp).filter(|r| {
            !(r.status == ReviewStatus::Pending && r.expires_at.is_some_and(|e| e <= now))
                && r.status != ReviewStatus::Expired
        });
        let review = match existing {
            Some(r) => r,
            None => {
                if let Some(old) = store.get(&fp).filter(|r| r.status == ReviewStatus::Pending) {
                    let _ = store.decide(&old.id, ReviewStatus::Expired, now);
                }
                let review = Review {
                    id: uuid::Uuid::now_v7().to_string(),
                    fingerprint: fp.clone(),
                    status: ReviewStatus::Pending,
                    agent_id: ctx.agent_id.clone(),
                    rule_id: rule_id.to_string(),
                    tool_name: call.name.clone(),
                    args: call.args.clone(),
                    enduser_id: enduser.map(str::to_string),
                    run_id: ctx.run_id.clone(),
                    call_id: call.id.clone(),
                    reason: d.reason.as_deref().map(str::to_string),
                    created_at: now,
                    decided_at: None,
                    expires_at: self
                        .engine
                        .review_ttl
                        .and_then(|t| chrono::Duration::from_std(t).ok())
                        .map(|t| now + t),
                };
                let stored = store.insert_if_absent(review.clone());
                if stored.id == review.id {
                    d.code = DecisionCode::BlockedHitlRequested;
                    d.hitl = Some(HitlInfo {
                        review_id: stored.id,
                        status: ReviewStatus::Pending,
                        fingerprint: fp,
                    });
                    self.abort();
                    d.abort_run = true;
                    return;
                }
                stored
            }
        };
        let (effect, code, abort) = match review.status {
            ReviewStatus::Approved => (EffectType::Allow, DecisionCode::AllowedHitlApproved, false),
            ReviewStatus::Denied => (EffectType::Block, DecisionCode::BlockedHitlDenied, false),
            _ => (EffectType::Hitl, DecisionCode::BlockedHitlPending, true),
        };
        d.effect = effect;
        d.code = code;
        d.abort_run = abort;
        if abort {
            self.abort();
        }
        d.hitl = Some(HitlInfo {
            review_id: review.id,
            status: review.status,
            fingerprint: fp,
        });
    }

    fn abort(&self) {
        self.shared.aborted.store(true, Ordering::Release);
    }

    /// Records the outcome of an allowed call and decides the after-phase rules
    /// (`tool.after`). Returns `None` when `call_id` was not allowed by
    /// [`before_tool`](Run::before_tool) in this run (its result is ignored).
    ///
    /// An after-phase `block` means the output must not reach the agent; `hitl` stops the run.
    pub async fn after_tool(&self, call_id: &str, outcome: ToolOutcome) -> Option<Decision> {
        let pending = self.shared.pending.lock().remove(call_id)?;
        let now = self.engine.clock.now();
        let fut = std::panic::AssertUnwindSafe(self.after_allowed(call_id, pending, outcome, now));
        match futures::FutureExt::catch_unwind(fut).await {
            Ok(d) => d,
            Err(_) => Some(self.failure(
                Phase::After,
                call_id,
                now,
                "internal error while recording the result",
            )),
        }
    }

    async fn after_allowed(
        &self,
        call_id: &str,
        pending: PendingCall,
        outcome: ToolOutcome,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Option<Decision> {
        let started = Instant::now();
        let policies = self.engine.policies.load_full();
        let name_lc = lower_cow(&pending.name);
        let tags_lc = lower_all_cow(&pending.tags);
        let duration_ms = outcome.duration.as_secs_f64() * 1000.0;

        // Inbuilt metrics of the call.
        let mut metrics: Vec<(InbuiltMetric, f64)> = Vec::with_capacity(5);
        let want = |m: InbuiltMetric| {
            self.engine.audit_enabled() || policies.trackers_by_metric.contains_key(m.key())
        };
        if want(InbuiltMetric::BytesIn) {
            metrics.push((InbuiltMetric::BytesIn, json_len(&pending.args)));
        }
        let output = outcome.output.as_ref().unwrap_or(&Value::Null);
        if outcome.output.is_some() && want(InbuiltMetric::BytesOut) {
            metrics.push((InbuiltMetric::BytesOut, json_len(output)));
        }
        metrics.push((InbuiltMetric::DurationMs, duration_ms));
        if let Value::Array(a) = &pending.args {
            metrics.push((InbuiltMetric::RecordsIn, a.len() as f64));
        }
        if let Value::Array(a) = output {
            metrics.push((InbuiltMetric::RecordsOut, a.len() as f64));
        }
        for (m, v) in &metrics {
            record_metric(
                &self.engine,
                &policies,
                &self.shared,
                m.key(),
                Some((&name_lc, &tags_lc)),
                *v,
                now.timestamp_millis(),
            );
        }

        let rules = rules_in_play(&policies, Phase::After, &name_lc, &tags_lc);
        let decision = if rules.is_empty() {
            None
        } else {
            let view = CallView {
                name: &pending.name,
                name_lc: &name_lc,
                tags: &pending.tags,
                tags_lc: &tags_lc,
                args: &pending.args,
                duration_ms: Some(duration_ms),
            };
            let mut ctx =
                DecisionCtx::new(&self.engine, &policies, &self.shared, view, now, Vec::new());
            extract_subjects(&mut ctx, &rules).await;
            let verdict = evaluate_rules(&mut ctx, &rules).await;
            // After phase: counters were taken by the before decision; give back any taken now.
            for (_, key, permit) in ctx.permits.drain(..) {
                self.engine.state.release(&key, permit);
            }
            let mut d = base_decision(Phase::After, &verdict, &policies);
            d.evaluated = verdict.evaluated;
            d.signals = std::mem::take(&mut ctx.signals);
            if d.effect == EffectType::Hitl {
                let call = ToolCall {
                    id: call_id.to_string(),
                    name: pending.name.clone(),
                    tags: pending.tags.clone(),
                    args: pending.args.clone(),
                    subjects: Vec::new(),
                };
                self.resolve_hitl(&mut d, &call, now);
            }
            d.latency_ns = started.elapsed().as_nanos() as u64;
            Some(d)
        };

        self.shared.history.lock().push(HistoryEntry {
            name_lc: name_lc.into_owned(),
            tags_lc: tags_lc.into_owned(),
        });
        self.shared
            .tool_calls
            .lock()
            .push(crate::eval::ToolCallRecord {
                name: pending.name.clone(),
                args: pending.args.clone(),
                output: outcome.output.clone(),
                error: outcome.error.clone(),
            });

        if self.engine.audit_enabled() {
            if let Some(d) = &decision {
                let body = json!({
                    "phase": "tool.after",
                    "callId": call_id,
                    "tool": {"name": pending.name, "tags": pending.tags},
                    "args": pending.args,
                    "decision": d,
                });
                self.emit(EventKind::ToolDecision, obj(body), now);
            }
            let metrics_json: Map<String, Value> = metrics
                .iter()
                .map(|(m, v)| (m.key().to_string(), num(*v)))
                .collect();
            let mut body = obj(json!({
                "callId": call_id,
                "tool": {"name": pending.name, "tags": pending.tags},
                "durationMs": num(duration_ms),
                "metrics": metrics_json,
            }));
            match &outcome.error {
                Some(e) => body.insert("error".into(), Value::String(e.clone())),
                None => body.insert("output".into(), output.clone()),
            };
            let (evaluation, slow) = self
                .engine
                .evaluate_tool_output(&self.shared, &pending.name, &pending.args, &outcome)
                .await;
            self.engine.emit_with_evaluation(
                &self.shared,
                EventKind::ToolResult,
                body,
                now,
                evaluation,
                slow,
            );
        }
        decision
    }

    /// Drops the run-scoped counters and metric windows of the current policies: they can never
    /// be read again once the run is over, and a long-lived engine must not keep them.
    fn forget_run_state(&self) {
        let policies = self.engine.policies.load();
        let counters = policies.counters.counters.iter().map(|c| (c.slot, c.scope));
        let trackers = policies.trackers.iter().map(|t| (t.slot, t.scope));
        for (slot, scope) in counters.chain(trackers) {
            if scope == Scope::Run {
                self.engine
                    .state
                    .remove(&self.shared.state_key(slot, Scope::Run));
            }
        }
    }

    /// Records a custom metric event for `metricWindow` rules.
    pub fn record_metric(&self, key: &str, value: f64) {
        let now = self.engine.clock.now();
        let policies = self.engine.policies.load_full();
        record_metric(
            &self.engine,
            &policies,
            &self.shared,
            key,
            None,
            value,
            now.timestamp_millis(),
        );
    }

    /// Records an LLM call: tokens and cost become the inbuilt metrics `llm_tokens_in`,
    /// `llm_tokens_out` and `llm_cost_usd`, and an `llm.result` event.
    pub fn record_llm(&self, tokens_in: u64, tokens_out: u64, cost_usd: f64) {
        let now = self.engine.clock.now();
        let policies = self.engine.policies.load_full();
        let t = now.timestamp_millis();
        for (m, v) in [
            (InbuiltMetric::LlmTokensIn, tokens_in as f64),
            (InbuiltMetric::LlmTokensOut, tokens_out as f64),
            (InbuiltMetric::LlmCostUsd, cost_usd),
        ] {
            record_metric(&self.engine, &policies, &self.shared, m.key(), None, v, t);
        }
        let totals = &self.shared.totals;
        totals.tokens_in.fetch_add(tokens_in, Ordering::Relaxed);
        totals.tokens_out.fetch_add(tokens_out, Ordering::Relaxed);
        if cost_usd.is_finite() && cost_usd > 0.0 {
            totals
                .cost_micro_usd
                .fetch_add((cost_usd * 1e6).round() as u64, Ordering::Relaxed);
        }
        self.emit(
            EventKind::LlmResult,
            obj(json!({"tokensIn": tokens_in, "tokensOut": tokens_out, "costUsd": num(cost_usd)})),
            now,
        );
    }

    /// Ends the run with a status (e.g. `success`, `error`) and, optionally, the agent's final
    /// response (evaluated by the run-level evaluators). Flushes the audit sinks, bounded by the
    /// engine's flush timeout. Ending twice does nothing.
    pub async fn end(&self, status: &str, final_response: Option<&str>) {
        if self.shared.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        self.forget_run_state();
        let now = self.engine.clock.now();
        let t = &self.shared.totals;
        let totals = json!({
            "calls": t.calls.load(Ordering::Relaxed),
            "allowed": t.allowed.load(Ordering::Relaxed),
            "blocked": t.blocked.load(Ordering::Relaxed),
            "hitl": t.hitl.load(Ordering::Relaxed),
            "llmTokensIn": t.tokens_in.load(Ordering::Relaxed),
            "llmTokensOut": t.tokens_out.load(Ordering::Relaxed),
            "llmCostUsd": num(t.cost_micro_usd.load(Ordering::Relaxed) as f64 / 1e6),
            "durationMs": now.timestamp_millis() - self.shared.started_ms,
        });
        let mut body =
            obj(json!({"status": status, "totals": totals, "aborted": self.is_aborted()}));
        if let Some(r) = final_response {
            body.insert("finalResponse".into(), Value::String(r.to_string()));
        }
        if self.engine.audit_enabled() {
            self.engine.await_background(&self.shared).await;
            let (evaluation, slow) = self
                .engine
                .evaluate_run(&self.shared, final_response, status)
                .await;
            self.engine.emit_with_evaluation(
                &self.shared,
                EventKind::RunEnded,
                body,
                now,
                evaluation,
                slow,
            );
            self.engine.await_background(&self.shared).await;
            self.engine.flush_audit().await;
        }
    }
}

/// Counts an allowed call in every maxCalls counter whose selector matches it and that the
/// decision did not already count.
fn count_allowed(
    engine: &EngineInner,
    policies: &CompiledPolicies,
    run: &RunShared,
    name_lc: &str,
    tags_lc: &[String],
    taken: &[(u32, StateKey, crate::state::Permit)],
    now_ms: i64,
) {
    let idx = &policies.counters;
    if idx.counters.is_empty() {
        return;
    }
    // Glob hits, turned into counter indices in place.
    let mut hits: Vec<usize> = Vec::new();
    if !idx.glob_counter.is_empty() {
        idx.names.matches_into(name_lc, &mut hits);
        hits.retain_mut(|i| match idx.glob_counter.get(*i) {
            Some(c) => {
                *i = *c as usize;
                true
            }
            None => false,
        });
    }
    for t in tags_lc {
        if let Some(cs) = idx.by_tag.get(t) {
            hits.extend(cs.iter().map(|c| *c as usize));
        }
    }
    hits.sort_unstable();
    hits.dedup();
    for c in hits {
        if taken.iter().any(|(t, _, _)| *t as usize == c) {
            continue;
        }
        if let Some(spec) = idx.counters.get(c) {
            engine.state.add(
                &run.state_key(spec.slot, spec.scope),
                spec.window_seconds,
                now_ms,
            );
        }
    }
}

fn record_metric(
    engine: &EngineInner,
    policies: &CompiledPolicies,
    run: &RunShared,
    key: &str,
    tool: Option<(&str, &[String])>,
    value: f64,
    at_ms: i64,
) {
    let Some(trackers) = policies.trackers_by_metric.get(key) else {
        return;
    };
    for &t in trackers {
        let spec = &policies.trackers[t];
        let accepted = match tool {
            Some((name, tags)) => spec.accepts(Some(name), tags),
            None => spec.accepts(None, &[]),
        };
        if accepted {
            engine.state.record(
                &run.state_key(spec.slot, spec.scope),
                spec.window_seconds,
                at_ms,
                value,
            );
        }
    }
}

fn json_len(v: &Value) -> f64 {
    serde_json::to_vec(v).map_or(0.0, |b| b.len() as f64)
}

pub(crate) fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}
