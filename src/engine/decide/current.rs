//! The engine's current policy set, and each thread's copy of it for the decision path.
//!
//! A decision needs the current [`PolicySet`] and the profile of its tool. Reading both from
//! their `ArcSwap`s costs two loads of arc-swap's debt list per decision (≈ 170 instructions on
//! a fresh run). Instead each thread keeps a copy of the last sets it decided under (at most
//! two engines' worth, see [`SLOTS`]) with the profile map it read, and checks them against two
//! counters: the engine's set generation and the set's map version. A reload or a new profile
//! changes a counter; the next decision on each thread then reads afresh.
//!
//! The copy holds the set (an `Arc`) until the thread decides under another one or ends: a
//! thread that decided under an engine since dropped keeps that engine's compiled policies
//! alive until then (at most [`SLOTS`] sets per thread).

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;

use super::profile::{PolicySet, ProfileMap, ToolProfile};

/// How many policy sets (of distinct engines, or of one engine before and after a reload) a
/// thread keeps: two, so that a thread deciding for two engines in turn does not read afresh
/// every time.
const SLOTS: usize = 2;

/// What a thread last read of one engine's policy set.
struct ThreadCopy {
    /// The set's generation (distinct for every compiled set in this process).
    generation: u64,
    set: Arc<PolicySet>,
    /// The version of the set's tool map in `map`.
    map_version: u64,
    map: Arc<ProfileMap>,
}

thread_local! {
    static COPIES: RefCell<[Option<ThreadCopy>; SLOTS]> = const { RefCell::new([None, None]) };
}

/// The engine's policy set: replaced on reload, read by every decision.
pub(crate) struct CurrentPolicies {
    set: ArcSwap<PolicySet>,
    /// The generation of the set in `set`, written after it (under `replacing`).
    generation: AtomicU64,
    /// Held while the set is replaced: two reloads at once cannot leave `generation` naming
    /// the set the other one replaced (every decision would then read afresh).
    replacing: parking_lot::Mutex<()>,
}

impl CurrentPolicies {
    /// Starts with `set`.
    pub(crate) fn new(set: PolicySet) -> CurrentPolicies {
        let generation = set.tools.generation();
        CurrentPolicies {
            set: ArcSwap::from_pointee(set),
            generation: AtomicU64::new(generation),
            replacing: parking_lot::Mutex::new(()),
        }
    }

    /// The current set, borrowed for a moment (see `ArcSwap::load`).
    #[inline]
    pub(crate) fn load(&self) -> arc_swap::Guard<Arc<PolicySet>> {
        self.set.load()
    }

    /// The current set.
    #[inline]
    pub(crate) fn load_full(&self) -> Arc<PolicySet> {
        self.set.load_full()
    }

    /// Replaces the set (a reload): later decisions on every thread decide under `set`.
    pub(crate) fn store(&self, set: PolicySet) {
        let generation = set.tools.generation();
        let _one_at_a_time = self.replacing.lock();
        self.set.store(Arc::new(set));
        self.generation.store(generation, Ordering::Release);
    }

    /// The current set and the profile of tool `name` with `tags` (from the set's cache, or
    /// computed), read through the calling thread's copy when it is current.
    #[inline]
    pub(crate) fn tool_profile(
        &self,
        name: &str,
        tags: &[String],
    ) -> (Arc<PolicySet>, Arc<ToolProfile>) {
        let generation = self.generation.load(Ordering::Acquire);
        let found = COPIES
            .try_with(|copies| {
                let mut copies = copies.try_borrow_mut().ok()?;
                Some(self.find_in(&mut copies, generation, name, tags))
            })
            .ok()
            .flatten();
        match found {
            Some(Found {
                set,
                profile,
                displaced,
            }) => {
                // Dropped here, outside the thread's copies (nothing runs while they are borrowed).
                drop(displaced);
                let profile = profile.unwrap_or_else(|| set.tools.profile(&set, name, tags));
                (set, profile)
            }
            None => {
                // The thread is ending or re-entered: read the shared set.
                let set = self.set.load_full();
                let profile = set.tools.profile(&set, name, tags);
                (set, profile)
            }
        }
    }

    /// Looks the tool up in the thread's copy of the set of `generation`, made first if the
    /// thread has none.
    #[inline]
    fn find_in(
        &self,
        copies: &mut [Option<ThreadCopy>; SLOTS],
        generation: u64,
        name: &str,
        tags: &[String],
    ) -> Found {
        let mut displaced = None;
        if !matches!(&copies[0], Some(c) if c.generation == generation) {
            if matches!(&copies[1], Some(c) if c.generation == generation) {
                copies.swap(0, 1);
            } else {
                displaced = self.renew(copies);
            }
        }
        let Some(copy) = copies[0].as_mut() else {
            // `renew` filled it; never empty here.
            return Found {
                set: self.set.load_full(),
                profile: None,
                displaced,
            };
        };
        let version = copy.set.tools.map_version();
        if copy.map_version != version {
            copy.map = copy.set.tools.map_now();
            copy.map_version = version;
        }
        Found {
            profile: copy.set.tools.cached(&copy.map, name, tags),
            set: copy.set.clone(),
            displaced,
        }
    }

    /// Reads the current set into slot 0 (the other copy moved to slot 1); returns the copy
    /// that no longer fits.
    #[cold]
    #[inline(never)]
    fn renew(&self, copies: &mut [Option<ThreadCopy>; SLOTS]) -> Option<ThreadCopy> {
        let set = self.set.load_full();
        let map_version = set.tools.map_version();
        let fresh = ThreadCopy {
            generation: set.tools.generation(),
            map: set.tools.map_now(),
            map_version,
            set,
        };
        let displaced = copies[1].take();
        copies[1] = copies[0].replace(fresh);
        displaced
    }
}

/// What [`CurrentPolicies::find_in`] found: the set, the tool's profile if cached, and a copy
/// to drop once the thread's copies are released.
struct Found {
    set: Arc<PolicySet>,
    profile: Option<Arc<ToolProfile>>,
    displaced: Option<ThreadCopy>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{CompiledPolicies, parse_policy};

    fn set(tool_rule: &str) -> PolicySet {
        let p = parse_policy(
            &format!(
                r#"[{{"id": "r", "name": "r", "priority": 1, "enabled": true,
                 "selector": {{"phase": "tool.before", "tool": {{"name": "{tool_rule}"}}}},
                 "condition": {{"kind": "toolName", "op": "glob", "value": "*"}},
                 "effect": {{"type": "block"}}}}]"#
            ),
            None,
        )
        .expect("parses");
        PolicySet::new(Arc::new(
            CompiledPolicies::compile(vec![p], &[]).expect("compiles"),
        ))
    }

    #[test]
    fn a_thread_reads_the_cached_profile_and_sees_reloads() {
        let current = CurrentPolicies::new(set("a"));
        let (s1, a1) = current.tool_profile("a", &[]);
        assert_eq!(a1.rules[0].len(), 1);
        let (s2, a2) = current.tool_profile("a", &[]);
        assert!(Arc::ptr_eq(&s1, &s2));
        assert!(Arc::ptr_eq(&a1, &a2), "the second lookup hits the cache");
        let (_, b) = current.tool_profile("b", &["t".to_string()]);
        assert!(b.rules[0].is_empty());
        assert!(Arc::ptr_eq(
            &b,
            &current.tool_profile("b", &["t".to_string()]).1
        ));

        current.store(set("b"));
        let (s3, a3) = current.tool_profile("a", &[]);
        assert!(!Arc::ptr_eq(&s1, &s3), "a reload is seen at once");
        assert!(a3.rules[0].is_empty());
        assert_eq!(current.tool_profile("b", &[]).1.rules[0].len(), 1);
    }

    #[test]
    fn two_engines_on_one_thread_keep_their_own_sets() {
        let one = CurrentPolicies::new(set("a"));
        let two = CurrentPolicies::new(set("b"));
        let three = CurrentPolicies::new(set("c"));
        for _ in 0..3 {
            for (current, tool) in [(&one, "a"), (&two, "b"), (&three, "c")] {
                let (s, p) = current.tool_profile(tool, &[]);
                assert!(Arc::ptr_eq(&s, &current.load_full()));
                assert_eq!(p.rules[0].len(), 1, "{tool}");
                assert!(current.tool_profile("x", &[]).1.rules[0].is_empty());
            }
        }
    }

    #[test]
    fn other_threads_see_a_reload() {
        let current = Arc::new(CurrentPolicies::new(set("a")));
        let c = current.clone();
        std::thread::spawn(move || assert_eq!(c.tool_profile("a", &[]).1.rules[0].len(), 1))
            .join()
            .expect("joins");
        current.store(set("b"));
        let c = current.clone();
        std::thread::spawn(move || assert!(c.tool_profile("a", &[]).1.rules[0].is_empty()))
            .join()
            .expect("joins");
    }
}
