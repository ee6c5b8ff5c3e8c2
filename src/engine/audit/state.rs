//! What the engine holds of its audit trail ([`AuditState`]): the sealer, the signer and the
//! redaction rules, the chain heads of runs left open without a shared store
//! ([`MemoryHeads`]), the runs held under a lease ([`Leases`]), and what the trail reads of
//! the engine (its clock, the shared store). Its behaviour lives beside it: a run's chain and
//! events (`audit_hook.rs`), letting go of a chain (`chain_head.rs`), leases (`lease.rs`).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use super::run_audit::RunAudit;
use super::sealer::{Sealer, SealerConfig};
use crate::audit::{AuditBus, Redactor, RunChain, RunSigner};
use crate::engine::clock::Clock;
use crate::state::{ChainClaim, ChainHead, SharedStateStore};

/// Audit settings of an engine, and what its audit trail reads of the engine (its clock, the
/// store shared by processes). The engine holds one (in an `Arc`: a run's background
/// evaluations, the thread that hands a dropped run on and the lease timer keep it).
pub(crate) struct AuditState {
    /// Seals queued events in batches and hands them to the bus.
    pub(crate) sealer: Sealer,
    pub(crate) flush_timeout: Duration,
    /// Signs every run's chain, when set.
    pub(crate) signer: Option<Arc<RunSigner>>,
    /// Chain heads of runs left open, without a shared store (see `chain_head.rs`).
    pub(crate) heads: MemoryHeads,
    /// The redaction rules (also applied to the arguments a review shows).
    pub(crate) redactor: Redactor,
    /// Runs held under a lease on the shared store (see `lease.rs`).
    pub(crate) leases: Leases,
    /// The engine's clock: the time of the events the audit trail writes of its own.
    pub(crate) clock: Arc<dyn Clock>,
    /// The store shared by processes, when set: chain heads and leases live there.
    pub(crate) shared: Option<Arc<dyn SharedStateStore>>,
    /// The engine was shut down: the lease timer stops.
    pub(crate) shut_down: std::sync::atomic::AtomicBool,
}

impl AuditState {
    pub(crate) fn new(
        bus: AuditBus,
        redactor: Redactor,
        flush_timeout: Duration,
        sealers: SealerConfig,
        signer: Option<Arc<RunSigner>>,
        clock: Arc<dyn Clock>,
        shared: Option<Arc<dyn SharedStateStore>>,
    ) -> AuditState {
        AuditState {
            redactor: redactor.clone(),
            sealer: Sealer::start(bus, redactor, flush_timeout, sealers),
            flush_timeout,
            signer,
            heads: MemoryHeads::default(),
            leases: Leases::default(),
            clock,
            shared,
            shut_down: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The bus, after everything queued was sealed and handed to it.
    pub(crate) fn drained_bus(&self) -> &AuditBus {
        self.sealer.drain();
        self.sealer.bus()
    }
}

/// The chain heads of an engine without a shared state store: a run left open
/// (`Run::leave`) and started again in the same engine continues its chain, as it does across
/// processes on a shared store (design §8). Keyed by the run's scope string.
#[derive(Default)]
pub(crate) struct MemoryHeads(dashmap::DashMap<Arc<str>, MemoryHead>);

#[derive(Default)]
pub(crate) struct MemoryHead {
    head: Option<ChainHead>,
    owner: Option<Box<str>>,
}

impl MemoryHeads {
    pub(crate) fn claim(&self, run_key: &Arc<str>, owner: &str) -> ChainClaim {
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
    pub(crate) fn leave(&self, run_key: &str, owner: &str, head: Option<ChainHead>) -> bool {
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
pub(crate) fn head_of(chain: &RunChain) -> Option<ChainHead> {
    Some(ChainHead {
        next_seq: chain.next_seq(),
        last_hash: chain.last_hash()?.to_string(),
    })
}

/// The runs an engine holds under a lease, for the renewal timer.
#[derive(Default)]
pub(crate) struct Leases {
    pub(super) runs: Mutex<Vec<Weak<RunAudit>>>,
    /// The renewal timer was started (see `lease.rs`).
    pub(super) started: std::sync::OnceLock<()>,
}

impl Leases {
    /// The runs still held (their handles live, the lease neither lost nor let go).
    pub(crate) fn held(&self) -> Vec<Arc<RunAudit>> {
        let mut runs = self.runs.lock();
        runs.retain(|w| {
            w.upgrade()
                .is_some_and(|r| r.leased && !r.lost.load(Ordering::Acquire) && !r.let_go())
        });
        runs.iter().filter_map(Weak::upgrade).collect()
    }
}

/// The run id of a side chain of run `run_id` written by holder `owner`.
pub(crate) fn side_run_id(run_id: &str, owner: &str, why: &str) -> String {
    format!("{run_id}#{why}-{owner}")
}
