//! Engine state that outlives a single decision: `maxCalls` counters and `metricWindow`
//! windows. [`StateStore`] is the seam; [`MemoryStateStore`] (dashmap, sharded locks, no
//! global lock) is the default.
//!
//! Keys are a stable *slot* (a hash of the counter's or tracker's definition, so state survives a
//! policy reload when the rule is unchanged) and a *scope* (the run id, agent id, or agent and
//! end user).
//!
//! A store shared by processes (Redis) plugs in through [`SharedStateStore`] instead: one
//! asynchronous round trip per decision for everything the rules in play read.

pub mod current_run;
mod memory;
#[cfg(feature = "redis")]
pub mod redis;
pub mod shared;
mod window;

use std::sync::Arc;

pub use current_run::{CurrentRun, MemoryCurrentRuns};
pub use memory::MemoryStateStore;
pub use shared::{
    ChainClaim, ChainHead, LeaseHold, LeaseRenewal, SharedStateError, SharedStateStore,
    StateSnapshot,
};
pub use window::{SlidingWindow, WindowStats};

/// Identifies one counter or metric window.
#[derive(Debug, Clone)]
pub struct StateKey {
    /// Stable identity of the counter or tracker definition.
    pub slot: u64,
    /// The scope instance: [`run_scope`], [`agent_scope`] or [`user_scope`].
    pub scope: Arc<str>,
}

/// The scope string of a run's own state. Injective: every component but the last is
/// length-prefixed, so no choice of ids (separators, NUL, U+001F included) makes two
/// (agent, run) pairs share it.
pub fn run_scope(agent: &str, run_id: &str) -> String {
    format!("run\u{1f}{}:{agent}{run_id}", agent.len())
}

/// The scope string of an agent's state.
pub fn agent_scope(agent: &str) -> String {
    format!("agent\u{1f}{agent}")
}

/// The scope string of an (agent, end user) pair's state, injective as [`run_scope`] is.
pub fn user_scope(agent: &str, enduser: &str) -> String {
    format!("user\u{1f}{}:{agent}{enduser}", agent.len())
}

impl PartialEq for StateKey {
    fn eq(&self, other: &Self) -> bool {
        // Keys of one run share its scope string: no byte comparison then.
        self.slot == other.slot
            && (Arc::ptr_eq(&self.scope, &other.scope) || self.scope == other.scope)
    }
}

impl Eq for StateKey {}

impl std::hash::Hash for StateKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.slot);
        state.write(self.scope.as_bytes());
    }
}

/// A slot taken in a counter by [`StateStore::try_acquire`]; give it back with
/// [`StateStore::release`] when the call does not proceed after all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permit {
    /// When the slot was taken (ms since the Unix epoch).
    pub at_ms: i64,
}

/// Storage of counters and metric windows.
///
/// Implementations must make [`try_acquire`](StateStore::try_acquire) atomic: parallel callers
/// can never together take more than `max` slots.
pub trait StateStore: Send + Sync + 'static {
    /// Takes a slot if fewer than `max` are taken (within the last `window_secs` when given).
    fn try_acquire(
        &self,
        key: &StateKey,
        max: u64,
        window_secs: Option<u64>,
        now_ms: i64,
    ) -> Option<Permit>;
    /// Gives back a slot taken by `try_acquire`.
    fn release(&self, key: &StateKey, permit: Permit);
    /// Counts one call unconditionally (in a sliding window of `window_secs` when given, as
    /// for [`try_acquire`](StateStore::try_acquire)).
    fn add(&self, key: &StateKey, window_secs: Option<u64>, now_ms: i64);
    /// The number of slots taken (within the last `window_secs` when given).
    fn count(&self, key: &StateKey, window_secs: Option<u64>, now_ms: i64) -> u64;
    /// Records a metric event at `at_ms` into a window of `window_secs`.
    fn record(&self, key: &StateKey, window_secs: u64, at_ms: i64, value: f64);
    /// Aggregates of the events with `now − window < t ≤ now`.
    fn window(&self, key: &StateKey, window_secs: u64, now_ms: i64) -> WindowStats;
    /// Forgets a counter and a metric window.
    fn remove(&self, key: &StateKey);
    /// Forgets every counter and metric window of one scope instance (`StateKey::scope`): a
    /// run's own state when it ends or is dropped. Must not depend on how many counters the
    /// policies define (the store knows which keys the scope has).
    fn forget_scope(&self, scope: &str);
}
