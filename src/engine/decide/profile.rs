//! What a compiled policy set says about one tool (name and tags), worked out once per tool and
//! kept with the policies: the rules in play in each phase, the maxCalls counters that count
//! its calls, and the `sequence` entries that one of its calls satisfies (a bitset).
//!
//! Decisions then find all of this with one hash lookup, without glob matching or allocation.
//! The cache is copy-on-write ([`ArcSwap`]): lookups never lock, so threads deciding on one
//! engine do not contend; a miss computes the profile and publishes a new map. Past
//! [`MAX_TOOLS`] distinct tools (or [`MAX_CACHE_BYTES`] of names and tags), profiles are
//! computed per call instead of cached.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;

use super::decision::{Evaluated, EvaluatedRule};
use super::in_play::{plain_entries, rules_in_play_uncached};
use super::remote::StatePlan;
use crate::policy::{CSeqEntry, CompiledPolicies, Phase};

/// Distinct tools whose profile is cached per policy set.
pub(crate) const MAX_TOOLS: usize = 4096;

/// Bytes of names and tags the profiles cached per policy set may hold (beyond: computed per
/// call), so distinct long names cannot grow the cache without bound.
pub(crate) const MAX_CACHE_BYTES: usize = 4 << 20;

static GENERATION: AtomicU64 = AtomicU64::new(1);

/// A tool's profile under one compiled policy set.
#[derive(Debug)]
pub(crate) struct ToolProfile {
    pub(crate) name: Box<str>,
    pub(crate) tags: Box<[String]>,
    /// The name lowercased.
    pub(crate) name_lc: Arc<str>,
    /// The tags lowercased.
    pub(crate) tags_lc: Arc<[String]>,
    /// Rules in play per phase (`phase_slot`), in evaluation order.
    pub(crate) rules: [Box<[u32]>; 2],
    /// maxCalls counters whose selector selects this tool, ascending.
    pub(crate) counters: Box<[u32]>,
    /// Bit `i` set: a call of this tool satisfies sequence entry `i`.
    pub(crate) seq_bits: Box<[u64]>,
    /// Per phase: some rule in play asks a signal provider.
    pub(crate) has_signal: [bool; 2],
    /// Per phase: some rule in play needs subjects.
    pub(crate) needs_subjects: [bool; 2],
    /// Per phase, the state the rules in play read (worked out for a shared store only).
    pub(crate) state_plan: std::sync::OnceLock<[StatePlan; 2]>,
    /// Per phase (`rules`), the `evaluated` lists of decisions whose rules came out plainly.
    evaluated: [EvaluatedCache; 2],
}

/// Outcomes a tool's [`EvaluatedCache`] keeps per phase: a tool's calls mostly come out one of
/// a few ways.
const EVALUATED_OUTCOMES: usize = 8;

/// The `evaluated` lists of the first few plain outcomes seen (see `Combiner` in
/// `evaluate.rs`), by the bits of the rules that triggered: a decision shares one instead of
/// building its own. Set once each, read without a lock.
#[derive(Debug, Default)]
struct EvaluatedCache([std::sync::OnceLock<(u64, Arc<[EvaluatedRule]>)>; EVALUATED_OUTCOMES]);

impl ToolProfile {
    /// The profile of a model (for `llm.before` decisions): slot 0 of `rules` holds the
    /// `llm.before` rules in play for the model's name, `counters` the `llm.before` maxCalls
    /// counters whose patterns select it; a model has no tags and satisfies no `sequence`
    /// entry.
    fn compute_model(policies: &CompiledPolicies, name: &str) -> ToolProfile {
        let name_lc: Arc<str> = Arc::from(name.to_lowercase());
        let llm: Box<[u32]> = rules_in_play_uncached(policies, Phase::LlmBefore, &name_lc, &[])
            .into_iter()
            .map(|r| r as u32)
            .collect();
        let has_signal = llm.iter().any(|&i| policies.rules[i as usize].has_signal);
        let idx = &policies.counters;
        let mut counters: Vec<u32> = Vec::new();
        if !idx.llm_glob_counter.is_empty() {
            for g in idx.llm_names.matches(&*name_lc) {
                if let Some(c) = idx.llm_glob_counter.get(g) {
                    counters.push(*c);
                }
            }
        }
        counters.sort_unstable();
        counters.dedup();
        ToolProfile {
            name: name.into(),
            tags: Box::new([]),
            name_lc,
            tags_lc: Arc::from(Vec::new()),
            rules: [llm, Box::new([])],
            counters: counters.into_boxed_slice(),
            seq_bits: vec![0u64; policies.seq_entries.len().div_ceil(64)].into_boxed_slice(),
            has_signal: [has_signal, false],
            needs_subjects: [false, false],
            state_plan: std::sync::OnceLock::new(),
            evaluated: Default::default(),
        }
    }

    fn compute(policies: &CompiledPolicies, name: &str, tags: &[String]) -> ToolProfile {
        let name_lc: Arc<str> = Arc::from(name.to_lowercase());
        let tags_lc: Arc<[String]> = tags.iter().map(|t| t.to_lowercase()).collect();
        let rules = [Phase::Before, Phase::After].map(|p| {
            rules_in_play_uncached(policies, p, &name_lc, &tags_lc)
                .into_iter()
                .map(|r| r as u32)
                .collect::<Box<[u32]>>()
        });
        let any = |rs: &[u32], f: fn(&crate::policy::CompiledRule) -> bool| {
            rs.iter().any(|&i| f(&policies.rules[i as usize]))
        };
        let has_signal = [0, 1].map(|p| any(&rules[p], |r| r.has_signal));
        let needs_subjects = [0, 1].map(|p| any(&rules[p], |r| r.needs_subjects));
        let counters = selected_counters(policies, &name_lc, &tags_lc);
        let mut seq_bits = vec![0u64; policies.seq_entries.len().div_ceil(64)];
        for (i, e) in policies.seq_entries.iter().enumerate() {
            let hit = match e {
                CSeqEntry::Glob(g) => g.is_match(&*name_lc),
                CSeqEntry::Names(g) => g.is_match(&*name_lc),
                CSeqEntry::Tags { tags, all: true } => tags.iter().all(|t| tags_lc.contains(t)),
                CSeqEntry::Tags { tags, all: false } => tags.iter().any(|t| tags_lc.contains(t)),
            };
            if hit {
                seq_bits[i / 64] |= 1 << (i % 64);
            }
        }
        ToolProfile {
            name: name.into(),
            tags: tags.into(),
            name_lc,
            tags_lc,
            rules,
            counters,
            seq_bits: seq_bits.into_boxed_slice(),
            has_signal,
            needs_subjects,
            state_plan: std::sync::OnceLock::new(),
            evaluated: Default::default(),
        }
    }

    /// The `evaluated` list of a decision that evaluated `rules` (in play in one phase, every
    /// one of them plainly) and whose triggered rules are the bits of `triggered`: shared from
    /// the profile's cache, or made (and kept while the cache has room).
    pub(crate) fn evaluated_list(
        &self,
        policies: &CompiledPolicies,
        rules: &[u32],
        triggered: u64,
    ) -> Evaluated {
        let make =
            || -> Arc<[EvaluatedRule]> { plain_entries(policies, rules, triggered).collect() };
        let Some(cache) = self
            .rules
            .iter()
            .position(|r| std::ptr::eq(&**r, rules))
            .and_then(|p| self.evaluated.get(p))
        else {
            return Evaluated::from(plain_entries(policies, rules, triggered).collect::<Vec<_>>());
        };
        for slot in &cache.0 {
            match slot.get() {
                Some((t, list)) if *t == triggered => return Evaluated::shared(list.clone()),
                Some(_) => {}
                None => {
                    let list = make();
                    // Another decision may fill the slot first: this one keeps its own list.
                    let _ = slot.set((triggered, list.clone()));
                    return Evaluated::shared(list);
                }
            }
        }
        Evaluated::shared(make())
    }

    /// The state the rules in play of `phase` read.
    pub(crate) fn plan(&self, policies: &CompiledPolicies, phase: Phase) -> &StatePlan {
        let plans = self.state_plan.get_or_init(|| {
            [
                StatePlan::compute(policies, &self.rules[0]),
                StatePlan::compute(policies, &self.rules[1]),
            ]
        });
        &plans[crate::policy::phase_slot(phase)]
    }

    /// Whether maxCalls counter `counter` counts calls of this tool.
    pub(crate) fn counts(&self, counter: u32) -> bool {
        self.counters.binary_search(&counter).is_ok()
    }
}

/// The counters selecting a tool: by a name glob or by one of its tags.
fn selected_counters(policies: &CompiledPolicies, name_lc: &str, tags_lc: &[String]) -> Box<[u32]> {
    let idx = &policies.counters;
    let mut hits: Vec<u32> = Vec::new();
    if !idx.glob_counter.is_empty() {
        for g in idx.names.matches(name_lc) {
            if let Some(c) = idx.glob_counter.get(g) {
                hits.push(*c);
            }
        }
    }
    for t in tags_lc {
        if let Some(cs) = idx.by_tag.get(t) {
            hits.extend_from_slice(cs);
        }
    }
    hits.sort_unstable();
    hits.dedup();
    hits.retain(|&c| {
        idx.counters
            .get(c as usize)
            .is_some_and(|s| s.passes(tags_lc))
    });
    hits.into_boxed_slice()
}

/// A hasher for keys that already are hashes.
#[derive(Default)]
pub(super) struct PreHashed(u64);

impl Hasher for PreHashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100000001b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

pub(super) type ProfileMap = HashMap<u64, Vec<Arc<ToolProfile>>, BuildHasherDefault<PreHashed>>;

/// A compiled policy set with what the engine learns of it while deciding: the profiles of
/// the tools and models it has seen. A reload makes a new set (fresh caches); reads go through
/// to the compiled policies (`Deref`).
#[derive(Debug)]
pub(crate) struct PolicySet {
    /// The compiled policies.
    pub(crate) compiled: Arc<CompiledPolicies>,
    /// What the engine learned about each tool seen (rules in play, counters, sequence bits).
    pub(crate) tools: ToolCache,
    /// What the engine learned about each model seen (`llm.before` rules and counters).
    pub(crate) models: ToolCache,
}

impl PolicySet {
    /// `compiled`, with empty caches.
    pub(crate) fn new(compiled: Arc<CompiledPolicies>) -> PolicySet {
        PolicySet {
            compiled,
            tools: ToolCache::default(),
            models: ToolCache::for_models(),
        }
    }
}

impl std::ops::Deref for PolicySet {
    type Target = CompiledPolicies;
    #[inline]
    fn deref(&self) -> &CompiledPolicies {
        &self.compiled
    }
}

/// Profiles of the tools seen under one compiled policy set.
#[derive(Debug)]
pub(crate) struct ToolCache {
    /// The cache holds model profiles (`llm.before`), not tool profiles.
    models: bool,
    generation: u64,
    map: ArcSwap<ProfileMap>,
    /// Bumped after each change of `map` (see `current.rs`).
    version: AtomicU64,
    /// Held while the map changes; counts the bytes of names and tags cached.
    writer: parking_lot::Mutex<usize>,
    seed: foldhash::fast::RandomState,
}

impl Default for ToolCache {
    fn default() -> Self {
        ToolCache {
            models: false,
            generation: GENERATION.fetch_add(1, Ordering::Relaxed),
            map: ArcSwap::from_pointee(ProfileMap::default()),
            version: AtomicU64::new(0),
            writer: parking_lot::Mutex::new(0),
            seed: foldhash::fast::RandomState::default(),
        }
    }
}

use crate::policy::eq_bytes;

/// The map key of a tool: its name's and tags' bytes, each written whole (no length prefixes
/// or terminators: a collision only costs a comparison, as lookups compare name and tags).
fn key_hash(seed: &foldhash::fast::RandomState, name: &str, tags: &[String]) -> u64 {
    use std::hash::BuildHasher;
    let mut h = seed.build_hasher();
    h.write(name.as_bytes());
    for t in tags {
        h.write(t.as_bytes());
    }
    h.finish()
}

/// The profile of `name` with `tags` in `map` under key `h`.
fn find(map: &ProfileMap, h: u64, name: &str, tags: &[String]) -> Option<Arc<ToolProfile>> {
    'profiles: for p in map.get(&h)? {
        if p.tags.len() != tags.len() || !eq_bytes(p.name.as_bytes(), name.as_bytes()) {
            continue;
        }
        for (a, b) in p.tags.iter().zip(tags) {
            if !eq_bytes(a.as_bytes(), b.as_bytes()) {
                continue 'profiles;
            }
        }
        return Some(p.clone());
    }
    None
}

impl ToolCache {
    /// A cache of model profiles (see [`ToolProfile::compute_model`]).
    pub(crate) fn for_models() -> ToolCache {
        ToolCache {
            models: true,
            ..ToolCache::default()
        }
    }

    /// Identifies the policy set (distinct for every compilation in this process).
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// The profile of a tool, from the cache or computed (and cached while there is room).
    pub(crate) fn profile(
        &self,
        policies: &CompiledPolicies,
        name: &str,
        tags: &[String],
    ) -> Arc<ToolProfile> {
        let h = key_hash(&self.seed, name, tags);
        if let Some(p) = find(&self.map.load(), h, name, tags) {
            return p;
        }
        self.compute_and_cache(policies, h, name, tags)
    }

    /// The version of the map (bumped after each change).
    #[inline]
    pub(super) fn map_version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The map as it is now.
    pub(super) fn map_now(&self) -> Arc<ProfileMap> {
        self.map.load_full()
    }

    /// The profile of `name` with `tags` if `map` (read from this cache) holds it.
    #[inline]
    pub(super) fn cached(
        &self,
        map: &ProfileMap,
        name: &str,
        tags: &[String],
    ) -> Option<Arc<ToolProfile>> {
        find(map, key_hash(&self.seed, name, tags), name, tags)
    }

    fn compute_and_cache(
        &self,
        policies: &CompiledPolicies,
        h: u64,
        name: &str,
        tags: &[String],
    ) -> Arc<ToolProfile> {
        let profile = Arc::new(if self.models {
            ToolProfile::compute_model(policies, name)
        } else {
            ToolProfile::compute(policies, name, tags)
        });
        let mut bytes = self.writer.lock();
        let current = self.map.load_full();
        if let Some(p) = find(&current, h, name, tags) {
            return p;
        }
        // The name and tags are kept twice (as given and lowercased).
        let cost = 2 * (name.len() + tags.iter().map(String::len).sum::<usize>()) + 64;
        if current.len() < MAX_TOOLS && *bytes + cost <= MAX_CACHE_BYTES {
            *bytes += cost;
            let mut next = (*current).clone();
            next.entry(h).or_default().push(profile.clone());
            self.map.store(Arc::new(next));
            self.version.fetch_add(1, Ordering::Release);
        }
        profile
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::parse_policy;

    fn compiled() -> PolicySet {
        let p = parse_policy(
            r#"[
            {"id": "seq", "name": "seq", "priority": 3, "enabled": true,
             "selector": {"phase": "tool.before", "tool": {"name": "refund*"}},
             "condition": {"kind": "sequence", "mustHaveCalled": ["verify_*", {"by": "toolTag", "tags": ["AUTH"]}]},
             "effect": {"type": "block"}},
            {"id": "cap", "name": "cap", "priority": 2, "enabled": true,
             "selector": {"phase": "tool.before", "tool": {"tagsAny": ["finance"]}},
             "condition": {"kind": "maxCalls", "selector": {"by": "toolTag", "tags": ["finance"]}, "max": 3},
             "effect": {"type": "block"}},
            {"id": "after", "name": "after", "priority": 1, "enabled": true,
             "selector": {"phase": "tool.after", "tool": {}},
             "condition": {"kind": "toolName", "op": "eq", "value": "x"},
             "effect": {"type": "block"}}
            ]"#,
            None,
        )
        .expect("parses");
        PolicySet::new(Arc::new(
            CompiledPolicies::compile(vec![p], &[]).expect("compiles"),
        ))
    }

    #[test]
    fn a_profile_holds_the_rules_in_play_counters_and_sequence_bits() {
        let c = compiled();
        let refund = c
            .tools
            .profile(&c, "Refund_Order", &["Finance".to_string()]);
        assert_eq!(&*refund.name_lc, "refund_order");
        assert_eq!(refund.rules[0].len(), 2, "seq and cap before");
        assert_eq!(refund.rules[1].len(), 1, "after on every tool");
        assert_eq!(refund.counters.len(), 1);
        assert!(refund.counts(refund.counters[0]));
        assert!(!crate::engine::decide::history::bit(&refund.seq_bits, 0));
        let verify = c.tools.profile(&c, "verify_id", &[]);
        assert!(crate::engine::decide::history::bit(&verify.seq_bits, 0));
        assert!(!crate::engine::decide::history::bit(&verify.seq_bits, 1));
        let auth = c.tools.profile(&c, "login", &["auth".to_string()]);
        assert!(crate::engine::decide::history::bit(&auth.seq_bits, 1));
        assert!(auth.counters.is_empty());
    }

    #[test]
    fn profiles_are_cached_per_name_and_tags() {
        let c = compiled();
        let a = c.tools.profile(&c, "t", &["x".to_string()]);
        let b = c.tools.profile(&c, "t", &["x".to_string()]);
        let other = c.tools.profile(&c, "t", &[]);
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &other));
        assert_ne!(c.tools.generation(), compiled().tools.generation());
    }

    #[test]
    fn the_cache_is_bounded_in_bytes() {
        let c = compiled();
        for i in 0..64 {
            let name = format!("{i}{}", "n".repeat(1 << 20));
            let p = c.tools.profile(&c, &name, &[]);
            assert_eq!(&*p.name, name.as_str(), "computed even when not cached");
        }
        let cached: usize = c.tools.map.load().values().map(Vec::len).sum();
        assert!(
            cached * (1 << 20) <= MAX_CACHE_BYTES,
            "{cached} profiles of 1 MiB names cached"
        );
    }
}
