//! The fast crossing of a decision made at once: its fields as numbers in a `Float64Array`
//! that `index.js` owns (one per engine, reused for every call), its strings (phase, effect,
//! code, reason, rule id, shadow effect) as numbers into a table of strings that the addon
//! hands to JavaScript once each. No JSON text to build or parse, no object to create through
//! Node-API: the decision's crossing costs a few stores into the buffer.
//!
//! A decision the buffer cannot carry (one with a review id or an error, or a string past the
//! table's bound) crosses as JSON text instead, as an awaited decision always does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::*;
use toolgate::engine::Decision;

use crate::invalid;

/// Slots of the buffer (`index.js` reads the same numbers: keep the two in step).
pub(crate) mod slot {
    /// 1: the decision is in the buffer (the call's return value, if any, is a JSON array of
    /// new strings); 0: the return value is the decision as JSON text.
    pub const FORM: usize = 0;
    /// The decision's number in its run (`NativeRun.decisionJson(seq)`).
    pub const SEQ: usize = 1;
    /// The engine's own latency, in nanoseconds.
    pub const LATENCY: usize = 2;
    /// 1: allowed, 2: abortRun.
    pub const FLAGS: usize = 3;
    /// N when the addon named the call `call-N`; 0 when the caller gave its id.
    pub const CALL_NO: usize = 4;
    /// String numbers (-1: null).
    pub const PHASE: usize = 5;
    /// See [`PHASE`].
    pub const EFFECT: usize = 6;
    /// See [`PHASE`].
    pub const CODE: usize = 7;
    /// See [`PHASE`].
    pub const REASON: usize = 8;
    /// See [`PHASE`].
    pub const RULE_ID: usize = 9;
    /// See [`PHASE`].
    pub const SHADOW_EFFECT: usize = 10;
    /// The number of the first string in the returned array of new strings.
    pub const FIRST_NEW: usize = 11;
    /// The buffer's length.
    pub const LEN: usize = 12;
}

/// How many distinct strings an engine hands out by number; past it, decisions with new
/// strings cross as JSON text (a reason that differs per call cannot grow the table forever).
pub(crate) const MAX_STRINGS: usize = 4096;

/// The strings an engine has given JavaScript by number: JavaScript keeps the list (string
/// `i` is the `i`-th one ever sent), the addon the index.
#[derive(Default)]
pub(crate) struct Strings {
    table: Mutex<Table>,
}

/// Slots of [`Table::seen`] (a power of two).
const SEEN: usize = 64;

/// The index of strings by text, and a small cache of the same numbers by address: a
/// decision's phase, effect and code are `&'static str`s and its reason and rule id the
/// compiled rule's `Arc<str>`s, the same allocation call after call, so most strings are
/// found by comparing two pointers instead of hashing their text.
struct Table {
    index: HashMap<Box<str>, u32>,
    seen: [Option<(Seen, u32)>; SEEN],
}

impl Default for Table {
    fn default() -> Self {
        Table {
            index: HashMap::new(),
            seen: std::array::from_fn(|_| None),
        }
    }
}

/// A string as the cache knows it: its address stays its own while the cache holds it (a
/// static string's for ever; a shared one's while the cache keeps a reference to it), so
/// the same address and length mean the same text.
enum Seen {
    Static(&'static str),
    Shared(Arc<str>),
}

/// A decision's string, by reference.
#[derive(Clone, Copy)]
enum Text<'a> {
    Static(&'static str),
    Shared(&'a Arc<str>),
}

impl<'a> Text<'a> {
    fn as_str(self) -> &'a str {
        match self {
            Text::Static(s) => s,
            Text::Shared(s) => s,
        }
    }
}

impl Table {
    fn slot(s: &str) -> usize {
        let at = s.as_ptr() as usize;
        ((at >> 3) ^ (at >> 11) ^ s.len()) & (SEEN - 1)
    }

    /// The number of `s` if the cache has it.
    fn cached(&self, s: Text<'_>) -> Option<u32> {
        let (seen, n) = self.seen[Self::slot(s.as_str())].as_ref()?;
        let same = match (seen, s) {
            (Seen::Static(a), Text::Static(b)) => a.as_ptr() == b.as_ptr() && a.len() == b.len(),
            (Seen::Shared(a), Text::Shared(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        same.then_some(*n)
    }

    fn remember(&mut self, s: Text<'_>, n: u32) {
        let seen = match s {
            Text::Static(s) => Seen::Static(s),
            Text::Shared(s) => Seen::Shared(s.clone()),
        };
        self.seen[Self::slot(s.as_str())] = Some((seen, n));
    }
}

/// The outcome of [`fill`].
pub(crate) enum Filled {
    /// In the buffer; the new strings (JSON array text) if any.
    Buffer(Option<String>),
    /// Not representable: cross as JSON text.
    Text,
}

impl Strings {
    /// Writes `d` into `out` (see [`slot`]; `SEQ` is the caller's to write), `call_no` as given.
    pub(crate) fn fill(&self, d: &Decision, call_no: u64, out: &mut [f64]) -> Filled {
        if d.hitl.is_some() || d.error.is_some() || out.len() < slot::LEN {
            return Filled::Text;
        }
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let first = table.index.len();
        let strings = [
            Some(Text::Static(d.phase.as_str())),
            Some(Text::Static(d.effect.as_str())),
            Some(Text::Static(d.code.as_str())),
            d.reason.as_ref().map(Text::Shared),
            d.rule_id.as_ref().map(Text::Shared),
            d.shadow_effect.map(|e| Text::Static(e.as_str())),
        ];
        let mut numbers = [-1.0; 6];
        // Found by text: cached once the decision is sure to cross in the buffer.
        let mut found: [Option<(Text<'_>, u32)>; 6] = [None; 6];
        // Strings new to JavaScript, in the order of their numbers (first, first + 1, …).
        let mut added: Vec<&str> = Vec::new();
        for (k, s) in strings.iter().enumerate() {
            let Some(s) = *s else { continue };
            if let Some(n) = table.cached(s) {
                numbers[k] = f64::from(n);
                continue;
            }
            let n = match table.index.get(s.as_str()) {
                Some(&n) => n,
                None => {
                    if table.index.len() >= MAX_STRINGS {
                        // Not numbered after all: JavaScript never receives these.
                        for s in &added {
                            table.index.remove(*s);
                        }
                        return Filled::Text;
                    }
                    let n = table.index.len() as u32;
                    table.index.insert(s.as_str().into(), n);
                    added.push(s.as_str());
                    n
                }
            };
            found[k] = Some((s, n));
            numbers[k] = f64::from(n);
        }
        for (s, n) in found.into_iter().flatten() {
            table.remember(s, n);
        }
        drop(table);
        const AT: [usize; 6] = [
            slot::PHASE,
            slot::EFFECT,
            slot::CODE,
            slot::REASON,
            slot::RULE_ID,
            slot::SHADOW_EFFECT,
        ];
        for (at, n) in AT.into_iter().zip(numbers) {
            out[at] = n;
        }
        out[slot::FORM] = 1.0;
        out[slot::LATENCY] = d.latency_ns as f64;
        out[slot::FLAGS] = f64::from(u8::from(d.is_allowed()) | (u8::from(d.abort_run) << 1));
        out[slot::CALL_NO] = call_no as f64;
        out[slot::FIRST_NEW] = first as f64;
        if added.is_empty() {
            return Filled::Buffer(None);
        }
        // Writing JSON into a String cannot fail.
        Filled::Buffer(Some(serde_json::to_string(&added).unwrap_or_default()))
    }
}

/// The buffer `index.js` passes, checked.
pub(crate) fn buffer(out: &mut [f64]) -> Result<&mut [f64]> {
    if out.len() < slot::LEN {
        return Err(invalid(format!(
            "out: expected a Float64Array of at least {} numbers",
            slot::LEN
        )));
    }
    out[slot::FORM] = 0.0;
    Ok(out)
}
