//! What a decision reads from a state store shared by processes: per tool and phase, the
//! counters, metric windows and run history the rules in play read ([`StatePlan`], worked out
//! once and kept in the tool's profile, `profile.rs`), and the snapshot of them a decision evaluates its
//! rules on ([`RemoteView`]). Asking the store for them is the run's business (`run/shared_state.rs`).

use smallvec::SmallVec;

use crate::policy::{CCond, CompiledPolicies};
use crate::state::WindowStats;

/// What the rules in play of one phase read from the past.
#[derive(Debug, Default)]
pub(crate) struct StatePlan {
    /// maxCalls counters and their (smallest) limit.
    pub(crate) counters: Box<[(u32, u64)]>,
    /// metricWindow trackers.
    pub(crate) trackers: Box<[u32]>,
    /// Whether a `sequence` condition reads the run's history.
    pub(crate) history: bool,
}

impl StatePlan {
    /// The state the rules `rules` (indexes into `policies.rules`) read.
    pub(crate) fn compute(policies: &CompiledPolicies, rules: &[u32]) -> StatePlan {
        let mut counters: Vec<(u32, u64)> = Vec::new();
        let mut trackers: Vec<u32> = Vec::new();
        let mut history = false;
        let mut stack: Vec<&CCond> = rules
            .iter()
            .filter_map(|&i| policies.rules.get(i as usize))
            .map(|r| &r.condition)
            .collect();
        while let Some(c) = stack.pop() {
            match c {
                CCond::And(cs) | CCond::Or(cs) => stack.extend(cs.iter()),
                CCond::Not(c) => stack.push(c),
                CCond::MaxCalls { counter, max } => {
                    match counters.iter_mut().find(|(c, _)| c == counter) {
                        Some(entry) => entry.1 = entry.1.min(*max),
                        None => counters.push((*counter, *max)),
                    }
                }
                CCond::MetricWindow { tracker, .. } if !trackers.contains(tracker) => {
                    trackers.push(*tracker);
                }
                CCond::Sequence { .. } => history = true,
                _ => {}
            }
        }
        counters.sort_unstable();
        trackers.sort_unstable();
        StatePlan {
            counters: counters.into(),
            trackers: trackers.into(),
            history,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.counters.is_empty() && self.trackers.is_empty() && !self.history
    }
}

/// What a decision on a shared store read: conditions look here instead of the memory store.
#[derive(Debug, Default)]
pub(crate) struct RemoteView {
    pub(crate) counters: SmallVec<[(u32, u64); 4]>,
    pub(crate) windows: SmallVec<[(u32, WindowStats); 2]>,
    pub(crate) seen: Vec<u64>,
}

impl RemoteView {
    /// A counter's count before this call (`None`: not read).
    pub(crate) fn count(&self, counter: u32) -> Option<u64> {
        self.counters
            .iter()
            .find(|(c, _)| *c == counter)
            .map(|(_, n)| *n)
    }

    /// A window's aggregates (`None`: not read).
    pub(crate) fn window(&self, tracker: u32) -> Option<WindowStats> {
        self.windows
            .iter()
            .find(|(t, _)| *t == tracker)
            .map(|(_, w)| *w)
    }

    /// The sequence entries the run's history satisfies.
    pub(crate) fn seen(&self) -> &[u64] {
        &self.seen
    }
}
