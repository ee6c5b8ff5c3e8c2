//! The engine's side of the audit trail: one hash chain per run; events are redacted, sealed
//! in order under the run's chain lock and handed to the bus (which never blocks). Evaluation
//! results are attached here too.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};

use super::evaluations::{EvalSet, run_to_json};
use super::sealer::{Body, Sealer, SealerConfig};
use crate::audit::{AuditBus, EventKind, Redactor, RunChain, RunSigner};
use crate::engine::EngineInner;
use crate::engine::decide::call::{RunContext, ToolOutcome};
use crate::engine::run::handle::RunShared;
use crate::eval::EvaluationInput;
use crate::state::ChainClaim;

/// Audit settings of an engine.
pub(crate) struct AuditState {
    /// Seals queued events in batches and hands them to the bus.
    pub(crate) sealer: Sealer,
    pub(crate) flush_timeout: Duration,
    /// Signs every run's chain, when set.
    pub(crate) signer: Option<Arc<RunSigner>>,
    /// Chain heads of runs left open, without a shared store (see `chain_head.rs`).
    pub(crate) heads: super::chain_head::MemoryHeads,
    /// The redaction rules (also applied to the arguments a review shows).
    pub(crate) redactor: Redactor,
    /// Runs held under a lease on the shared store (see `lease.rs`).
    pub(crate) leases: super::lease::Leases,
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
            redactor: redactor.clone(),
            sealer: Sealer::start(bus, redactor, flush_timeout, sealers),
            flush_timeout,
            signer,
            heads: super::chain_head::MemoryHeads::default(),
            leases: super::lease::Leases::default(),
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
    pub(super) chain: Option<Arc<Mutex<RunChain>>>,
    /// The sealer shard the run's events go to.
    pub(super) shard: usize,
    background: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// This handle's claim on the run's chain head (unique per run handle).
    pub(crate) owner: Box<str>,
    /// The run is held under a lease on the shared store (renewed with each reservation).
    pub(crate) leased: bool,
    /// The lease was lost (taken over), or never had (held elsewhere, or the run had ended):
    /// this handle appends nothing to the run's chain (its events go to a side chain).
    pub(crate) lost: std::sync::atomic::AtomicBool,
}

/// What starting a run's chain found wrong, for `error` events after its first event.
pub(crate) type ChainProblems = Vec<String>;

/// How a run's chain starts (its first event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChainStart {
    /// A new run: `run.started`.
    Started,
    /// A run its last holder left: `run.continued`.
    Continued,
    /// A run taken over from a holder whose lease lapsed, or whose head was lost:
    /// `run.resumed`.
    Resumed {
        replaced: Option<String>,
        head_lost: bool,
    },
    /// The run cannot be held (it has ended, or a live holder has it): the handle's events
    /// go to a side chain; its decisions are refused (ended) or decided by the failure mode.
    Refused { ended: bool },
}

/// How long a claim waits for a live holder to let go of a run (the lease plus a second).
fn claim_deadline(lease: std::time::Duration) -> std::time::Instant {
    std::time::Instant::now() + lease + Duration::from_secs(1)
}

impl EngineInner {
    #[inline]
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
    ) -> (RunAudit, ChainProblems, ChainStart) {
        let mut problems = ChainProblems::new();
        let Some(a) = self.audit.as_ref() else {
            let audit = RunAudit {
                shard: 0,
                chain: None,
                background: Mutex::new(Vec::new()),
                owner: Box::from(""),
                leased: false,
                lost: Default::default(),
            };
            return (audit, problems, ChainStart::Started);
        };
        let owner = uuid::Uuid::now_v7().simple().to_string();
        let claim = match &self.shared {
            Some(store) => self.claim_shared(&**store, ctx, &owner, &mut problems),
            None => a.heads.claim(run_key, &owner),
        };
        if claim.held_elsewhere && self.shared.is_none() {
            problems.push(format!(
                "fork: run {:?} of agent {:?} is held by another process or handle that has \
                 not left it; two writers append to its audit chain at once",
                ctx.run_id, ctx.agent_id
            ));
        }
        let start = if claim.ended {
            problems.push(format!(
                "run {:?} of agent {:?} has ended: its id is not started again (one chain per \
                 run id); this handle's calls are refused and written here, in a side chain",
                ctx.run_id, ctx.agent_id
            ));
            ChainStart::Refused { ended: true }
        } else if claim.held_elsewhere && self.shared.is_some() {
            problems.push(format!(
                "run {:?} of agent {:?} is held by another live process (holder {}) that did not \
                 let go of it within its lease; this handle appends nothing to the run's chain: \
                 its calls are decided by the failure mode and written here, in a side chain",
                ctx.run_id,
                ctx.agent_id,
                claim.holder.as_deref().unwrap_or("?")
            ));
            ChainStart::Refused { ended: false }
        } else if claim.replaced.is_some() || claim.head_lost {
            ChainStart::Resumed {
                replaced: claim.replaced.clone(),
                head_lost: claim.head.is_none(),
            }
        } else if claim.head.is_some() {
            ChainStart::Continued
        } else {
            ChainStart::Started
        };
        let refused = matches!(start, ChainStart::Refused { .. });
        let run_id = if refused {
            let why = if claim.ended {
                "ended"
            } else {
                "held-elsewhere"
            };
            super::lease::side_run_id(&ctx.run_id, &owner, why)
        } else {
            ctx.run_id.clone()
        };
        let mut chain = RunChain::new(
            run_id,
            ctx.agent_id.clone(),
            ctx.enduser.as_ref().map(|u| u.id.clone()),
        )
        .with_signer(a.signer.clone());
        if let (Some(h), false) = (&claim.head, refused) {
            chain = chain.continue_at(h.next_seq, &h.last_hash);
        }
        let audit = RunAudit {
            shard: a.sealer.assign_shard(),
            chain: Some(Arc::new(Mutex::new(chain))),
            background: Mutex::new(Vec::new()),
            owner: owner.into(),
            leased: claim.leased && !refused,
            lost: std::sync::atomic::AtomicBool::new(refused),
        };
        (audit, problems, start)
    }

    /// Claims the run on the shared store, waiting (bounded by the lease) while another live
    /// holder has it: it lets go (a hand-over) or its lease lapses (a takeover).
    fn claim_shared(
        &self,
        store: &dyn crate::state::SharedStateStore,
        ctx: &RunContext,
        owner: &str,
        problems: &mut ChainProblems,
    ) -> ChainClaim {
        let lease = store.lease_duration().unwrap_or_default();
        let deadline = claim_deadline(lease);
        let poll = (lease / 20).clamp(Duration::from_millis(20), Duration::from_millis(250));
        // A hand-over (the last holder let go: a handle dropped or ended a moment ago, often in
        // this process) usually lands within milliseconds: ask again soon, then back off to
        // `poll`, so continuing a run does not cost a whole poll interval.
        let mut wait = Duration::from_millis(2).min(poll);
        // A store that fails is asked twice more, no longer: a server that is down must not
        // hold every run's start for the lease.
        let mut retries = 2u8;
        loop {
            let claimed = crate::engine::blocking::block_on(store.claim_chain(
                &ctx.agent_id,
                &ctx.run_id,
                owner,
            ));
            match claimed {
                Some(Ok(c)) if c.held_elsewhere && std::time::Instant::now() < deadline => {
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(poll);
                }
                Some(Ok(c)) => return c,
                // A connection broken a moment ago (a restarted server) is re-established in
                // the background: ask again within the same bound.
                Some(Err(_)) if retries > 0 && std::time::Instant::now() + poll < deadline => {
                    retries -= 1;
                    std::thread::sleep(poll);
                }
                Some(Err(e)) => {
                    problems.push(format!(
                        "state store: reading the run's audit chain head failed: {e}; \
                         the chain starts at seq 0"
                    ));
                    return ChainClaim::default();
                }
                None => {
                    problems.push(
                        "state store: no runtime to read the run's audit chain head; \
                         the chain starts at seq 0"
                            .to_string(),
                    );
                    return ChainClaim::default();
                }
            }
        }
    }
}

impl EngineInner {
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
            tracing::warn!(run_id = %run.facts.context.run_id, "background evaluations did not finish within {timeout:?}");
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
            "runId": run.facts.context.run_id,
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
        let context = json!({"runId": run.facts.context.run_id, "status": status});
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
        input.agent_id = Some(run.facts.context.agent_id.clone());
        input.session_id = run.facts.context.session_id.clone();
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
