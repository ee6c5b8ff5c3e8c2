//! The parts conditions are built from: comparison and string operators, argument and tag
//! tests, scopes, metrics, times of day, subjects and signals (see [`super::Condition`]).

use std::fmt;

use serde_json::Value;

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
    /// `exists`: the path is present (a `null` value counts). Never missing data.
    Exists,
    /// `notExists`: the path is absent. Never missing data.
    NotExists,
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
    /// `{"by": "toolName", "patterns": [..]}`: a tool name matching any of these globs.
    Names(Vec<String>),
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
