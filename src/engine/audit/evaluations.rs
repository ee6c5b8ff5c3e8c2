//! Evaluators configured on the engine: per tool glob (run on `tool.after` over the tool's
//! output) and per run (run on `run.end` over the final response). Fast evaluators finish before
//! the `tool.result` / `run.ended` event is sealed and land in its `evaluation` field; slow ones
//! (LLM judge, embeddings) run in the background and emit a linked `evaluation.result` event.

use std::sync::Arc;

use globset::GlobMatcher;
use serde_json::{Value, json};

use super::run_audit::RunAudit;
use crate::engine::clock::Clock;
use crate::engine::decide::call::ToolOutcome;
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

impl EngineEvals {
    /// Runs the evaluators configured for this tool over its output.
    pub(crate) async fn evaluate_tool_output(
        &self,
        clock: &dyn Clock,
        run: &RunAudit,
        tool: &str,
        args: &Value,
        outcome: &ToolOutcome,
    ) -> (Option<Value>, Option<SlowEvaluation>) {
        if self.per_tool.is_empty() {
            return (None, None);
        }
        let tool_lc = tool.to_lowercase();
        let Some((_, set)) = self.per_tool.iter().find(|(g, _)| g.is_match(&tool_lc)) else {
            return (None, None);
        };
        let response = outcome.output.clone().unwrap_or(Value::Null);
        let context = json!({
            "toolName": tool,
            "args": args,
            "error": outcome.error,
            "durationMs": outcome.duration.as_secs_f64() * 1000.0,
            "runId": run.context.run_id,
        });
        self.run_eval_set(clock, set, run, response, context).await
    }

    /// Runs the run-level evaluators over the final response.
    pub(crate) async fn evaluate_run(
        &self,
        clock: &dyn Clock,
        run: &RunAudit,
        final_response: Option<&str>,
        status: &str,
    ) -> (Option<Value>, Option<SlowEvaluation>) {
        let Some(set) = &self.per_run else {
            return (None, None);
        };
        let response = final_response.map_or(Value::Null, |r| Value::String(r.to_string()));
        let context = json!({"runId": run.context.run_id, "status": status});
        self.run_eval_set(clock, set, run, response, context).await
    }

    /// Builds the input (the run's agent, session and real tool calls), runs the fast
    /// evaluators now and hands back the slow ones with their input.
    async fn run_eval_set(
        &self,
        clock: &dyn Clock,
        set: &EvalSet,
        run: &RunAudit,
        response: Value,
        context: Value,
    ) -> (Option<Value>, Option<SlowEvaluation>) {
        let mut input = EvaluationInput::new(response);
        input.agent_id = Some(run.context.agent_id.clone());
        input.session_id = run.context.session_id.clone();
        input.context = Some(context);
        input.tool_calls = Some(run.tool_calls.lock().clone());
        input.timestamp = Some(clock.now().timestamp_millis());
        let fast = match &set.fast {
            Some(r) => Some(run_to_json(r, input.clone()).await),
            None => None,
        };
        (fast, set.slow.clone().map(|r| (r, input)))
    }
}

/// Slow evaluators and the input they are to run on, after the event is sealed.
pub(crate) type SlowEvaluation = (Arc<EvaluationRunner>, EvaluationInput);

/// Runs a runner and turns its result (or its failure) into the JSON put into events.
pub(crate) async fn run_to_json(runner: &EvaluationRunner, input: EvaluationInput) -> Value {
    match runner.run(input).await {
        Ok(r) => serde_json::to_value(&r).unwrap_or_else(|e| json!({"error": e.to_string()})),
        Err(e) => json!({"error": e.to_string()}),
    }
}
