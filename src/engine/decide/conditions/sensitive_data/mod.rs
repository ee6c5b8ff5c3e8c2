//! `sensitiveData`: scans the string leaves (and, for `credit_card`, the integers) of a call's
//! arguments or, after the call, of its result (or of the value at a path) with hand-written
//! linear detectors, one file per detector family. At most the scan limit of each string is
//! scanned (1 MiB by default; past it the answer is missing data); nothing is copied. The
//! decision's `evaluated` entry records the detectors that matched and the paths — never the
//! matched text. Live calls are scanned whatever they hold; only a what-if replay honours the
//! trail's stand-ins (`walk.rs`).

mod walk;

pub(crate) use scan::MAX_SCAN as DEFAULT_SCAN_LIMIT;
pub(crate) use walk::{ScanMode, UNDECIDABLE_NOTE, eval};

use serde_json::Value;

pub(crate) use crate::detect::detect_bytes;
use crate::detect::first_pass;
pub(crate) use crate::detect::{redact_found, redact_strings};
use crate::detect::{redact_value, scan};
use crate::policy::Detector;
pub(crate) use crate::policy::SensitiveTarget as Target;
pub(crate) use crate::policy::{CSensitive, shared_bit};

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
