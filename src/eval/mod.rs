//! # Evaluation framework
//!
//! Measures the quality of agent outputs (after the AgentDock evaluation PRD). An
//! [`EvaluationInput`] (response, prompt, ground truth, context, tool calls, criteria) is scored
//! by [`Evaluator`]s against [`EvaluationCriteria`]; the [`EvaluationRunner`] runs them
//! concurrently, normalizes each score to 0–1 by its criterion's [`EvaluationScale`]
//! ([`normalize_score`]), aggregates a weighted overall score ([`aggregate`]) and stores the
//! [`AggregatedEvaluationResult`] through an [`EvaluationStorageProvider`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), toolgate::eval::EvalError> {
//! use toolgate::eval::{EvaluationInput, EvaluationRunConfig, run_evaluation};
//! let config = EvaluationRunConfig::from_json(r#"{
//!   "criteria": [{"name": "Concise", "description": "short", "scale": "binary"}],
//!   "evaluatorConfigs": [{"type": "ruleBased", "rules": [
//!     {"criterionName": "Concise", "config": {"type": "length", "max": 200}}]}]
//! }"#)?;
//! let result = run_evaluation(EvaluationInput::new("A short answer."), &config).await?;
//! assert_eq!(result.overall_score, Some(1.0));
//! # Ok(()) }
//! ```
//!
//! Evaluators are listed in [`evaluators`]; custom ones implement [`Evaluator`] and are added
//! with [`EvaluationRunner::with_evaluator`].

mod config;
mod error;
pub mod evaluators;
pub mod fields;
mod normalize;
mod runner;
mod storage;
mod types;

pub use config::{EvaluationRunConfig, EvaluatorConfig, validate_criteria};
pub use error::EvalError;
pub use evaluators::*;
pub use normalize::{aggregate, bool_on_scale, normalize_score, score_on_scale};
pub use runner::{EvaluationRunner, run_evaluation};
pub use storage::{EvaluationStorageProvider, JsonlFileStorage, MemoryStorage, StorageConfig};
pub use types::{
    AggregatedEvaluationResult, EvaluationConfigSnapshot, EvaluationCriteria, EvaluationInput,
    EvaluationResult, EvaluationScale, Evaluator, RunError, RunErrorKind, Score, ToolCallRecord,
};
