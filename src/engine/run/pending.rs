//! Calls allowed by a before decision and waiting for their result: kept once, shared (by
//! `Arc`) between the run's pending set and the audit event that records the decision, so
//! neither copies the call's arguments.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

pub(crate) use crate::engine::audit::body::CallRecord;

/// An entry of [`PendingCalls`], found by the call's id.
#[derive(Debug)]
struct Entry(Arc<CallRecord>);

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

/// The run's allowed calls waiting for `after_tool`, by call id (no copy of the id as a key).
#[derive(Debug, Default)]
pub(crate) struct PendingCalls(std::collections::HashSet<Entry, foldhash::fast::RandomState>);

impl PendingCalls {
    /// Adds `call`, replacing a pending call with the same id.
    pub(crate) fn insert(&mut self, call: Arc<CallRecord>) {
        self.0.replace(Entry(call));
    }

    /// The pending call `id`, if any.
    pub(crate) fn get(&self, id: &str) -> Option<&Arc<CallRecord>> {
        self.0.get(id).map(|e| &e.0)
    }

    /// Takes the pending call `id` out.
    pub(crate) fn remove(&mut self, id: &str) -> Option<Arc<CallRecord>> {
        self.0.take(id).map(|e| e.0)
    }

    /// How many calls wait.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn call(id: &str, n: u64) -> Arc<CallRecord> {
        Arc::new(CallRecord {
            id: id.into(),
            name: "t".into(),
            tags: vec![],
            args: Value::from(n),
            redaction: None,
        })
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
}
