//! What the audit trail keeps of a run ([`RunAudit`]): who runs it, its hash chain, the lease
//! it is held under, whether it has let go of it. The run holds it in an `Arc`; the engine's
//! side of the trail (`audit_hook`, `chain_head`, `lease`, `evaluations`) reads nothing else of
//! the run.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::audit::RunChain;
use crate::engine::decide::call::RunContext;

/// Per-run audit state: who runs it, the run's hash chain and its background evaluations,
/// the lease it is held under, whether the run has let go of it. A run holds it in an `Arc`
/// (background evaluations keep it; the lease timer keeps a `Weak` of it).
pub(crate) struct RunAudit {
    /// The run's context (the run's own, shared).
    pub(crate) context: Arc<RunContext>,
    /// The run's scope string (the key of its chain head in this engine).
    pub(crate) run_key: Arc<str>,
    pub(super) chain: Option<Arc<Mutex<RunChain>>>,
    /// The sealer shard the run's events go to.
    pub(super) shard: usize,
    pub(super) background: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// This handle's claim on the run's chain head (unique per run handle).
    pub(crate) owner: Box<str>,
    /// The run is held under a lease on the shared store (renewed with each reservation).
    pub(crate) leased: bool,
    /// The lease was lost (taken over), or never had (held elsewhere, or the run had ended):
    /// this handle appends nothing to the run's chain (its events go to a side chain).
    pub(crate) lost: std::sync::atomic::AtomicBool,
    /// The run has let go of its chain: ended, left, or dropped (or it was over before it
    /// started: its engine had shut down, or its id had ended). It decides nothing more.
    pub(crate) ended: std::sync::atomic::AtomicBool,
    /// The run's tool calls, for the evaluators' input (kept only when an evaluator runs).
    pub(crate) tool_calls: Mutex<Vec<crate::eval::ToolCallRecord>>,
}

impl RunAudit {
    /// The audit state of a run of an engine without an audit trail: no chain.
    pub(crate) fn off(context: Arc<RunContext>, run_key: Arc<str>) -> RunAudit {
        RunAudit {
            context,
            run_key,
            shard: 0,
            chain: None,
            background: Mutex::new(Vec::new()),
            owner: Box::from(""),
            leased: false,
            lost: Default::default(),
            ended: Default::default(),
            tool_calls: Mutex::new(Vec::new()),
        }
    }

    /// The run has let go of its chain (ended, left, or dropped).
    pub(crate) fn let_go(&self) -> bool {
        self.ended.load(std::sync::atomic::Ordering::Acquire)
    }
}
