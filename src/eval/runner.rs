//! The evaluation runner (PRD FR3/FR4): runs evaluators concurrently, aggregates, stores.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use serde_json::{Map, Value};

use super::config::{EvaluationRunConfig, validate_criteria};
use super::error::EvalError;
use super::normalize::aggregate;
use super::storage::EvaluationStorageProvider;
use super::types::{
    AggregatedEvaluationResult, EvaluationConfigSnapshot, EvaluationInput, Evaluator, RunError,
    RunErrorKind,
};

/// Runs a set of evaluators over inputs.
///
/// For each input ([`EvaluationRunner::run`]):
/// 1. the effective criteria are the input's `criteria` when non-empty, else the runner's;
/// 2. all evaluators run **concurrently** on the input; an evaluator that returns `Err` (or
///    panics) is recorded in `runErrors` and the others' results are kept;
/// 3. scores are normalized and aggregated ([`aggregate`]);
/// 4. the result is saved to the storage provider, if any; a storage failure is recorded in
///    `runErrors` and does not fail the run.
#[derive(Clone, Default)]
pub struct EvaluationRunner {
    evaluators: Vec<Arc<dyn Evaluator>>,
    criteria: Vec<super::types::EvaluationCriteria>,
    storage: Option<Arc<dyn EvaluationStorageProvider>>,
    metadata: Option<Map<String, Value>>,
}

impl std::fmt::Debug for EvaluationRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvaluationRunner")
            .field(
                "evaluators",
                &self
                    .evaluators
                    .iter()
                    .map(|e| e.evaluator_type())
                    .collect::<Vec<_>>(),
            )
            .field("criteria", &self.criteria.len())
            .field("storage", &self.storage.as_ref().map(|s| s.provider_type()))
            .finish()
    }
}

impl EvaluationRunner {
    /// A runner without evaluators, criteria or storage.
    pub fn new() -> Self {
        Self::default()
    }

    /// Validates `config` and builds its evaluators and storage.
    pub fn from_config(config: &EvaluationRunConfig) -> Result<Self, EvalError> {
        config.validate()?;
        let evaluators = config
            .evaluator_configs
            .iter()
            .map(|c| c.build())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(EvaluationRunner {
            evaluators,
            criteria: config.criteria.clone(),
            storage: config.storage.as_ref().map(|s| s.build()),
            metadata: None,
        })
    }

    /// Adds an evaluator (custom ones included).
    pub fn with_evaluator(mut self, evaluator: Arc<dyn Evaluator>) -> Self {
        self.evaluators.push(evaluator);
        self
    }

    /// Sets the default criteria.
    pub fn with_criteria(mut self, criteria: Vec<super::types::EvaluationCriteria>) -> Self {
        self.criteria = criteria;
        self
    }

    /// Sets the storage provider.
    pub fn with_storage(mut self, storage: Arc<dyn EvaluationStorageProvider>) -> Self {
        self.storage = Some(storage);
        self
    }

    /// Sets run-level metadata copied into every result.
    pub fn with_metadata(mut self, metadata: Map<String, Value>) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// The evaluators, in order.
    pub fn evaluators(&self) -> &[Arc<dyn Evaluator>] {
        &self.evaluators
    }

    /// Evaluates one input. Fails only when the effective criteria are invalid (see
    /// [`validate_criteria`]); evaluator and storage failures are recorded in `runErrors`.
    pub async fn run(
        &self,
        mut input: EvaluationInput,
    ) -> Result<AggregatedEvaluationResult, EvalError> {
        let started = Instant::now();
        if input.criteria.is_empty() {
            input.criteria = self.criteria.clone();
        } else {
            validate_criteria(&input.criteria, "input.criteria")?;
        }
        let criteria = input.criteria.clone();
        let futures = self.evaluators.iter().enumerate().map(|(i, e)| {
            let input = &input;
            let criteria = &criteria;
            async move {
                let r = AssertUnwindSafe(e.evaluate(input, criteria))
                    .catch_unwind()
                    .await;
                (i, e.evaluator_type().to_string(), r)
            }
        });
        let outcomes = futures::future::join_all(futures).await;
        let mut results = Vec::new();
        let mut run_errors = Vec::new();
        for (i, ty, outcome) in outcomes {
            match outcome {
                Ok(Ok(mut r)) => results.append(&mut r),
                Ok(Err(e)) => run_errors.push(RunError {
                    kind: RunErrorKind::Evaluator,
                    source: ty,
                    evaluator_index: Some(i),
                    error: e.to_string(),
                }),
                Err(panic) => {
                    let msg = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".into());
                    run_errors.push(RunError {
                        kind: RunErrorKind::Evaluator,
                        source: ty,
                        evaluator_index: Some(i),
                        error: format!("evaluator panicked: {msg}"),
                    });
                }
            }
        }
        for e in &run_errors {
            tracing::warn!(evaluator = %e.source, error = %e.error, "evaluator failed");
        }
        let overall_score = aggregate(&mut results, &criteria);
        let snapshot = EvaluationConfigSnapshot {
            evaluator_types: self
                .evaluators
                .iter()
                .map(|e| e.evaluator_type().to_string())
                .collect(),
            criteria_names: criteria.iter().map(|c| c.name.clone()).collect(),
            storage_provider_type: self
                .storage
                .as_ref()
                .map_or_else(|| "none".to_string(), |s| s.provider_type().to_string()),
            metadata_keys: self
                .metadata
                .as_ref()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default(),
        };
        let mut result = AggregatedEvaluationResult {
            overall_score,
            results,
            timestamp: chrono::Utc::now().timestamp_millis(),
            agent_id: input.agent_id.clone(),
            session_id: input.session_id.clone(),
            input_snapshot: input,
            evaluation_config_snapshot: snapshot,
            run_errors,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            metadata: self.metadata.clone(),
        };
        if let Some(storage) = &self.storage
            && let Err(e) = storage.save_result(&result).await
        {
            tracing::warn!(storage = storage.provider_type(), error = %e, "storing evaluation result failed");
            result.run_errors.push(RunError {
                kind: RunErrorKind::Storage,
                source: storage.provider_type().to_string(),
                evaluator_index: None,
                error: e.to_string(),
            });
        }
        Ok(result)
    }
}

/// Validates `config`, builds its evaluators and evaluates `input` (PRD FR6: `runEvaluation`).
///
/// Errors only for an invalid configuration or invalid input criteria; evaluator and storage
/// failures are recorded in the result's `runErrors`.
pub async fn run_evaluation(
    input: EvaluationInput,
    config: &EvaluationRunConfig,
) -> Result<AggregatedEvaluationResult, EvalError> {
    EvaluationRunner::from_config(config)?.run(input).await
}
