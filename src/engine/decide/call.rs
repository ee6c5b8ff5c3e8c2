//! What a run is about and what an agent asks: the run's context, a tool call, the subjects
//! it is about and its outcome.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

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

/// A subject of a tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubjectRef {
    /// Kind of subject, e.g. `customer`.
    pub subject_type: String,
    /// Its id.
    pub value: String,
    /// Role when a call has several of a type (`primary`, `source`, `dest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The system the id belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_system: Option<String>,
}

impl SubjectRef {
    /// The subjects a host language's extractor returned, as JSON: an array of `{subjectType,
    /// id, idSystem?, role?}` (numbers are taken as their text). The error names the first
    /// item that is not one (`subject [2]: …`).
    pub fn list_from_json(value: &Value) -> Result<Vec<SubjectRef>, String> {
        let Value::Array(items) = value else {
            return Err(
                "a subject extractor returns a list of {subjectType, id, idSystem?, role?}".into(),
            );
        };
        let field = |o: &serde_json::Map<String, Value>, k: &str| -> Option<String> {
            match o.get(k) {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Number(n)) => Some(n.to_string()),
                _ => None,
            }
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let bad = || {
                    format!(
                        "subject [{i}]: expected {{subjectType: string, id: string, idSystem?: string, role?: string}}"
                    )
                };
                let o = item.as_object().ok_or_else(bad)?;
                Ok(SubjectRef {
                    subject_type: field(o, "subjectType").ok_or_else(bad)?,
                    value: field(o, "id").ok_or_else(bad)?,
                    role: field(o, "role"),
                    id_system: field(o, "idSystem"),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subjects_from_a_host_languages_json() {
        let got = SubjectRef::list_from_json(&json!([
            {"subjectType": "customer", "id": "c-1", "role": "primary"},
            {"subjectType": "order", "id": 42, "idSystem": "shop"}
        ]))
        .unwrap();
        assert_eq!(got[0].value, "c-1");
        assert_eq!(got[0].role.as_deref(), Some("primary"));
        assert_eq!(
            (got[1].value.as_str(), got[1].id_system.as_deref()),
            ("42", Some("shop"))
        );
        let e = SubjectRef::list_from_json(&json!([{"subjectType": "a", "id": "1"}, {"id": "x"}]))
            .unwrap_err();
        assert!(e.starts_with("subject [1]: expected"), "{e}");
        assert!(SubjectRef::list_from_json(&json!({"id": "x"})).is_err());
    }
}
