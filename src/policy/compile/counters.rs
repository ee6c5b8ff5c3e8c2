//! The counters (`maxCalls`) and metric trackers (`metricWindow`) the compiled rules need.

use std::collections::HashMap;

use globset::GlobSet;

use crate::policy::types::*;

/// Every maxCalls counter of the policies, indexed so that one match call finds the counters a
/// tool call increments.
#[derive(Debug, Default)]
pub(crate) struct CounterIndex {
    pub(crate) counters: Vec<CounterSpec>,
    pub(crate) names: GlobSet,
    pub(crate) glob_counter: Vec<u32>,
    /// Counters selected by tag: (tag lowercased, counter).
    pub(crate) by_tag: HashMap<String, Vec<u32>>,
    /// The counters of `llm.before` rules, by model-name glob: they count model calls only
    /// (never tool calls, which `names` and `by_tag` select).
    pub(crate) llm_names: GlobSet,
    /// For each glob of `llm_names`, the counter it belongs to.
    pub(crate) llm_glob_counter: Vec<u32>,
}

/// One maxCalls counter.
#[derive(Debug)]
pub(crate) struct CounterSpec {
    /// Stable identity of the counter (same across reloads when the rule is unchanged).
    pub(crate) slot: u64,
    pub(crate) scope: Scope,
    pub(crate) window_seconds: Option<u64>,
    /// `tagFilter`, lowercased: a call of a tool lacking one of these is neither counted nor
    /// limited.
    pub(crate) tag_filter: Vec<String>,
}

impl CounterSpec {
    /// Whether a tool with these (lowercased) tags passes the counter's `tagFilter`.
    pub(crate) fn passes(&self, tags_lc: &[String]) -> bool {
        self.tag_filter.iter().all(|t| tags_lc.contains(t))
    }
}

/// The window of a run-scoped `metricWindow` without `windowSeconds` ("since the run
/// started"): 7 days, longer than any run is expected to last.
pub(crate) const RUN_WINDOW_SECONDS: u64 = 7 * 24 * 3600;

/// One metric tracker (scope, metric, window, filter).
#[derive(Debug)]
pub(crate) struct TrackerSpec {
    pub(crate) slot: u64,
    pub(crate) scope: Scope,
    pub(crate) window_seconds: u64,
    pub(crate) filter_names: Option<GlobSet>,
    pub(crate) filter_tags: Option<Vec<String>>,
}

impl TrackerSpec {
    pub(crate) fn accepts(&self, tool_lc: Option<&str>, tags_lc: &[String]) -> bool {
        if self.filter_names.is_none() && self.filter_tags.is_none() {
            return true;
        }
        let Some(name) = tool_lc else {
            return false;
        };
        if let Some(g) = &self.filter_names
            && !g.is_match(name)
        {
            return false;
        }
        if let Some(t) = &self.filter_tags
            && !t.iter().any(|t| tags_lc.contains(t))
        {
            return false;
        }
        true
    }
}

pub(super) fn stable_hash(s: &str) -> u64 {
    // FNV-1a: stable across processes and releases, unlike std's SipHash keys.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}
