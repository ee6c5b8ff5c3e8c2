//! Evaluators configured on the engine: per tool glob (run on `tool.after` over the tool's
//! output) and per run (run on `run.end` over the final response). Fast evaluators finish before
//! the `tool.result` / `run.ended` event is sealed and land in its `evaluation` field; slow ones
//! (LLM judge, embeddings) run in the background and emit a linked `evaluation.result` event.

use std::sync::Arc;

use globset::GlobMatcher;
use serde_json::{Value, json};

use crate::eval::{EvalError, EvaluationInput, EvaluationRunConfig, EvaluationRunner};

/// Evaluators split by speed, built once.
pub(crate) struct EvalSet {
    pub(crate) fast: Option<Arc<EvaluationRunner>>,
    pub(crate) slow: Option<Arc<EvaluationRunner>>,
}

impl EvalSet {
    pub(crate) fn build(config: &EvaluationRunConfig) -> Result<EvalSet, EvalError> {
        config.validate()?;
        let (fast, slow) = config.split_by_speed();
        Ok(EvalSet {
            fast: fast
                .map(|c| EvaluationRunner::from_config(&c).map(Arc::new))
                .transpose()?,
            slow: slow
                .map(|c| EvaluationRunner::from_config(&c).map(Arc::new))
                .transpose()?,
        })
    }
}

/// Evaluation sets of the engine.
#[derive(Default)]
pub(crate) struct EngineEvals {
    pub(crate) per_tool: Vec<(GlobMatcher, EvalSet)>,
    pub(crate) per_run: Option<EvalSet>,
}

/// Runs a runner and turns its result (or its failure) into the JSON put into events.
pub(crate) async fn run_to_json(runner: &EvaluationRunner, input: EvaluationInput) -> Value {
    match runner.run(input).await {
        Ok(r) => serde_json::to_value(&r).unwrap_or_else(|e| json!({"error": e.to_string()})),
        Err(e) => json!({"error": e.to_string()}),
    }
}
