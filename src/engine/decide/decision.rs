//! The result of a decision, as the agent and the audit trail see it.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::policy::{Detector, EffectType, Phase};

/// Why a decision came out as it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DecisionCode {
    /// No rule stopped the call.
    Allowed,
    /// A human approved an identical call before.
    AllowedHitlApproved,
    /// A rule blocked the call.
    BlockedRule,
    /// A review was requested; the run must stop while it is pending.
    BlockedHitlRequested,
    /// A review for an identical call is still pending.
    BlockedHitlPending,
    /// A human denied an identical call.
    BlockedHitlDenied,
    /// An earlier hitl aborted this run.
    BlockedRunAborted,
    /// The engine failed and `failure_mode` is closed.
    BlockedFailure,
}

impl DecisionCode {
    /// The code as written in JSON, e.g. `BLOCKED_RULE`.
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionCode::Allowed => "ALLOWED",
            DecisionCode::AllowedHitlApproved => "ALLOWED_HITL_APPROVED",
            DecisionCode::BlockedRule => "BLOCKED_RULE",
            DecisionCode::BlockedHitlRequested => "BLOCKED_HITL_REQUESTED",
            DecisionCode::BlockedHitlPending => "BLOCKED_HITL_PENDING",
            DecisionCode::BlockedHitlDenied => "BLOCKED_HITL_DENIED",
            DecisionCode::BlockedRunAborted => "BLOCKED_RUN_ABORTED",
            DecisionCode::BlockedFailure => "BLOCKED_FAILURE",
        }
    }
}

impl fmt::Display for DecisionCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for EffectType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl Serialize for Phase {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// How one rule in play came out.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EvaluatedRule {
    /// The rule.
    pub rule_id: Arc<str>,
    /// Whether its condition held (after missing-data resolution).
    pub triggered: bool,
    /// The effect it applies when triggered.
    pub effect: EffectType,
    /// The rule is in shadow mode: audited, not applied.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shadow: bool,
    /// What data was missing while evaluating it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// An error met while evaluating it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What its `sensitiveData` conditions detected: detectors and argument paths, never the
    /// matched text.
    /// (`None` when nothing was detected: the common case costs one null pointer.)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detected: Option<Box<[Detection]>>,
    /// Detections past the ones kept in `detected` (at most 16 per condition and call),
    /// counted.
    #[serde(skip_serializing_if = "is_zero")]
    pub detected_more: u32,
}

/// The rules in play of a decision and how each came out, in evaluation order: a slice of
/// [`EvaluatedRule`] (it derefs to one; `iter`, `len`, indexing).
///
/// A decision whose rules all came out plainly (no missing data, detection or error) shares a
/// list kept with the tool's profile for that outcome, so deciding allocates nothing for it;
/// otherwise the list is the decision's own.
#[derive(Clone, Default)]
pub struct Evaluated(EvaluatedRepr);

#[derive(Clone, Default)]
enum EvaluatedRepr {
    #[default]
    Empty,
    Owned(Vec<EvaluatedRule>),
    Shared(Arc<[EvaluatedRule]>),
}

impl Evaluated {
    /// A list shared with others (see the type's documentation).
    pub(crate) fn shared(list: Arc<[EvaluatedRule]>) -> Evaluated {
        Evaluated(EvaluatedRepr::Shared(list))
    }

    /// The rules as a slice.
    #[inline]
    pub fn as_slice(&self) -> &[EvaluatedRule] {
        match &self.0 {
            EvaluatedRepr::Empty => &[],
            EvaluatedRepr::Owned(v) => v,
            EvaluatedRepr::Shared(a) => a,
        }
    }

    /// The rules as a vector of their own.
    pub fn into_vec(self) -> Vec<EvaluatedRule> {
        match self.0 {
            EvaluatedRepr::Empty => Vec::new(),
            EvaluatedRepr::Owned(v) => v,
            EvaluatedRepr::Shared(a) => a.to_vec(),
        }
    }
}

impl std::ops::Deref for Evaluated {
    type Target = [EvaluatedRule];
    #[inline]
    fn deref(&self) -> &[EvaluatedRule] {
        self.as_slice()
    }
}

impl From<Vec<EvaluatedRule>> for Evaluated {
    fn from(v: Vec<EvaluatedRule>) -> Evaluated {
        if v.is_empty() {
            Evaluated(EvaluatedRepr::Empty)
        } else {
            Evaluated(EvaluatedRepr::Owned(v))
        }
    }
}

impl FromIterator<EvaluatedRule> for Evaluated {
    fn from_iter<I: IntoIterator<Item = EvaluatedRule>>(iter: I) -> Evaluated {
        Vec::from_iter(iter).into()
    }
}

impl<'a> IntoIterator for &'a Evaluated {
    type Item = &'a EvaluatedRule;
    type IntoIter = std::slice::Iter<'a, EvaluatedRule>;
    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl fmt::Debug for Evaluated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl PartialEq for Evaluated {
    fn eq(&self, other: &Evaluated) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Serialize for Evaluated {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.as_slice().serialize(s)
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Serialize for Detector {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A segment of an argument path, borrowed from the arguments while they are scanned.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ArgPathSeg<'a> {
    Key(&'a str),
    Index(usize),
}

/// A segment of an argument path, owned.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum OwnedSeg {
    Key(String),
    Index(usize),
}

/// A `sensitiveData` detection: which detector matched a string and where in the arguments
/// (a dot path, empty for the arguments themselves). The matched text is never kept.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Detection {
    /// The detector.
    pub detector: Detector,
    /// Dot path of the string in the arguments (`to`, `items.0.body`).
    pub path: String,
    /// The path's segments (keys may contain dots).
    #[serde(skip)]
    pub(crate) segs: Vec<OwnedSeg>,
    /// The string is redacted from the audit trail (`redactDetected`).
    #[serde(skip)]
    pub(crate) redact: bool,
    /// Found in the tool's result (`target: "toolOutput"`): the path is in the result.
    #[serde(skip)]
    pub(crate) in_output: bool,
}

impl Detection {
    pub(crate) fn new(detector: Detector, segs: &[ArgPathSeg<'_>], redact: bool) -> Detection {
        let mut path = String::new();
        let mut owned = Vec::with_capacity(segs.len());
        for (i, s) in segs.iter().enumerate() {
            if i > 0 {
                path.push('.');
            }
            match s {
                ArgPathSeg::Key(k) => {
                    path.push_str(k);
                    owned.push(OwnedSeg::Key((*k).to_string()));
                }
                ArgPathSeg::Index(n) => {
                    path.push_str(itoa::Buffer::new().format(*n));
                    owned.push(OwnedSeg::Index(*n));
                }
            }
        }
        Detection {
            detector,
            path,
            segs: owned,
            redact,
            in_output: false,
        }
    }
}

/// A signal the decision asked for.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalRecord {
    /// Provider key.
    pub key: Arc<str>,
    /// Resolved arguments.
    pub args: Value,
    /// The value, when the provider answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// Why there is no value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How long the provider took, in microseconds.
    pub duration_us: u64,
}

/// Status of a human review.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReviewStatus {
    /// Waiting for a human.
    Pending,
    /// Approved: identical calls are allowed.
    Approved,
    /// Denied: identical calls are blocked.
    Denied,
    /// Expired without a decision.
    Expired,
}

/// The review attached to a hitl decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HitlInfo {
    /// The review's id.
    pub review_id: String,
    /// Its status at decision time.
    pub status: ReviewStatus,
    /// The call's fingerprint.
    pub fingerprint: String,
}

/// A decision about one tool call in one phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// The phase decided.
    pub phase: Phase,
    /// What the agent must do: allow, block, or hitl (blocked and the run must stop).
    pub effect: EffectType,
    /// Why.
    pub code: DecisionCode,
    /// The deciding rule's reason.
    pub reason: Option<Arc<str>>,
    /// The deciding rule.
    pub rule_id: Option<Arc<str>>,
    /// The deciding rule's Handlebar `policyId`, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_id: Option<Arc<str>>,
    /// Every rule in play, in evaluation order.
    pub evaluated: Evaluated,
    /// Signals asked for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<SignalRecord>,
    /// The review, for hitl rules.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hitl: Option<HitlInfo>,
    /// Whether a shadow-mode rule triggered.
    pub shadow: bool,
    /// The effect the shadow-mode rules would have applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow_effect: Option<EffectType>,
    /// The agent must stop the run.
    pub abort_run: bool,
    /// Decision time in nanoseconds.
    pub latency_ns: u64,
    /// An engine fault that decided by `failure_mode`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Decision {
    /// Whether the call may proceed.
    pub fn is_allowed(&self) -> bool {
        self.effect == EffectType::Allow
    }

    /// A decision no rule made: `effect` and `code` with `reason`, nothing evaluated (e.g. a
    /// binding's answer for an after phase with no rule in play).
    pub fn simple(
        phase: Phase,
        effect: EffectType,
        code: DecisionCode,
        reason: Option<Arc<str>>,
    ) -> Self {
        Decision {
            phase,
            effect,
            code,
            reason,
            rule_id: None,
            policy_id: None,
            evaluated: Evaluated::default(),
            signals: Vec::new(),
            hitl: None,
            shadow: false,
            shadow_effect: None,
            abort_run: false,
            latency_ns: 0,
            error: None,
        }
    }
}
