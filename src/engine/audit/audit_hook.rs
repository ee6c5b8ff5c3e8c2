//! The engine's side of the audit trail: one hash chain per run; events are redacted, sealed
//! in order under the run's chain lock and handed to the bus (which never blocks). Evaluation
//! results are attached here too.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use serde_json::{Map, Value};

use super::evaluations::{SlowEvaluation, run_to_json};
use super::run_audit::RunAudit;
use super::sealer::Body;
use super::state::{AuditState, side_run_id};
use crate::audit::{EventKind, RunChain};
use crate::engine::decide::call::RunContext;
use crate::state::{ChainClaim, SharedStateStore};

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

impl AuditState {
    /// The run's audit state: its chain starts where a holder that left the run left it (on
    /// the shared store, or in this engine), else at `seq` 0. What went wrong (the store
    /// failed, another holder has not left the run: a fork) is returned for `error` events.
    pub(crate) fn audit_for_run(
        &self,
        ctx: &Arc<RunContext>,
        run_key: &Arc<str>,
    ) -> (RunAudit, ChainProblems, ChainStart) {
        let mut problems = ChainProblems::new();
        let owner = uuid::Uuid::now_v7().simple().to_string();
        let claim = match &self.shared {
            Some(store) => self.claim_shared(&**store, ctx, &owner, &mut problems),
            None => self.heads.claim(run_key, &owner),
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
            side_run_id(&ctx.run_id, &owner, why)
        } else {
            ctx.run_id.clone()
        };
        let mut chain = RunChain::new(
            run_id,
            ctx.agent_id.clone(),
            ctx.enduser.as_ref().map(|u| u.id.clone()),
        )
        .with_signer(self.signer.clone());
        if let (Some(h), false) = (&claim.head, refused) {
            chain = chain.continue_at(h.next_seq, &h.last_hash);
        }
        let audit = RunAudit {
            context: ctx.clone(),
            run_key: run_key.clone(),
            shard: self.sealer.assign_shard(),
            chain: Some(Arc::new(Mutex::new(chain))),
            background: Mutex::new(Vec::new()),
            owner: owner.into(),
            leased: claim.leased && !refused,
            lost: std::sync::atomic::AtomicBool::new(refused),
            ended: Default::default(),
            tool_calls: Mutex::new(Vec::new()),
        };
        (audit, problems, start)
    }

    /// Claims the run on the shared store, waiting (bounded by the lease) while another live
    /// holder has it: it lets go (a hand-over) or its lease lapses (a takeover).
    fn claim_shared(
        &self,
        store: &dyn SharedStateStore,
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

impl AuditState {
    /// Queues an event of the run for sealing (redaction, hash, chain) off the caller's
    /// thread.
    pub(crate) fn emit(
        &self,
        run: &RunAudit,
        kind: EventKind,
        body: Map<String, Value>,
        at: DateTime<Utc>,
    ) {
        self.emit_body(run, kind, Body::Json(body), at);
    }

    /// [`emit`](Self::emit) with a typed body, turned into JSON by the sealer. The event's
    /// id is picked by the sealer too (nobody here needs it).
    #[inline]
    pub(crate) fn emit_body(&self, run: &RunAudit, kind: EventKind, body: Body, at: DateTime<Utc>) {
        if let Some(chain) = run.chain.as_ref() {
            self.sealer.push_unnamed(run.shard, chain, kind, at, body);
        }
    }

    /// [`emit_body`](Self::emit_body), returning the event's id (picked now).
    fn emit_body_named(
        &self,
        run: &RunAudit,
        kind: EventKind,
        body: Body,
        at: DateTime<Utc>,
    ) -> Option<uuid::Uuid> {
        let chain = run.chain.as_ref()?;
        Some(self.sealer.push(run.shard, chain, kind, at, body))
    }

    /// Emits a `tool.result` or `run.ended` event (the fast evaluators' result attached to
    /// `body` already), then starts the slow evaluators, which emit a linked
    /// `evaluation.result` event (naming `call_id`, when given). The slow evaluators keep
    /// `handle` (the run's own) until their event is queued: a run dropped meanwhile ends
    /// after it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn emit_with_evaluation<H: Send + Sync + 'static>(
        self: &Arc<Self>,
        run: &Arc<RunAudit>,
        handle: &Arc<H>,
        kind: EventKind,
        body: Body,
        at: DateTime<Utc>,
        slow: Option<SlowEvaluation>,
        call_id: Option<&str>,
    ) {
        let Some((runner, input)) = slow else {
            self.emit_body(run, kind, body, at);
            return;
        };
        let Some(event_id) = self.emit_body_named(run, kind, body, at) else {
            return;
        };
        {
            let engine = self.clone();
            let run2 = run.clone();
            let held = handle.clone();
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
                drop(held);
            });
            run.background.lock().push(handle);
        }
    }

    /// With a signing key, seals a `checkpoint` that signs the events written after the
    /// run's `run.ended` (slow run evaluations).
    pub(crate) fn emit_closing_checkpoint(&self, run: &RunAudit) {
        if self.signer.is_some() {
            let now = self.clock.now();
            self.emit(run, EventKind::Checkpoint, Map::new(), now);
        }
    }

    /// Waits (bounded by the flush timeout) for the run's background evaluations.
    pub(crate) async fn await_background(&self, run: &RunAudit) {
        let handles: Vec<_> = std::mem::take(&mut *run.background.lock());
        if handles.is_empty() {
            return;
        }
        let timeout = self.flush_timeout;
        let all = futures::future::join_all(handles);
        if tokio::time::timeout(timeout, all).await.is_err() {
            tracing::warn!(run_id = %run.context.run_id, "background evaluations did not finish within {timeout:?}");
        }
    }

    /// Seals what the run queued (its shard's queue, on this thread) and flushes the sinks:
    /// on `Run::end`, which need not seal the other runs' events.
    pub(crate) async fn flush_run_audit(&self, run: &RunAudit) {
        self.sealer.drain_shard(run.shard);
        if let Err(e) = self.sealer.bus().flush(self.flush_timeout).await {
            tracing::error!("audit trail: this run's events may not be stored: {e}");
        }
    }
}
