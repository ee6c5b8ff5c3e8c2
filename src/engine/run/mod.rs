//! A run and the life of its calls: the [`Run`](crate::engine::Run) handle and the before
//! phase (`handle`, with its hitl step in `run_hitl`), calls waiting for their result (`pending`), the
//! after phase (`after`), decisions on a state store shared by processes (`shared_state`), the
//! guard that wraps tool dispatch (`guard`) and the observers told of every decision
//! (`observe`).
//!
//! It drives the other rooms: `decide` makes the decisions, `hitl` keeps the reviews, `audit`
//! records what happened.

pub(super) mod after;
mod audit_calls;
pub(super) mod closed;
pub(super) mod edge;
pub(super) mod guard;
pub(super) mod handle;
pub(super) mod inner;
pub(super) mod llm;
pub(super) mod observe;
pub(super) mod parts;
pub(super) mod pending;
pub(super) mod refused;
mod run_hitl;
pub(super) mod shared_state;
pub(super) mod stopwatch;
