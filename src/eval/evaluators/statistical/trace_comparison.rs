//! Comparison against a reference trace ([`TraceComparisonEvaluator`]).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::default_pass_threshold;
use crate::eval::error::EvalError;
use crate::eval::evaluators::lexical::sorensen_dice;
use crate::eval::evaluators::text::normalize_whitespace;
use crate::eval::evaluators::tool_usage::tool_calls_from_messages;
use crate::eval::normalize::score_on_scale;
use crate::eval::types::{
    EvaluationCriteria, EvaluationInput, EvaluationResult, Evaluator, ToolCallRecord,
};

/// A reference trace for [`TraceComparisonEvaluator`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceTrace {
    /// The reference tool calls, in order.
    #[serde(default)]
    pub tool_calls: Vec<ToolCallRecord>,
    /// The reference final output (alias `output`).
    #[serde(default, alias = "output", skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
    /// The reference cost in USD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// Dimension weights of [`TraceComparisonEvaluator`] (defaults 0.3 / 0.2 / 0.35 / 0.15).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TraceWeights {
    /// Weight of the tool sequence similarity.
    #[serde(default = "w_seq", alias = "tool_sequence")]
    pub tool_sequence: f64,
    /// Weight of the parameter agreement.
    #[serde(default = "w_params", alias = "tool_parameters")]
    pub tool_parameters: f64,
    /// Weight of the output similarity.
    #[serde(default = "w_output", alias = "output_similarity")]
    pub output_similarity: f64,
    /// Weight of the cost deviation score.
    #[serde(default = "w_cost", alias = "cost_deviation")]
    pub cost_deviation: f64,
}

fn w_seq() -> f64 {
    0.3
}
fn w_params() -> f64 {
    0.2
}
fn w_output() -> f64 {
    0.35
}
fn w_cost() -> f64 {
    0.15
}

impl Default for TraceWeights {
    fn default() -> Self {
        TraceWeights {
            tool_sequence: w_seq(),
            tool_parameters: w_params(),
            output_similarity: w_output(),
            cost_deviation: w_cost(),
        }
    }
}

fn default_reference_field() -> String {
    "groundTruth".into()
}
fn default_cost_field() -> String {
    "metadata.costUsd".into()
}

/// Configuration of [`TraceComparisonEvaluator`] (`"type": "traceComparison"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TraceComparisonConfig {
    /// Criterion this evaluator scores.
    pub criterion_name: String,
    /// The reference trace; when absent it is read from `referenceField`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<ReferenceTrace>,
    /// Field holding the reference trace object (default `groundTruth`).
    #[serde(default = "default_reference_field")]
    pub reference_field: String,
    /// Dimension weights.
    #[serde(default)]
    pub weights: TraceWeights,
    /// The trace passes when its score ≥ this (default 0.7).
    #[serde(default = "default_pass_threshold")]
    pub pass_threshold: f64,
    /// Field holding the current run's cost in USD (default `metadata.costUsd`).
    #[serde(default = "default_cost_field")]
    pub cost_field: String,
}

/// Levenshtein distance between two sequences.
fn seq_distance<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, y) in b.iter().enumerate() {
            let cost = usize::from(x != y);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Tool sequence similarity: `1 − levenshtein(names a, names b) / max(len)`; 1 when both are
/// empty.
pub fn tool_sequence_similarity(current: &[ToolCallRecord], reference: &[ToolCallRecord]) -> f64 {
    let a: Vec<&str> = current.iter().map(|c| c.name.as_str()).collect();
    let b: Vec<&str> = reference.iter().map(|c| c.name.as_str()).collect();
    let max = a.len().max(b.len());
    if max == 0 {
        return 1.0;
    }
    1.0 - seq_distance(&a, &b) as f64 / max as f64
}

fn args_agreement(a: &Value, b: &Value) -> f64 {
    let eq = |x: &Value, y: &Value| match (x, y) {
        (Value::Number(p), Value::Number(q)) => p.as_f64() == q.as_f64(),
        _ => x == y,
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            if keys.is_empty() {
                return 1.0;
            }
            let same = keys
                .iter()
                .filter(|k| matches!((x.get(**k), y.get(**k)), (Some(p), Some(q)) if eq(p, q)))
                .count();
            same as f64 / keys.len() as f64
        }
        _ => f64::from(u8::from(eq(a, b))),
    }
}

/// Parameter agreement: each reference call is paired with the first unused current call of
/// the same name (in order); a pair scores the fraction of argument keys (union of both) whose
/// values are equal (non-object arguments: 1 if equal else 0); an unpaired reference call
/// scores 0. The result is the mean over reference calls; 1 when the reference has no calls.
pub fn parameter_agreement(current: &[ToolCallRecord], reference: &[ToolCallRecord]) -> f64 {
    if reference.is_empty() {
        return 1.0;
    }
    let mut used = vec![false; current.len()];
    let mut total = 0.0;
    for r in reference {
        if let Some(i) = (0..current.len()).find(|i| !used[*i] && current[*i].name == r.name) {
            used[i] = true;
            total += args_agreement(&current[i].args, &r.args);
        }
    }
    total / reference.len() as f64
}

/// Cost deviation score: `1 − min(1, |cost − reference| / reference)`; when the reference cost
/// is 0: 1 if the cost is 0, else 0.
pub fn cost_deviation_score(cost: f64, reference: f64) -> f64 {
    if reference <= 0.0 {
        return if cost <= 0.0 { 1.0 } else { 0.0 };
    }
    1.0 - ((cost - reference).abs() / reference).min(1.0)
}

/// Compares the run against a reference trace on four dimensions (seed 002):
/// * `toolSequence` — [`tool_sequence_similarity`] of the tool names;
/// * `toolParameters` — [`parameter_agreement`];
/// * `outputSimilarity` — Sørensen–Dice ([`sorensen_dice`]) of the lower-cased,
///   whitespace-normalized response and reference output (skipped when the reference has no
///   output);
/// * `costDeviation` — [`cost_deviation_score`] (skipped when either cost is unknown).
///
/// Score = Σ weight·dimension / Σ weight over the dimensions not skipped; pass = score ≥
/// `passThreshold`. The result's score is on the criterion's scale ([`score_on_scale`] with
/// `passThreshold`). The run's tool calls are the input's `toolCalls`, else those in
/// `messageHistory`. `metadata`: each dimension, `score`, `passed`.
#[derive(Debug, Clone)]
pub struct TraceComparisonEvaluator {
    config: TraceComparisonConfig,
}

/// Evaluator type of [`TraceComparisonEvaluator`].
pub const TRACE_COMPARISON: &str = "traceComparison";

impl TraceComparisonEvaluator {
    /// Builds the evaluator.
    pub fn new(config: TraceComparisonConfig) -> Self {
        TraceComparisonEvaluator { config }
    }

    fn reference(&self, input: &EvaluationInput) -> Result<ReferenceTrace, String> {
        if let Some(r) = &self.config.reference {
            return Ok(r.clone());
        }
        let f = &self.config.reference_field;
        serde_json::from_value(input.field_value(f)?).map_err(|e| {
            format!("field '{f}' is not a reference trace ({{toolCalls, response, costUsd}}): {e}")
        })
    }
}

#[async_trait]
impl Evaluator for TraceComparisonEvaluator {
    fn evaluator_type(&self) -> &str {
        TRACE_COMPARISON
    }

    async fn evaluate(
        &self,
        input: &EvaluationInput,
        criteria: &[EvaluationCriteria],
    ) -> Result<Vec<EvaluationResult>, EvalError> {
        let c = &self.config;
        let Some(crit) = criteria.iter().find(|k| k.name == c.criterion_name) else {
            return Ok(vec![]);
        };
        let reference = match self.reference(input) {
            Ok(r) => r,
            Err(e) => {
                return Ok(vec![EvaluationResult::failed(
                    &c.criterion_name,
                    TRACE_COMPARISON,
                    e,
                )]);
            }
        };
        let calls = match &input.tool_calls {
            Some(t) => t.clone(),
            None => tool_calls_from_messages(input.message_history.as_deref().unwrap_or_default()),
        };
        let w = &c.weights;
        let mut dims: Vec<(&str, f64, f64)> = vec![
            (
                "toolSequence",
                tool_sequence_similarity(&calls, &reference.tool_calls),
                w.tool_sequence,
            ),
            (
                "toolParameters",
                parameter_agreement(&calls, &reference.tool_calls),
                w.tool_parameters,
            ),
        ];
        if let Some(ref_out) = &reference.response {
            let prep = |s: &str| normalize_whitespace(s).to_lowercase();
            let out = input.field_text("response").unwrap_or_default();
            dims.push((
                "outputSimilarity",
                sorensen_dice(&prep(&out), &prep(ref_out)),
                w.output_similarity,
            ));
        }
        let cost = input
            .field_value(&c.cost_field)
            .ok()
            .and_then(|v| v.as_f64());
        if let (Some(cost), Some(ref_cost)) = (cost, reference.cost_usd) {
            dims.push((
                "costDeviation",
                cost_deviation_score(cost, ref_cost),
                w.cost_deviation,
            ));
        }
        let wsum: f64 = dims.iter().map(|d| d.2).sum();
        let score = if wsum > 0.0 {
            dims.iter().map(|d| d.1 * d.2).sum::<f64>() / wsum
        } else {
            0.0
        };
        let passed = score >= c.pass_threshold;
        let mut meta = Map::new();
        let mut dm = Map::new();
        for (name, v, _) in &dims {
            dm.insert((*name).into(), json!(v));
        }
        meta.insert("dimensions".into(), Value::Object(dm));
        meta.insert("score".into(), json!(score));
        meta.insert("passed".into(), json!(passed));
        meta.insert("passThreshold".into(), json!(c.pass_threshold));
        let detail: Vec<String> = dims
            .iter()
            .map(|(n, v, w)| format!("{n} {v:.4} (w {w})"))
            .collect();
        Ok(vec![
            EvaluationResult::new(
                &c.criterion_name,
                TRACE_COMPARISON,
                score_on_scale(score, &crit.scale, c.pass_threshold),
                format!(
                    "trace score {score:.4} ({}): {}",
                    if passed { "pass" } else { "fail" },
                    detail.join(", ")
                ),
            )
            .with_metadata(meta),
        ])
    }
}
