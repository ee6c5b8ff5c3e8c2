//! The *current run* of a caller that names none of its own (a 2026-07-28 client of the shared
//! MCP gateway, by its token): one record per (agent, key) holding the run id and when it was
//! last used. Every process sharing a state store shares the records (design §14), so a client
//! whose calls alternate between gateway replicas stays in one run; the first process to see
//! the key creates the run atomically, the others continue it.
//!
//! A run idle for the idle time is over: exactly one process learns so (from
//! [`end_idle`](MemoryCurrentRuns::end_idle), or as the `stale` run of an
//! [`acquire`](MemoryCurrentRuns::acquire) that replaced it) and ends it.
//!
//! [`MemoryCurrentRuns`] keeps the records of one process; a shared store keeps them through
//! [`SharedStateStore`](super::SharedStateStore)'s `*_current_run` calls (Redis: one Lua script
//! per call). Time is the caller's clock (ms since the Unix epoch), as everywhere in the store.

use std::collections::HashMap;

use parking_lot::Mutex;

/// The answer to an acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentRun {
    /// The run the call belongs to.
    pub run_id: String,
    /// The run was created by this acquire (it is the `fresh` id given).
    pub created: bool,
    /// A run this acquire replaced because it was idle: nobody ended it yet, and nobody else
    /// will be told — the caller ends it.
    pub stale: Option<String>,
}

/// The current-run records of one process.
#[derive(Debug, Default)]
pub struct MemoryCurrentRuns {
    /// (agent, key) → (run id, last use in ms).
    records: Mutex<HashMap<(String, String), (String, i64)>>,
}

impl MemoryCurrentRuns {
    /// The current run of `key`: the record's run when it was used less than `idle_ms` ago
    /// (its last use becomes `now_ms`), else `fresh` (recorded, `created`), naming the idle run
    /// it replaced as `stale`.
    pub fn acquire(
        &self,
        agent: &str,
        key: &str,
        fresh: &str,
        now_ms: i64,
        idle_ms: i64,
    ) -> CurrentRun {
        let mut r = self.records.lock();
        let k = (agent.to_string(), key.to_string());
        if let Some((run, last)) = r.get_mut(&k)
            && now_ms.saturating_sub(*last) < idle_ms
        {
            *last = (*last).max(now_ms);
            return CurrentRun {
                run_id: run.clone(),
                created: false,
                stale: None,
            };
        }
        let old = r.insert(k, (fresh.to_string(), now_ms));
        CurrentRun {
            run_id: fresh.to_string(),
            created: true,
            stale: old.map(|(run, _)| run),
        }
    }

    /// Records a use of `run_id` at `now_ms` (nothing when `key`'s current run is another).
    pub fn touch(&self, agent: &str, key: &str, run_id: &str, now_ms: i64) {
        let mut r = self.records.lock();
        if let Some((run, last)) = r.get_mut(&(agent.to_string(), key.to_string()))
            && run == run_id
        {
            *last = (*last).max(now_ms);
        }
    }

    /// Forgets `key`'s record if its run is `run_id` and was last used `idle_ms` or more ago;
    /// `true`: the run is over and the caller (the only one told) ends it.
    pub fn end_idle(
        &self,
        agent: &str,
        key: &str,
        run_id: &str,
        now_ms: i64,
        idle_ms: i64,
    ) -> bool {
        let mut r = self.records.lock();
        let k = (agent.to_string(), key.to_string());
        match r.get(&k) {
            Some((run, last)) if run == run_id && now_ms.saturating_sub(*last) >= idle_ms => {
                r.remove(&k);
                true
            }
            _ => false,
        }
    }

    /// Forgets `key`'s record if its run is `run_id` (the run ended otherwise).
    pub fn forget(&self, agent: &str, key: &str, run_id: &str) {
        let mut r = self.records.lock();
        let k = (agent.to_string(), key.to_string());
        if r.get(&k).is_some_and(|(run, _)| run == run_id) {
            r.remove(&k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_run_until_idle_then_a_new_one_and_the_idle_one_ended_once() {
        let m = MemoryCurrentRuns::default();
        let a = m.acquire("ag", "k", "r1", 1_000, 500);
        assert_eq!((a.run_id.as_str(), a.created, a.stale), ("r1", true, None));
        let b = m.acquire("ag", "k", "r2", 1_400, 500);
        assert_eq!((b.run_id.as_str(), b.created), ("r1", false));
        m.touch("ag", "k", "r1", 1_800);
        assert!(!m.end_idle("ag", "k", "r1", 2_200, 500), "used at 1 800");
        assert!(m.end_idle("ag", "k", "r1", 2_300, 500));
        assert!(!m.end_idle("ag", "k", "r1", 2_300, 500), "ended once");
        let c = m.acquire("ag", "k", "r3", 2_400, 500);
        assert_eq!((c.run_id.as_str(), c.created, c.stale), ("r3", true, None));
        // Idle and not reaped: the next acquire replaces it and names it.
        let d = m.acquire("ag", "k", "r4", 9_000, 500);
        assert_eq!(d.stale.as_deref(), Some("r3"));
        assert_eq!(d.run_id, "r4");
        assert!(
            !m.end_idle("ag", "k", "r3", 9_999, 500),
            "r3 is no longer current"
        );
        assert_eq!(m.acquire("other", "k", "x", 9_000, 500).run_id, "x");
    }
}
