//! What a run is about and what an agent asks: the run's context, a tool call and its outcome.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::subjects::SubjectRef;

/// The end user an agent acts for.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Enduser {
    /// Their id.
    pub id: String,
    /// Their tags (e.g. `tz`, `role`), values as strings.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// Who runs and for whom.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunContext {
    /// Unique id of the run.
    pub run_id: String,
    /// The agent.
    pub agent_id: String,
    /// The agent's tags (policies' `agentSelector` reads them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agent_tags: Vec<String>,
    /// A session grouping runs, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The end user, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enduser: Option<Enduser>,
}

impl RunContext {
    /// A context for `run_id` of `agent_id`, without an end user.
    pub fn new(run_id: impl Into<String>, agent_id: impl Into<String>) -> Self {
        RunContext {
            run_id: run_id.into(),
            agent_id: agent_id.into(),
            agent_tags: Vec::new(),
            session_id: None,
            enduser: None,
        }
    }

    /// Sets the agent's tags (matched by policies' `agentSelector`).
    pub fn with_agent_tags<S: Into<String>>(mut self, tags: impl IntoIterator<Item = S>) -> Self {
        self.agent_tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the end user.
    pub fn with_enduser(
        mut self,
        id: impl Into<String>,
        tags: impl IntoIterator<Item = (String, String)>,
    ) -> Self {
        self.enduser = Some(Enduser {
            id: id.into(),
            tags: tags.into_iter().collect(),
        });
        self
    }
}

/// A tool call the agent wants to make.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolCall {
    /// Id of the call, unique in the run.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Tool tags.
    pub tags: Vec<String>,
    /// Arguments (any JSON).
    pub args: Value,
    /// Subjects known by the caller (extractors add to these).
    pub subjects: Vec<SubjectRef>,
}

impl ToolCall {
    /// A call of `name` with `args`.
    pub fn new(id: impl Into<String>, name: impl Into<String>, args: Value) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            tags: Vec::new(),
            args,
            subjects: Vec::new(),
        }
    }

    /// Sets the tags.
    pub fn with_tags<S: Into<String>>(mut self, tags: impl IntoIterator<Item = S>) -> Self {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }
}

/// What a tool call produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolOutcome {
    /// The output, when it succeeded.
    pub output: Option<Value>,
    /// The error, when it failed.
    pub error: Option<String>,
    /// How long it ran.
    pub duration: Duration,
}

impl ToolOutcome {
    /// A success.
    pub fn ok(output: Value, duration: Duration) -> Self {
        ToolOutcome {
            output: Some(output),
            error: None,
            duration,
        }
    }

    /// A failure.
    pub fn err(error: impl Into<String>, duration: Duration) -> Self {
        ToolOutcome {
            output: None,
            error: Some(error.into()),
            duration,
        }
    }
}
