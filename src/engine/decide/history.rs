//! A run's history of completed calls, for `sequence` conditions: each entry's tool profile
//! says which sequence entries it satisfies, and the run keeps their union as a bitset.

use std::sync::Arc;

use super::profile::ToolProfile;

/// A completed, allowed call in the run's history.
#[derive(Debug, Clone)]
pub(crate) struct HistoryEntry {
    pub(crate) name_lc: Arc<str>,
    pub(crate) tags_lc: Arc<[String]>,
}

/// The run's history and, for the current policies, the `sequence` entries it satisfies.
#[derive(Debug, Default)]
pub(crate) struct History {
    entries: Vec<HistoryEntry>,
    /// The policy generation `seen` was computed for (0: never).
    seen_generation: u64,
    /// Bit `i`: some entry satisfies sequence entry `i`.
    seen: Vec<u64>,
}

impl History {
    pub(crate) fn push(&mut self, profile: &ToolProfile, generation: u64) {
        if self.entries.is_empty() {
            self.seen_generation = generation;
            self.seen.clear();
        }
        self.entries.push(HistoryEntry {
            name_lc: profile.name_lc.clone(),
            tags_lc: profile.tags_lc.clone(),
        });
        if self.seen_generation == generation {
            or_into(&mut self.seen, &profile.seq_bits);
        }
    }

    /// The sequence entries of `policies` that some history entry satisfies, recomputed from
    /// the entries when the policies were reloaded since.
    pub(crate) fn seen(&mut self, policies: &super::profile::PolicySet) -> &[u64] {
        let generation = policies.tools.generation();
        if self.seen_generation != generation {
            self.seen.clear();
            for e in &self.entries {
                let p = policies.tools.profile(policies, &e.name_lc, &e.tags_lc);
                or_into(&mut self.seen, &p.seq_bits);
            }
            self.seen_generation = generation;
        }
        &self.seen
    }
}

fn or_into(dst: &mut Vec<u64>, src: &[u64]) {
    if dst.len() < src.len() {
        dst.resize(src.len(), 0);
    }
    for (d, s) in dst.iter_mut().zip(src) {
        *d |= *s;
    }
}

/// Whether bit `i` is set.
pub(crate) fn bit(bits: &[u64], i: u32) -> bool {
    bits.get(i as usize / 64)
        .is_some_and(|w| (w >> (i % 64)) & 1 == 1)
}
