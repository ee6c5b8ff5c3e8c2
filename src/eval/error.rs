//! Errors of the evaluation framework.

/// Errors of the evaluation framework. Every variant carries enough context to locate the
/// problem (the config entry, the evaluator, the file or the URL).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// The run configuration is invalid; `path` names the bad entry (e.g. `evaluatorConfigs[1].rules[0].config.pattern`).
    #[error("invalid evaluation config at {path}: {message}")]
    InvalidConfig {
        /// Location of the bad entry in the configuration.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// An evaluator failed as a whole.
    #[error("evaluator {evaluator} failed: {message}")]
    Evaluator {
        /// The evaluator type.
        evaluator: String,
        /// What went wrong.
        message: String,
    },
    /// A model call (LLM judge or embeddings) failed.
    #[error("model request to {url} failed: {message}")]
    Model {
        /// The URL called.
        url: String,
        /// What went wrong (after retries).
        message: String,
    },
    /// Reading or writing a file failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done (`writing`, `reading`, …).
        action: &'static str,
        /// The file.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// (De)serializing JSON failed.
    #[error("JSON error ({context}): {source}")]
    Json {
        /// What was being (de)serialized.
        context: String,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },
}

impl EvalError {
    /// Shorthand for [`EvalError::InvalidConfig`].
    pub fn config(path: impl Into<String>, message: impl Into<String>) -> Self {
        EvalError::InvalidConfig {
            path: path.into(),
            message: message.into(),
        }
    }

    /// Shorthand for [`EvalError::Evaluator`].
    pub fn evaluator(evaluator: impl Into<String>, message: impl Into<String>) -> Self {
        EvalError::Evaluator {
            evaluator: evaluator.into(),
            message: message.into(),
        }
    }
}
