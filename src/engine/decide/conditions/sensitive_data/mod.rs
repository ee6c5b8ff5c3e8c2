//! `sensitiveData`: scans the string leaves of a call's arguments (or of the value at a path)
//! with hand-written linear detectors, one file per detector family. At most the first 1 MiB
//! of each string is scanned; nothing is copied. The decision's `evaluated` entry records the
//! detectors that matched and the argument paths — never the matched text.

mod contact;
mod finance;
mod first_pass;
#[cfg(test)]
mod first_pass_tests;
mod network;
pub(crate) mod scan;
mod secrets;
#[cfg(test)]
mod skip_tests;
mod spans;
#[cfg(test)]
mod spans_tests;

use serde_json::Value;
use smallvec::SmallVec;

use super::{Tri, json_path};
use crate::engine::decision::{ArgPathSeg, Detection};
use crate::engine::evaluate::DecisionCtx;
use crate::policy::{Detector, DetectorEntry, SubCheck, SubCondition, SubOp};

/// Deepest argument nesting scanned (deeper values are not looked at).
const MAX_DEPTH: usize = 128;

/// A compiled sub-condition (values lowercased).
#[derive(Debug)]
pub(crate) struct CSub {
    check: SubCheck,
    op: SubOp,
    values: Vec<String>,
}

impl CSub {
    fn compile(s: &SubCondition) -> CSub {
        CSub {
            check: s.check,
            op: s.op,
            values: s.value.values().iter().map(|v| v.to_lowercase()).collect(),
        }
    }

    fn accepts(&self, scheme: &str, domain: &str) -> bool {
        let got = match self.check {
            SubCheck::Scheme => scheme,
            SubCheck::Domain => domain,
            SubCheck::Tld => scan::tld(domain),
        };
        let eq = |v: &String| got.eq_ignore_ascii_case(v);
        match self.op {
            SubOp::Eq | SubOp::In => self.values.iter().any(eq),
            SubOp::Neq => !self.values.iter().any(eq),
            SubOp::EndsWith => self.values.iter().any(|v| {
                got.len() >= v.len()
                    && got.as_bytes()[got.len() - v.len()..].eq_ignore_ascii_case(v.as_bytes())
            }),
        }
    }
}

/// A compiled `sensitiveData` condition.
#[derive(Debug)]
pub(crate) struct CSensitive {
    path: Option<Vec<String>>,
    all: bool,
    detectors: Vec<(Detector, Option<CSub>)>,
    /// The detectors answered by one shared [`first_pass::first_pass`] over each string (a mask
    /// of its bits; 0 when each detector scans on its own).
    shared: u8,
    /// Detections are redacted from the audit trail (`redactDetected`, default true).
    redact: bool,
}

/// The bit of `d` in [`first_pass::first_pass`]'s masks, if it is one of its detectors.
fn shared_bit(d: Detector) -> u8 {
    match d {
        Detector::SecretKey => first_pass::SECRET,
        Detector::Jwt => first_pass::JWT,
        _ => 0,
    }
}

/// Which detectors of a condition share one pass: when it has two or three of `secret_key`,
/// `credit_card` and `jwt` (alone, each detector's own scan costs less).
fn shared_mask(detectors: &[(Detector, Option<CSub>)]) -> u8 {
    let m = detectors.iter().fold(0, |m, (d, _)| m | shared_bit(*d));
    if m.count_ones() >= 2 { m } else { 0 }
}

impl CSensitive {
    /// Compiles a condition's parts.
    pub(crate) fn compile(
        path: Option<&str>,
        all: bool,
        detectors: &[DetectorEntry],
        redact: bool,
    ) -> CSensitive {
        let detectors: Vec<_> = detectors
            .iter()
            .map(|d| (d.detector, d.sub_condition.as_ref().map(CSub::compile)))
            .collect();
        CSensitive {
            path: path.map(|p| p.split('.').map(str::to_string).collect()),
            all,
            shared: shared_mask(&detectors),
            detectors,
            redact,
        }
    }
}

/// Whether `detector` finds a detection in `s` that `sub` (if any) accepts (stand-ins are
/// answered by the scan, see [`stand_ins`]).
pub(crate) fn detect(detector: Detector, s: &str, sub: Option<&CSub>) -> bool {
    let b = scan::bounded(s);
    match detector {
        Detector::Email | Detector::EmailDomain => {
            contact::emails(b, &mut |domain| sub.is_none_or(|c| c.accepts("", domain)))
        }
        Detector::Url => contact::urls(b, &mut |scheme, host| {
            sub.is_none_or(|c| c.accepts(scheme, host))
        }),
        Detector::Phone => contact::phone(b),
        Detector::CreditCard => finance::credit_card(b),
        Detector::Iban => finance::iban(b),
        Detector::UkNino => finance::uk_nino(b),
        Detector::IpAddress => network::ip_address(b),
        Detector::Jwt => secrets::jwt(b),
        Detector::PrivateKey => secrets::private_key(b),
        Detector::SecretKey => first_pass::first_pass(b, first_pass::SECRET) != 0,
    }
}

fn stand_in_bit(d: Detector) -> u16 {
    1 << (d as u16)
}

/// The detectors named by the audit trail's stand-ins (`[redacted:<detector>]`, written for
/// the spans a detector matched) in `s`, as a mask of [`stand_in_bit`]s: a what-if replay of
/// a redacted trail decides them as they were decided live (sub-conditions cannot be
/// re-checked). A stand-in never hides the rest of the string from the detectors.
fn stand_ins(s: &str) -> u16 {
    const OPEN: &[u8] = b"[redacted:";
    let b = s.as_bytes();
    let mut m = 0;
    for i in memchr::memchr_iter(b'[', b) {
        let Some(rest) = b[i..].strip_prefix(OPEN) else {
            continue;
        };
        let Some(end) = memchr::memchr(b']', &rest[..rest.len().min(16)]) else {
            continue;
        };
        if let Some(d) = Detector::ALL
            .iter()
            .find(|d| d.as_str().as_bytes() == &rest[..end])
        {
            m |= stand_in_bit(*d);
        }
    }
    m
}

type Segs<'a> = SmallVec<[ArgPathSeg<'a>; 8]>;

struct Scan<'c> {
    cond: &'c CSensitive,
    /// Bit i: detector i matched somewhere.
    mask: u32,
    found: Vec<Detection>,
}

impl Scan<'_> {
    fn value<'v>(&mut self, v: &'v Value, segs: &mut Segs<'v>) {
        match v {
            Value::String(s) => self.string(s, segs),
            Value::Array(a) if segs.len() < MAX_DEPTH => {
                for (i, x) in a.iter().enumerate() {
                    segs.push(ArgPathSeg::Index(i));
                    self.value(x, segs);
                    segs.pop();
                }
            }
            Value::Object(m) if segs.len() < MAX_DEPTH => {
                for (k, x) in m {
                    segs.push(ArgPathSeg::Key(k));
                    self.value(x, segs);
                    segs.pop();
                }
            }
            _ => {}
        }
    }

    fn string(&mut self, s: &str, segs: &Segs<'_>) {
        let stand = stand_ins(s);
        let shared = self.cond.shared;
        let found = if shared != 0 {
            first_pass::first_pass(scan::bounded(s), shared)
        } else {
            0
        };
        for (i, (d, sub)) in self.cond.detectors.iter().enumerate() {
            let bit = shared_bit(*d) & shared;
            let hit = stand & stand_in_bit(*d) != 0
                || if bit != 0 {
                    found & bit != 0
                } else {
                    detect(*d, s, sub.as_ref())
                };
            if hit {
                self.mask |= 1 << i;
                self.found.push(Detection::new(*d, segs, self.cond.redact));
            }
        }
    }
}

/// True when the detectors match per `op` (anyOf: one of them somewhere; allOf: each of them
/// somewhere). A `path` that is absent is false: nothing is sent. Never missing data.
pub(crate) fn eval(c: &CSensitive, ctx: &mut DecisionCtx<'_>) -> Tri {
    let root = match &c.path {
        None => Some(ctx.call.args),
        Some(p) => json_path(ctx.call.args, p),
    };
    let Some(root) = root else {
        return Tri::False;
    };
    let mut scan = Scan {
        cond: c,
        mask: 0,
        found: Vec::new(),
    };
    let mut segs: Segs<'_> = SmallVec::new();
    if let Some(p) = &c.path {
        // The path's own segments: resolved against the arguments as `json_path` does.
        let mut cur = ctx.call.args;
        for k in p {
            match cur {
                Value::Object(m) => {
                    segs.push(ArgPathSeg::Key(k));
                    cur = m.get(k.as_str()).unwrap_or(&Value::Null);
                }
                Value::Array(a) => {
                    let i = k.parse::<usize>().unwrap_or(usize::MAX);
                    segs.push(ArgPathSeg::Index(i));
                    cur = a.get(i).unwrap_or(&Value::Null);
                }
                _ => break,
            }
        }
    }
    scan.value(root, &mut segs);
    if !scan.found.is_empty() {
        ctx.add_detections(scan.found);
    }
    let n = c.detectors.len().min(32);
    let want = if n == 32 { u32::MAX } else { (1u32 << n) - 1 };
    let hit = if c.all {
        scan.mask & want == want
    } else {
        scan.mask != 0
    };
    hit.into()
}

/// What the audit trail writes instead of the arguments of a call in which `sensitiveData`
/// detected something (policy option `redactDetected`, on by default).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Redaction {
    /// The arguments, each detected string replaced by `"[redacted:<detector>]"`.
    pub(crate) args: Value,
    /// The detectors that matched (outputs are redacted with them).
    pub(crate) detectors: Vec<Detector>,
}

/// The redaction of `args` for the detections of `evaluated` (on top of `base`, an earlier
/// redaction of the same arguments), or `None` when nothing is to be redacted.
pub(crate) fn redaction(
    args: &Value,
    base: Option<&Redaction>,
    evaluated: &[crate::engine::decision::EvaluatedRule],
) -> Option<Redaction> {
    let mut found = evaluated
        .iter()
        .flat_map(|e| e.detected.iter().flat_map(|d| d.iter()))
        .filter(|d| d.redact)
        .peekable();
    found.peek()?;
    let mut out = match base {
        Some(b) => b.clone(),
        None => Redaction {
            args: args.clone(),
            detectors: Vec::new(),
        },
    };
    for d in found {
        if let Some(Value::String(s)) = at_path_mut(&mut out.args, &d.segs) {
            match spans::redact_spans(s, &[d.detector]) {
                Some(r) => *s = r,
                // Detected, but no span found to replace (never expected): the whole string.
                None if stand_ins(s) & stand_in_bit(d.detector) == 0 => {
                    *s = format!("[redacted:{}]", d.detector)
                }
                None => {}
            }
        }
        if !out.detectors.contains(&d.detector) {
            out.detectors.push(d.detector);
        }
    }
    Some(out)
}

/// Redacts, in an output, each span of a string that one of `detectors` finds: the span
/// becomes `[redacted:<detector>]`, the rest of the string is kept.
pub(crate) fn redact_strings(v: &mut Value, detectors: &[Detector]) {
    redact_in(v, detectors, 0);
}

fn redact_in(v: &mut Value, detectors: &[Detector], depth: usize) {
    match v {
        Value::String(s) => {
            if let Some(r) = spans::redact_spans(s, detectors) {
                *s = r;
            }
        }
        Value::Array(a) if depth < MAX_DEPTH => a
            .iter_mut()
            .for_each(|x| redact_in(x, detectors, depth + 1)),
        Value::Object(m) if depth < MAX_DEPTH => m
            .values_mut()
            .for_each(|x| redact_in(x, detectors, depth + 1)),
        _ => {}
    }
}

fn at_path_mut<'v>(
    mut v: &'v mut Value,
    segs: &[crate::engine::decision::OwnedSeg],
) -> Option<&'v mut Value> {
    use crate::engine::decision::OwnedSeg;
    for s in segs {
        v = match (v, s) {
            (Value::Object(m), OwnedSeg::Key(k)) => m.get_mut(k.as_str())?,
            (Value::Array(a), OwnedSeg::Index(i)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(v)
}
