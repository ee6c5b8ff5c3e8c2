//! The policy language as Rust values: what a policy file says, validated but not yet compiled.
//!
//! These types mirror the JSON of the Handlebar rule spec (camelCase keys, `kind`/`type`/`from`
//! tags). They are produced by [`crate::policy::parse_policy`] and turned back into the same JSON by
//! their `Serialize` impls, so parse → serialize → parse yields an equal value.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

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
}

impl Phase {
    /// The JSON spelling: `tool.before` or `tool.after`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Before => "tool.before",
            Phase::After => "tool.after",
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
}

/// Which calls a rule is in play for.
#[derive(Debug, Clone, PartialEq)]
pub struct Selector {
    /// `tool.before` or `tool.after`.
    pub phase: Phase,
    /// Without `tool` the rule is never evaluated (spec).
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

/// Comparison operators on numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Neq,
    /// `<`
    Lt,
    /// `<=`
    Lte,
    /// `>`
    Gt,
    /// `>=`
    Gte,
}

impl CmpOp {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Neq => "neq",
            CmpOp::Lt => "lt",
            CmpOp::Lte => "lte",
            CmpOp::Gt => "gt",
            CmpOp::Gte => "gte",
        }
    }

    /// Applies the comparison `lhs op rhs`.
    ///
    /// ```
    /// use toolgate::policy::CmpOp;
    /// assert!(CmpOp::Gte.apply(3.0, 3.0));
    /// assert!(!CmpOp::Lt.apply(3.0, 3.0));
    /// ```
    pub fn apply(self, lhs: f64, rhs: f64) -> bool {
        match self {
            CmpOp::Eq => lhs == rhs,
            CmpOp::Neq => lhs != rhs,
            CmpOp::Lt => lhs < rhs,
            CmpOp::Lte => lhs <= rhs,
            CmpOp::Gt => lhs > rhs,
            CmpOp::Gte => lhs >= rhs,
        }
    }
}

/// A string test, as used by `toolName` and string `toolArg` conditions.
#[derive(Debug, Clone, PartialEq)]
pub enum StringOp {
    /// Equal.
    Eq(String),
    /// Not equal.
    Neq(String),
    /// Contains the substring.
    Contains(String),
    /// Starts with.
    StartsWith(String),
    /// Ends with.
    EndsWith(String),
    /// Matches the glob (`toolName` only).
    Glob(String),
    /// Equals one of the strings.
    In(Vec<String>),
    /// Matches the regular expression (`toolArg` only).
    Regex(String),
}

impl StringOp {
    /// The JSON spelling of the operator.
    pub fn op_name(&self) -> &'static str {
        match self {
            StringOp::Eq(_) => "eq",
            StringOp::Neq(_) => "neq",
            StringOp::Contains(_) => "contains",
            StringOp::StartsWith(_) => "startsWith",
            StringOp::EndsWith(_) => "endsWith",
            StringOp::Glob(_) => "glob",
            StringOp::In(_) => "in",
            StringOp::Regex(_) => "regex",
        }
    }
}

/// A test on a tool argument, by the argument's expected JSON type.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgTest {
    /// The argument must be a string.
    String(StringOp),
    /// The argument must be a number.
    Number(CmpOp, f64),
    /// The argument must be a boolean equal to this.
    Boolean(bool),
}

/// The `toolTag` tests.
#[derive(Debug, Clone, PartialEq)]
pub enum TagOp {
    /// The tool has this tag.
    Has(String),
    /// The tool has at least one of these tags.
    AnyOf(Vec<String>),
    /// The tool has all of these tags.
    AllOf(Vec<String>),
}

/// The `enduserTag` tests.
#[derive(Debug, Clone, PartialEq)]
pub enum EnduserTagOp {
    /// The tag is present with a value that is not empty, `"false"` or `"0"`.
    Has {
        /// Tag name.
        tag: String,
    },
    /// The tag has exactly this value.
    HasValue {
        /// Tag name.
        tag: String,
        /// Expected value.
        value: String,
    },
    /// The tag has one of these values.
    HasValueAny {
        /// Tag name.
        tag: String,
        /// Accepted values.
        values: Vec<String>,
    },
}

/// What `executionTime` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeScope {
    /// This call's measured duration (after phase only).
    Tool,
    /// Milliseconds since the run started.
    Total,
}

/// One entry of a `sequence` list.
#[derive(Debug, Clone, PartialEq)]
pub enum SequenceEntry {
    /// A tool-name glob.
    Glob(String),
    /// Calls of tools carrying tags.
    Tags {
        /// The tags.
        tags: Vec<String>,
        /// `anyOf` (default) or `allOf`.
        all: bool,
    },
}

/// Which calls a `maxCalls` condition counts.
#[derive(Debug, Clone, PartialEq)]
pub enum CallSelector {
    /// Calls whose tool name matches one of these globs.
    ToolName(Vec<String>),
    /// Calls whose tool has one of these tags.
    ToolTag(Vec<String>),
}

/// The scope a counter or metric is kept for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// This run only.
    Run,
    /// Every run of the agent.
    Agent,
    /// Every run of the agent for the same end user.
    AgentUser,
}

impl Scope {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Run => "run",
            Scope::Agent => "agent",
            Scope::AgentUser => "agent_user",
        }
    }
}

/// Metrics the engine records by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InbuiltMetric {
    /// Bytes of the args as compact JSON.
    BytesIn,
    /// Bytes of the result as compact JSON.
    BytesOut,
    /// The tool's duration in ms.
    DurationMs,
    /// Length of the args when they are an array.
    RecordsIn,
    /// Length of the result when it is an array.
    RecordsOut,
    /// LLM input tokens (`record_llm`).
    LlmTokensIn,
    /// LLM output tokens (`record_llm`).
    LlmTokensOut,
    /// LLM cost in USD (`record_llm`).
    LlmCostUsd,
}

impl InbuiltMetric {
    /// Every inbuilt metric.
    pub const ALL: [InbuiltMetric; 8] = [
        InbuiltMetric::BytesIn,
        InbuiltMetric::BytesOut,
        InbuiltMetric::DurationMs,
        InbuiltMetric::RecordsIn,
        InbuiltMetric::RecordsOut,
        InbuiltMetric::LlmTokensIn,
        InbuiltMetric::LlmTokensOut,
        InbuiltMetric::LlmCostUsd,
    ];

    /// The JSON key.
    pub fn key(self) -> &'static str {
        match self {
            InbuiltMetric::BytesIn => "bytes_in",
            InbuiltMetric::BytesOut => "bytes_out",
            InbuiltMetric::DurationMs => "duration_ms",
            InbuiltMetric::RecordsIn => "records_in",
            InbuiltMetric::RecordsOut => "records_out",
            InbuiltMetric::LlmTokensIn => "llm_tokens_in",
            InbuiltMetric::LlmTokensOut => "llm_tokens_out",
            InbuiltMetric::LlmCostUsd => "llm_cost_usd",
        }
    }

    /// Parses a JSON key.
    pub fn from_key(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.key() == key)
    }
}

/// A metric reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MetricRef {
    /// Recorded by the engine.
    Inbuilt(InbuiltMetric),
    /// Recorded with `Run::record_metric`.
    Custom(String),
}

impl MetricRef {
    /// The metric's key.
    pub fn key(&self) -> &str {
        match self {
            MetricRef::Inbuilt(m) => m.key(),
            MetricRef::Custom(k) => k,
        }
    }
}

/// Aggregations over a metric window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Aggregate {
    /// Sum (0 when empty).
    Sum,
    /// Mean (missing when empty).
    Avg,
    /// Maximum (missing when empty).
    Max,
    /// Minimum (missing when empty).
    Min,
    /// Number of events (0 when empty).
    Count,
}

impl Aggregate {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Aggregate::Sum => "sum",
            Aggregate::Avg => "avg",
            Aggregate::Max => "max",
            Aggregate::Min => "min",
            Aggregate::Count => "count",
        }
    }
}

/// Restricts a metric window to events of matching tools.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MetricFilter {
    /// Tool-name globs.
    pub tool_name: Option<Vec<String>>,
    /// Tool tags (any).
    pub tool_tag: Option<Vec<String>>,
}

/// Where a `timeGate` gets its timezone.
#[derive(Debug, Clone, PartialEq)]
pub enum TimezoneSource {
    /// From an end-user tag, optionally falling back to the org timezone.
    EnduserTag {
        /// Tag holding an IANA name.
        tag: String,
        /// `fallback: "org"`.
        fallback_org: bool,
    },
    /// A fixed IANA timezone.
    Static {
        /// IANA name.
        tz: String,
    },
}

/// A time of day in minutes since midnight, `00:00` to `24:00`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimeOfDay(pub u16);

impl TimeOfDay {
    /// Parses `HH:MM` (`24:00` allowed).
    ///
    /// ```
    /// use toolgate::policy::TimeOfDay;
    /// assert_eq!(TimeOfDay::parse("09:30"), Some(TimeOfDay(570)));
    /// assert_eq!(TimeOfDay::parse("24:00"), Some(TimeOfDay(1440)));
    /// assert_eq!(TimeOfDay::parse("25:00"), None);
    /// assert_eq!(TimeOfDay::parse("+9:00"), None);
    /// ```
    pub fn parse(s: &str) -> Option<TimeOfDay> {
        let (h, m) = s.split_once(':')?;
        // Exactly two ASCII digits each: `u16::from_str` alone would accept "+9".
        if h.len() != 2 || m.len() != 2 || !h.bytes().chain(m.bytes()).all(|b| b.is_ascii_digit()) {
            return None;
        }
        let h: u16 = h.parse().ok()?;
        let m: u16 = m.parse().ok()?;
        if m > 59 || h > 24 || (h == 24 && m != 0) {
            return None;
        }
        Some(TimeOfDay(h * 60 + m))
    }
}

impl fmt::Display for TimeOfDay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02}:{:02}", self.0 / 60, self.0 % 60)
    }
}

/// A weekly time window.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeWindow {
    /// Days the window starts on.
    pub days: Vec<chrono::Weekday>,
    /// Start (inclusive).
    pub start: TimeOfDay,
    /// End (exclusive); before `start` means the window spans midnight.
    pub end: TimeOfDay,
}

/// A `requireSubject` condition.
#[derive(Debug, Clone, PartialEq)]
pub struct SubjectTest {
    /// Required subject type.
    pub subject_type: String,
    /// Required id system, if any.
    pub id_system: Option<String>,
    /// Required role, if any.
    pub role: Option<String>,
}

/// How a signal argument gets its value.
#[derive(Debug, Clone, PartialEq)]
pub enum SignalBinding {
    /// The end user's id.
    EnduserId,
    /// An end-user tag's value.
    EnduserTag(String),
    /// The tool's name.
    ToolName,
    /// Whether the tool has the tag (the tag name if it does).
    ToolTag(String),
    /// A value at a dot path in the args.
    ToolArg(String),
    /// A field of an extracted subject.
    Subject {
        /// Subject type.
        subject_type: String,
        /// Role, if any.
        role: Option<String>,
        /// `id` (default) or `idSystem`.
        field: SubjectField,
    },
    /// A constant.
    Const(Value),
}

/// Which field of a subject a binding takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubjectField {
    /// The subject's value (id).
    Id,
    /// The subject's id system.
    IdSystem,
}

/// Operators of a `signal` condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SignalOp {
    /// JSON equality.
    Eq,
    /// JSON inequality.
    Neq,
    /// Numbers only.
    Gt,
    /// Numbers only.
    Gte,
    /// Numbers only.
    Lt,
    /// Numbers only.
    Lte,
    /// Membership in an array.
    In,
    /// Non-membership in an array.
    Nin,
}

impl SignalOp {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SignalOp::Eq => "eq",
            SignalOp::Neq => "neq",
            SignalOp::Gt => "gt",
            SignalOp::Gte => "gte",
            SignalOp::Lt => "lt",
            SignalOp::Lte => "lte",
            SignalOp::In => "in",
            SignalOp::Nin => "nin",
        }
    }
}

/// A rule condition. True means the rule triggers.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// Tests the tool's name (case-insensitive).
    ToolName(StringOp),
    /// Tests the tool's tags (case-insensitive).
    ToolTag(TagOp),
    /// Tests an argument at a dot path.
    ToolArg {
        /// Dot path (`a.b.0.c`).
        path: String,
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
    },
    /// Compares an aggregate of a metric over a sliding window.
    MetricWindow {
        /// Scope of the events.
        scope: Scope,
        /// The metric.
        metric: MetricRef,
        /// Aggregation.
        aggregate: Aggregate,
        /// Window length.
        window_seconds: u64,
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
