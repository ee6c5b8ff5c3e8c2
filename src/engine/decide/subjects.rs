//! Subject extractors: registered functions that find who or what a tool call is about (a
//! customer, an account) in its arguments; the subjects themselves are [`SubjectRef`]s.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use globset::GlobMatcher;
use serde_json::Value;

use super::call::{RunContext, SubjectRef};

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
