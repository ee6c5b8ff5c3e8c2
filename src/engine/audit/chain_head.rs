//! A run's audit chain across processes (design §8): the chain head (next `seq`, last hash)
//! a run handle claims when the run starts (see `audit_hook.rs`) and writes back when it lets
//! go of the run (`Run::leave`, a drop) or forgets when the run ends. On a shared store the
//! head lives there; without one, in the engine (`MemoryHeads`, in `state.rs`). A claim or a
//! release that finds another holder is a fork, written as an `error` event.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;
use serde_json::{Map, Value};

use super::run_audit::RunAudit;
use super::sealer::Body;
use super::state::{AuditState, head_of};
use crate::audit::{EventKind, RunChain};
use crate::engine::decide::call::RunContext;
use crate::state::ChainHead;

impl AuditState {
    /// Seals what the run queued and answers where its chain stands.
    fn sealed_head(&self, run: &RunAudit) -> Option<ChainHead> {
        self.sealer.drain_shard(run.shard);
        let chain = run.chain.as_ref()?.lock();
        head_of(&chain)
    }

    /// Leaves the run's chain (after sealing its queued events): writes its head for the next
    /// holder, or forgets it when `ended`. A fork (another holder claimed the run meanwhile)
    /// or a store failure is an `error` event.
    pub(crate) async fn leave_chain(&self, run: &RunAudit, ended: bool) {
        if run.lost.load(Ordering::Acquire) {
            // Taken over (or never held): the run's chain is another holder's now.
            return;
        }
        let Some(head) = self.sealed_head(run) else {
            return;
        };
        let ctx = &run.context;
        let outcome = match &self.shared {
            Some(store) => {
                let left = store
                    .leave_chain(&ctx.agent_id, &ctx.run_id, &run.owner, Some(&head), ended)
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
    pub(crate) fn leave_chain_on_drop(self: &Arc<Self>, run: &RunAudit) {
        let Some(chain) = run.chain.clone() else {
            return;
        };
        if run.lost.load(Ordering::Acquire) {
            return;
        }
        let shard = run.shard;
        let Some(store) = self.shared.clone() else {
            let ok = self.heads.leave(&run.run_key, &run.owner, None);
            if !ok {
                self.report_leave_on(shard, &chain, &run.context, Ok(false));
            }
            return;
        };
        let engine = self.clone();
        let owner = run.owner.clone();
        let ctx = run.context.clone();
        let spawned = std::thread::Builder::new()
            .name("toolgate-leave-run".into())
            .spawn(move || {
                engine.sealer.drain_shard(shard);
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
            tracing::warn!(run_id = %run.context.run_id, "cannot hand the run's audit chain on: {e}");
        }
    }

    fn leave_memory_chain(&self, run: &RunAudit, head: Option<ChainHead>) -> bool {
        self.heads.leave(&run.run_key, &run.owner, head)
    }

    fn report_leave(&self, run: &RunAudit, outcome: Result<bool, String>) {
        if let Some(chain) = &run.chain {
            self.report_leave_on(run.shard, chain, &run.context, outcome);
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
        let mut body = Map::new();
        body.insert("message".into(), Value::String(message));
        self.sealer.push(
            shard,
            chain,
            EventKind::Error,
            self.clock.now(),
            Body::Json(body),
        );
        self.sealer.drain_shard(shard);
    }
}
