//! A bounded cache of hitl fingerprints: the SHA-256 of a call's canonical form
//! ([`fingerprint`]) is worked out once per distinct (agent, rule, tool, args, end user), not on
//! every hitl decision about an identical call.
//!
//! The key is a cheap keyed hash of the inputs; a hit is confirmed by comparing the inputs
//! exactly (numbers by representation, so a hit always has the same canonical JSON), so the
//! fingerprint is always the one [`fingerprint`] computes. Arguments nested deeper than
//! [`MAX_DEPTH`] or larger than about [`MAX_ARGS_BYTES`] are not cached (so the cache holds a
//! few megabytes at most). Past [`CAPACITY`] entries the cache starts over.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use parking_lot::Mutex;
use serde_json::Value;

use super::reviews::fingerprint;

/// Entries kept before the cache is cleared.
pub(crate) const CAPACITY: usize = 1024;

/// Arguments nested deeper than this are fingerprinted without the cache.
pub(crate) const MAX_DEPTH: usize = 32;

/// Arguments larger than this (string bytes plus 8 per value) are fingerprinted without the
/// cache.
pub(crate) const MAX_ARGS_BYTES: usize = 4096;

struct Entry {
    agent_id: Box<str>,
    rule_id: Box<str>,
    tool_name: Box<str>,
    enduser_id: Option<Box<str>>,
    args: Value,
    fingerprint: String,
}

/// Fingerprints of the calls seen, by a keyed hash of their inputs.
#[derive(Default)]
pub(crate) struct FingerprintCache {
    map: Mutex<HashMap<u64, Entry, nohash::BuildNoHash>>,
    seed: foldhash::fast::RandomState,
}

impl std::fmt::Debug for FingerprintCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FingerprintCache").finish_non_exhaustive()
    }
}

impl FingerprintCache {
    /// The fingerprint of a call, as [`fingerprint`] computes it.
    pub(crate) fn get(
        &self,
        agent_id: &str,
        rule_id: &str,
        tool_name: &str,
        args: &Value,
        enduser_id: Option<&str>,
    ) -> String {
        let mut h = self.seed.build_hasher();
        for part in [agent_id, rule_id, tool_name, enduser_id.unwrap_or("")] {
            h.write(part.as_bytes());
        }
        h.write_u8(u8::from(enduser_id.is_some()));
        let mut budget = MAX_ARGS_BYTES;
        if !hash_value(args, &mut h, 0, &mut budget) {
            return fingerprint(agent_id, rule_id, tool_name, args, enduser_id);
        }
        let key = h.finish();
        {
            let map = self.map.lock();
            if let Some(e) = map.get(&key)
                && &*e.agent_id == agent_id
                && &*e.rule_id == rule_id
                && &*e.tool_name == tool_name
                && e.enduser_id.as_deref() == enduser_id
                && same(&e.args, args)
            {
                return e.fingerprint.clone();
            }
        }
        let fp = fingerprint(agent_id, rule_id, tool_name, args, enduser_id);
        let entry = Entry {
            agent_id: agent_id.into(),
            rule_id: rule_id.into(),
            tool_name: tool_name.into(),
            enduser_id: enduser_id.map(Into::into),
            args: args.clone(),
            fingerprint: fp.clone(),
        };
        let mut map = self.map.lock();
        if map.len() >= CAPACITY {
            map.clear();
        }
        map.insert(key, entry);
        fp
    }
}

/// Hashes a JSON value; false when it is nested deeper than [`MAX_DEPTH`] or larger than
/// `budget` (what is left of it is updated).
fn hash_value(v: &Value, h: &mut impl Hasher, depth: usize, budget: &mut usize) -> bool {
    let size = 8 + match v {
        Value::String(s) => s.len(),
        Value::Object(m) => m.keys().map(String::len).sum(),
        _ => 0,
    };
    if depth > MAX_DEPTH || size > *budget {
        return false;
    }
    *budget -= size;
    match v {
        Value::Null => h.write_u8(0),
        Value::Bool(b) => h.write_u8(1 + u8::from(*b)),
        Value::Number(n) => {
            h.write_u8(3);
            if let Some(u) = n.as_u64() {
                h.write_u64(u);
            } else if let Some(i) = n.as_i64() {
                h.write_u64(i as u64);
            } else if let Some(f) = n.as_f64() {
                h.write_u64(f.to_bits());
            }
        }
        Value::String(s) => {
            h.write_u8(4);
            h.write(s.as_bytes());
        }
        Value::Array(items) => {
            h.write_u8(5);
            h.write_usize(items.len());
            for item in items {
                if !hash_value(item, h, depth + 1, budget) {
                    return false;
                }
            }
        }
        Value::Object(map) => {
            h.write_u8(6);
            h.write_usize(map.len());
            for (k, item) in map {
                h.write(k.as_bytes());
                if !hash_value(item, h, depth + 1, budget) {
                    return false;
                }
            }
        }
    }
    true
}

/// Whether two values are the same JSON text-wise: as `==`, but numbers compare by their
/// representation (`1` and `1.0`, `0.0` and `-0.0` differ), so both have one canonical form.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x.is_f64() == y.is_f64()
                && if x.is_f64() {
                    x.as_f64().map(f64::to_bits) == y.as_f64().map(f64::to_bits)
                } else {
                    x.as_u64() == y.as_u64() && x.as_i64() == y.as_i64()
                }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|((k, p), (l, q))| k == l && same(p, q))
        }
        _ => a == b,
    }
}

mod nohash {
    //! A hasher for keys that already are hashes.
    use std::hash::{BuildHasherDefault, Hasher};

    #[derive(Default)]
    pub(crate) struct NoHash(u64);

    impl Hasher for NoHash {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 = self.0.rotate_left(8) ^ u64::from(*b);
            }
        }
        fn write_u64(&mut self, n: u64) {
            self.0 = n;
        }
    }

    pub(crate) type BuildNoHash = BuildHasherDefault<NoHash>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cached_fingerprints_are_the_computed_ones() {
        let c = FingerprintCache::default();
        let calls = [
            json!({"amount": 500, "to": "x"}),
            json!({"amount": 500.0, "to": "x"}),
            json!({"amount": -0.0}),
            json!({"amount": 0.0}),
            json!([1, [2, {"a": null}]]),
        ];
        for _ in 0..2 {
            for args in &calls {
                for user in [None, Some("u1"), Some("")] {
                    assert_eq!(
                        c.get("agent", "r1", "issue_refund", args, user),
                        fingerprint("agent", "r1", "issue_refund", args, user)
                    );
                }
            }
        }
        let mut deep = json!(1);
        for _ in 0..(MAX_DEPTH + 2) {
            deep = json!([deep]);
        }
        let big = json!({"body": "x".repeat(MAX_ARGS_BYTES)});
        for args in [&deep, &big] {
            assert_eq!(
                c.get("a", "r", "t", args, None),
                fingerprint("a", "r", "t", args, None)
            );
        }
        assert_eq!(c.map.lock().len(), calls.len() * 3);
    }
}
