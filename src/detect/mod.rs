//! The `sensitiveData` detectors: hand-written linear scanners, one file per detector
//! family, and the redaction of what they find. Used by the engine's `sensitiveData`
//! condition and by the audit trail's redaction; they know nothing of either.

mod card;
mod contact;
mod finance;
pub(crate) mod first_pass;
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

use crate::json::MAX_VALUE_DEPTH as MAX_DEPTH;
use crate::policy::{CSub, Detector, SubCheck, SubOp};

impl CSub {
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
pub(crate) fn label_suffix(name: &str, suffix: &str) -> bool {
    let (n, v) = (name.as_bytes(), suffix.as_bytes());
    if n.len() < v.len() || !n[n.len() - v.len()..].eq_ignore_ascii_case(v) {
        return false;
    }
    n.len() == v.len() || v.first() == Some(&b'.') || n[n.len() - v.len() - 1] == b'.'
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
