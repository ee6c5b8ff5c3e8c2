//! `sensitiveData`: scans the string leaves (and, for `credit_card`, the integers) of a call's
//! arguments or, after the call, of its result (or of the value at a path) with hand-written
//! linear detectors, one file per detector family. At most the scan limit of each string is
//! scanned (1 MiB by default; past it the answer is missing data); nothing is copied. The
//! decision's `evaluated` entry records the detectors that matched and the paths — never the
//! matched text. Live calls are scanned whatever they hold; only a what-if replay honours the
//! trail's stand-ins (`walk.rs`).

mod card;
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
mod walk;

pub(crate) use scan::MAX_SCAN as DEFAULT_SCAN_LIMIT;
pub(crate) use walk::{ScanMode, UNDECIDABLE_NOTE, eval};
mod spans;
#[cfg(test)]
mod spans_tests;

use serde_json::Value;

use crate::json::MAX_VALUE_DEPTH as MAX_DEPTH;
pub(crate) use crate::policy::SensitiveTarget as Target;
use crate::policy::{Detector, DetectorEntry, EffectType, SubCheck, SubCondition, SubOp};

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
            SubOp::EndsWith => self.values.iter().any(|v| label_suffix(got, v)),
        }
    }
}

/// Whether `name` ends with `suffix` on a label boundary (ignoring case): `name` is `suffix`
/// itself or ends with `.` + `suffix` (`x.corp.example` and `corp.example` end with
/// `corp.example`; `evilcorp.example` does not). A suffix written with its leading dot
/// (`.corp.example`) matches subdomains only.
fn label_suffix(name: &str, suffix: &str) -> bool {
    let (n, v) = (name.as_bytes(), suffix.as_bytes());
    if n.len() < v.len() || !n[n.len() - v.len()..].eq_ignore_ascii_case(v) {
        return false;
    }
    n.len() == v.len() || v.first() == Some(&b'.') || n[n.len() - v.len() - 1] == b'.'
}

/// A compiled `sensitiveData` condition.
#[derive(Debug)]
pub(crate) struct CSensitive {
    /// What is scanned: the call's arguments, or (after phase) the tool's result.
    target: Target,
    /// What a missing answer (text past the scan limit, a stand-in in what-if) resolves to:
    /// the condition's `onMissing`, else its rule's, else block (never the policy's default).
    on_missing: EffectType,
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
    /// Whether it scans the messages sent to a model (`target: "llmInput"`).
    pub(crate) fn scans_llm_input(&self) -> bool {
        self.target == Target::LlmInput
    }

    /// Compiles a condition's parts.
    pub(crate) fn compile(
        target: Target,
        path: Option<&str>,
        all: bool,
        detectors: &[DetectorEntry],
        redact: bool,
        on_missing: EffectType,
    ) -> CSensitive {
        let detectors: Vec<_> = detectors
            .iter()
            .map(|d| (d.detector, d.sub_condition.as_ref().map(CSub::compile)))
            .collect();
        CSensitive {
            target,
            on_missing,
            path: path.map(|p| p.split('.').map(str::to_string).collect()),
            all,
            shared: shared_mask(&detectors),
            detectors,
            redact,
        }
    }
}

/// Whether `detector` finds a detection in (the first [`scan::MAX_SCAN`] bytes of) `s` that
/// `sub` (if any) accepts. Whatever `s` holds is scanned: a stand-in is plain text here.
pub(crate) fn detect(detector: Detector, s: &str, sub: Option<&CSub>) -> bool {
    detect_bytes(detector, scan::bounded(s), sub)
}

/// [`detect`] over bytes already bounded.
pub(crate) fn detect_bytes(detector: Detector, b: &[u8], sub: Option<&CSub>) -> bool {
    match detector {
        Detector::Email | Detector::EmailDomain => {
            contact::emails(b, &mut |domain| sub.is_none_or(|c| c.accepts("", domain)))
        }
        Detector::Url => contact::urls(b, &mut |scheme, host| {
            sub.is_none_or(|c| c.accepts(scheme, host))
        }),
        Detector::Phone => contact::phone(b),
        Detector::CreditCard => card::credit_card(b),
        Detector::Iban => finance::iban(b),
        Detector::UkNino => finance::uk_nino(b),
        Detector::IpAddress => network::ip_address(b),
        Detector::Jwt => secrets::jwt(b),
        Detector::PrivateKey => secrets::private_key(b),
        Detector::SecretKey => first_pass::first_pass(b, first_pass::SECRET) != 0,
    }
}

/// The first detector of `detectors` that matches `s`, if any (sub-conditions ignored): what
/// the audit trail's redaction of outputs uses.
pub(crate) fn first_match(detectors: &[Detector], s: &str) -> Option<Detector> {
    detectors.iter().copied().find(|&d| detect(d, s, None))
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
    evaluated: &[crate::engine::decide::decision::EvaluatedRule],
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
        // A detection in the tool's result names no place in the arguments.
        if !d.in_output
            && let Some(v) = at_path_mut(&mut out.args, &d.segs)
        {
            redact_value(v, d.detector);
        }
        if !out.detectors.contains(&d.detector) {
            out.detectors.push(d.detector);
        }
    }
    Some(out)
}

/// Redacts what `detector` found in `v`: a string as [`redact_strings`] does; an integer
/// (`credit_card`) becomes its digits, redacted, or the whole stand-in when they are not
/// found again.
pub(crate) fn redact_value(v: &mut Value, detector: Detector) {
    match v {
        Value::String(_) => redact_strings(v, &[detector]),
        Value::Number(n) => {
            let stand_in = Value::String(format!("[redacted:{detector}]"));
            let mut digits = Value::String(n.to_string().trim_start_matches('-').to_string());
            redact_strings(&mut digits, &[detector]);
            *v = if digits.as_str().is_some_and(|s| s.contains("[redacted:")) {
                digits
            } else {
                stand_in
            };
        }
        _ => {}
    }
}

/// Redacts everything `detectors` find in `v`, wherever it lies: strings, object keys, and
/// (for `credit_card`) integers. What the audit trail does to every event of a run under a
/// policy with a redacting `sensitiveData` condition, and what the hitl fingerprint is taken
/// over. A string longer than the scan limit (1 MiB) keeps its scanned part only (followed
/// by `[unscanned: N bytes cut]`). Walks at most [`crate::json::MAX_EVENT_DEPTH`] levels (what an event may nest).
pub(crate) fn redact_found(v: &mut Value, detectors: &[Detector]) {
    if !detectors.is_empty() {
        redact_found_in(v, detectors, detectors.contains(&Detector::CreditCard), 0);
    }
}

fn redact_found_in(v: &mut Value, detectors: &[Detector], cards: bool, depth: usize) {
    match v {
        Value::String(s) => {
            // What the detectors cannot read is not kept: a string longer than the scan
            // limit keeps its scanned part only.
            let (kept, cut) = scan::bounded_to(s, scan::MAX_SCAN);
            if cut {
                let dropped = s.len() - kept.len();
                let mut t = scan::text(kept).to_string();
                t.push_str(&format!("[unscanned: {dropped} bytes cut]"));
                *s = t;
            }
            redact_strings(v, detectors)
        }
        Value::Number(n)
            if cards
                && detect(
                    Detector::CreditCard,
                    n.to_string().trim_start_matches('-'),
                    None,
                ) =>
        {
            redact_value(v, Detector::CreditCard)
        }
        Value::Array(a) if depth < crate::json::MAX_EVENT_DEPTH => a
            .iter_mut()
            .for_each(|x| redact_found_in(x, detectors, cards, depth + 1)),
        Value::Object(m) if depth < crate::json::MAX_EVENT_DEPTH => {
            if m.keys().any(|k| first_match(detectors, k).is_some()) {
                let old = std::mem::take(m);
                for (k, x) in old {
                    let mut key = Value::String(k);
                    redact_strings(&mut key, detectors);
                    let mut k = match key {
                        Value::String(k) => k,
                        _ => String::new(),
                    };
                    // Two keys redacted alike both stay.
                    while m.contains_key(&k) {
                        k.push('\'');
                    }
                    m.insert(k, x);
                }
            }
            m.values_mut()
                .for_each(|x| redact_found_in(x, detectors, cards, depth + 1));
        }
        _ => {}
    }
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
    segs: &[crate::engine::decide::decision::OwnedSeg],
) -> Option<&'v mut Value> {
    use crate::engine::decide::decision::OwnedSeg;
    for s in segs {
        v = match (v, s) {
            (Value::Object(m), OwnedSeg::Key(k)) => m.get_mut(k.as_str())?,
            (Value::Array(a), OwnedSeg::Index(i)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(v)
}
