//! Runs held under a lease on a shared store (design §16, "Runs across processes").
//!
//! A run handle that claims a run's chain on a shared store holds it under a lease (default
//! 10 s, `RedisConfig::lease`). The lease is renewed, and the chain head written, by each
//! decision's reservation (piggy-backed: no round trip of its own) and, for runs that decide
//! nothing for a while, by one timer thread per engine that renews every held run in one round
//! trip every third of the lease. A holder that finds its lease taken over (it was frozen, or cut
//! off from the store, longer than the lease) appends nothing more to the run's chain: its
//! events from then on go into a side chain of their own (run id `<run>#lease-lost-<holder>`),
//! its calls are decided by the failure mode, and it leaves the run's state alone.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::{Map, Value};

use super::run_audit::RunAudit;
use super::sealer::Body;
use super::state::{AuditState, head_of, side_run_id};
use crate::audit::{EventKind, RunChain};
use crate::state::{LeaseHold, LeaseRenewal};

/// Every `every`: renews the leases of the engine's held runs, until the engine is gone.
fn renew_loop(engine: &Weak<AuditState>, every: Duration) {
    loop {
        std::thread::sleep(every);
        let Some(engine) = engine.upgrade() else {
            return;
        };
        if engine.shut_down.load(Ordering::Acquire) {
            return;
        }
        engine.renew_leases();
    }
}

impl AuditState {
    /// Holds `run` under its lease: adds it to the held runs; starts the timer thread on
    /// first use.
    pub(crate) fn hold_lease(self: &Arc<Self>, run: &Arc<RunAudit>, every: Duration) {
        {
            let mut runs = self.leases.runs.lock();
            runs.retain(|w| w.strong_count() > 0);
            runs.push(Arc::downgrade(run));
        }
        self.leases.started.get_or_init(|| {
            let weak = Arc::downgrade(self);
            let spawned = std::thread::Builder::new()
                .name("toolgate-leases".into())
                .spawn(move || renew_loop(&weak, every));
            if let Err(e) = spawned {
                tracing::warn!(
                    "cannot start the lease timer: {e}; leases are renewed by decisions only"
                );
            }
        });
    }

    /// The lease to renew with a reservation of `run` (`None`: the run is not held under one).
    pub(crate) fn lease_hold(&self, run: &RunAudit) -> Option<LeaseHold> {
        if !run.leased || run.lost.load(Ordering::Acquire) {
            return None;
        }
        // What the run queued is sealed first (on this thread: work the sealer would do
        // anyway), so the head stored lags by this decision's own events at most.
        self.sealer.drain_shard(run.shard);
        let head = run.chain.as_ref().and_then(|c| head_of(&c.lock()));
        Some(LeaseHold {
            owner: run.owner.to_string(),
            head,
        })
    }

    /// One timer round: renews every held run's lease in one round trip; a run found taken
    /// over is let go.
    fn renew_leases(self: &Arc<Self>) {
        let Some(store) = self.shared.clone() else {
            return;
        };
        let runs = self.leases.held();
        if runs.is_empty() {
            return;
        }
        let renewals: Vec<LeaseRenewal> = runs
            .iter()
            .filter_map(|r| {
                Some(LeaseRenewal {
                    agent: r.context.agent_id.clone(),
                    run_id: r.context.run_id.clone(),
                    hold: self.lease_hold(r)?,
                })
            })
            .collect();
        match crate::engine::blocking::block_on(store.renew_leases(&renewals)) {
            Some(Ok(held)) => {
                for (r, ok) in runs.iter().zip(held) {
                    if !ok {
                        self.lose_lease(r, None);
                    }
                }
            }
            Some(Err(e)) => tracing::warn!("state store: renewing run leases failed: {e}"),
            None => tracing::warn!("state store: no runtime to renew run leases"),
        }
    }

    /// The run's lease was taken over (by `holder`, when known): seals what it queued into its
    /// chain, then moves the handle to a side chain of its own with an `error` event saying
    /// so. Nothing more of this handle reaches the run's chain. Once per run.
    pub(crate) fn lose_lease(&self, run: &RunAudit, holder: Option<&str>) {
        if run.lost.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(chain) = run.chain.as_ref() else {
            return;
        };
        self.sealer.drain_shard(run.shard);
        let ctx = &run.context;
        let side = side_run_id(&ctx.run_id, &run.owner, "lease-lost");
        *chain.lock() = RunChain::new(
            side,
            ctx.agent_id.clone(),
            ctx.enduser.as_ref().map(|u| u.id.clone()),
        )
        .with_signer(self.signer.clone());
        let by = holder
            .filter(|h| !h.is_empty())
            .map_or_else(|| "another holder".to_string(), |h| format!("holder {h}"));
        let message = format!(
            "lease lost: run {:?} of agent {:?} was taken over by {by} while this holder ({}) \
             was away longer than its lease (frozen, or cut off from the state store); this \
             handle appends nothing more to the run's chain: its late calls are decided by the \
             failure mode and written here",
            ctx.run_id, ctx.agent_id, run.owner
        );
        tracing::warn!("{message}");
        let mut body = Map::new();
        body.insert("message".into(), Value::String(message));
        body.insert("leaseLost".into(), Value::Bool(true));
        self.sealer.push(
            run.shard,
            chain,
            EventKind::Error,
            self.clock.now(),
            Body::Json(body),
        );
    }
}
