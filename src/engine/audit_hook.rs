//! The engine's side of the audit trail: one hash chain per run; events are redacted, sealed
//! in order under the run's chain lock and handed to the bus (which never blocks). Evaluation
//! results are attached here too.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};

use super::EngineInner;
use super::evaluations::{EvalSet, run_to_json};
use super::run::{RunContext, RunShared, ToolOutcome};
use super::sealer::{Body, Sealer, SealerConfig};
use crate::audit::{AuditBus, EventKind, Redactor, RunChain, RunSigner};
use crate::eval::EvaluationInput;
use crate::state::{ChainClaim, ChainHead};

/// Audit settings of an engine.
pub(crate) struct AuditState {
    /// Seals queued events in batches and hands them to the bus.
    pub(crate) sealer: Sealer,
    pub(crate) flush_timeout: Duration,
    /// Signs every run's chain, when set.
    pub(crate) signer: Option<Arc<RunSigner>>,
    /// Chain heads of runs left open, without a shared store (see [`MemoryHeads`]).
    pub(crate) heads: MemoryHeads,
}

/// The chain heads of an engine without a shared state store: a run left open (or dropped)
/// and started again in the same engine continues its chain, as it does across processes on
/// a shared store (design §8). Keyed by the run's scope string.
#[derive(Default)]
pub(crate) struct MemoryHeads(dashmap::DashMap<Arc<str>, MemoryHead>);

#[derive(Default)]
pub(crate) struct MemoryHead {
    head: Option<ChainHead>,
    owner: Option<Box<str>>,
    /// A dropped run's chain and shard: its head once its queued events are sealed (a drop
    /// does not wait for the sinks, so the next claim seals them).
    parked: Option<(Arc<Mutex<RunChain>>, usize)>,
}

impl MemoryHeads {
    fn claim(&self, run_key: &Arc<str>, owner: &str, sealer: &Sealer) -> ChainClaim {
        let parked = self.0.get_mut(run_key).and_then(|mut e| e.parked.take());
        let sealed = parked.and_then(|(chain, shard)| {
            sealer.drain_shard(shard);
            head_of(&chain.lock())
        });
        let mut e = self.0.entry(run_key.clone()).or_default();
        if sealed.is_some() {
            e.head = sealed;
        }
        let held_elsewhere = e.owner.as_deref().is_some_and(|o| o != owner);
        e.owner = Some(owner.into());
        ChainClaim {
            head: e.head.clone(),
            held_elsewhere,
        }
    }

    /// Lets go of the chain: `Some(head)` written for the next holder, `None` forgotten (the
    /// run ended). `false`: another owner claimed it meanwhile (a fork).
    fn leave(&self, run_key: &str, owner: &str, head: Option<ChainHead>) -> bool {
        let Some(mut e) = self.0.get_mut(run_key) else {
            return true;
        };
        if e.owner.as_deref().is_some_and(|o| o != owner) {
            return false;
        }
        match head {
            Some(h) => {
                e.head = Some(h);
                e.owner = None;
            }
            None => {
                drop(e);
                self.0.remove(run_key);
            }
        }
        true
    }

    /// [`leave`](Self::leave) for a dropped run: the head is read at the next claim.
    fn park(&self, run_key: &str, owner: &str, chain: Arc<Mutex<RunChain>>, shard: usize) -> bool {
        let Some(mut e) = self.0.get_mut(run_key) else {
            return true;
        };
        if e.owner.as_deref().is_some_and(|o| o != owner) {
            return false;
        }
        e.owner = None;
        e.parked = Some((chain, shard));
        true
    }
}

/// Where a chain stands (`None` before its first event).
fn head_of(chain: &RunChain) -> Option<ChainHead> {
    Some(ChainHead {
        next_seq: chain.next_seq(),
        last_hash: chain.last_hash()?.to_string(),
    })
}

impl AuditState {
    pub(crate) fn new(
        bus: AuditBus,
        redactor: Redactor,
        flush_timeout: Duration,
        sealers: SealerConfig,
        signer: Option<Arc<RunSigner>>,
    ) -> AuditState {
        AuditState {
            sealer: Sealer::start(bus, redactor, flush_timeout, sealers),
            flush_timeout,
            signer,
            heads: MemoryHeads::default(),
        }
    }

    /// The bus, after everything queued was sealed and handed to it.
    pub(crate) fn drained_bus(&self) -> &AuditBus {
        self.sealer.drain();
        self.sealer.bus()
    }
}

/// Slow evaluators and the input they are to run on, after the event is sealed.
pub(crate) type SlowEvaluation = (Arc<crate::eval::EvaluationRunner>, EvaluationInput);

/// Per-run audit state: the run's hash chain and its background evaluations.
pub(crate) struct RunAudit {
    chain: Option<Arc<Mutex<RunChain>>>,
    /// The sealer shard the run's events go to.
    shard: usize,
    background: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// This handle's claim on the run's chain head (unique per run handle).
    owner: Box<str>,
}

/// What starting a run's chain found wrong, for `error` events after `run.started`.
pub(crate) type ChainProblems = Vec<String>;

impl EngineInner {
    pub(crate) fn audit_enabled(&self) -> bool {
        self.audit.is_some()
    }

    /// The run's audit state: its chain starts where a holder that left the run left it (on
    /// the shared store, or in this engine), else at `seq` 0. What went wrong (the store
    /// failed, another holder has not left the run: a fork) is returned for `error` events.
    pub(crate) fn audit_for_run(
        &self,
        ctx: &RunContext,
        run_key: &Arc<str>,
    ) -> (RunAudit, ChainProblems) {
        let mut problems = ChainProblems::new();
        let Some(a) = self.audit.as_ref() else {
            let audit = RunAudit {
                shard: 0,
                chain: None,
                background: Mutex::new(Vec::new()),
                owner: Box::from(""),
            };
            return (audit, problems);
        };
        let owner = uuid::Uuid::now_v7().simple().to_string();
        let claim = match &self.shared {
            Some(store) => {
                let claimed = super::blocking::block_on(store.claim_chain(
                    &ctx.agent_id,
                    &ctx.run_id,
                    &owner,
                ));
                match claimed {
                    Some(Ok(c)) => c,
                    Some(Err(e)) => {
                        problems.push(format!(
                            "state store: reading the run's audit chain head failed: {e}; \
                             the chain starts at seq 0"
                        ));
                        ChainClaim::default()
                    }
                    None => {
                        problems.push(
                            "state store: no runtime to read the run's audit chain head; \
                             the chain starts at seq 0"
                                .to_string(),
                        );
                        ChainClaim::default()
                    }
                }
            }
            None => a.heads.claim(run_key, &owner, &a.sealer),
        };
        if claim.held_elsewhere {
            problems.push(format!(
                "fork: run {:?} of agent {:?} is held by another process or handle that has \
                 not left it; two writers append to its audit chain at once",
                ctx.run_id, ctx.agent_id
            ));
        }
        let mut chain = RunChain::new(
            ctx.run_id.clone(),
            ctx.agent_id.clone(),
            ctx.enduser.as_ref().map(|u| u.id.clone()),
        )
        .with_signer(a.signer.clone());
        if let Some(h) = &claim.head {
            chain = chain.continue_at(h.next_seq, &h.last_hash);
        }
        let audit = RunAudit {
            shard: a.sealer.assign_shard(),
            chain: Some(Arc::new(Mutex::new(chain))),
            background: Mutex::new(Vec::new()),
            owner: owner.into(),
        };
        (audit, problems)
    }

    /// Seals what the run queued and answers where its chain stands.
    fn sealed_head(&self, run: &RunShared) -> Option<ChainHead> {
        let a = self.audit.as_ref()?;
        a.sealer.drain_shard(run.audit.shard);
        let chain = run.audit.chain.as_ref()?.lock();
        head_of(&chain)
    }

    /// Leaves the run's chain (after sealing its queued events): writes its head for the next
    /// holder, or forgets it when `ended`. A fork (another holder claimed the run meanwhile)
    /// or a store failure is an `error` event.
    pub(crate) async fn leave_chain(&self, run: &RunShared, ended: bool) {
        let Some(head) = self.sealed_head(run) else {
            return;
        };
        let head = (!ended).then_some(head);
        let ctx = &run.context;
        let outcome = match &self.shared {
            Some(store) => store
                .leave_chain(&ctx.agent_id, &ctx.run_id, &run.audit.owner, head.as_ref())
                .await
                .map_err(|e| e.to_string()),
            None => Ok(self.leave_memory_chain(run, head)),
        };
        self.report_leave(run, outcome);
    }

    /// [`leave_chain`](Self::leave_chain) for a dropped run, which must not wait (for the
    /// sinks, or the store): in memory the chain is parked for the next claim to read; on a
    /// shared store a thread of its own seals the run's events and writes the head.
    pub(crate) fn leave_chain_on_drop(self: &Arc<Self>, run: &RunShared) {
        let (Some(a), Some(chain)) = (self.audit.as_ref(), run.audit.chain.clone()) else {
            return;
        };
        let shard = run.audit.shard;
        let Some(store) = self.shared.clone() else {
            let ok = a
                .heads
                .park(&run.run_key, &run.audit.owner, chain.clone(), shard);
            if !ok {
                self.report_leave_on(shard, &chain, &run.context, Ok(false));
            }
            return;
        };
        let engine = self.clone();
        let owner = run.audit.owner.clone();
        let ctx = run.context.clone();
        let spawned = std::thread::Builder::new()
            .name("toolgate-leave-run".into())
            .spawn(move || {
                let Some(a) = engine.audit.as_ref() else {
                    return;
                };
                a.sealer.drain_shard(shard);
                let Some(head) = head_of(&chain.lock()) else {
                    return;
                };
                let left = super::blocking::block_on(store.leave_chain(
                    &ctx.agent_id,
                    &ctx.run_id,
                    &owner,
                    Some(&head),
                ))
                .unwrap_or_else(|| Err(crate::state::SharedStateError("no runtime".into())))
                .map_err(|e| e.to_string());
                engine.report_leave_on(shard, &chain, &ctx, left);
            });
        if let Err(e) = spawned {
            tracing::warn!(run_id = %run.context.run_id, "cannot hand the run's audit chain on: {e}");
        }
    }

    fn leave_memory_chain(&self, run: &RunShared, head: Option<ChainHead>) -> bool {
        self.audit
            .as_ref()
            .is_none_or(|a| a.heads.leave(&run.run_key, &run.audit.owner, head))
    }

    fn report_leave(&self, run: &RunShared, outcome: Result<bool, String>) {
        if let Some(chain) = &run.audit.chain {
            self.report_leave_on(run.audit.shard, chain, &run.context, outcome);
        }
    }

    /// An `error` event for a fork or a store failure found when letting go of a chain,
    /// sealed at once.
    fn report_leave_on(
        &self,
        shard: usize,
        chain: &Arc<Mutex<RunChain>>,
        ctx: &RunContext,
        outcome: Result<bool, String>,
    ) {
        let message = match outcome {
            Ok(true) => return,
            Ok(false) => format!(
                "fork: run {:?} of agent {:?} was claimed by another process or handle while \
                 this one appended to it; two audit chains were written",
                ctx.run_id, ctx.agent_id
            ),
            Err(e) => format!("state store: writing the run's audit chain head failed: {e}"),
        };
        let Some(a) = &self.audit else {
            return;
        };
        let mut body = Map::new();
        body.insert("message".into(), Value::String(message));
        a.sealer.push(
            shard,
            chain,
            EventKind::Error,
            self.clock.now(),
            Body::Json(body),
        );
        a.sealer.drain_shard(shard);
    }

    /// Queues an event of the run for sealing (redaction, hash, chain) off the caller's
    /// thread; returns its id.
    pub(crate) fn emit(
        &self,
        run: &RunShared,
        kind: EventKind,
        body: Map<String, Value>,
        at: DateTime<Utc>,
    ) -> Option<uuid::Uuid> {
        self.emit_body(run, kind, Body::Json(body), at)
    }

    /// [`emit`](Self::emit) with a typed body, turned into JSON by the sealer.
    pub(crate) fn emit_body(
        &self,
        run: &RunShared,
        kind: EventKind,
        body: Body,
        at: DateTime<Utc>,
    ) -> Option<uuid::Uuid> {
        let audit = self.audit.as_ref()?;
        let chain = run.audit.chain.as_ref()?;
        Some(audit.sealer.push(run.audit.shard, chain, kind, at, body))
    }

    /// Emits a `tool.result` or `run.ended` event (the fast evaluators' result attached to
    /// `body` already), then starts the slow evaluators, which emit a linked
    /// `evaluation.result` event (naming `call_id`, when given).
    pub(crate) fn emit_with_evaluation(
        self: &Arc<Self>,
        run: &Arc<RunShared>,
        kind: EventKind,
        body: Body,
        at: DateTime<Utc>,
        slow: Option<SlowEvaluation>,
        call_id: Option<&str>,
    ) {
        let Some(event_id) = self.emit_body(run, kind, body, at) else {
            return;
        };
        if let Some((runner, input)) = slow {
            let engine = self.clone();
            let run2 = run.clone();
            let call_id = call_id.map(str::to_string);
            let handle = tokio::spawn(async move {
                let result = run_to_json(&runner, input).await;
                let mut body = Map::new();
                body.insert("forEventId".into(), Value::String(event_id.to_string()));
                body.insert(
                    "forEventKind".into(),
                    Value::String(kind.as_str().to_string()),
                );
                if let Some(c) = call_id {
                    body.insert("callId".into(), Value::String(c));
                }
                body.insert("evaluation".into(), result);
                let now = engine.clock.now();
                engine.emit(&run2, EventKind::EvaluationResult, body, now);
            });
            run.audit.background.lock().push(handle);
        }
    }

    /// With a signing key, seals a `checkpoint` that signs the events written after the
    /// run's `run.ended` (slow run evaluations).
    pub(crate) fn emit_closing_checkpoint(&self, run: &RunShared) {
        if self.audit.as_ref().is_some_and(|a| a.signer.is_some()) {
            let now = self.clock.now();
            self.emit(run, EventKind::Checkpoint, Map::new(), now);
        }
    }

    /// Waits (bounded by the flush timeout) for the run's background evaluations.
    pub(crate) async fn await_background(&self, run: &RunShared) {
        let handles: Vec<_> = std::mem::take(&mut *run.audit.background.lock());
        if handles.is_empty() {
            return;
        }
        let timeout = self
            .audit
            .as_ref()
            .map_or(Duration::from_secs(5), |a| a.flush_timeout);
        let all = futures::future::join_all(handles);
        if tokio::time::timeout(timeout, all).await.is_err() {
            tracing::warn!(run_id = %run.context.run_id, "background evaluations did not finish within {timeout:?}");
        }
    }

    /// Seals what the run queued (its shard's queue, on this thread) and flushes the sinks:
    /// on `Run::end`, which need not seal the other runs' events.
    pub(crate) async fn flush_run_audit(&self, run: &RunShared) {
        if let Some(a) = &self.audit {
            a.sealer.drain_shard(run.audit.shard);
            if let Err(e) = a.sealer.bus().flush(a.flush_timeout).await {
                tracing::warn!("audit flush: {e}");
            }
        }
    }

    /// Runs the evaluators configured for this tool over its output.
    pub(crate) async fn evaluate_tool_output(
        &self,
        run: &RunShared,
        tool: &str,
        args: &Value,
        outcome: &ToolOutcome,
    ) -> (Option<Value>, Option<SlowEvaluation>) {
        if self.evals.per_tool.is_empty() {
            return (None, None);
        }
        let tool_lc = tool.to_lowercase();
        let Some((_, set)) = self
            .evals
            .per_tool
            .iter()
            .find(|(g, _)| g.is_match(&tool_lc))
        else {
            return (None, None);
        };
        let response = outcome.output.clone().unwrap_or(Value::Null);
        let context = json!({
            "toolName": tool,
            "args": args,
            "error": outcome.error,
            "durationMs": outcome.duration.as_secs_f64() * 1000.0,
            "runId": run.context.run_id,
        });
        self.run_eval_set(set, run, response, context).await
    }

    /// Runs the run-level evaluators over the final response.
    pub(crate) async fn evaluate_run(
        &self,
        run: &RunShared,
        final_response: Option<&str>,
        status: &str,
    ) -> (Option<Value>, Option<SlowEvaluation>) {
        let Some(set) = &self.evals.per_run else {
            return (None, None);
        };
        let response = final_response.map_or(Value::Null, |r| Value::String(r.to_string()));
        let context = json!({"runId": run.context.run_id, "status": status});
        self.run_eval_set(set, run, response, context).await
    }

    /// Builds the input (the run's agent, session and real tool calls), runs the fast
    /// evaluators now and hands back the slow ones with their input.
    async fn run_eval_set(
        &self,
        set: &EvalSet,
        run: &RunShared,
        response: Value,
        context: Value,
    ) -> (Option<Value>, Option<SlowEvaluation>) {
        let mut input = EvaluationInput::new(response);
        input.agent_id = Some(run.context.agent_id.clone());
        input.session_id = run.context.session_id.clone();
        input.context = Some(context);
        input.tool_calls = Some(run.tool_calls.lock().clone());
        input.timestamp = Some(self.clock.now().timestamp_millis());
        let fast = match &set.fast {
            Some(r) => Some(run_to_json(r, input.clone()).await),
            None => None,
        };
        (fast, set.slow.clone().map(|r| (r, input)))
    }
}
