//! Runs: one agent run's context, history and decisions.
//!
//! A decision that needs nothing awaited (no signal provider, no subject extractor in play) is
//! made synchronously, with no allocation beyond the [`Decision`] itself: the rules in play,
//! the counters a call takes and the sequence entries it satisfies come from the tool's cached
//! profile (see `profile.rs`), and `sequence` conditions read a per-run bitset.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use smallvec::SmallVec;

use super::decision::{Decision, DecisionCode, HitlInfo, ReviewStatus};
use super::evaluate::{
    CallView, DecisionCtx, RuleVerdict, base_decision, evaluate_rules, evaluate_rules_sync,
    extract_subjects, needs_async,
};
use super::hitl::{Review, fingerprint};
use super::profile::ToolProfile;
use super::sealer::Body;
use super::{EngineInner, FailureMode};
use crate::audit::EventKind;
use crate::policy::{
    CompiledPolicies, EffectType, InbuiltMetric, Phase, Scope, json_number as num,
};
use crate::state::StateKey;

pub(crate) use super::call::{RunContext, ToolCall, ToolOutcome};

/// A completed, allowed call in the run's history.
#[derive(Debug, Clone)]
pub(crate) struct HistoryEntry {
    pub(crate) name_lc: Arc<str>,
    pub(crate) tags_lc: Arc<[String]>,
}

/// The run's history and, for the current policies, the `sequence` entries it satisfies.
#[derive(Debug, Default)]
pub(crate) struct History {
    entries: Vec<HistoryEntry>,
    /// The policy generation `seen` was computed for (0: never).
    seen_generation: u64,
    /// Bit `i`: some entry satisfies sequence entry `i`.
    seen: Vec<u64>,
}

impl History {
    fn push(&mut self, profile: &ToolProfile, generation: u64) {
        if self.entries.is_empty() {
            self.seen_generation = generation;
            self.seen.clear();
        }
        self.entries.push(HistoryEntry {
            name_lc: profile.name_lc.clone(),
            tags_lc: profile.tags_lc.clone(),
        });
        if self.seen_generation == generation {
            or_into(&mut self.seen, &profile.seq_bits);
        }
    }

    /// The sequence entries of `policies` that some history entry satisfies, recomputed from
    /// the entries when the policies were reloaded since.
    pub(crate) fn seen(&mut self, policies: &CompiledPolicies) -> &[u64] {
        let generation = policies.tools.generation();
        if self.seen_generation != generation {
            self.seen.clear();
            for e in &self.entries {
                let p = policies.tools.profile(policies, &e.name_lc, &e.tags_lc);
                or_into(&mut self.seen, &p.seq_bits);
            }
            self.seen_generation = generation;
        }
        &self.seen
    }
}

fn or_into(dst: &mut Vec<u64>, src: &[u64]) {
    if dst.len() < src.len() {
        dst.resize(src.len(), 0);
    }
    for (d, s) in dst.iter_mut().zip(src) {
        *d |= *s;
    }
}

/// Whether bit `i` is set.
pub(crate) fn bit(bits: &[u64], i: u32) -> bool {
    bits.get(i as usize / 64)
        .is_some_and(|w| (w >> (i % 64)) & 1 == 1)
}

#[derive(Debug, Clone)]
pub(crate) struct PendingCall {
    name: String,
    tags: Vec<String>,
    args: Value,
}

type PendingMap = std::collections::HashMap<String, PendingCall, foldhash::fast::RandomState>;

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
    pub(crate) engine: Arc<EngineInner>,
    pub(crate) context: Arc<RunContext>,
    pub(crate) started_ms: i64,
    pub(crate) aborted: AtomicBool,
    pub(crate) ended: AtomicBool,
    pub(crate) history: Mutex<History>,
    pub(crate) pending: Mutex<PendingMap>,
    /// The end user's time zone from a tag, parsed once: (tag, zone).
    pub(crate) tz_cache: std::sync::OnceLock<(Box<str>, Option<chrono_tz::Tz>)>,
    pub(crate) tool_calls: Mutex<Vec<crate::eval::ToolCallRecord>>,
    pub(crate) totals: Totals,
    run_key: Arc<str>,
    agent_key: Arc<str>,
    agent_user_key: Arc<str>,
    pub(crate) audit: super::audit_hook::RunAudit,
}

impl RunShared {
    /// The time zone named by the end user's tag `tag` (parsed once per run for the first tag
    /// asked; other tags are parsed each time).
    pub(crate) fn enduser_tz(&self, tag: &str) -> Option<chrono_tz::Tz> {
        let parse = || {
            self.context
                .enduser
                .as_ref()
                .and_then(|u| u.tags.get(tag))
                .and_then(|v| v.parse::<chrono_tz::Tz>().ok())
        };
        let (cached_tag, tz) = self.tz_cache.get_or_init(|| (tag.into(), parse()));
        if &**cached_tag == tag { *tz } else { parse() }
    }

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

    /// The body of `run.ended`.
    fn ended_body(
        &self,
        status: &str,
        final_response: Option<&str>,
        now: DateTime<Utc>,
    ) -> Map<String, Value> {
        let t = &self.totals;
        let totals = json!({
            "calls": t.calls.load(Ordering::Relaxed),
            "allowed": t.allowed.load(Ordering::Relaxed),
            "blocked": t.blocked.load(Ordering::Relaxed),
            "hitl": t.hitl.load(Ordering::Relaxed),
            "llmTokensIn": t.tokens_in.load(Ordering::Relaxed),
            "llmTokensOut": t.tokens_out.load(Ordering::Relaxed),
            "llmCostUsd": num(t.cost_micro_usd.load(Ordering::Relaxed) as f64 / 1e6),
            "durationMs": now.timestamp_millis() - self.started_ms,
        });
        let aborted = self.aborted.load(Ordering::Acquire);
        let mut body = obj(json!({"status": status, "totals": totals, "aborted": aborted}));
        if let Some(r) = final_response {
            body.insert("finalResponse".into(), Value::String(r.to_string()));
        }
        body
    }
}

impl Drop for RunShared {
    /// A run dropped without [`Run::end`] releases its run-scoped state and, with the audit
    /// trail on, ends its chain with a `run.ended` event of status `dropped`.
    fn drop(&mut self) {
        if self.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        self.engine.state.forget_scope(&self.run_key);
        if self.engine.audit_enabled() {
            let now = self.engine.clock.now();
            let body = self.ended_body("dropped", None, now);
            self.engine.emit(self, EventKind::RunEnded, body, now);
        }
    }
}

/// A live agent run. Cheap to clone; use it from as many tasks as you like.
///
/// Dropping the last handle without calling [`end`](Run::end) releases the run's state and
/// (with the audit trail on) writes `run.ended` with status `dropped`; only `end` flushes.
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

/// A before decision that awaits something (a signal provider or subject extractor).
struct AsyncPlan {
    policies: Arc<CompiledPolicies>,
    profile: Arc<ToolProfile>,
}

/// Runs a future to completion for a caller that is not async: on the caller's runtime when
/// there is one (a worker thread of a multi-threaded runtime), else on a small runtime of the
/// engine's own. `None` if no runtime could be started.
fn block_on<F>(fut: F) -> Option<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    static FALLBACK: std::sync::OnceLock<Option<tokio::runtime::Runtime>> =
        std::sync::OnceLock::new();
    let fallback = || {
        FALLBACK
            .get_or_init(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("toolgate-blocking")
                    .enable_all()
                    .build()
                    .ok()
            })
            .as_ref()
    };
    match tokio::runtime::Handle::try_current() {
        Err(_) => fallback().map(|rt| rt.block_on(fut)),
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            Some(tokio::task::block_in_place(|| h.block_on(fut)))
        }
        // A current-thread runtime cannot be blocked from its own thread: run elsewhere.
        Ok(_) => std::thread::scope(|s| {
            s.spawn(|| fallback().map(|rt| rt.block_on(fut)))
                .join()
                .ok()
                .flatten()
        }),
    }
}

impl Run {
    pub(crate) fn new(engine: Arc<EngineInner>, context: RunContext) -> Run {
        let now = engine.clock.now();
        let enduser = context.enduser.as_ref().map_or("", |u| u.id.as_str());
        let shared = Arc::new(RunShared {
            engine: engine.clone(),
            run_key: Arc::from(format!("run\u{1f}{}", context.run_id)),
            agent_key: Arc::from(format!("agent\u{1f}{}", context.agent_id)),
            agent_user_key: Arc::from(format!("user\u{1f}{}\u{1f}{enduser}", context.agent_id)),
            audit: engine.audit_for_run(&context),
            context: Arc::new(context),
            started_ms: now.timestamp_millis(),
            aborted: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            history: Mutex::new(History::default()),
            pending: Mutex::new(PendingMap::default()),
            tz_cache: std::sync::OnceLock::new(),
            tool_calls: Mutex::new(Vec::new()),
            totals: Totals::default(),
        });
        let run = Run { engine, shared };
        if run.engine.audit_enabled() {
            let ctx = serde_json::to_value(&*run.shared.context).unwrap_or(Value::Null);
            run.emit(
                EventKind::RunStarted,
                obj(json!({ "runContext": ctx })),
                now,
            );
        }
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

    fn emit(&self, kind: EventKind, body: Map<String, Value>, at: DateTime<Utc>) {
        self.engine.emit(&self.shared, kind, body, at);
    }

    /// Decides whether a tool call may proceed (phase `tool.before`).
    ///
    /// Never fails: an internal fault yields a decision by the engine's failure mode. When no
    /// signal provider or subject extractor is in play the decision is made without awaiting
    /// (see [`before_tool_blocking`](Run::before_tool_blocking) for callers that are not async).
    pub async fn before_tool(&self, call: ToolCall) -> Decision {
        let started = Instant::now();
        let now = self.engine.clock.now();
        let (decision, proceeds) = match self.before_sync(&call, now) {
            Ok(d) => d,
            Err(plan) => {
                let fut = AssertUnwindSafe(self.decide_before_async(&call, now, plan));
                match futures::FutureExt::catch_unwind(fut).await {
                    Ok(d) => d,
                    Err(_) => self.before_failure(&call, now),
                }
            }
        };
        self.finish_before(call, decision, proceeds, started, now)
    }

    /// [`before_tool`](Run::before_tool) for callers that are not async (no runtime needed).
    ///
    /// Returns without blocking when no signal provider or subject extractor is in play (the
    /// common case: nothing to await). Otherwise it waits for them: on the caller's tokio
    /// runtime when called from a worker thread of a multi-threaded one, else on a small
    /// runtime the engine starts once. Do not call it from async code on a current-thread
    /// runtime's own tasks when signals are in play (it then runs them on another thread and
    /// blocks this one meanwhile); use `before_tool` there.
    pub fn before_tool_blocking(&self, call: ToolCall) -> Decision {
        let started = Instant::now();
        let now = self.engine.clock.now();
        let (decision, proceeds) = match self.before_sync(&call, now) {
            Ok(d) => d,
            Err(plan) => {
                let fut = AssertUnwindSafe(self.decide_before_async(&call, now, plan));
                match block_on(futures::FutureExt::catch_unwind(fut)) {
                    Some(Ok(d)) => d,
                    _ => self.before_failure(&call, now),
                }
            }
        };
        self.finish_before(call, decision, proceeds, started, now)
    }

    fn before_failure(&self, call: &ToolCall, now: DateTime<Utc>) -> (Decision, bool) {
        let d = self.failure(
            Phase::Before,
            &call.id,
            now,
            "internal error while deciding",
        );
        (d, false)
    }

    /// The decision and whether the call proceeds, when nothing needs awaiting; else the
    /// plan for the async path.
    fn before_sync(
        &self,
        call: &ToolCall,
        now: DateTime<Utc>,
    ) -> Result<(Decision, bool), AsyncPlan> {
        if self.is_aborted() {
            let d = Decision::simple(
                Phase::Before,
                EffectType::Block,
                DecisionCode::BlockedRunAborted,
                Some(Arc::from(
                    "the run was aborted by an earlier human-review request",
                )),
            );
            return Ok((d, false));
        }
        let policies = self.engine.policies.load();
        let profile = policies.tools.profile(&policies, &call.name, &call.tags);
        if needs_async(&self.engine, &policies, &profile.rules[0], &profile.name_lc) {
            return Err(AsyncPlan {
                policies: arc_swap::Guard::into_inner(policies),
                profile,
            });
        }
        let decide = AssertUnwindSafe(|| {
            let view = call_view(call, &profile, None);
            let mut ctx = DecisionCtx::new(
                &self.engine,
                &policies,
                &self.shared,
                &profile,
                view,
                now,
                call.subjects.clone(),
            );
            let verdict = evaluate_rules_sync(&mut ctx, &profile.rules[0]);
            self.conclude_before(call, now, ctx, verdict)
        });
        Ok(std::panic::catch_unwind(decide).unwrap_or_else(|_| self.before_failure(call, now)))
    }

    async fn decide_before_async(
        &self,
        call: &ToolCall,
        now: DateTime<Utc>,
        plan: AsyncPlan,
    ) -> (Decision, bool) {
        let AsyncPlan { policies, profile } = plan;
        let view = call_view(call, &profile, None);
        let subjects = call.subjects.clone();
        let mut ctx = DecisionCtx::new(
            &self.engine,
            &policies,
            &self.shared,
            &profile,
            view,
            now,
            subjects,
        );
        let rules = &profile.rules[0];
        if !rules.is_empty() {
            extract_subjects(&mut ctx, rules).await;
        }
        let verdict = evaluate_rules(&mut ctx, rules).await;
        self.conclude_before(call, now, ctx, verdict)
    }

    /// Turns the verdict into the decision: hitl lookup, then counters (kept when the call
    /// proceeds, given back otherwise).
    fn conclude_before(
        &self,
        call: &ToolCall,
        now: DateTime<Utc>,
        mut ctx: DecisionCtx<'_>,
        verdict: RuleVerdict,
    ) -> (Decision, bool) {
        let mut d = base_decision(Phase::Before, &verdict, ctx.policies);
        d.evaluated = verdict.evaluated;
        if d.effect == EffectType::Hitl {
            self.resolve_hitl(&mut d, call, now);
        }
        d.signals = std::mem::take(&mut ctx.signals);
        let proceeds = d.effect == EffectType::Allow;
        if proceeds {
            count_allowed(&self.engine, &ctx, &ctx.permits);
        } else {
            for (_, key, permit) in ctx.permits.drain(..) {
                self.engine.state.release(&key, permit);
            }
        }
        (d, proceeds)
    }

    /// Totals, latency, the `tool.decision` event; an allowed call waits in `pending`.
    fn finish_before(
        &self,
        call: ToolCall,
        mut decision: Decision,
        proceeds: bool,
        started: Instant,
        now: DateTime<Utc>,
    ) -> Decision {
        let t = &self.shared.totals;
        t.calls.fetch_add(1, Ordering::Relaxed);
        match decision.effect {
            EffectType::Allow => t.allowed.fetch_add(1, Ordering::Relaxed),
            EffectType::Block => t.blocked.fetch_add(1, Ordering::Relaxed),
            EffectType::Hitl => t.hitl.fetch_add(1, Ordering::Relaxed),
        };
        decision.latency_ns = started.elapsed().as_nanos() as u64;
        let ToolCall {
            id,
            name,
            tags,
            args,
            subjects,
        } = call;
        let pending = |name, tags, args| PendingCall { name, tags, args };
        if self.engine.audit_enabled() {
            // Captured as is (the call moved, or cloned when it proceeds; the decision
            // cloned); the sealer writes the JSON.
            let body = |call_id, name, tags, args, decision| Body::BeforeDecision {
                call_id,
                name,
                tags,
                args,
                subjects,
                decision,
            };
            let body = if proceeds {
                let b = body(
                    id.clone(),
                    name.clone(),
                    tags.clone(),
                    args.clone(),
                    decision.clone(),
                );
                self.shared
                    .pending
                    .lock()
                    .insert(id, pending(name, tags, args));
                b
            } else {
                body(id, name, tags, args, decision.clone())
            };
            self.engine
                .emit_body(&self.shared, EventKind::ToolDecision, body, now);
        } else if proceeds {
            // The call is ours: move it into `pending` rather than cloning its arguments.
            self.shared
                .pending
                .lock()
                .insert(id, pending(name, tags, args));
        }
        decision
    }

    fn failure(&self, phase: Phase, call_id: &str, now: DateTime<Utc>, msg: &str) -> Decision {
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
        let fut = AssertUnwindSafe(self.after_allowed(call_id, pending, outcome, now));
        match futures::FutureExt::catch_unwind(fut).await {
            Ok(d) => d,
            Err(_) => Some(self.after_failure(call_id, now)),
        }
    }

    fn after_failure(&self, call_id: &str, now: DateTime<Utc>) -> Decision {
        self.failure(
            Phase::After,
            call_id,
            now,
            "internal error while recording the result",
        )
    }

    /// [`after_tool`](Run::after_tool) for callers that are not async: returns without
    /// blocking when no signal provider, subject extractor or tool evaluator is in play, else
    /// waits for them as [`before_tool_blocking`](Run::before_tool_blocking) does.
    pub fn after_tool_blocking(&self, call_id: &str, outcome: ToolOutcome) -> Option<Decision> {
        let tool = {
            let pending = self.shared.pending.lock();
            let p = pending.get(call_id)?;
            (p.name.clone(), p.tags.clone())
        };
        let awaits = {
            let policies = self.engine.policies.load();
            let profile = policies.tools.profile(&policies, &tool.0, &tool.1);
            needs_async(&self.engine, &policies, &profile.rules[1], &profile.name_lc)
                || (self.engine.audit_enabled()
                    && self
                        .engine
                        .evals
                        .per_tool
                        .iter()
                        .any(|(g, _)| g.is_match(&*profile.name_lc)))
        };
        let mut fut = std::pin::pin!(self.after_tool(call_id, outcome));
        if !awaits {
            // Nothing to await: one poll finishes it.
            if let Poll::Ready(d) = fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                return d;
            }
        }
        let now = self.engine.clock.now();
        block_on(fut).unwrap_or_else(|| Some(self.after_failure(call_id, now)))
    }

    async fn after_allowed(
        &self,
        call_id: &str,
        pending: PendingCall,
        outcome: ToolOutcome,
        now: DateTime<Utc>,
    ) -> Option<Decision> {
        let started = Instant::now();
        let policies = self.engine.policies.load_full();
        let profile = policies
            .tools
            .profile(&policies, &pending.name, &pending.tags);
        let duration_ms = outcome.duration.as_secs_f64() * 1000.0;
        let audit = self.engine.audit_enabled();

        // Inbuilt metrics of the call: only those a metricWindow tracker or the audit trail uses.
        let mut metrics: SmallVec<[(InbuiltMetric, f64); 5]> = SmallVec::new();
        if audit || !policies.trackers.is_empty() {
            let want =
                |m: InbuiltMetric| audit || policies.trackers_by_metric.contains_key(m.key());
            if want(InbuiltMetric::BytesIn) {
                metrics.push((InbuiltMetric::BytesIn, json_len(&pending.args)));
            }
            if let Some(output) = &outcome.output {
                if want(InbuiltMetric::BytesOut) {
                    metrics.push((InbuiltMetric::BytesOut, json_len(output)));
                }
            }
            metrics.push((InbuiltMetric::DurationMs, duration_ms));
            if let Value::Array(a) = &pending.args {
                metrics.push((InbuiltMetric::RecordsIn, a.len() as f64));
            }
            if let Some(Value::Array(a)) = &outcome.output {
                metrics.push((InbuiltMetric::RecordsOut, a.len() as f64));
            }
        }
        if !policies.trackers.is_empty() {
            for (m, v) in &metrics {
                record_metric(
                    &self.engine,
                    &policies,
                    &self.shared,
                    m.key(),
                    Some((&profile.name_lc, &profile.tags_lc)),
                    *v,
                    now.timestamp_millis(),
                );
            }
        }

        let rules = &profile.rules[1];
        let decision = if rules.is_empty() {
            None
        } else {
            let view = CallView {
                name: &pending.name,
                name_lc: &profile.name_lc,
                tags: &pending.tags,
                tags_lc: &profile.tags_lc,
                args: &pending.args,
                duration_ms: Some(duration_ms),
            };
            let mut ctx = DecisionCtx::new(
                &self.engine,
                &policies,
                &self.shared,
                &profile,
                view,
                now,
                Vec::new(),
            );
            extract_subjects(&mut ctx, rules).await;
            let verdict = evaluate_rules(&mut ctx, rules).await;
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

        self.shared
            .history
            .lock()
            .push(&profile, policies.tools.generation());
        // The evaluators' input lists the run's tool calls: kept only when an evaluator runs.
        let evaluators = &self.engine.evals;
        if audit && (!evaluators.per_tool.is_empty() || evaluators.per_run.is_some()) {
            self.shared
                .tool_calls
                .lock()
                .push(crate::eval::ToolCallRecord {
                    name: pending.name.clone(),
                    args: pending.args.clone(),
                    output: outcome.output.clone(),
                    error: outcome.error.clone(),
                });
        }

        if audit {
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
                None => body.insert(
                    "output".into(),
                    outcome.output.clone().unwrap_or(Value::Null),
                ),
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
    ///
    /// The run's own counters and metric windows (scope `run`) are released: they can never
    /// be read again, and a long-lived engine must not keep them. This costs the same whatever
    /// the size of the policies (the store knows the run's keys).
    pub async fn end(&self, status: &str, final_response: Option<&str>) {
        if self.shared.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        self.engine.state.forget_scope(&self.shared.run_key);
        if self.engine.audit_enabled() {
            let now = self.engine.clock.now();
            let body = self.shared.ended_body(status, final_response, now);
            self.engine.await_background(&self.shared).await;
            let (evaluation, slow) = self
                .engine
                .evaluate_run(&self.shared, final_response, status)
                .await;
            let late_events = slow.is_some();
            self.engine.emit_with_evaluation(
                &self.shared,
                EventKind::RunEnded,
                body,
                now,
                evaluation,
                slow,
            );
            self.engine.await_background(&self.shared).await;
            if late_events {
                // Slow run evaluations land after the signed `run.ended`: sign them too.
                self.engine.emit_closing_checkpoint(&self.shared);
            }
            self.engine.flush_audit().await;
        }
    }
}

fn call_view<'a>(
    call: &'a ToolCall,
    profile: &'a ToolProfile,
    duration_ms: Option<f64>,
) -> CallView<'a> {
    CallView {
        name: &call.name,
        name_lc: &profile.name_lc,
        tags: &call.tags,
        tags_lc: &profile.tags_lc,
        args: &call.args,
        duration_ms,
    }
}

/// Counts an allowed call in every maxCalls counter whose selector selects it and that the
/// decision did not already count.
fn count_allowed(
    engine: &EngineInner,
    ctx: &DecisionCtx<'_>,
    taken: &[(u32, StateKey, crate::state::Permit)],
) {
    for &c in ctx.profile.counters.iter() {
        if taken.iter().any(|(t, _, _)| *t == c) {
            continue;
        }
        if let Some(spec) = ctx.policies.counters.counters.get(c as usize) {
            engine.state.add(
                &ctx.run.state_key(spec.slot, spec.scope),
                spec.window_seconds,
                ctx.now_ms,
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
