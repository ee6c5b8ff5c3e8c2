//! The lines of a trace (module docs of [`super`]).

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;

use crate::engine::SubjectRef;

/// One line of a trace.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all_fields = "camelCase", deny_unknown_fields)]
pub enum TraceLine {
    /// A run starts.
    #[serde(rename = "run.start")]
    RunStart {
        /// Run id.
        run_id: String,
        /// Agent id.
        agent_id: String,
        /// The agent's tags (for policies' `agentSelector`).
        #[serde(default)]
        agent_tags: Vec<String>,
        /// Session id.
        #[serde(default)]
        session_id: Option<String>,
        /// End user.
        #[serde(default)]
        enduser: Option<crate::engine::Enduser>,
        /// Time.
        #[serde(default)]
        at: Option<DateTime<Utc>>,
    },
    /// From here on, the provider `key` returns `value` (or fails with `error`, after `delayMs`).
    #[serde(rename = "signal")]
    Signal {
        /// Provider key.
        key: String,
        /// The value (`null` included: a present `"value": null` is the value null, design §5).
        #[serde(default, deserialize_with = "present_value")]
        value: Option<Value>,
        /// An error instead.
        #[serde(default)]
        error: Option<String>,
        /// Delay before answering.
        #[serde(default)]
        delay_ms: Option<u64>,
        /// Time.
        #[serde(default)]
        at: Option<DateTime<Utc>>,
    },
    /// The agent asks to call a tool.
    #[serde(rename = "tool.call")]
    ToolCall {
        /// Run id (may be left out when one run is live).
        #[serde(default)]
        run_id: Option<String>,
        /// Call id.
        id: String,
        /// The tool.
        tool: TraceTool,
        /// Arguments.
        #[serde(default)]
        args: Value,
        /// Subjects of the call.
        #[serde(default)]
        subjects: Vec<SubjectRef>,
        /// Time.
        #[serde(default)]
        at: Option<DateTime<Utc>>,
    },
    /// A tool call's result.
    #[serde(rename = "tool.result")]
    ToolResult {
        /// Run id.
        #[serde(default)]
        run_id: Option<String>,
        /// Call id.
        id: String,
        /// Output.
        #[serde(default)]
        output: Option<Value>,
        /// Duration.
        #[serde(default)]
        duration_ms: Option<f64>,
        /// Error.
        #[serde(default)]
        error: Option<String>,
        /// Time.
        #[serde(default)]
        at: Option<DateTime<Utc>>,
    },
    /// A custom metric.
    #[serde(rename = "metric")]
    Metric {
        /// Run id.
        #[serde(default)]
        run_id: Option<String>,
        /// Metric key.
        key: String,
        /// Value.
        value: f64,
        /// Time.
        #[serde(default)]
        at: Option<DateTime<Utc>>,
    },
    /// The agent is about to call a model: decided by the `llm.before` rules.
    #[serde(rename = "llm.call")]
    LlmCall {
        /// Run id (may be left out when one run is live).
        #[serde(default)]
        run_id: Option<String>,
        /// Call id.
        id: String,
        /// The model's name.
        model: String,
        /// The messages it would be sent.
        #[serde(default)]
        messages: Value,
        /// Time.
        #[serde(default)]
        at: Option<DateTime<Utc>>,
    },
    /// The usage of a model call (the `llm_*` metrics).
    #[serde(rename = "llm")]
    Llm {
        /// Run id.
        #[serde(default)]
        run_id: Option<String>,
        /// The `llm.call` it belongs to: ignored when that call was not allowed (the model was
        /// not called).
        #[serde(default)]
        id: Option<String>,
        /// Input tokens.
        #[serde(default)]
        tokens_in: u64,
        /// Output tokens.
        #[serde(default)]
        tokens_out: u64,
        /// Cost (absent: priced from the replay's price table, if any).
        #[serde(default)]
        cost_usd: Option<f64>,
        /// The model's name.
        #[serde(default)]
        model: Option<String>,
        /// How long the call took.
        #[serde(default)]
        duration_ms: Option<f64>,
        /// Time.
        #[serde(default)]
        at: Option<DateTime<Utc>>,
    },
    /// A human decides the review raised by a call.
    #[serde(rename = "review")]
    Review {
        /// The call whose review is decided.
        fingerprint_of: String,
        /// `approved` or `denied`.
        decision: ReviewDecision,
        /// Time.
        #[serde(default)]
        at: Option<DateTime<Utc>>,
    },
    /// A run ends.
    #[serde(rename = "run.end")]
    RunEnd {
        /// Run id.
        #[serde(default)]
        run_id: Option<String>,
        /// Status.
        #[serde(default)]
        status: Option<String>,
        /// The agent's final response.
        #[serde(default)]
        final_response: Option<String>,
        /// Time.
        #[serde(default)]
        at: Option<DateTime<Utc>>,
    },
}

/// A review decision in a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReviewDecision {
    /// Approve.
    Approved,
    /// Deny.
    Denied,
}

/// The tool of a `tool.call` line.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceTool {
    /// Name.
    pub name: String,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

impl TraceLine {
    pub(super) fn at(&self) -> Option<DateTime<Utc>> {
        match self {
            TraceLine::RunStart { at, .. }
            | TraceLine::Signal { at, .. }
            | TraceLine::ToolCall { at, .. }
            | TraceLine::ToolResult { at, .. }
            | TraceLine::Metric { at, .. }
            | TraceLine::LlmCall { at, .. }
            | TraceLine::Llm { at, .. }
            | TraceLine::Review { at, .. }
            | TraceLine::RunEnd { at, .. } => *at,
        }
    }
}

/// A field that is present is `Some`, whatever its value (`null` included); an absent one is
/// `None` (through `#[serde(default)]`).
fn present_value<'de, D>(d: D) -> Result<Option<Value>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    <Value as serde::Deserialize>::deserialize(d).map(Some)
}
