//! Where each detector matches in a string (byte ranges), and the redaction of those spans:
//! the audit trail replaces the detected text, not the whole string, so a reviewer still sees
//! the rest of the command.

use std::ops::Range;

use super::{card, contact, finance, network, secrets};
use crate::policy::Detector;

/// Calls `f` with the byte range of each match of `detector` in `s` (sub-conditions are not
/// applied: every match is reported) until it returns true; returns whether it did.
pub(crate) fn detector_spans(
    detector: Detector,
    s: &[u8],
    mut f: impl FnMut(Range<usize>) -> bool,
) -> bool {
    match detector {
        Detector::Email | Detector::EmailDomain => contact::email_spans(s, |_, r| f(r)),
        Detector::Url => contact::url_spans(s, |_, _, r| f(r)),
        Detector::Phone => contact::phone_spans(s, f),
        Detector::CreditCard => card::card_spans(s, f),
        Detector::Iban => finance::iban_spans(s, f),
        Detector::UkNino => finance::nino_spans(s, f),
        Detector::IpAddress => network::ip_spans(s, f),
        Detector::Jwt => secrets::jwt_spans(s, f),
        Detector::PrivateKey => secrets::private_key_spans(s, f),
        Detector::SecretKey => secrets::secret_spans(s, f),
    }
}

/// How many times a string is scanned again after its spans were replaced (a replacement
/// can join what was left on its two sides; in practice one pass finds everything and the
/// second finds nothing).
const MAX_PASSES: usize = 4;

/// `s` with each span that one of `detectors` finds replaced by `[redacted:<detector>]`, or
/// `None` when none matches. Overlapping spans are merged (named after the detector whose
/// span starts first). The whole string is scanned (not only the decision's scan limit): the
/// detectors are linear, and a value past the limit is redacted too. The text between spans
/// is kept byte for byte.
pub(crate) fn redact_spans(s: &str, detectors: &[Detector]) -> Option<String> {
    let mut out: Option<String> = None;
    for _ in 0..MAX_PASSES {
        let cur = out.as_deref().unwrap_or(s);
        match redact_once(cur, detectors) {
            Some(next) => out = Some(next),
            None => break,
        }
    }
    out
}

fn redact_once(s: &str, detectors: &[Detector]) -> Option<String> {
    let b = s.as_bytes();
    let mut found: Vec<(Range<usize>, Detector)> = Vec::new();
    for &d in detectors {
        detector_spans(d, b, |r| {
            if r.start < r.end && r.end <= b.len() {
                found.push((r, d));
            }
            false
        });
    }
    if found.is_empty() {
        return None;
    }
    found.sort_by_key(|(r, _)| (r.start, std::cmp::Reverse(r.end)));
    let mut out = String::with_capacity(s.len());
    let mut at = 0;
    let mut i = 0;
    while i < found.len() {
        let (r, d) = (found[i].0.clone(), found[i].1);
        let mut end = r.end;
        i += 1;
        while i < found.len() && found[i].0.start < end {
            end = end.max(found[i].0.end);
            i += 1;
        }
        // Spans start and end at ASCII bytes (character boundaries); be safe anyway.
        let (start, end) = (floor_char(s, r.start.max(at)), ceil_char(s, end));
        out.push_str(&s[at..start]);
        out.push_str("[redacted:");
        out.push_str(d.as_str());
        out.push(']');
        at = end;
    }
    out.push_str(&s[at..]);
    Some(out)
}

fn floor_char(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}
