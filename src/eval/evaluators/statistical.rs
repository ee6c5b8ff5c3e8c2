//! Statistics over many runs ([`StatisticalEvaluator`]) and comparison against a reference
//! trace ([`TraceComparisonEvaluator`]) (seed 002).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::samples::{sample_variant, take_field};
use crate::eval::error::EvalError;
use crate::eval::normalize::{aggregate, normalize_score, score_on_scale};
use crate::eval::types::{EvaluationCriteria, EvaluationInput, EvaluationResult, Evaluator};

mod trace_comparison;
pub use trace_comparison::*;

/// Summary statistics of a list of scores (0–1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatisticalSummary {
    /// Number of values.
    pub count: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (divisor n − 1; 0 for a single value).
    pub std_dev: f64,
    /// Median (the 50th percentile).
    pub median: f64,
    /// 5th percentile.
    pub p5: f64,
    /// 95th percentile.
    pub p95: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Fraction of values ≥ `passThreshold`.
    pub pass_rate: f64,
    /// The threshold used for `passRate`.
    pub pass_threshold: f64,
}

/// Percentile `p` (0–100) of sorted values with linear interpolation between closest ranks
/// (rank = p/100 · (n − 1), as numpy's default).
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p / 100.0).clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    let frac = rank - lo as f64;
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * frac)
}

/// Summarizes `values` (non-finite values are ignored); `None` when nothing is left.
pub fn summarize(values: &[f64], pass_threshold: f64) -> Option<StatisticalSummary> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let mean = v.iter().sum::<f64>() / n as f64;
    let std_dev = if n > 1 {
        (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    Some(StatisticalSummary {
        count: n,
        mean,
        std_dev,
        median: percentile(&v, 50.0)?,
        p5: percentile(&v, 5.0)?,
        p95: percentile(&v, 95.0)?,
        min: v[0],
        max: v[n - 1],
        pass_rate: v.iter().filter(|x| **x >= pass_threshold).count() as f64 / n as f64,
        pass_threshold,
    })
}

/// Per-criterion statistics of [`StatisticalEvaluator::evaluate_multiple`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CriterionStatistics {
    /// Statistics of the normalized scores (absent when none normalized).
    pub summary: Option<StatisticalSummary>,
    /// Results with `error`.
    pub errors: usize,
    /// Results whose score did not normalize.
    pub not_normalized: usize,
}

/// Report of [`StatisticalEvaluator::evaluate_multiple`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatisticalReport {
    /// Number of inputs evaluated.
    pub runs: usize,
    /// Statistics per criterion name.
    pub criteria: BTreeMap<String, CriterionStatistics>,
    /// Statistics of each input's overall (weighted) score.
    pub overall: Option<StatisticalSummary>,
    /// Inputs on which the inner evaluator failed as a whole.
    pub failed_runs: usize,
}

fn default_pass_threshold() -> f64 {
    0.7
}
fn default_samples_field() -> String {
    "context.samples".into()
}

/// Configuration of [`StatisticalEvaluator`] (`"type": "statistical"`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StatisticalConfig {
    /// The wrapped evaluator.
    pub evaluator: Box<crate::eval::EvaluatorConfig>,
    /// A normalized score ≥ this passes (default 0.7).
    #[serde(default = "default_pass_threshold")]
    pub pass_threshold: f64,
    /// Field holding the samples (default `context.samples`): an array whose elements are
    /// responses (any JSON) or objects with a `response` key and optional `groundTruth`,
    /// `context`, `toolCalls`, `metadata` that replace the input's.
    #[serde(default = "default_samples_field")]
    pub samples_field: String,
}

/// Runs a wrapped evaluator over many inputs (e.g. several responses of a non-deterministic
/// agent to one prompt) and reports mean, sample standard deviation, median, p5, p95 and the
/// pass rate against a threshold.
///
/// As a library: [`StatisticalEvaluator::evaluate_multiple`]. As an [`Evaluator`] (in a run
/// config): the samples are read from `samplesField` and, for each criterion the inner
/// evaluator scored, one result is produced with score = the mean normalized score on the
/// criterion's scale ([`score_on_scale`], threshold = `passThreshold`) and the summary in
/// `metadata`.
#[derive(Clone)]
pub struct StatisticalEvaluator {
    inner: Arc<dyn Evaluator>,
    pass_threshold: f64,
    samples_field: String,
}

impl std::fmt::Debug for StatisticalEvaluator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatisticalEvaluator")
            .field("inner", &self.inner.evaluator_type())
            .field("pass_threshold", &self.pass_threshold)
            .finish()
    }
}

/// Evaluator type of [`StatisticalEvaluator`].
pub const STATISTICAL: &str = "statistical";

impl StatisticalEvaluator {
    /// Wraps `inner`; samples are read from `context.samples`.
    pub fn new(inner: Arc<dyn Evaluator>, pass_threshold: f64) -> Self {
        StatisticalEvaluator {
            inner,
            pass_threshold,
            samples_field: default_samples_field(),
        }
    }

    /// Sets the samples field.
    pub fn with_samples_field(mut self, field: impl Into<String>) -> Self {
        self.samples_field = field.into();
        self
    }

    /// Evaluates every input with the inner evaluator (sequentially) and summarizes.
    pub async fn evaluate_multiple(
        &self,
        inputs: &[EvaluationInput],
        criteria: &[EvaluationCriteria],
    ) -> StatisticalReport {
        self.evaluate_each(inputs.iter().map(std::borrow::Cow::Borrowed), criteria)
            .await
    }

    /// Evaluates the inputs one at a time as the iterator yields them, so only one is alive
    /// at a time, and summarizes.
    async fn evaluate_each<'a>(
        &self,
        inputs: impl Iterator<Item = std::borrow::Cow<'a, EvaluationInput>> + Send,
        criteria: &[EvaluationCriteria],
    ) -> StatisticalReport {
        let mut per: BTreeMap<String, (Vec<f64>, usize, usize)> = BTreeMap::new();
        let mut overall = Vec::new();
        let mut failed_runs = 0;
        let mut runs = 0;
        for input in inputs {
            runs += 1;
            match self.inner.evaluate(&input, criteria).await {
                Ok(mut results) => {
                    if let Some(o) = aggregate(&mut results, criteria) {
                        overall.push(o);
                    }
                    for r in &results {
                        let e = per.entry(r.criterion_name.clone()).or_default();
                        match (r.error.is_some(), r.normalized_score) {
                            (true, _) => e.1 += 1,
                            (false, Some(n)) => e.0.push(n),
                            (false, None) => e.2 += 1,
                        }
                    }
                }
                Err(_) => failed_runs += 1,
            }
        }
        StatisticalReport {
            runs,
            criteria: per
                .into_iter()
                .map(|(k, (v, errors, not_normalized))| {
                    (
                        k,
                        CriterionStatistics {
                            summary: summarize(&v, self.pass_threshold),
                            errors,
                            not_normalized,
                        },
                    )
                })
                .collect(),
            overall: summarize(&overall, self.pass_threshold),
            failed_runs,
        }
    }

    /// Splits `input` into the samples and a base input without them, so that each sample's
    /// variant is the base plus one sample (memory linear in the input, not quadratic).
    fn split_samples(
        &self,
        input: &EvaluationInput,
    ) -> Result<(EvaluationInput, Vec<Value>), String> {
        let not_array = || format!("field '{}' must be an array of samples", self.samples_field);
        let mut base = input.clone();
        match take_field(&mut base, &self.samples_field) {
            Some(Value::Array(samples)) => Ok((base, samples)),
            Some(_) => Err(not_array()),
            // A root this cannot detach (messageHistory, toolCalls, prompt): read a copy.
            None => match input.field_value(&self.samples_field)? {
                Value::Array(samples) => Ok((base, samples)),
                _ => Err(not_array()),
            },
        }
    }
}

#[async_trait]
impl Evaluator for StatisticalEvaluator {
    fn evaluator_type(&self) -> &str {
        STATISTICAL
    }

    fn is_slow(&self) -> bool {
        self.inner.is_slow()
    }

    async fn evaluate(
        &self,
        input: &EvaluationInput,
        criteria: &[EvaluationCriteria],
    ) -> Result<Vec<EvaluationResult>, EvalError> {
        let (base, samples) = self
            .split_samples(input)
            .map_err(|m| EvalError::evaluator(STATISTICAL, m))?;
        let variants = samples
            .into_iter()
            .map(|s| std::borrow::Cow::Owned(sample_variant(&base, s)));
        let report = self.evaluate_each(variants, criteria).await;
        let mut out = Vec::new();
        for c in criteria {
            let Some(stats) = report.criteria.get(&c.name) else {
                continue;
            };
            let mut meta = Map::new();
            meta.insert("inner".into(), json!(self.inner.evaluator_type()));
            meta.insert("runs".into(), json!(report.runs));
            meta.insert("failedRuns".into(), json!(report.failed_runs));
            meta.insert("errors".into(), json!(stats.errors));
            meta.insert("notNormalized".into(), json!(stats.not_normalized));
            let result = match &stats.summary {
                Some(s) => {
                    meta.insert(
                        "summary".into(),
                        serde_json::to_value(s).unwrap_or(Value::Null),
                    );
                    EvaluationResult::new(
                        &c.name,
                        STATISTICAL,
                        score_on_scale(s.mean, &c.scale, self.pass_threshold),
                        format!(
                            "{} samples: mean {:.4}, std_dev {:.4}, median {:.4}, p5 {:.4}, p95 {:.4}, pass rate {:.4} (≥ {})",
                            s.count,
                            s.mean,
                            s.std_dev,
                            s.median,
                            s.p5,
                            s.p95,
                            s.pass_rate,
                            s.pass_threshold
                        ),
                    )
                }
                None => EvaluationResult::failed(
                    &c.name,
                    STATISTICAL,
                    "no sample produced a normalizable score",
                ),
            };
            out.push(result.with_metadata(meta));
        }
        Ok(out)
    }
}

/// Normalized score of `result` under `criterion` (helper for statistics).
pub fn normalized(result: &EvaluationResult, criterion: &EvaluationCriteria) -> Option<f64> {
    if result.error.is_some() {
        return None;
    }
    normalize_score(&result.score, &criterion.scale)
}
