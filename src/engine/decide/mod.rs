//! Deciding one call: what the rules in play say about it.
//!
//! Holds the inputs of a decision (the run's context and the tool call: `call`; subjects,
//! signal providers and `custom` condition functions), what a policy set says about one tool
//! (`profile`, the run's `history` of calls for `sequence`), rule evaluation (`evaluate`), one
//! file per condition kind (`conditions/`), time zones for `timeGate` (`tz`), and the result:
//! the [`Decision`](crate::engine::Decision) and its JSON (`decision`, `decision_json`).
//!
//! It knows nothing of runs' lifecycle, reviews or the audit trail, apart from the run's shared
//! state it reads (`RunShared`, `RemoteView`) and the engine it runs in (`EngineInner`).

pub(super) mod call;
pub(crate) mod conditions;
pub(super) mod custom;
pub(super) mod decision;
mod decision_json;
pub(super) mod env;
pub(super) mod evaluate;
pub(super) mod history;
pub(super) mod profile;
pub(super) mod remote;
pub(super) mod signals;
pub(super) mod subjects;
pub(super) mod tz;
