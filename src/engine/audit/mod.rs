//! The engine's side of the audit trail: one hash chain per run (`audit_hook`), the chain head
//! a run claims and lets go across processes (`chain_head`), event bodies as captured on the
//! caller's thread (`body`), the sealer threads that write, hash and chain them (`sealer`,
//! tested in `sealer_tests`), and the evaluators whose results ride on audit events
//! (`evaluations`), and the leases runs are held under on a shared store (`lease`). What the
//! trail keeps of a run is its [`RunAudit`](run_audit::RunAudit) (`run_audit`): audit/ reads
//! nothing of `run/` or of the engine's front door; `run/` calls it.
//!
//! The audit trail itself (events, sinks, verification) is [`crate::audit`].

pub(super) mod audit_hook;
pub(super) mod body;
pub(super) mod chain_head;
pub(super) mod evaluations;
pub(crate) mod lease;
pub(super) mod run_audit;
pub(super) mod sealer;
pub(super) mod state;
