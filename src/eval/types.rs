//! Core data types of the evaluation framework: criteria, scales, inputs, results and the
//! [`Evaluator`] trait. JSON field names are camelCase, as in the PRD.

use std::fmt;

use async_trait::async_trait;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::error::EvalError;

/// The scale a criterion is scored on. Serialized as a plain string: `"binary"`, `"likert5"`,
/// `"numeric"`, `"pass/fail"`; any other string is a custom scale.
///
/// How each scale is normalized to 0–1 for aggregation is documented on
/// [`normalize_score`](super::normalize_score).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EvaluationScale {
    /// Yes/no, true/false. Normalized to 0 or 1.
    Binary,
    /// A 1–5 rating. Normalized as `(x − 1) / 4`.
    Likert5,
    /// A plain number: 0–1 as is, 1 < x ≤ 100 divided by 100.
    Numeric,
    /// A pass/fail outcome. Normalized to 0 or 1.
    PassFail,
    /// Any other scale name (categorical or custom).
    Custom(String),
}

impl EvaluationScale {
    /// The scale's string form, as written in JSON.
    pub fn as_str(&self) -> &str {
        match self {
            EvaluationScale::Binary => "binary",
            EvaluationScale::Likert5 => "likert5",
            EvaluationScale::Numeric => "numeric",
            EvaluationScale::PassFail => "pass/fail",
            EvaluationScale::Custom(s) => s,
        }
    }

    /// Parses a scale name; unknown names become [`EvaluationScale::Custom`].
    pub fn parse(s: &str) -> EvaluationScale {
        match s {
            "binary" => EvaluationScale::Binary,
            "likert5" => EvaluationScale::Likert5,
            "numeric" => EvaluationScale::Numeric,
            "pass/fail" => EvaluationScale::PassFail,
            other => EvaluationScale::Custom(other.to_string()),
        }
    }

    /// True for the two-valued scales (`binary`, `pass/fail`).
    pub fn is_two_valued(&self) -> bool {
        matches!(self, EvaluationScale::Binary | EvaluationScale::PassFail)
    }
}

impl fmt::Display for EvaluationScale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for EvaluationScale {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EvaluationScale {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(EvaluationScale::parse(&s))
    }
}

/// One thing an evaluation measures (PRD FR1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EvaluationCriteria {
    /// Unique identifier of the criterion; evaluator configs refer to it by this name.
    pub name: String,
    /// Human-readable explanation (also given to the LLM judge).
    #[serde(default)]
    pub description: String,
    /// The scale results for this criterion are expressed on.
    pub scale: EvaluationScale,
    /// Weight in the overall score; `None` means 1. Must be finite and ≥ 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
}

impl EvaluationCriteria {
    /// A criterion with an empty description and the default weight.
    pub fn new(name: impl Into<String>, scale: EvaluationScale) -> Self {
        EvaluationCriteria {
            name: name.into(),
            description: String::new(),
            scale,
            weight: None,
        }
    }

    /// Sets the weight.
    pub fn with_weight(mut self, weight: f64) -> Self {
        self.weight = Some(weight);
        self
    }

    /// Sets the description.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// The effective weight (`weight`, or 1 when unset).
    pub fn effective_weight(&self) -> f64 {
        self.weight.unwrap_or(1.0)
    }
}

/// One tool call of an agent run, as seen by evaluators (e.g. [`ToolUsage`](super::ToolUsageEvaluator)).
/// Inside the engine these are the run's real tool calls.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallRecord {
    /// Tool name.
    pub name: String,
    /// Arguments the tool was called with (usually a JSON object).
    #[serde(default)]
    pub args: Value,
    /// The tool's output, when it returned one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// The tool's error message, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Everything an evaluation looks at (PRD: `EvaluationInput`).
///
/// `response` is a JSON value: a string, an agent message (`{"role":…, "content":…}`), or any
/// other JSON (e.g. a tool's output). Evaluators read text through
/// [`EvaluationInput::field_text`], documented there.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvaluationInput {
    /// The initiating prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The agent output being evaluated.
    #[serde(default)]
    pub response: Value,
    /// Arbitrary contextual data (reachable as `context.a.b` in field paths).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Value>,
    /// Reference answer or data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ground_truth: Option<Value>,
    /// Criteria to evaluate against. When empty, the run config's criteria are used.
    #[serde(default)]
    pub criteria: Vec<EvaluationCriteria>,
    /// Snapshot of the agent configuration at the time of the response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_config: Option<Value>,
    /// Relevant message history (agent messages as JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_history: Option<Vec<Value>>,
    /// Tool calls of the run. The engine fills these from the run's real tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallRecord>>,
    /// Timestamp of the response (milliseconds since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<i64>,
    /// Session / conversation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Agent id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Other metadata (reachable as `metadata.a.b` in field paths).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

impl EvaluationInput {
    /// An input with the given response and everything else empty.
    pub fn new(response: impl Into<Value>) -> Self {
        EvaluationInput {
            response: response.into(),
            ..Default::default()
        }
    }

    /// Sets the criteria.
    pub fn with_criteria(mut self, criteria: Vec<EvaluationCriteria>) -> Self {
        self.criteria = criteria;
        self
    }

    /// Sets the ground truth.
    pub fn with_ground_truth(mut self, ground_truth: impl Into<Value>) -> Self {
        self.ground_truth = Some(ground_truth.into());
        self
    }

    /// Sets the context.
    pub fn with_context(mut self, context: Value) -> Self {
        self.context = Some(context);
        self
    }

    /// Sets the prompt.
    pub fn with_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.prompt = Some(prompt.into());
        self
    }

    /// Sets the tool calls.
    pub fn with_tool_calls(mut self, tool_calls: Vec<ToolCallRecord>) -> Self {
        self.tool_calls = Some(tool_calls);
        self
    }
}

/// The score of one result: a number, a boolean or a string (PRD: `number | boolean | string`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Score {
    /// A boolean judgment.
    Bool(bool),
    /// A number.
    Number(f64),
    /// A string (categorical or textual judgment).
    Text(String),
}

impl Score {
    /// The score as JSON.
    pub fn to_value(&self) -> Value {
        match self {
            Score::Bool(b) => Value::Bool(*b),
            Score::Number(n) => serde_json::Number::from_f64(*n)
                .map(Value::Number)
                .unwrap_or(Value::Null),
            Score::Text(s) => Value::String(s.clone()),
        }
    }
}

impl fmt::Display for Score {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Score::Bool(b) => write!(f, "{b}"),
            Score::Number(n) => write!(f, "{n}"),
            Score::Text(s) => f.write_str(s),
        }
    }
}

impl From<bool> for Score {
    fn from(b: bool) -> Self {
        Score::Bool(b)
    }
}

impl From<f64> for Score {
    fn from(n: f64) -> Self {
        Score::Number(n)
    }
}

impl From<&str> for Score {
    fn from(s: &str) -> Self {
        Score::Text(s.to_string())
    }
}

/// The result of one evaluator for one criterion (PRD: `EvaluationResult`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvaluationResult {
    /// The criterion this result is for.
    pub criterion_name: String,
    /// The judgment, on the criterion's scale.
    pub score: Score,
    /// Explanation of the score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Type of the evaluator that produced the result (e.g. `ruleBased`).
    pub evaluator_type: String,
    /// Set when this particular evaluation failed; such results are left out of the overall score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Evaluator-specific details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// The score normalized to 0–1 by the runner (absent when it does not normalize or the
    /// result has an error). Filled in by the runner; evaluators leave it `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalized_score: Option<f64>,
}

impl EvaluationResult {
    /// A result with a score and reasoning.
    pub fn new(
        criterion_name: impl Into<String>,
        evaluator_type: impl Into<String>,
        score: impl Into<Score>,
        reasoning: impl Into<String>,
    ) -> Self {
        EvaluationResult {
            criterion_name: criterion_name.into(),
            score: score.into(),
            reasoning: Some(reasoning.into()),
            evaluator_type: evaluator_type.into(),
            error: None,
            metadata: None,
            normalized_score: None,
        }
    }

    /// A failed evaluation: score `false`, `error` set.
    pub fn failed(
        criterion_name: impl Into<String>,
        evaluator_type: impl Into<String>,
        error: impl Into<String>,
    ) -> Self {
        let error = error.into();
        EvaluationResult {
            criterion_name: criterion_name.into(),
            score: Score::Bool(false),
            reasoning: Some(format!("Evaluation failed: {error}")),
            evaluator_type: evaluator_type.into(),
            error: Some(error),
            metadata: None,
            normalized_score: None,
        }
    }

    /// Attaches metadata.
    pub fn with_metadata(mut self, metadata: Map<String, Value>) -> Self {
        self.metadata = Some(metadata);
        self
    }
}

/// What went wrong during a run without failing it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RunErrorKind {
    /// An evaluator returned an error (or panicked); its results are missing.
    Evaluator,
    /// Saving the result to the storage provider failed.
    Storage,
}

/// One failure recorded in [`AggregatedEvaluationResult::run_errors`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunError {
    /// Evaluator or storage failure.
    pub kind: RunErrorKind,
    /// The evaluator's type (for evaluator failures) or the storage provider's type.
    pub source: String,
    /// Index of the evaluator in the run's evaluator list (evaluator failures only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluator_index: Option<usize>,
    /// The error message.
    pub error: String,
}

/// What the run was configured with (PRD: `evaluationConfigSnapshot`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvaluationConfigSnapshot {
    /// Types of the evaluators that ran, in configuration order.
    pub evaluator_types: Vec<String>,
    /// Names of the criteria evaluated against.
    pub criteria_names: Vec<String>,
    /// Type of the storage provider (`none` when results are not stored).
    pub storage_provider_type: String,
    /// Keys of the run-level metadata.
    pub metadata_keys: Vec<String>,
}

/// The outcome of one evaluation run (PRD: `AggregatedEvaluationResult`). Serialized camelCase;
/// the engine puts it into audit events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AggregatedEvaluationResult {
    /// Weighted mean of the normalized scores; `null` when no result could be normalized.
    /// See [`aggregate`](super::aggregate) for the rules.
    pub overall_score: Option<f64>,
    /// All results of all evaluators (including those with `error`).
    pub results: Vec<EvaluationResult>,
    /// Completion time, milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// Copied from the input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Copied from the input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The exact input evaluated, with the effective criteria filled in.
    pub input_snapshot: EvaluationInput,
    /// Evaluators, criteria and storage of the run.
    pub evaluation_config_snapshot: EvaluationConfigSnapshot,
    /// Evaluators that failed and storage failures; the run still completed.
    #[serde(default)]
    pub run_errors: Vec<RunError>,
    /// Wall-clock duration of the run in milliseconds.
    pub duration_ms: u64,
    /// Run-level metadata from the run configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// An evaluation method (PRD FR2). Implement this to plug custom logic into the runner.
///
/// `evaluate` returns one result per criterion it covers; criteria not in `criteria` are
/// skipped. A problem with one criterion should be returned as an [`EvaluationResult`] with
/// `error` set; returning `Err` means the whole evaluator failed, and the runner records it in
/// `runErrors` while keeping the other evaluators' results.
#[async_trait]
pub trait Evaluator: Send + Sync {
    /// Identifier of the evaluator type (e.g. `ruleBased`).
    fn evaluator_type(&self) -> &str;

    /// True for evaluators that call a model over the network (LLM judge, embeddings).
    fn is_slow(&self) -> bool {
        false
    }

    /// Evaluates `input` against `criteria`.
    async fn evaluate(
        &self,
        input: &EvaluationInput,
        criteria: &[EvaluationCriteria],
    ) -> Result<Vec<EvaluationResult>, EvalError>;
}
