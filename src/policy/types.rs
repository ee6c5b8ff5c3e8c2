//! The policy language as Rust values: what a policy file says, validated but not yet compiled.
//!
//! These types mirror the JSON of the Handlebar rule spec (camelCase keys, `kind`/`type`/`from`
//! tags). They are produced by [`crate::policy::parse_policy`] and turned back into the same JSON by
//! their `Serialize` impls, so parse → serialize → parse yields an equal value.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

mod parts;
mod sensitive;
pub use parts::*;
pub use sensitive::*;

/// A whole policy file: its metadata and its rules, in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Metadata from the `policy` object (defaults for a bare array of rules).
    pub meta: PolicyMeta,
    /// The rules, in the order the file lists them.
    pub rules: Vec<Rule>,
}

/// The `policy` object of a policy file.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyMeta {
    /// Name of the policy (for a bare array of rules: the file stem).
    pub name: String,
    /// Free text for people.
    pub description: Option<String>,
    /// `enforce` (default), `shadow` or `off`.
    pub mode: Mode,
    /// How triggered rules combine: `most_severe_wins` (default) or `priority_first`.
    pub combine: Combine,
    /// Effect used when a rule's condition is unknown and nothing closer decides (default allow).
    pub on_missing_default: EffectType,
    /// The organisation's IANA timezone, used by `timeGate` with `fallback: "org"`.
    pub timezone: Option<String>,
    /// Strings in which a `sensitiveData` detector matched are replaced by
    /// `"[redacted:<detector>]"` in audit events (`redactDetected`, default true).
    pub redact_detected: bool,
    /// `enabled: false` turns every rule of the policy off (default true).
    pub enabled: bool,
    /// The runs the policy applies to (all when absent).
    pub agent_selector: Option<AgentSelector>,
    /// `reviewTtlSeconds`: a review its hitl rules raise is decided by
    /// [`on_expire`](Self::on_expire) when nobody decides it within this many seconds (a rule's
    /// own `reviewTtlSeconds` wins; default: reviews wait).
    pub review_ttl_seconds: Option<u64>,
    /// `onExpire`: how an expired review is decided (a rule's own `onExpire` wins; default
    /// deny).
    pub on_expire: Option<OnExpire>,
}

/// `onExpire`: how a review nobody decided within its `reviewTtlSeconds` is decided.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum OnExpire {
    /// Denied: identical calls are blocked (`BLOCKED_HITL_DENIED`).
    #[default]
    Deny,
    /// Approved: identical calls are allowed (`ALLOWED_HITL_APPROVED`).
    Allow,
}

impl OnExpire {
    /// The JSON spelling: `deny` or `allow`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnExpire::Deny => "deny",
            OnExpire::Allow => "allow",
        }
    }
}

/// `agentSelector`: the parts present must all hold.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentSelector {
    /// The agent id matches one of these globs (case-insensitive).
    pub any_of_slugs: Option<Vec<String>>,
    /// The agent has at least one of these tags (case-insensitive).
    pub any_of_tags: Option<Vec<String>>,
    /// The agent has every one of these tags (case-insensitive).
    pub all_of_tags: Option<Vec<String>>,
}

impl Default for PolicyMeta {
    fn default() -> Self {
        PolicyMeta {
            name: "policy".to_string(),
            description: None,
            mode: Mode::Enforce,
            combine: Combine::MostSevereWins,
            on_missing_default: EffectType::Allow,
            timezone: None,
            redact_detected: true,
            enabled: true,
            agent_selector: None,
            review_ttl_seconds: None,
            on_expire: None,
        }
    }
}

/// Whether rules are applied, only audited, or skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Apply the effect.
    Enforce,
    /// Compute and audit the real decision, but let the call proceed.
    Shadow,
    /// Skip the rule (or every rule of the policy).
    Off,
}

/// How the effects of several triggered rules combine into one decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Combine {
    /// The most severe triggered effect wins (block > hitl > allow).
    MostSevereWins,
    /// The first triggered rule in priority order decides.
    PriorityFirst,
}

/// The effect of a rule: allow, hitl (human review) or block.
///
/// Ordered by severity: `Allow < Hitl < Block`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EffectType {
    /// Let the call proceed.
    Allow,
    /// Hold the call for human review and stop the run while it is pending.
    Hitl,
    /// Refuse the call; the agent may go on without it.
    Block,
}

impl EffectType {
    /// The JSON spelling: `allow`, `hitl` or `block`.
    pub fn as_str(self) -> &'static str {
        match self {
            EffectType::Allow => "allow",
            EffectType::Hitl => "hitl",
            EffectType::Block => "block",
        }
    }
}

impl fmt::Display for EffectType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The phase a rule applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Before the tool runs: the decision can block it.
    Before,
    /// After the tool ran: its output and duration are known.
    After,
    /// Before a model call (`llm.before`, a toolgate extension): the decision can stop the
    /// model from being called. The selector's `tool` part, when present, matches the model's
    /// name; absent, the rule is in play for every model.
    LlmBefore,
}

impl Phase {
    /// The JSON spelling: `tool.before`, `tool.after` or `llm.before`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Before => "tool.before",
            Phase::After => "tool.after",
            Phase::LlmBefore => "llm.before",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One rule of a policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Unique id (defaults to a slug of `name`).
    pub id: String,
    /// Human name.
    pub name: String,
    /// Free text for people (a toolgate extension: JSON has no comments).
    pub description: Option<String>,
    /// Higher is evaluated first; ties keep file order.
    pub priority: i64,
    /// A disabled rule is never evaluated.
    pub enabled: bool,
    /// Which calls the rule is in play for.
    pub selector: Selector,
    /// The condition; true means the rule triggers.
    pub condition: Condition,
    /// What happens when the rule triggers.
    pub effect: Effect,
    /// How an unknown condition resolves for this rule.
    pub on_missing: Option<EffectType>,
    /// Per-rule override of the policy's mode.
    pub mode: Option<Mode>,
    /// The Handlebar platform's policy id (`policyId`), kept as given and carried in the
    /// audit events of the decisions this rule decides. (Handlebar's `createdAt`/`updatedAt`
    /// are accepted and ignored.)
    pub policy_id: Option<String>,
    /// `reviewTtlSeconds`: overrides the policy's (see [`PolicyMeta::review_ttl_seconds`]).
    pub review_ttl_seconds: Option<u64>,
    /// `onExpire`: overrides the policy's (see [`PolicyMeta::on_expire`]).
    pub on_expire: Option<OnExpire>,
}

/// Which calls a rule is in play for.
#[derive(Debug, Clone, PartialEq)]
pub struct Selector {
    /// `tool.before`, `tool.after` or `llm.before`.
    pub phase: Phase,
    /// Without `tool` a tool rule is never evaluated (spec); an `llm.before` rule without it is
    /// in play for every model.
    pub tool: Option<ToolSelector>,
}

/// Tool part of a selector; the parts present are AND-ed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolSelector {
    /// Name globs, OR-ed, case-insensitive.
    pub name: Option<Vec<String>>,
    /// Every one of these tags must be on the tool.
    pub tags_all: Option<Vec<String>>,
    /// At least one of these tags must be on the tool.
    pub tags_any: Option<Vec<String>>,
}

/// The effect of a rule and the reason shown to the agent.
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    /// allow, hitl or block.
    pub kind: EffectType,
    /// Why; becomes the decision's reason.
    pub reason: Option<String>,
}

/// A rule condition. True means the rule triggers.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// Tests the tool's name (case-insensitive).
    ToolName(StringOp),
    /// Tests the tool's tags (case-insensitive).
    ToolTag(TagOp),
    /// Tests an argument at a dot path, or (without a path) every leaf of the test's type.
    ToolArg {
        /// Dot path (`a.b.0.c`); `None` = scan mode (any leaf of the type satisfies the test).
        path: Option<String>,
        /// The test.
        test: ArgTest,
        /// Resolution when the path is absent or of another type.
        on_missing: Option<EffectType>,
    },
    /// Tests an end-user tag.
    EnduserTag(EnduserTagOp),
    /// Compares a duration in milliseconds.
    ExecutionTime {
        /// What is measured.
        scope: TimeScope,
        /// Comparison.
        op: CmpOp,
        /// Threshold in ms.
        ms: f64,
        /// Resolution when the duration is unknown.
        on_missing: Option<EffectType>,
    },
    /// Tests the run's history of completed calls.
    Sequence {
        /// Violation if any of these matched no history entry.
        must_have_called: Option<Vec<SequenceEntry>>,
        /// Violation if any of these matched a history entry.
        must_not_have_called: Option<Vec<SequenceEntry>>,
    },
    /// Caps the number of allowed calls.
    MaxCalls {
        /// Which calls count.
        selector: CallSelector,
        /// Calls allowed before the rule triggers.
        max: u64,
        /// Sliding window; whole scope when absent.
        window_seconds: Option<u64>,
        /// Counting scope (run by default).
        per: Option<Scope>,
        /// `tagFilter`: only calls of tools carrying every one of these tags are counted and
        /// limited (AND with the selector).
        tag_filter: Option<Vec<String>>,
    },
    /// Compares an aggregate of a metric over a sliding window.
    MetricWindow {
        /// Scope of the events.
        scope: Scope,
        /// The metric.
        metric: MetricRef,
        /// Aggregation.
        aggregate: Aggregate,
        /// Window length; optional for scope `run` (absent: since the run started).
        window_seconds: Option<u64>,
        /// Comparison.
        op: CmpOp,
        /// Threshold.
        value: f64,
        /// Restricts the events to matching tools.
        filter: Option<MetricFilter>,
        /// Resolution when the window is empty for avg/min/max.
        on_missing: Option<EffectType>,
    },
    /// True when the end user's local time is inside any window.
    TimeGate {
        /// Where the timezone comes from.
        timezone: TimezoneSource,
        /// The windows.
        windows: Vec<TimeWindow>,
        /// Resolution when no timezone is known.
        on_missing: Option<EffectType>,
    },
    /// True when an extracted subject matches.
    RequireSubject(SubjectTest),
    /// Compares the value of a registered signal provider.
    Signal {
        /// Provider key.
        key: String,
        /// Arguments passed to the provider.
        args: BTreeMap<String, SignalBinding>,
        /// Comparison.
        op: SignalOp,
        /// Value compared with.
        value: Value,
        /// Resolution when the provider fails or a binding is missing.
        on_missing: Option<EffectType>,
    },
    /// Asks a host function registered by name (`EngineBuilder::custom_condition`).
    Custom {
        /// The function's name.
        name: String,
        /// Passed to the function as they are (`null` when absent).
        args: Option<Value>,
    },
    /// Detects sensitive data (card numbers, keys, …) in the arguments.
    SensitiveData {
        /// What is scanned: the arguments (`toolArg`) or, after the call, its result
        /// (`toolOutput`).
        target: SensitiveTarget,
        /// Dot path of the value scanned; every string leaf of the target when absent.
        path: Option<String>,
        /// `allOf`: every detector must match somewhere; `anyOf` (default): one.
        all: bool,
        /// The detectors (at least one).
        detectors: Vec<DetectorEntry>,
        /// What an answer that could not be given (text past the scan limit) resolves to;
        /// when absent, the rule's `onMissing`, else block (never the policy's default).
        on_missing: Option<EffectType>,
    },
    /// All must hold.
    And(Vec<Condition>),
    /// At least one must hold.
    Or(Vec<Condition>),
    /// Negation.
    Not(Box<Condition>),
}

impl Condition {
    /// The `kind` tag of this condition.
    pub fn kind(&self) -> &'static str {
        match self {
            Condition::ToolName(_) => "toolName",
            Condition::ToolTag(_) => "toolTag",
            Condition::ToolArg { .. } => "toolArg",
            Condition::EnduserTag(_) => "enduserTag",
            Condition::ExecutionTime { .. } => "executionTime",
            Condition::Sequence { .. } => "sequence",
            Condition::MaxCalls { .. } => "maxCalls",
            Condition::MetricWindow { .. } => "metricWindow",
            Condition::TimeGate { .. } => "timeGate",
            Condition::RequireSubject(_) => "requireSubject",
            Condition::Signal { .. } => "signal",
            Condition::SensitiveData { .. } => "sensitiveData",
            Condition::Custom { .. } => "custom",
            Condition::And(_) => "and",
            Condition::Or(_) => "or",
            Condition::Not(_) => "not",
        }
    }

    /// Calls `f` on this condition and every nested one, depth first.
    pub fn walk<'a>(&'a self, f: &mut dyn FnMut(&'a Condition)) {
        f(self);
        match self {
            Condition::And(cs) | Condition::Or(cs) => cs.iter().for_each(|c| c.walk(f)),
            Condition::Not(c) => c.walk(f),
            _ => {}
        }
    }
}
