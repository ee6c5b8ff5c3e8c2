//! The compiled form of a condition and of its parts: string and argument tests, sequence
//! entries, timezone sources and signal bindings.

use std::sync::Arc;

use chrono_tz::Tz;
use globset::{GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use regex::Regex;
use serde_json::Value;

use crate::policy::types::*;

/// Builds a case-insensitive glob matcher (patterns and names are lowercased).
pub(crate) fn glob_matcher(pattern: &str) -> Result<GlobMatcher, globset::Error> {
    Ok(GlobBuilder::new(&pattern.to_lowercase())
        .literal_separator(false)
        .build()?
        .compile_matcher())
}

pub(super) fn glob_set(patterns: &[String]) -> Result<GlobSet, globset::Error> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        b.add(GlobBuilder::new(&p.to_lowercase()).build()?);
    }
    b.build()
}

pub(super) fn lower(v: &[String]) -> Vec<String> {
    v.iter().map(|s| s.to_lowercase()).collect()
}

/// A compiled string test.
#[derive(Debug)]
pub(crate) enum StrTest {
    Eq(String),
    Neq(String),
    Contains(String),
    StartsWith(String),
    EndsWith(String),
    Glob(GlobMatcher),
    In(Vec<String>),
    Regex(Regex),
}

impl StrTest {
    pub(crate) fn matches(&self, s: &str) -> bool {
        // Equality and affixes compared without a `memcmp` call for short strings (most tool
        // names; a glob `*` is the empty prefix).
        let eq = |a: &[u8], b: &str| eq_bytes(a, b.as_bytes());
        let b = s.as_bytes();
        match self {
            StrTest::Eq(v) => eq(b, v),
            StrTest::Neq(v) => !eq(b, v),
            StrTest::Contains(v) => s.contains(v.as_str()),
            StrTest::StartsWith(v) => b.get(..v.len()).is_some_and(|p| eq(p, v)),
            StrTest::EndsWith(v) => b
                .len()
                .checked_sub(v.len())
                .and_then(|i| b.get(i..))
                .is_some_and(|p| eq(p, v)),
            StrTest::Glob(g) => g.is_match(s),
            StrTest::In(vs) => vs.iter().any(|v| v == s),
            StrTest::Regex(r) => r.is_match(s),
        }
    }

    pub(super) fn compile(op: &StringOp, lowercase: bool) -> Result<StrTest, String> {
        let l = |s: &String| {
            if lowercase {
                s.to_lowercase()
            } else {
                s.clone()
            }
        };
        Ok(match op {
            StringOp::Eq(s) => StrTest::Eq(l(s)),
            StringOp::Neq(s) => StrTest::Neq(l(s)),
            StringOp::Contains(s) => StrTest::Contains(l(s)),
            StringOp::StartsWith(s) => StrTest::StartsWith(l(s)),
            StringOp::EndsWith(s) => StrTest::EndsWith(l(s)),
            StringOp::Glob(g) => match simple_glob(&g.to_lowercase()) {
                Some(t) => t,
                None => StrTest::Glob(glob_matcher(g).map_err(|e| e.to_string())?),
            },
            StringOp::In(v) => StrTest::In(v.iter().map(l).collect()),
            StringOp::Regex(r) => StrTest::Regex(
                regex::RegexBuilder::new(r)
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| e.to_string())?,
            ),
        })
    }
}

/// Byte equality, without a library call for up to 16 bytes (most tool names and tags): two
/// overlapping words from each end.
#[inline]
pub(crate) fn eq_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        8..=16 => {
            a.first_chunk::<8>() == b.first_chunk::<8>()
                && a.last_chunk::<8>() == b.last_chunk::<8>()
        }
        4..=7 => {
            a.first_chunk::<4>() == b.first_chunk::<4>()
                && a.last_chunk::<4>() == b.last_chunk::<4>()
        }
        // First, middle and last byte: every byte of up to 3.
        1..=3 => a.first() == b.first() && a.get(n / 2) == b.get(n / 2) && a.last() == b.last(),
        0 => true,
        _ => a == b,
    }
}

/// A glob that is a literal or `prefix*` as the equivalent plain string test (no glob
/// machinery on the decision path). `None` for any other glob.
fn simple_glob(g: &str) -> Option<StrTest> {
    let special = |c: char| matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\' | '!');
    match g.strip_suffix('*') {
        Some(prefix) if !prefix.contains(special) => Some(StrTest::StartsWith(prefix.to_string())),
        None if !g.contains(special) => Some(StrTest::Eq(g.to_string())),
        _ => None,
    }
}

/// A compiled argument test.
#[derive(Debug)]
pub(crate) enum CArgTest {
    Str(StrTest),
    Num(CmpOp, f64),
    Bool(bool),
    /// `exists` (true) / `notExists` (false).
    Exists(bool),
}

/// A compiled sequence entry.
#[derive(Debug)]
pub(crate) enum CSeqEntry {
    Glob(GlobMatcher),
    Names(GlobSet),
    Tags { tags: Vec<String>, all: bool },
}

/// A compiled time-gate timezone source.
#[derive(Debug)]
pub(crate) enum CTzSource {
    Tag { tag: String, fallback_org: bool },
    Static(Tz),
}

/// A compiled signal binding.
#[derive(Debug)]
pub(crate) enum CBinding {
    EnduserId,
    EnduserTag(String),
    ToolName,
    ToolTag(String),
    ToolArg(Vec<String>),
    Subject {
        subject_type: String,
        role: Option<String>,
        field: SubjectField,
    },
    Const(Value),
}

/// The value a signal's result is compared with.
#[derive(Debug)]
pub(crate) struct SignalValue {
    /// The value as written.
    pub(crate) raw: Value,
    /// For a string value: the string parsed as JSON, if it parses.
    pub(crate) parsed: Option<Value>,
}

/// A compiled condition.
#[derive(Debug)]
pub(crate) enum CCond {
    ToolName(StrTest),
    ToolTag(TagOp),
    ToolArg {
        /// Empty: scan mode (every leaf of the test's type).
        path: Option<Vec<String>>,
        test: CArgTest,
        on_missing: Option<EffectType>,
    },
    EnduserTag(EnduserTagOp),
    ExecutionTime {
        scope: TimeScope,
        op: CmpOp,
        ms: f64,
        on_missing: Option<EffectType>,
    },
    /// Ids into [`CompiledPolicies::seq_entries`].
    Sequence {
        must: Vec<u32>,
        must_not: Vec<u32>,
    },
    MaxCalls {
        counter: u32,
        max: u64,
    },
    MetricWindow {
        tracker: u32,
        aggregate: Aggregate,
        op: CmpOp,
        value: f64,
        on_missing: Option<EffectType>,
    },
    TimeGate {
        tz: CTzSource,
        windows: Vec<TimeWindow>,
        on_missing: Option<EffectType>,
    },
    RequireSubject(SubjectTest),
    Signal {
        key: Arc<str>,
        args: Vec<(String, CBinding)>,
        op: SignalOp,
        value: SignalValue,
        on_missing: Option<EffectType>,
    },
    SensitiveData(Box<crate::policy::sensitive_compiled::CSensitive>),
    Custom {
        name: Arc<str>,
        args: Value,
    },
    And(Vec<CCond>),
    Or(Vec<CCond>),
    Not(Box<CCond>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eq_bytes_is_byte_equality() {
        let words = [
            "",
            "a",
            "b",
            "ab",
            "ba",
            "aa",
            "abc",
            "aXc",
            "Xbc",
            "abX",
            "abcd",
            "abcde",
            "abcdefg",
            "abcdefgh",
            "abcdefghi",
            "abcdefghijklmnop",
            "abcdefghijklmnoq",
            "bbcdefghijklmnop",
            "abcdefghijklmnopq",
            "abcdefgX",
            "Xbcdefgh",
            "abcdXfgh",
        ];
        for a in words {
            for b in words {
                assert_eq!(eq_bytes(a.as_bytes(), b.as_bytes()), a == b, "{a} {b}");
            }
        }
    }

    #[test]
    fn plain_string_tests_agree_with_the_standard_library() {
        let words = [
            "",
            "a",
            "b",
            "ab",
            "ba",
            "abc",
            "abcd",
            "abce",
            "bcd",
            "abcdefg",
            "abcdefgh",
            "abcdefghi",
            "bcdefghi",
            "abcdefghijklmnop",
            "abcdefghijklmnopq",
            "send_email",
            "send_",
            "email",
            "x_send_email",
            "é",
            "aé",
        ];
        for v in words {
            let tests = [
                (StrTest::Eq(v.into()), "eq"),
                (StrTest::Neq(v.into()), "neq"),
                (StrTest::StartsWith(v.into()), "startsWith"),
                (StrTest::EndsWith(v.into()), "endsWith"),
                (StrTest::Contains(v.into()), "contains"),
            ];
            for s in words {
                for (t, op) in &tests {
                    let want = match *op {
                        "eq" => s == v,
                        "neq" => s != v,
                        "startsWith" => s.starts_with(v),
                        "endsWith" => s.ends_with(v),
                        _ => s.contains(v),
                    };
                    assert_eq!(t.matches(s), want, "{s:?} {op} {v:?}");
                }
            }
        }
    }

    #[test]
    fn a_star_glob_matches_every_name() {
        let t = StrTest::compile(&StringOp::Glob("*".into()), true).expect("compiles");
        for s in ["", "a", "delete_user", "é"] {
            assert!(t.matches(s), "{s:?}");
        }
    }
}
