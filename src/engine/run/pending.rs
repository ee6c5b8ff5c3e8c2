//! Calls allowed by a before decision and waiting for their result: kept once, shared (by
//! `Arc`) between the run's pending set and the audit event that records the decision, so
//! neither copies the call's arguments. Without an audit trail nothing shares them: the run
//! keeps the call itself, and the first few calls waiting sit in the run's own slots (a
//! decision allowing a call then allocates nothing).

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

pub(crate) use crate::engine::audit::body::CallRecord;

/// A call waiting for its result: shared with the audit event of its decision, or the run's
/// own.
#[derive(Debug)]
pub(crate) enum PendingCall {
    Shared(Arc<CallRecord>),
    Own(CallRecord),
}

impl std::ops::Deref for PendingCall {
    type Target = CallRecord;
    #[inline]
    fn deref(&self) -> &CallRecord {
        match self {
            PendingCall::Shared(c) => c,
            PendingCall::Own(c) => c,
        }
    }
}

impl PendingCall {
    /// The call to share (with an audit event).
    pub(crate) fn into_shared(self) -> Arc<CallRecord> {
        match self {
            PendingCall::Shared(c) => c,
            PendingCall::Own(c) => Arc::new(c),
        }
    }
}

/// An entry of [`PendingCalls`]' set, found by the call's id; its second field numbers the
/// calls in the order they came (the oldest are dropped first when the set is full).
#[derive(Debug)]
struct Entry(PendingCall, u64);

impl Borrow<str> for Entry {
    fn borrow(&self) -> &str {
        &self.0.id
    }
}

impl Hash for Entry {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As `str` hashes, so a lookup by `&str` finds it.
        self.0.id.as_str().hash(state);
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}

impl Eq for Entry {}

/// Calls kept in the run's own slots before the set is used.
const FEW: usize = 4;

/// The most calls a run keeps waiting for their results. A run whose caller never reports
/// results (no `after_tool`) would otherwise keep every allowed call, its arguments
/// included, for as long as it lives. Past it the oldest half of the calls waiting in the set
/// are dropped; a result reported later for one of them is decided by the failure mode (see
/// [`PendingCalls::dropped`]), never let through as if its call had not been allowed here.
pub(crate) const MAX_PENDING: usize = 10_000;

/// The run's allowed calls waiting for `after_tool`, by call id (no copy of the id as a key):
/// the first [`FEW`] in slots of the run's own (searched in turn), the others in a set, at
/// most [`MAX_PENDING`] in all.
#[derive(Debug, Default)]
pub(crate) struct PendingCalls {
    few: smallvec::SmallVec<[PendingCall; FEW]>,
    many: std::collections::HashSet<Entry, foldhash::fast::RandomState>,
    /// The number the next call put into the set gets.
    next: u64,
    /// How many calls were dropped by the bound.
    dropped: u64,
}

impl PendingCalls {
    /// Adds `call`, replacing a pending call with the same id. Answers how many of the
    /// oldest calls waiting were dropped to keep the bound (0 almost always).
    pub(crate) fn insert(&mut self, call: PendingCall) -> usize {
        if let Some(slot) = self.few.iter_mut().find(|c| c.id == call.id) {
            *slot = call;
            return 0;
        }
        if self.few.len() < FEW && (self.many.is_empty() || !self.many.contains(call.id.as_str())) {
            self.few.push(call);
            return 0;
        }
        // A call replacing one in the set (same id) does not grow it: nothing to drop.
        let dropped =
            if self.many.len() + FEW >= MAX_PENDING && !self.many.contains(call.id.as_str()) {
                self.drop_oldest_half()
            } else {
                0
            };
        self.next += 1;
        self.many.replace(Entry(call, self.next));
        dropped
    }

    /// Drops the older half of the calls waiting in the set (one pass to find the middle
    /// number, one to drop: amortized over the calls that filled it).
    #[cold]
    fn drop_oldest_half(&mut self) -> usize {
        let mut numbers: Vec<u64> = self.many.iter().map(|e| e.1).collect();
        let middle = numbers.len() / 2;
        let (_, &mut cut, _) = numbers.select_nth_unstable(middle);
        let before = self.many.len();
        self.many.retain(|e| e.1 >= cut);
        let n = before - self.many.len();
        self.dropped += n as u64;
        n
    }

    /// Whether a call with this id waits for its result.
    #[cfg(test)]
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.few.iter().any(|c| c.id == id) || (!self.many.is_empty() && self.many.contains(id))
    }

    /// How many calls were dropped by the bound ([`MAX_PENDING`]) in this run: when any were,
    /// a result for a call not found here may be one of theirs.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The pending call `id`, if any.
    pub(crate) fn get(&self, id: &str) -> Option<&PendingCall> {
        match self.few.iter().find(|c| c.id == id) {
            Some(c) => Some(c),
            None if self.many.is_empty() => None,
            None => self.many.get(id).map(|e| &e.0),
        }
    }

    /// Takes the pending call `id` out.
    pub(crate) fn remove(&mut self, id: &str) -> Option<PendingCall> {
        match self.few.iter().position(|c| c.id == id) {
            Some(i) => Some(self.few.swap_remove(i)),
            None if self.many.is_empty() => None,
            None => self.many.take(id).map(|e| e.0),
        }
    }

    /// How many calls wait.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.few.len() + self.many.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn call(id: &str, n: u64) -> PendingCall {
        let c = CallRecord {
            id: id.into(),
            name: "t".into(),
            tags: vec![],
            args: Value::from(n),
            redaction: None,
        };
        if n.is_multiple_of(2) {
            PendingCall::Own(c)
        } else {
            PendingCall::Shared(Arc::new(c))
        }
    }

    #[test]
    fn found_by_id_replaced_and_taken() {
        let mut p = PendingCalls::default();
        p.insert(call("a", 1));
        p.insert(call("b", 2));
        p.insert(call("a", 3));
        assert_eq!(p.len(), 2);
        assert_eq!(p.get("a").map(|c| c.args.clone()), Some(Value::from(3)));
        assert_eq!(p.remove("b").map(|c| c.args.clone()), Some(Value::from(2)));
        assert!(p.remove("b").is_none());
        assert!(p.get("zz").is_none());
    }

    #[test]
    fn past_the_bound_the_oldest_half_is_dropped_and_counted() {
        let mut p = PendingCalls::default();
        let mut dropped = 0;
        for i in 0..MAX_PENDING as u64 {
            dropped += p.insert(call(&format!("c{i}"), i));
        }
        assert_eq!((p.len(), dropped, p.dropped()), (MAX_PENDING, 0, 0));
        let n = p.insert(call("last", 1));
        let half = (MAX_PENDING - FEW) / 2;
        assert!((half - 1..=half + 1).contains(&n), "{n}");
        assert_eq!(p.dropped(), n as u64);
        assert_eq!(p.len(), MAX_PENDING + 1 - n);
        // The few slots and the newest stay; the oldest of the set went first.
        for id in ["c0", "c3", "last", &format!("c{}", MAX_PENDING - 1)] {
            assert!(p.contains(id) && p.get(id).is_some(), "{id}");
        }
        assert!(!p.contains("c4") && !p.contains("c100"));
        // At the bound again, a call under an id already waiting replaces it: nothing dropped.
        let mut i = 0u64;
        while p.len() < MAX_PENDING {
            p.insert(call(&format!("e{i}"), i));
            i += 1;
        }
        let newest = format!("e{}", i - 1);
        assert_eq!(p.insert(call(&newest, 7)), 0);
        assert_eq!(p.len(), MAX_PENDING);
        assert_eq!(p.get(&newest).map(|c| c.args.clone()), Some(Value::from(7)));
        // Filling it again drops again: memory stays bounded whatever the caller does.
        for i in 0..3 * MAX_PENDING as u64 {
            p.insert(call(&format!("d{i}"), i));
            assert!(p.len() <= MAX_PENDING);
        }
        assert!(p.dropped() > 3 * MAX_PENDING as u64 / 2);
    }

    #[test]
    fn contains_finds_calls_in_the_slots_and_in_the_set() {
        let mut p = PendingCalls::default();
        for i in 0..10u64 {
            p.insert(call(&format!("c{i}"), i));
        }
        assert!((0..10).all(|i| p.contains(&format!("c{i}"))));
        assert!(!p.contains("c10") && !p.contains(""));
        p.remove("c7");
        p.remove("c1");
        assert!(!p.contains("c7") && !p.contains("c1"));
    }

    #[test]
    fn past_the_few_slots_calls_wait_in_the_set() {
        let mut p = PendingCalls::default();
        for i in 0..20u64 {
            p.insert(call(&format!("c{i}"), i));
        }
        assert_eq!(p.len(), 20);
        p.insert(call("c3", 100));
        p.insert(call("c17", 101));
        assert_eq!(p.len(), 20, "replaced, wherever they wait");
        assert_eq!(p.get("c3").map(|c| c.args.clone()), Some(Value::from(100)));
        assert_eq!(p.get("c17").map(|c| c.args.clone()), Some(Value::from(101)));
        for i in (0..20u64).rev() {
            assert!(p.remove(&format!("c{i}")).is_some(), "c{i}");
        }
        assert_eq!(p.len(), 0);
        // A freed slot takes a new call; an id waiting in the set is replaced there.
        for i in 0..6u64 {
            p.insert(call(&format!("d{i}"), i));
        }
        assert!(p.remove("d1").is_some());
        p.insert(call("d5", 7));
        assert_eq!(p.len(), 5);
        assert_eq!(p.get("d5").map(|c| c.args.clone()), Some(Value::from(7)));
    }
}
