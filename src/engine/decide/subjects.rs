//! Subjects: who or what a tool call is about (a customer, an account), extracted by
//! registered functions or given with the call.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use globset::GlobMatcher;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::call::RunContext;

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

/// What an extractor sees of the call.
#[derive(Debug, Clone)]
pub struct SubjectInput {
    /// Tool name.
    pub tool_name: String,
    /// Tool tags.
    pub tool_tags: Vec<String>,
    /// Tool arguments.
    pub args: Value,
    /// The run.
    pub run: Arc<RunContext>,
}

/// Extracts subjects from a call. Closures `Fn(SubjectInput) -> impl Future<Output =
/// Result<Vec<SubjectRef>, String>>` implement it.
pub trait SubjectExtractor: Send + Sync + 'static {
    /// Extracts. An `Err` yields no subjects and is recorded on the decision.
    fn extract(
        &self,
        input: SubjectInput,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<SubjectRef>, String>> + Send>>;
}

impl<F, Fut> SubjectExtractor for F
where
    F: Fn(SubjectInput) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<SubjectRef>, String>> + Send + 'static,
{
    fn extract(
        &self,
        input: SubjectInput,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<SubjectRef>, String>> + Send>> {
        Box::pin(self(input))
    }
}

pub(crate) struct RegisteredExtractor {
    pub(crate) glob: GlobMatcher,
    pub(crate) extractor: Arc<dyn SubjectExtractor>,
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
