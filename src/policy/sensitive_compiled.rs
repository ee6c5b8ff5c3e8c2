//! The compiled form of a `sensitiveData` condition: what the policy compiler builds and the
//! engine's `sensitiveData` condition scans with (the detectors themselves live apart).

use super::{Detector, DetectorEntry, EffectType, SensitiveTarget, SubCheck, SubCondition, SubOp};

/// The bit of `secret_key` in the masks of the detectors' shared first pass.
pub(crate) const SHARED_SECRET: u8 = 1;
/// The bit of `jwt` in the masks of the detectors' shared first pass.
pub(crate) const SHARED_JWT: u8 = 2;

/// A compiled sub-condition (values lowercased).
#[derive(Debug)]
pub(crate) struct CSub {
    pub(crate) check: SubCheck,
    pub(crate) op: SubOp,
    pub(crate) values: Vec<String>,
}

impl CSub {
    fn compile(s: &SubCondition) -> CSub {
        CSub {
            check: s.check,
            op: s.op,
            values: s.value.values().iter().map(|v| v.to_lowercase()).collect(),
        }
    }
}

/// A compiled `sensitiveData` condition.
#[derive(Debug)]
pub(crate) struct CSensitive {
    /// What is scanned: the call's arguments, or (after phase) the tool's result.
    pub(crate) target: SensitiveTarget,
    /// What a missing answer (text past the scan limit, a stand-in in what-if) resolves to:
    /// the condition's `onMissing`, else its rule's, else block (never the policy's default).
    pub(crate) on_missing: EffectType,
    pub(crate) path: Option<Vec<String>>,
    pub(crate) all: bool,
    pub(crate) detectors: Vec<(Detector, Option<CSub>)>,
    /// The detectors answered by one shared the detectors' shared first pass over each string (a mask
    /// of its bits; 0 when each detector scans on its own).
    pub(crate) shared: u8,
    /// Detections are redacted from the audit trail (`redactDetected`, default true).
    pub(crate) redact: bool,
}

/// The bit of `d` in the detectors' shared first pass's masks, if it is one of its detectors.
pub(crate) fn shared_bit(d: Detector) -> u8 {
    match d {
        Detector::SecretKey => SHARED_SECRET,
        Detector::Jwt => SHARED_JWT,
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
        self.target == SensitiveTarget::LlmInput
    }

    /// Compiles a condition's parts.
    pub(crate) fn compile(
        target: SensitiveTarget,
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
