//! A run's audit chain across processes (design §8): the chain head (next `seq`, last hash)
//! a run handle claims when the run starts (see `audit_hook.rs`) and writes back when it lets
//! go of the run ([`Run::leave`], a drop) or forgets when the run ends. On a shared store the
//! head lives there; without one, in the engine ([`MemoryHeads`]). A claim or a release that
//! finds another holder is a fork, written as an `error` event.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;
use serde_json::{Map, Value};

use super::sealer::Body;
use crate::audit::{EventKind, RunChain};
use crate::engine::EngineInner;
use crate::engine::decide::call::RunContext;
use crate::engine::run::handle::RunShared;
use crate::state::{ChainClaim, ChainHead};

/// The chain heads of an engine without a shared state store: a run left open
/// ([`Run::leave`]) and started again in the same engine continues its chain, as it does across processes on
/// a shared store (design §8). Keyed by the run's scope string.
#[derive(Default)]
pub(crate) struct MemoryHeads(dashmap::DashMap<Arc<str>, MemoryHead>);

#[derive(Default)]
pub(crate) struct MemoryHead {
    head: Option<ChainHead>,
    owner: Option<Box<str>>,
}

impl MemoryHeads {
    pub(super) fn claim(&self, run_key: &Arc<str>, owner: &str) -> ChainClaim {
        let mut e = self.0.entry(run_key.clone()).or_default();
        let held_elsewhere = e.owner.as_deref().is_some_and(|o| o != owner);
        e.owner = Some(owner.into());
        ChainClaim {
            head: e.head.clone(),
            held_elsewhere,
            ..ChainClaim::default()
        }
    }

    /// Lets go of the chain: `Some(head)` written for the next holder, `None` forgotten (the
    /// run ended). `false`: another owner claimed it meanwhile (a fork).
    pub(super) fn leave(&self, run_key: &str, owner: &str, head: Option<ChainHead>) -> bool {
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
}

/// Where a chain stands (`None` before its first event).
pub(super) fn head_of(chain: &RunChain) -> Option<ChainHead> {
    Some(ChainHead {
        next_seq: chain.next_seq(),
        last_hash: chain.last_hash()?.to_string(),
    })
}

impl EngineInner {
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
        if run.audit.lost.load(Ordering::Acquire) {
            // Taken over (or never held): the run's chain is another holder's now.
            return;
        }
        let Some(head) = self.sealed_head(run) else {
            return;
        };
        let ctx = &run.facts.context;
        let outcome = match &self.shared {
            Some(store) => {
                let left = store
                    .leave_chain(
                        &ctx.agent_id,
                        &ctx.run_id,
                        &run.audit.owner,
                        Some(&head),
                        ended,
                    )
                    .await
                    .map_err(|e| e.to_string());
                if left == Ok(false) {
                    self.lose_lease(run, None);
                    return;
                }
                left
            }
            None => Ok(self.leave_memory_chain(run, (!ended).then_some(head))),
        };
        self.report_leave(run, outcome);
    }

    /// [`leave_chain`](Self::leave_chain) for a dropped run, which must not wait (for the
    /// sinks, or the store). In memory a dropped run is over, its chain head forgotten with
    /// its state (as at `end`; keeping it would keep every dropped run's head for ever); on
    /// a shared store, where the run's state stays, a thread of its own seals the run's events
    /// and writes the head for the next holder.
    pub(crate) fn leave_chain_on_drop(self: &Arc<Self>, run: &RunShared) {
        let (Some(a), Some(chain)) = (self.audit.as_ref(), run.audit.chain.clone()) else {
            return;
        };
        if run.audit.lost.load(Ordering::Acquire) {
            return;
        }
        let shard = run.audit.shard;
        let Some(store) = self.shared.clone() else {
            let ok = a.heads.leave(&run.facts.run_key, &run.audit.owner, None);
            if !ok {
                self.report_leave_on(shard, &chain, &run.facts.context, Ok(false));
            }
            return;
        };
        let engine = self.clone();
        let owner = run.audit.owner.clone();
        let ctx = run.facts.context.clone();
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
                let left = crate::engine::blocking::block_on(store.leave_chain(
                    &ctx.agent_id,
                    &ctx.run_id,
                    &owner,
                    Some(&head),
                    false,
                ))
                .unwrap_or_else(|| Err(crate::state::SharedStateError("no runtime".into())))
                .map_err(|e| e.to_string());
                engine.report_leave_on(shard, &chain, &ctx, left);
            });
        if let Err(e) = spawned {
            tracing::warn!(run_id = %run.facts.context.run_id, "cannot hand the run's audit chain on: {e}");
        }
    }

    fn leave_memory_chain(&self, run: &RunShared, head: Option<ChainHead>) -> bool {
        self.audit
            .as_ref()
            .is_none_or(|a| a.heads.leave(&run.facts.run_key, &run.audit.owner, head))
    }

    fn report_leave(&self, run: &RunShared, outcome: Result<bool, String>) {
        if let Some(chain) = &run.audit.chain {
            self.report_leave_on(run.audit.shard, chain, &run.facts.context, outcome);
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
}
