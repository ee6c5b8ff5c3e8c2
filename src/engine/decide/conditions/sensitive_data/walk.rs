//! The walk of a `sensitiveData` condition over the scanned value: every string leaf and
//! object key (and, for `credit_card`, every integer), each detector's answer per string, the detections kept (at
//! most [`MAX_DETECTIONS`] per condition and call; the rest counted), and what could not be
//! answered: the part of a string past the scan limit (live), or a trail's stand-in a
//! detector would have to see through (what-if only).

use serde_json::Value;
use smallvec::SmallVec;

use super::{CSensitive, Target, detect_bytes, first_pass, scan, shared_bit};
use crate::engine::decide::conditions::{Tri, json_path, resolve_missing};
use crate::engine::decide::ctx::DecisionCtx;
use crate::engine::decide::decision::{ArgPathSeg, Detection};
use crate::json::MAX_VALUE_DEPTH;
use crate::policy::Detector;

/// Detections kept per condition and call: enough to name what was found where; the rest are
/// counted (`detectedMore`), so a call holding thousands of matches costs no more memory than
/// a few (each detection keeps its path).
pub(crate) const MAX_DETECTIONS: usize = 16;

/// The prefix of the `missing` note for a string cut at the scan limit.
pub(crate) const CUT_NOTE: &str = "sensitiveData: scan limit";
/// The prefix of the `missing` note for a stand-in a detector would have to see through.
pub(crate) const UNDECIDABLE_NOTE: &str = "undecidable from the trail";

pub(crate) use crate::engine::decide::env::ScanMode;

type Segs<'a> = SmallVec<[ArgPathSeg<'a>; 8]>;

struct Scan<'c> {
    cond: &'c CSensitive,
    mode: ScanMode,
    /// Bit i: detector i matched somewhere.
    mask: u32,
    /// Bit i: detector i could not be answered somewhere (cut, or behind a stand-in).
    unknown: u32,
    found: Vec<Detection>,
    /// Detections past [`MAX_DETECTIONS`].
    more: u32,
    /// The first string cut at the scan limit (its path and length).
    cut: Option<(String, usize)>,
    /// The first stand-in a detector would have to see through (its path and detectors).
    hidden: Option<(String, Detector, Detector)>,
}

/// The trail's stand-ins in `s`: a mask over [`Detector::ALL`] of the detectors named by an
/// exact `[redacted:<detector>]` span.
fn stand_ins(s: &str) -> u16 {
    let mut mask = 0;
    let mut rest = s;
    while let Some(at) = rest.find("[redacted:") {
        rest = &rest[at + "[redacted:".len()..];
        if let Some(end) = rest.find(']') {
            let name = &rest[..end];
            if let Some(i) = Detector::ALL.iter().position(|d| d.as_str() == name) {
                mask |= 1 << i;
                rest = &rest[end + 1..];
            }
        }
    }
    mask
}

fn bit_of(d: Detector) -> u16 {
    1 << Detector::ALL.iter().position(|x| *x == d).unwrap_or(0)
}

fn path_of(segs: &[ArgPathSeg<'_>]) -> String {
    Detection::new(Detector::Email, segs, false).path
}

impl Scan<'_> {
    fn value<'v>(&mut self, v: &'v Value, segs: &mut Segs<'v>) {
        match v {
            Value::String(s) => self.string(s, segs),
            Value::Number(n) => self.number(n, segs),
            Value::Array(a) if segs.len() < MAX_VALUE_DEPTH => {
                for (i, x) in a.iter().enumerate() {
                    segs.push(ArgPathSeg::Index(i));
                    self.value(x, segs);
                    segs.pop();
                }
            }
            Value::Object(m) if segs.len() < MAX_VALUE_DEPTH => {
                for (k, x) in m {
                    segs.push(ArgPathSeg::Key(k));
                    // A key reaches the tool as surely as a value: it is scanned too.
                    self.string(k, segs);
                    self.value(x, segs);
                    segs.pop();
                }
            }
            Value::Array(_) | Value::Object(_) => {
                // Past the one depth limit for values: not scanned, so not known to be clean.
                self.unknown = u32::MAX;
                if self.cut.is_none() {
                    self.cut = Some((path_of(segs), 0));
                }
            }
            _ => {}
        }
    }

    fn hit(&mut self, i: usize, d: Detector, segs: &Segs<'_>) {
        self.mask |= 1 << i;
        if self.found.len() < MAX_DETECTIONS {
            let mut det = Detection::new(d, segs, self.cond.redact);
            det.in_output = self.cond.target == Target::ToolOutput;
            if let Some(p) = self.safe_path(segs) {
                det.path = p;
            }
            self.found.push(det);
        } else {
            self.more = self.more.saturating_add(1);
        }
    }

    /// The path with each key in which a detector of the condition finds something written
    /// as its stand-in (the decision, handed to the caller and its observers, names where
    /// data was found, never the data); `None` when no key needs it.
    fn safe_path(&self, segs: &Segs<'_>) -> Option<String> {
        let found = |k: &str| {
            self.cond
                .detectors
                .iter()
                .find(|(d, _)| detect_bytes(*d, scan::bounded(k), None))
                .map(|(d, _)| *d)
        };
        if !segs
            .iter()
            .any(|s| matches!(s, ArgPathSeg::Key(k) if found(k).is_some()))
        {
            return None;
        }
        let mut path = String::new();
        for (i, s) in segs.iter().enumerate() {
            if i > 0 {
                path.push('.');
            }
            match s {
                ArgPathSeg::Key(k) => match found(k) {
                    Some(d) => path.push_str(&format!("[redacted:{d}]")),
                    None => path.push_str(k),
                },
                ArgPathSeg::Index(n) => path.push_str(&n.to_string()),
            }
        }
        Some(path)
    }

    /// A JSON integer (or a float with no fraction, as some clients send big integers) is
    /// read by `credit_card` as its digits.
    fn number(&mut self, n: &serde_json::Number, segs: &Segs<'_>) {
        let Some(i) = self
            .cond
            .detectors
            .iter()
            .position(|(d, _)| *d == Detector::CreditCard)
        else {
            return;
        };
        let mut buf = itoa::Buffer::new();
        let digits: String;
        let text = if let Some(u) = n.as_u64() {
            buf.format(u)
        } else if let Some(x) = n.as_i64() {
            // The digits of a negative number reach the tool all the same.
            buf.format(x.unsigned_abs())
        } else {
            match n.as_f64() {
                Some(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e20 => {
                    digits = format!("{:.0}", f.abs());
                    &digits
                }
                _ => return,
            }
        };
        if detect_bytes(Detector::CreditCard, text.as_bytes(), None) {
            self.hit(i, Detector::CreditCard, segs);
        }
    }

    fn string(&mut self, s: &str, segs: &Segs<'_>) {
        let (b, cut) = scan::bounded_to(s, self.mode.limit);
        if cut && self.cut.is_none() {
            self.cut = Some((path_of(segs), s.len()));
        }
        let standing = if self.mode.stand_ins { stand_ins(s) } else { 0 };
        let shared = self.cond.shared;
        let found = if shared != 0 {
            first_pass::first_pass(b, shared)
        } else {
            0
        };
        for (i, (d, sub)) in self.cond.detectors.iter().enumerate() {
            let bit = shared_bit(*d) & shared;
            let hit = if bit != 0 {
                found & bit != 0
            } else {
                detect_bytes(*d, b, sub.as_ref())
            };
            if hit {
                self.hit(i, *d, segs);
            } else if standing != 0 {
                // What-if: a stand-in of this detector (no sub-condition to check) is its
                // detection; any other stand-in hides text this detector has not seen.
                if standing & bit_of(*d) != 0 && sub.is_none() {
                    self.hit(i, *d, segs);
                } else {
                    self.unknown |= 1 << i;
                    if self.hidden.is_none() {
                        let named = Detector::ALL
                            .iter()
                            .copied()
                            .find(|x| standing & bit_of(*x) != 0)
                            .unwrap_or(*d);
                        self.hidden = Some((path_of(segs), named, *d));
                    }
                }
            } else if cut {
                self.unknown |= 1 << i;
            }
        }
    }
}

/// True when the detectors match per `op` (anyOf: one of them somewhere; allOf: each of them
/// somewhere). A `path` that is absent is false: nothing is sent. When the answer depends on
/// text that was not scanned (past the scan limit) or that a trail's stand-in hides (what-if),
/// it is missing data, resolved by the condition's `onMissing` (block by default).
pub(crate) fn eval(c: &CSensitive, ctx: &mut DecisionCtx<'_>) -> Tri {
    let base = match c.target {
        Target::ToolArg | Target::LlmInput => Some(ctx.call.args),
        Target::ToolOutput => ctx.call.output,
    };
    let Some(base) = base else {
        return Tri::False;
    };
    let root = match &c.path {
        None => Some(base),
        Some(p) => json_path(base, p),
    };
    let Some(root) = root else {
        return Tri::False;
    };
    let mut scan = Scan {
        cond: c,
        mode: ctx.engine.scan_mode(),
        mask: 0,
        unknown: 0,
        found: Vec::new(),
        more: 0,
        cut: None,
        hidden: None,
    };
    let mut segs: Segs<'_> = SmallVec::new();
    if let Some(p) = &c.path {
        // The path's own segments: resolved against the value as `json_path` does.
        let mut cur = base;
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
    if !scan.found.is_empty() || scan.more > 0 {
        ctx.add_detections(std::mem::take(&mut scan.found), scan.more);
    }
    match &scan.cut {
        Some((path, 0)) => ctx.note_missing(format!(
            "sensitiveData: the value at {path:?} nests deeper than {MAX_VALUE_DEPTH} levels; \
             not scanned"
        )),
        Some((path, len)) => ctx.note_missing(format!(
            "{CUT_NOTE}: the string at {:?} is {len} bytes; only its first {} were scanned",
            path, scan.mode.limit
        )),
        None => {}
    }
    let n = c.detectors.len().min(32);
    let want = if n == 32 { u32::MAX } else { (1u32 << n) - 1 };
    let t = if c.all {
        if scan.mask & want == want {
            Tri::True
        } else if (scan.mask | scan.unknown) & want == want {
            Tri::Unknown
        } else {
            Tri::False
        }
    } else if scan.mask != 0 {
        Tri::True
    } else if scan.unknown != 0 {
        Tri::Unknown
    } else {
        Tri::False
    };
    if t == Tri::Unknown
        && let Some((path, named, d)) = &scan.hidden
    {
        ctx.note_missing(format!(
            "{UNDECIDABLE_NOTE}: the stand-in [redacted:{named}] at {path:?} hides text \
             {d} would have to scan"
        ));
    }
    resolve_missing(t, Some(c.on_missing), ctx)
}
