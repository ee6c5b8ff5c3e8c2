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
