//! The fast crossing of a decision made at once: one short string of 16-bit code units that
//! `lib/decision.js` reads with `charCodeAt` — its flags, its strings (phase, effect, code,
//! reason, rule id, shadow effect) as numbers into a table of strings that the addon hands to
//! JavaScript once each, and its numbers (seq, latency, call number) in 48 bits each. No JSON
//! text to build or parse, no object or typed array to create or check through Node-API:
//! Node-API makes one string of 16 units (a typed array passed in instead cost ~1,000
//! instructions a call in Node-API's checks and napi-rs's borrow tracking).
//!
//! A decision the string cannot carry (one with a review id or an error, or with a string past
//! the table's bound) crosses as JSON text instead, as an awaited decision always does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use toolgate::engine::Decision;

/// Code units of the fast form (`lib/decision.js` reads the same numbers: keep the two in
/// step; `Numbered::encode` checks its layout against them in debug builds).
pub(crate) mod unit {
    /// `MARK + flags` (1: allowed, 2: abortRun). JSON text starts with `{` (0x7B), below it.
    pub const HEAD: usize = 0;
    /// Added to the flags in [`HEAD`].
    pub const MARK: u16 = 0x100;
    /// String numbers (`NONE`: null): phase, effect, code, reason, rule id, shadow effect.
    pub const PHASE: usize = 1;
    /// A null string.
    pub const NONE: u16 = 0xFFFF;
    /// The decision's number in its run (`NativeRun.decisionJson(seq)`), 48 bits, low first.
    pub const SEQ: usize = 7;
    /// The engine's own latency in nanoseconds, 48 bits, low first.
    pub const LATENCY: usize = 10;
    /// N when the addon named the call `call-N`; 0 when the caller gave its id. 48 bits.
    pub const CALL_NO: usize = 13;
    /// The length of the fast form without new strings. With them, the number of the first
    /// new string follows, then their JSON array text.
    pub const LEN: usize = 16;
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

/// Slots of [`Table::seen`] (a power of two); it is emptied when half full.
const SEEN: usize = 256;

/// The index of strings by text, and a small open-addressed table of the same numbers by
/// address: a decision's phase, effect and code are `&'static str`s and its reason and rule
/// id the compiled rule's `Arc<str>`s, the same allocation call after call, so most strings
/// are found by comparing two pointers instead of hashing their text.
struct Table {
    index: HashMap<Box<str>, u16, foldhash::fast::RandomState>,
    seen: Box<[Option<(Seen, u16)>]>,
    /// Entries in `seen`.
    seen_len: usize,
}

impl Default for Table {
    fn default() -> Self {
        Table {
            index: HashMap::default(),
            seen: (0..SEEN).map(|_| None).collect(),
            seen_len: 0,
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

    fn is(self, seen: &Seen) -> bool {
        match (seen, self) {
            (Seen::Static(a), Text::Static(b)) => a.as_ptr() == b.as_ptr() && a.len() == b.len(),
            (Seen::Shared(a), Text::Shared(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Table {
    /// The first slot to probe for `s`: its address, mixed (Fibonacci hashing).
    fn slot(s: &str) -> usize {
        let at = (s.as_ptr() as u64) ^ (s.len() as u64);
        (at.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize & (SEEN - 1)
    }

    /// The number of `s` if the cache has it.
    fn cached(&self, s: Text<'_>) -> Option<u16> {
        let mut i = Self::slot(s.as_str());
        loop {
            let (seen, n) = self.seen[i].as_ref()?;
            if s.is(seen) {
                return Some(*n);
            }
            i = (i + 1) & (SEEN - 1);
        }
    }

    fn remember(&mut self, s: Text<'_>, n: u16) {
        if self.seen_len >= SEEN / 2 {
            self.seen.iter_mut().for_each(|e| *e = None);
            self.seen_len = 0;
        }
        let mut i = Self::slot(s.as_str());
        while self.seen[i].is_some() {
            i = (i + 1) & (SEEN - 1);
        }
        let seen = match s {
            Text::Static(s) => Seen::Static(s),
            Text::Shared(s) => Seen::Shared(s.clone()),
        };
        self.seen[i] = Some((seen, n));
        self.seen_len += 1;
    }
}

/// A decision's strings by number, and those new to JavaScript.
pub(crate) struct Numbered {
    numbers: [u16; 6],
    /// The number of the first new string, and the new strings as a JSON array.
    added: Option<(u16, String)>,
}

impl Strings {
    /// The numbers of `d`'s strings; `None` when `d` must cross as JSON text (it names a review
    /// or an error, or a new string would pass [`MAX_STRINGS`]).
    pub(crate) fn number(&self, d: &Decision) -> Option<Numbered> {
        if d.hitl.is_some() || d.error.is_some() {
            return None;
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
        let mut numbers = [unit::NONE; 6];
        // Found by text: cached once the decision is sure to cross in the fast form.
        let mut found: [Option<(Text<'_>, u16)>; 6] = [None; 6];
        // Strings new to JavaScript, in the order of their numbers (first, first + 1, …).
        let mut added: Vec<&str> = Vec::new();
        for (k, s) in strings.iter().enumerate() {
            let Some(s) = *s else { continue };
            if let Some(n) = table.cached(s) {
                numbers[k] = n;
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
                        return None;
                    }
                    // Below MAX_STRINGS, so below u16::MAX (NONE).
                    let n = table.index.len() as u16;
                    table.index.insert(s.as_str().into(), n);
                    added.push(s.as_str());
                    n
                }
            };
            found[k] = Some((s, n));
            numbers[k] = n;
        }
        for (s, n) in found.into_iter().flatten() {
            table.remember(s, n);
        }
        drop(table);
        let added = (!added.is_empty()).then(|| {
            // Writing JSON into a String cannot fail.
            (
                first as u16,
                serde_json::to_string(&added).unwrap_or_default(),
            )
        });
        Some(Numbered { numbers, added })
    }
}

/// Pushes the low 48 bits of `n`, low unit first.
fn push48(out: &mut Vec<u16>, n: u64) {
    out.extend([n as u16, (n >> 16) as u16, (n >> 32) as u16]);
}

impl Numbered {
    /// The fast form (see [`unit`]) of a decision numbered `seq` in its run, `d`'s flags and
    /// latency as given.
    pub(crate) fn encode(self, flags: u16, seq: u64, latency_ns: u64, call_no: u64) -> Vec<u16> {
        let extra = self.added.as_ref().map_or(0, |(_, json)| 1 + json.len());
        let mut out = Vec::with_capacity(unit::LEN + extra);
        debug_assert_eq!(out.len(), unit::HEAD);
        out.push(unit::MARK + flags);
        debug_assert_eq!(out.len(), unit::PHASE);
        out.extend(self.numbers);
        debug_assert_eq!(out.len(), unit::SEQ);
        push48(&mut out, seq);
        debug_assert_eq!(out.len(), unit::LATENCY);
        push48(&mut out, latency_ns.min((1 << 48) - 1));
        debug_assert_eq!(out.len(), unit::CALL_NO);
        push48(&mut out, call_no);
        debug_assert_eq!(out.len(), unit::LEN);
        if let Some((first, json)) = self.added {
            out.push(first);
            out.extend(json.encode_utf16());
        }
        out
    }
}

/// A decision's flags in the fast form's head.
pub(crate) fn flags(d: &Decision) -> u16 {
    u16::from(d.is_allowed()) | (u16::from(d.abort_run) << 1)
}
