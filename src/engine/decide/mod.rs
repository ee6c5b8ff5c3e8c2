//! Deciding one call: what the rules in play say about it.
//!
//! Holds the inputs of a decision (the run's context, the tool call and its subjects: `call`;
//! subject extractors, signal providers and `custom` condition functions), what a decision reads
//! of the engine and the run (`env`: [`DecideEnv`](env::DecideEnv), [`RunFacts`](env::RunFacts),
//! owned here and held by the engine and the run), what a policy set says about one tool
//! (`profile`, the run's `history` of calls for `sequence`, the state a decision on a shared
//! store reads: `remote`), rule evaluation (`evaluate`), one file per condition kind
//! (`conditions/`), time zones for `timeGate` (`tz`), and the result: the
//! [`Decision`](decision::Decision) and its JSON (`decision`, `decision_json`).
//!
//! It is the bottom room of the engine: it imports nothing from `run/`, `hitl/`, `audit/` or
//! the engine's front door; they import from it.

pub(super) mod call;
pub(crate) mod conditions;
pub(super) mod ctx;
pub(super) mod current;
pub(super) mod custom;
pub(super) mod decision;
mod decision_json;
pub(super) mod env;
pub(super) mod evaluate;
pub(super) mod history;
pub(super) mod in_play;
pub(super) mod profile;
pub(super) mod remote;
pub(super) mod signals;
pub(super) mod subjects;
pub(super) mod tz;
