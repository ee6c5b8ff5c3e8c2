//! Runs: one agent run's context, history and decisions.
//!
//! A decision that needs nothing awaited (no signal provider, no subject extractor in play) is
//! made synchronously, with no allocation beyond the [`Decision`] itself: the rules in play,
//! the counters a call takes and the sequence entries it satisfies come from the tool's cached
//! profile (see `decide/profile.rs`), and `sequence` conditions read a per-run bitset.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};

use super::parts::{aborted_decision, blank_decision, call_view, clone_subjects, count_allowed};
use super::refused::closed_decision;
use super::stopwatch::Stopwatch;
use crate::audit::EventKind;
use crate::engine::audit::audit_hook::ChainStart;
use crate::engine::audit::run_audit::RunAudit;
use crate::engine::audit::sealer::Body;
use crate::engine::blocking::block_on;
use crate::engine::decide::decision::{Decision, DecisionCode};
use crate::engine::decide::env::RunFacts;
use crate::engine::decide::evaluate::{
    DecisionCtx, RuleVerdict, base_decision_into, evaluate_rules, evaluate_rules_sync,
    extract_subjects,
};
use crate::engine::decide::profile::ToolProfile;
use crate::engine::run::inner::{EngineInner, FailureMode};
use crate::policy::{EffectType, Phase};

pub(crate) use crate::engine::decide::call::{RunContext, ToolCall, ToolOutcome};

pub(crate) use super::pending::{CallRecord, PendingCall, PendingCalls};
pub(crate) use crate::engine::audit::body::obj;

#[derive(Debug, Default)]
pub(crate) struct Totals {
    pub(crate) calls: AtomicU64,
    pub(crate) allowed: AtomicU64,
    pub(crate) blocked: AtomicU64,
    pub(crate) hitl: AtomicU64,
    pub(crate) tokens_in: AtomicU64,
    pub(crate) tokens_out: AtomicU64,
    pub(crate) cost_micro_usd: AtomicU64,
    /// Model calls numbered so far (ids `llm-<n>` of calls given without one).
    pub(crate) llm_calls: AtomicU64,
}

/// State shared by every handle of one run.
pub(crate) struct RunShared {
    pub(crate) engine: Arc<EngineInner>,
    /// What decisions read of the run: its context, start, history, state keys.
    pub(crate) facts: RunFacts,
    pub(crate) aborted: AtomicBool,
    /// Held (shared) while a decision is written, taken (exclusive) when the run ends: a
    /// decision either lands before `run.ended` or sees the run ended (see `closed.rs`).
    pub(crate) gate: parking_lot::RwLock<()>,
    pub(crate) pending: Mutex<PendingCalls>,
    pub(crate) totals: Totals,
    /// On a shared store: the run was resumed; the next read clears its abort flag.
    pub(crate) resume_pending: AtomicBool,
    /// On a shared store: metric events not written yet (see `shared_state.rs`).
    pub(crate) buffered: Mutex<Vec<crate::state::shared::MetricEvent>>,
    /// What the audit trail keeps of the run: its chain, its lease, whether the run has let
    /// go of it (`audit.ended`: ended, left or dropped), the tool calls evaluators read.
    pub(crate) audit: Arc<RunAudit>,
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
            .field("context", &self.shared.facts.context)
            .finish()
    }
}

/// A before decision that awaits something (a signal provider or subject extractor).
struct AsyncPlan {
    policies: Arc<crate::engine::decide::profile::PolicySet>,
    profile: Arc<ToolProfile>,
}

/// A before decision started, waiting for what its plan awaits.
struct Waiting {
    call: ToolCall,
    plan: AsyncPlan,
    started: Stopwatch,
    /// The decision's time.
    at: DateTime<Utc>,
}

/// The rest of a before decision that awaits a signal provider or a subject extractor
/// ([`Run::before_tool_now`]): a future of the decision, to await on a tokio runtime.
pub struct PendingDecision(std::pin::Pin<Box<dyn std::future::Future<Output = Decision> + Send>>);

impl std::future::Future for PendingDecision {
    type Output = Decision;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Decision> {
        self.0.as_mut().poll(cx)
    }
}

impl std::fmt::Debug for PendingDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PendingDecision")
    }
}

impl Run {
    pub(crate) fn new(engine: Arc<EngineInner>, context: RunContext) -> Run {
        let now = engine.clock.now();
        let facts = RunFacts::new(context, now.timestamp_millis());
        let (mut audit, chain_problems, start) =
            engine.audit_for_run(&facts.context, &facts.run_key);
        // A run of a shut-down engine is over before it starts: it writes nothing.
        audit.ended = AtomicBool::new(engine.shut_down.load(Ordering::Acquire));
        let shared = Arc::new(RunShared {
            engine: engine.clone(),
            facts,
            audit: Arc::new(audit),
            aborted: AtomicBool::new(false),
            gate: parking_lot::RwLock::new(()),
            pending: Mutex::new(PendingCalls::default()),
            totals: Totals::default(),
            resume_pending: AtomicBool::new(false),
            buffered: Mutex::new(Vec::new()),
        });
        let run = Run { engine, shared };
        super::observe::each(&run.engine.observers, |o| {
            o.on_run_start(&run.shared.facts.context)
        });
        if run.engine.audit_enabled() && !run.shared.audit.ended.load(Ordering::Acquire) {
            run.emit_start(&start, now);
            for message in chain_problems {
                run.emit(EventKind::Error, obj(json!({ "message": message })), now);
            }
            if start == (ChainStart::Refused { ended: true }) {
                // An ended run's id is not started again: this handle decides nothing.
                run.shared.audit.ended.store(true, Ordering::Release);
            }
            if run.shared.audit.leased
                && let (Some(a), Some(store)) = (&run.engine.audit, &run.engine.shared)
            {
                let every = store.lease_duration().unwrap_or_default() / 3;
                a.hold_lease(&run.shared.audit, every);
            }
        }
        run
    }

    /// The run's first event in this handle's chain: `run.started`, `run.continued` (a run its
    /// last holder left) or `run.resumed` (taken over from a holder whose lease lapsed, or
    /// whose head was lost); nothing for a refused run (its `error` events say why).
    fn emit_start(&self, start: &ChainStart, now: DateTime<Utc>) {
        let ctx = self.shared.facts.context.clone();
        let holder = Value::String(self.shared.audit.owner.to_string());
        let (kind, body) = match start {
            ChainStart::Started => {
                let body = Body::RunStarted(ctx);
                self.engine
                    .emit_body(&self.shared, EventKind::RunStarted, body, now);
                return;
            }
            ChainStart::Refused { .. } => return,
            ChainStart::Continued => (
                EventKind::RunContinued,
                json!({"runContext": &*ctx, "holder": holder}),
            ),
            ChainStart::Resumed {
                replaced,
                head_lost,
            } => (
                EventKind::RunResumed,
                json!({
                    "runContext": &*ctx,
                    "holder": holder,
                    "replacedHolder": replaced,
                    "headLost": head_lost,
                }),
            ),
        };
        self.emit(kind, obj(body), now);
    }

    /// The run's context.
    pub fn context(&self) -> &RunContext {
        &self.shared.facts.context
    }

    /// Whether a hitl decision aborted the run.
    pub fn is_aborted(&self) -> bool {
        self.shared.aborted.load(Ordering::Acquire)
    }

    /// Lifts the pause a hitl decision put on the run (see [`is_aborted`](Run::is_aborted)),
    /// e.g. once its review is resolved: later calls are decided by the rules again.
    ///
    /// On a shared state store the run's abort flag there is cleared by the run's next decision.
    pub fn resume(&self) {
        self.shared.aborted.store(false, Ordering::Release);
        if self.engine.shared.is_some() {
            self.shared.resume_pending.store(true, Ordering::Release);
        }
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

    pub(crate) fn emit(&self, kind: EventKind, body: Map<String, Value>, at: DateTime<Utc>) {
        self.engine.emit(&self.shared, kind, body, at);
    }
    /// Decides whether a tool call may proceed (phase `tool.before`).
    ///
    /// Never fails: an internal fault yields a decision by the engine's failure mode. When no
    /// signal provider or subject extractor is in play the decision is made without awaiting
    /// (see [`before_tool_blocking`](Run::before_tool_blocking) for callers that are not async,
    /// [`before_tool_now`](Run::before_tool_now) for callers that hand the rest elsewhere).
    pub async fn before_tool(&self, call: ToolCall) -> Decision {
        let mut decision = blank_decision();
        match self.before_start(call, &mut decision) {
            None => decision,
            Some(waiting) => self.before_rest(waiting).await,
        }
    }

    /// [`before_tool`](Run::before_tool) made at once when nothing has to be awaited (the
    /// common case), without a future to allocate or poll: `Err` holds the rest of the
    /// decision, a future to await on a tokio runtime (signal providers and subject extractors
    /// may use its timers). For bindings that return at once what they can and hand the rest
    /// to their runtime.
    pub fn before_tool_now(&self, call: ToolCall) -> Result<Decision, PendingDecision> {
        let mut decision = blank_decision();
        match self.before_start(call, &mut decision) {
            None => Ok(decision),
            Some(waiting) => {
                let run = self.clone();
                Err(PendingDecision(Box::pin(async move {
                    run.before_rest(waiting).await
                })))
            }
        }
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
        // Written in place, the one value returned: the ~250-byte decision is never copied.
        let mut decision = blank_decision();
        if let Some(w) = self.before_start(call, &mut decision) {
            let fut = AssertUnwindSafe(self.decide_before_async(&w.call, w.at, w.plan));
            let (d, proceeds) = match block_on(futures::FutureExt::catch_unwind(fut)) {
                Some(Ok(d)) => d,
                _ => self.before_failure(&w.call, w.at),
            };
            decision = d;
            self.finish_before(w.call, &mut decision, proceeds, w.started, Some(w.at));
        }
        decision
    }

    /// A before decision as far as it goes without awaiting: written to `decision` (fresh
    /// from [`blank_decision`]) and finished (`None`), or what the rest needs. (Inlined: the
    /// call is moved in, and a call of its own copies it, ~30 instructions a decision.)
    #[inline(always)]
    fn before_start(&self, call: ToolCall, decision: &mut Decision) -> Option<Waiting> {
        if let Some(why) = self.closed() {
            *decision = closed_decision(Phase::Before, why);
            return None;
        }
        let started = Stopwatch::start();
        let mut now = self.audited_now();
        if let Some(at) = now
            && let Some(d) = self.refuse_too_deep(&call, at)
        {
            *decision = d;
            return None;
        }
        match self.before_sync(&call, &mut now, decision) {
            Ok(proceeds) => {
                self.finish_before(call, decision, proceeds, started, now);
                None
            }
            Err(plan) => {
                let at = now.unwrap_or_else(|| self.engine.clock.now());
                Some(Waiting {
                    call,
                    plan,
                    started,
                    at,
                })
            }
        }
    }

    /// The rest of a before decision that awaits something.
    async fn before_rest(&self, w: Waiting) -> Decision {
        let fut = AssertUnwindSafe(self.decide_before_async(&w.call, w.at, w.plan));
        let (mut decision, proceeds) = match futures::FutureExt::catch_unwind(fut).await {
            Ok(d) => d,
            Err(_) => self.before_failure(&w.call, w.at),
        };
        self.finish_before(w.call, &mut decision, proceeds, w.started, Some(w.at));
        decision
    }

    /// The time of a before decision when the audit trail records it; otherwise `None`: the
    /// decision reads the clock only if a condition or a review needs the time.
    #[inline]
    fn audited_now(&self) -> Option<DateTime<Utc>> {
        self.engine.audit_enabled().then(|| self.engine.clock.now())
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

    /// Whether the call proceeds, the decision written to `out` (fresh from
    /// [`blank_decision`]), when nothing needs awaiting; else the plan for the async path.
    /// (Written in place: a decision is large, and moving it costs a copy each time.)
    /// `now`: the decision's time, if known; set when the decision read the clock.
    fn before_sync(
        &self,
        call: &ToolCall,
        now: &mut Option<DateTime<Utc>>,
        out: &mut Decision,
    ) -> Result<bool, AsyncPlan> {
        let shared_store = self.engine.shared.is_some();
        if !shared_store && self.is_aborted() {
            *out = aborted_decision();
            return Ok(false);
        }
        let (policies, profile) = self.engine.policies.tool_profile(&call.name, &call.tags);
        if shared_store || profile.needs_async(&self.engine.decide, Phase::Before) {
            return Err(AsyncPlan { policies, profile });
        }
        let decide = AssertUnwindSafe(|| {
            let view = call_view(call, &profile, None);
            // Released by hand (see `DecisionCtx::release`).
            let mut ctx = std::mem::ManuallyDrop::new(DecisionCtx::new_at(
                &self.engine.decide,
                &policies,
                &self.shared.facts,
                &profile,
                view,
                Some(&*self.engine.clock),
                clone_subjects(&call.subjects),
            ));
            if let Some(at) = *now {
                ctx.set_now(at);
            }
            let verdict = evaluate_rules_sync(&mut ctx, &profile.rules[0]);
            let proceeds = self.conclude_before_into(call, &mut ctx, verdict, out);
            let read = ctx.now_if_read();
            ctx.release();
            (proceeds, read)
        });
        match std::panic::catch_unwind(decide) {
            Ok((proceeds, read)) => {
                *now = read;
                Ok(proceeds)
            }
            Err(_) => {
                let at = *now.get_or_insert_with(|| self.engine.clock.now());
                let (d, proceeds) = self.before_failure(call, at);
                *out = d;
                Ok(proceeds)
            }
        }
    }

    async fn decide_before_async(
        &self,
        call: &ToolCall,
        now: DateTime<Utc>,
        plan: AsyncPlan,
    ) -> (Decision, bool) {
        let AsyncPlan { policies, profile } = plan;
        if let Some(store) = self.engine.shared.clone() {
            return self
                .decide_before_shared(&*store, call, now, policies, profile)
                .await;
        }
        let view = call_view(call, &profile, None);
        let subjects = call.subjects.clone();
        let mut ctx = DecisionCtx::new(
            &self.engine.decide,
            &policies,
            &self.shared.facts,
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
        self.conclude_before(call, now, &mut ctx, verdict)
    }

    /// Turns the verdict into the decision: hitl lookup, then counters (kept when the call
    /// proceeds, given back otherwise).
    pub(crate) fn conclude_before(
        &self,
        call: &ToolCall,
        now: DateTime<Utc>,
        ctx: &mut DecisionCtx<'_>,
        verdict: RuleVerdict,
    ) -> (Decision, bool) {
        debug_assert_eq!(ctx.now(), now);
        let mut d = blank_decision();
        let proceeds = self.conclude_before_into(call, ctx, verdict, &mut d);
        (d, proceeds)
    }

    /// [`conclude_before`](Run::conclude_before), writing the decision to `d` (fresh from
    /// [`blank_decision`]).
    pub(crate) fn conclude_before_into(
        &self,
        call: &ToolCall,
        ctx: &mut DecisionCtx<'_>,
        verdict: RuleVerdict,
        d: &mut Decision,
    ) -> bool {
        base_decision_into(d, Phase::Before, &verdict, ctx.policies);
        d.evaluated = verdict.evaluated;
        if d.effect == EffectType::Hitl {
            self.resolve_hitl(d, call, ctx.now());
        }
        d.signals = std::mem::take(&mut ctx.signals);
        let proceeds = d.effect == EffectType::Allow;
        if ctx.remote.is_some() {
            // A shared store: the caller writes the outcome.
        } else if proceeds {
            count_allowed(&self.engine, ctx, &ctx.permits);
        } else {
            for (_, key, permit) in ctx.permits.drain(..) {
                self.engine.decide.state.release(&key, permit);
            }
        }
        proceeds
    }

    /// Totals, latency, the `tool.decision` event; an allowed call waits in `pending`.
    /// (The decision is updated in place: moving it in and out would copy it twice.)
    fn finish_before(
        &self,
        call: ToolCall,
        decision: &mut Decision,
        proceeds: bool,
        started: Stopwatch,
        now: Option<DateTime<Utc>>,
    ) {
        // The run may have ended while this call was decided: then it is refused, unwritten.
        // The gate orders this decision against `run.ended` for the trail and the observers;
        // with neither, nothing after `end` reads what it writes (one test, no lock).
        let _open = (self.engine.audit_enabled() || !self.engine.observers.is_empty())
            .then(|| self.shared.gate.read());
        if let Some(why) = self.closed() {
            *decision = closed_decision(Phase::Before, why);
            return;
        }
        let t = &self.shared.totals;
        t.calls.fetch_add(1, Ordering::Relaxed);
        match decision.effect {
            EffectType::Allow => t.allowed.fetch_add(1, Ordering::Relaxed),
            EffectType::Block => t.blocked.fetch_add(1, Ordering::Relaxed),
            EffectType::Hitl => t.hitl.fetch_add(1, Ordering::Relaxed),
        };
        decision.latency_ns = started.elapsed_ns();
        super::observe::each(&self.engine.observers, |o| {
            o.on_decision(&self.shared.facts.context, &call, decision)
        });
        let ToolCall {
            id,
            name,
            tags,
            args,
            subjects,
        } = call;
        if !self.engine.audit_enabled() && !proceeds {
            return;
        }
        // Kept once: the pending set and the audit event share it (no copy of the arguments).
        let redaction = if self.engine.audit_enabled() {
            crate::engine::decide::conditions::redaction(&args, None, &decision.evaluated)
                .map(Box::new)
        } else {
            None
        };
        let record = CallRecord {
            id,
            name,
            tags,
            args,
            redaction,
        };
        if !self.engine.audit_enabled() {
            // Nothing shares the call: the run keeps it (no allocation).
            let dropped = self.shared.pending.lock().insert(PendingCall::Own(record));
            if dropped > 0 {
                self.pending_dropped(dropped, now);
            }
            return;
        }
        let call = Arc::new(record);
        if proceeds {
            let dropped = self
                .shared
                .pending
                .lock()
                .insert(PendingCall::Shared(call.clone()));
            if dropped > 0 {
                self.pending_dropped(dropped, now);
            }
        }
        {
            // Captured as is (the decision cloned); the sealer writes the JSON.
            let body = Body::BeforeDecision {
                call,
                subjects,
                decision: decision.clone(),
            };
            let now = now.unwrap_or_else(|| self.engine.clock.now());
            self.engine
                .emit_body(&self.shared, EventKind::ToolDecision, body, now);
        }
    }

    /// The run's bound on calls waiting for their results dropped the `n` oldest: said in
    /// the log and, with a trail, in an `error` event.
    #[cold]
    #[inline(never)]
    fn pending_dropped(&self, n: usize, now: Option<DateTime<Utc>>) {
        let msg = format!(
            "run {:?}: more than {} allowed calls wait for their results (after_tool never \
             called for them); the {n} oldest were dropped: a result reported later for one of \
             them is decided by the failure mode",
            self.shared.facts.context.run_id,
            super::pending::MAX_PENDING
        );
        tracing::warn!("{msg}");
        let now = now.unwrap_or_else(|| self.engine.clock.now());
        self.emit(
            EventKind::Error,
            obj(json!({"message": msg, "pendingDropped": n})),
            now,
        );
    }

    pub(crate) fn failure(
        &self,
        phase: Phase,
        call_id: &str,
        now: DateTime<Utc>,
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

    pub(crate) fn abort(&self) {
        self.shared.aborted.store(true, Ordering::Release);
    }
}
