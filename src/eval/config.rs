//! Run configuration: which evaluators run, on which criteria, and where results are stored.

use std::collections::HashSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::error::EvalError;
use super::evaluators::*;
use super::fields::check_path;
use super::storage::StorageConfig;
use super::types::{EvaluationCriteria, Evaluator};

/// One evaluator of a run, tagged by `type` (camelCase; the PRD's PascalCase names such as
/// `RuleBased` and `LLMJudge` are accepted as aliases).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum EvaluatorConfig {
    /// [`RuleBasedEvaluator`].
    #[serde(alias = "RuleBased")]
    RuleBased(RuleBasedConfig),
    /// [`LexicalSimilarityEvaluator`].
    #[serde(alias = "LexicalSimilarity")]
    LexicalSimilarity(LexicalSimilarityConfig),
    /// [`KeywordCoverageEvaluator`].
    #[serde(alias = "KeywordCoverage")]
    KeywordCoverage(KeywordCoverageConfig),
    /// [`SentimentEvaluator`].
    #[serde(alias = "Sentiment")]
    Sentiment(SentimentConfig),
    /// [`ToxicityEvaluator`].
    #[serde(alias = "Toxicity")]
    Toxicity(ToxicityConfig),
    /// [`ToolUsageEvaluator`].
    #[serde(alias = "ToolUsage")]
    ToolUsage(ToolUsageConfig),
    /// [`StatisticalEvaluator`].
    #[serde(alias = "Statistical")]
    Statistical(StatisticalConfig),
    /// [`TraceComparisonEvaluator`].
    #[serde(alias = "TraceComparison")]
    TraceComparison(TraceComparisonConfig),
    /// [`LlmJudgeEvaluator`] with an [`OpenAiCompatibleClient`] (feature `http`). Slow.
    #[serde(rename = "llmJudge", alias = "LLMJudge")]
    LlmJudge(LlmJudgeConfig),
    /// [`EmbeddingSimilarityEvaluator`] with an [`OpenAiCompatibleClient`] (feature `http`). Slow.
    #[serde(
        alias = "EmbeddingSimilarity",
        alias = "NLPAccuracy",
        alias = "nlpAccuracy"
    )]
    EmbeddingSimilarity(EmbeddingSimilarityConfig),
}

fn check_threshold(v: f64, path: String) -> Result<(), EvalError> {
    if v.is_finite() && (0.0..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(EvalError::config(
            path,
            format!("must be between 0 and 1, got {v}"),
        ))
    }
}

fn check_criterion(
    name: &str,
    path: String,
    known: Option<&HashSet<&str>>,
) -> Result<(), EvalError> {
    if name.trim().is_empty() {
        return Err(EvalError::config(path, "must not be empty"));
    }
    if let Some(k) = known
        && !k.contains(name)
    {
        return Err(EvalError::config(
            path,
            format!("criterion {name:?} is not defined in criteria"),
        ));
    }
    Ok(())
}

fn check_field(field: &str, path: String) -> Result<(), EvalError> {
    check_path(field).map_err(|m| EvalError::config(path, m))
}

impl EvaluatorConfig {
    /// The evaluator type (the `type` tag).
    pub fn type_name(&self) -> &'static str {
        match self {
            EvaluatorConfig::RuleBased(_) => RULE_BASED,
            EvaluatorConfig::LexicalSimilarity(_) => LEXICAL_SIMILARITY,
            EvaluatorConfig::KeywordCoverage(_) => KEYWORD_COVERAGE,
            EvaluatorConfig::Sentiment(_) => SENTIMENT,
            EvaluatorConfig::Toxicity(_) => TOXICITY,
            EvaluatorConfig::ToolUsage(_) => TOOL_USAGE,
            EvaluatorConfig::Statistical(_) => STATISTICAL,
            EvaluatorConfig::TraceComparison(_) => TRACE_COMPARISON,
            EvaluatorConfig::LlmJudge(_) => LLM_JUDGE,
            EvaluatorConfig::EmbeddingSimilarity(_) => EMBEDDING_SIMILARITY,
        }
    }

    /// True for evaluators that call a model over the network (`llmJudge`,
    /// `embeddingSimilarity`, and `statistical` wrapping one of them).
    pub fn is_slow(&self) -> bool {
        match self {
            EvaluatorConfig::LlmJudge(_) | EvaluatorConfig::EmbeddingSimilarity(_) => true,
            EvaluatorConfig::Statistical(s) => s.evaluator.is_slow(),
            _ => false,
        }
    }

    /// Validates this entry; `path` (e.g. `evaluatorConfigs[2]`) prefixes error locations.
    /// `known` are the run's criterion names, when the run defines them.
    pub fn validate(&self, path: &str, known: Option<&HashSet<&str>>) -> Result<(), EvalError> {
        let cn = |name: &str| check_criterion(name, format!("{path}.criterionName"), known);
        match self {
            EvaluatorConfig::RuleBased(c) => {
                if c.rules.is_empty() {
                    return Err(EvalError::config(
                        format!("{path}.rules"),
                        "must not be empty",
                    ));
                }
                for (i, r) in c.rules.iter().enumerate() {
                    let p = format!("{path}.rules[{i}]");
                    check_criterion(&r.criterion_name, format!("{p}.criterionName"), known)?;
                    validate_rule(r, &p)?;
                }
                Ok(())
            }
            EvaluatorConfig::LexicalSimilarity(c) => {
                cn(&c.criterion_name)?;
                check_field(&c.source_field, format!("{path}.sourceField"))?;
                check_field(&c.reference_field, format!("{path}.referenceField"))?;
                check_threshold(c.threshold, format!("{path}.threshold"))
            }
            EvaluatorConfig::KeywordCoverage(c) => {
                cn(&c.criterion_name)?;
                check_field(&c.source_text_field, format!("{path}.sourceTextField"))?;
                match (&c.expected_keywords, &c.keywords_source_field) {
                    (Some(k), _) if k.iter().all(|k| k.trim().is_empty()) => {
                        Err(EvalError::config(
                            format!("{path}.expectedKeywords"),
                            "must hold at least one keyword",
                        ))
                    }
                    (None, None) => Err(EvalError::config(
                        path.to_string(),
                        "set expectedKeywords or keywordsSourceField",
                    )),
                    (None, Some(f)) => check_field(f, format!("{path}.keywordsSourceField")),
                    _ => Ok(()),
                }?;
                check_threshold(c.threshold, format!("{path}.threshold"))
            }
            EvaluatorConfig::Sentiment(c) => {
                cn(&c.criterion_name)?;
                check_field(&c.source_text_field, format!("{path}.sourceTextField"))?;
                if c.negative_threshold >= c.positive_threshold {
                    return Err(EvalError::config(
                        format!("{path}.negativeThreshold"),
                        "must be less than positiveThreshold",
                    ));
                }
                Ok(())
            }
            EvaluatorConfig::Toxicity(c) => {
                cn(&c.criterion_name)?;
                check_field(&c.source_text_field, format!("{path}.sourceTextField"))?;
                if c.toxic_terms.iter().all(|t| t.trim().is_empty()) {
                    return Err(EvalError::config(
                        format!("{path}.toxicTerms"),
                        "must not be empty",
                    ));
                }
                Ok(())
            }
            EvaluatorConfig::ToolUsage(c) => {
                if c.rules.is_empty() {
                    return Err(EvalError::config(
                        format!("{path}.rules"),
                        "must not be empty",
                    ));
                }
                for (i, r) in c.rules.iter().enumerate() {
                    let p = format!("{path}.rules[{i}]");
                    check_criterion(&r.criterion_name, format!("{p}.criterionName"), known)?;
                    if r.expected_tool_name.trim().is_empty() {
                        return Err(EvalError::config(
                            format!("{p}.expectedToolName"),
                            "must not be empty",
                        ));
                    }
                    for (j, chk) in r.argument_checks.iter().enumerate() {
                        let cp = format!("{p}.argumentChecks[{j}]");
                        let needs_value = !matches!(chk.op, CheckOp::Exists | CheckOp::NotExists);
                        if needs_value && chk.value.is_none() {
                            return Err(EvalError::config(
                                format!("{cp}.value"),
                                "is required for this op",
                            ));
                        }
                        if chk.op == CheckOp::Matches {
                            let pat =
                                chk.value.as_ref().and_then(|v| v.as_str()).ok_or_else(|| {
                                    EvalError::config(
                                        format!("{cp}.value"),
                                        "matches needs a string pattern",
                                    )
                                })?;
                            regex::Regex::new(pat).map_err(|e| {
                                EvalError::config(
                                    format!("{cp}.value"),
                                    format!("invalid regex: {e}"),
                                )
                            })?;
                        }
                        if chk.op == CheckOp::OneOf
                            && !chk.value.as_ref().is_some_and(|v| v.is_array())
                        {
                            return Err(EvalError::config(
                                format!("{cp}.value"),
                                "oneOf needs an array",
                            ));
                        }
                    }
                }
                Ok(())
            }
            EvaluatorConfig::Statistical(c) => {
                check_threshold(c.pass_threshold, format!("{path}.passThreshold"))?;
                check_field(&c.samples_field, format!("{path}.samplesField"))?;
                c.evaluator.validate(&format!("{path}.evaluator"), known)
            }
            EvaluatorConfig::TraceComparison(c) => {
                cn(&c.criterion_name)?;
                check_threshold(c.pass_threshold, format!("{path}.passThreshold"))?;
                check_field(&c.reference_field, format!("{path}.referenceField"))?;
                check_field(&c.cost_field, format!("{path}.costField"))?;
                let w = &c.weights;
                for (name, v) in [
                    ("toolSequence", w.tool_sequence),
                    ("toolParameters", w.tool_parameters),
                    ("outputSimilarity", w.output_similarity),
                    ("costDeviation", w.cost_deviation),
                ] {
                    if !v.is_finite() || v < 0.0 {
                        return Err(EvalError::config(
                            format!("{path}.weights.{name}"),
                            "must be a finite number ≥ 0",
                        ));
                    }
                }
                Ok(())
            }
            EvaluatorConfig::LlmJudge(c) => {
                cn(&c.criterion_name)?;
                c.model.validate(&format!("{path}.model"))?;
                Self::require_http(path)
            }
            EvaluatorConfig::EmbeddingSimilarity(c) => {
                cn(&c.criterion_name)?;
                check_field(&c.source_field, format!("{path}.sourceField"))?;
                check_field(&c.reference_field, format!("{path}.referenceField"))?;
                check_threshold(c.threshold, format!("{path}.threshold"))?;
                c.model.validate(&format!("{path}.model"))?;
                Self::require_http(path)
            }
        }
    }

    #[cfg(feature = "http")]
    fn require_http(_path: &str) -> Result<(), EvalError> {
        Ok(())
    }

    #[cfg(not(feature = "http"))]
    fn require_http(path: &str) -> Result<(), EvalError> {
        Err(EvalError::config(
            path.to_string(),
            "model-backed evaluators need toolgate built with the `http` feature",
        ))
    }

    /// Instantiates the evaluator. Model-backed evaluators get an [`OpenAiCompatibleClient`]
    /// (API key from the environment).
    pub fn build(&self) -> Result<Arc<dyn Evaluator>, EvalError> {
        Ok(match self {
            EvaluatorConfig::RuleBased(c) => Arc::new(RuleBasedEvaluator::new(c.clone())),
            EvaluatorConfig::LexicalSimilarity(c) => {
                Arc::new(LexicalSimilarityEvaluator::new(c.clone()))
            }
            EvaluatorConfig::KeywordCoverage(c) => {
                Arc::new(KeywordCoverageEvaluator::new(c.clone()))
            }
            EvaluatorConfig::Sentiment(c) => Arc::new(SentimentEvaluator::new(c.clone())),
            EvaluatorConfig::Toxicity(c) => Arc::new(ToxicityEvaluator::new(c.clone())),
            EvaluatorConfig::ToolUsage(c) => Arc::new(ToolUsageEvaluator::new(c.clone())),
            EvaluatorConfig::Statistical(c) => Arc::new(
                StatisticalEvaluator::new(c.evaluator.build()?, c.pass_threshold)
                    .with_samples_field(c.samples_field.clone()),
            ),
            EvaluatorConfig::TraceComparison(c) => {
                Arc::new(TraceComparisonEvaluator::new(c.clone()))
            }
            #[cfg(feature = "http")]
            EvaluatorConfig::LlmJudge(c) => {
                let client = Arc::new(OpenAiCompatibleClient::from_settings(&c.model)?);
                let mut e = LlmJudgeEvaluator::new(c.criterion_name.clone(), client);
                if let Some(t) = &c.prompt_template {
                    e = e.with_template(t.clone());
                }
                if let Some(s) = &c.system_prompt {
                    e = e.with_system_prompt(s.clone());
                }
                Arc::new(e)
            }
            #[cfg(feature = "http")]
            EvaluatorConfig::EmbeddingSimilarity(c) => {
                let client = Arc::new(OpenAiCompatibleClient::from_settings(&c.model)?);
                Arc::new(EmbeddingSimilarityEvaluator::new(c.clone(), client))
            }
            #[cfg(not(feature = "http"))]
            EvaluatorConfig::LlmJudge(_) | EvaluatorConfig::EmbeddingSimilarity(_) => {
                return Err(EvalError::config(
                    self.type_name(),
                    "model-backed evaluators need toolgate built with the `http` feature",
                ));
            }
        })
    }
}

/// Configuration of an evaluation run (PRD: `EvaluationRunConfig`):
/// `{"criteria": [...], "evaluatorConfigs": [...], "storage": {...}}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EvaluationRunConfig {
    /// Default criteria; an input's own non-empty `criteria` replace them.
    #[serde(default)]
    pub criteria: Vec<EvaluationCriteria>,
    /// The evaluators to run.
    #[serde(default)]
    pub evaluator_configs: Vec<EvaluatorConfig>,
    /// Where to store results; `None` stores nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageConfig>,
}

/// Validates a criteria list: names non-empty and unique, weights finite and ≥ 0. `path`
/// prefixes error locations (e.g. `criteria`).
pub fn validate_criteria(criteria: &[EvaluationCriteria], path: &str) -> Result<(), EvalError> {
    let mut seen = HashSet::new();
    for (i, c) in criteria.iter().enumerate() {
        if c.name.trim().is_empty() {
            return Err(EvalError::config(
                format!("{path}[{i}].name"),
                "must not be empty",
            ));
        }
        if !seen.insert(c.name.as_str()) {
            return Err(EvalError::config(
                format!("{path}[{i}].name"),
                format!("duplicate criterion name {:?}", c.name),
            ));
        }
        if let Some(w) = c.weight
            && (!w.is_finite() || w < 0.0)
        {
            return Err(EvalError::config(
                format!("{path}[{i}].weight"),
                format!("must be a finite number ≥ 0, got {w}"),
            ));
        }
    }
    Ok(())
}

impl EvaluationRunConfig {
    /// Parses a config from JSON text.
    pub fn from_json(text: &str) -> Result<Self, EvalError> {
        crate::json::from_str_strict(text).map_err(|source| EvalError::Json {
            context: "evaluation run config".into(),
            source,
        })
    }

    /// Validates the configuration. Errors name the bad entry, e.g.
    /// `evaluatorConfigs[0].rules[1].config.pattern`. Checks: criteria (see
    /// [`validate_criteria`]); every evaluator entry (criterion names non-empty and — when the
    /// config defines criteria — defined there; field paths; regexes; thresholds in 0–1;
    /// weights ≥ 0; model URLs).
    pub fn validate(&self) -> Result<(), EvalError> {
        validate_criteria(&self.criteria, "criteria")?;
        let known: HashSet<&str> = self.criteria.iter().map(|c| c.name.as_str()).collect();
        let known = (!known.is_empty()).then_some(&known);
        for (i, e) in self.evaluator_configs.iter().enumerate() {
            e.validate(&format!("evaluatorConfigs[{i}]"), known)?;
        }
        Ok(())
    }

    /// Splits the evaluators into fast ones and slow ones (those calling a model: `llmJudge`,
    /// `embeddingSimilarity`, see [`EvaluatorConfig::is_slow`]). Each part keeps the criteria and
    /// storage; a part without evaluators is `None`.
    pub fn split_by_speed(&self) -> (Option<EvaluationRunConfig>, Option<EvaluationRunConfig>) {
        let (slow, fast): (Vec<_>, Vec<_>) = self
            .evaluator_configs
            .iter()
            .cloned()
            .partition(EvaluatorConfig::is_slow);
        let part = |evaluators: Vec<EvaluatorConfig>| {
            (!evaluators.is_empty()).then(|| EvaluationRunConfig {
                criteria: self.criteria.clone(),
                evaluator_configs: evaluators,
                storage: self.storage.clone(),
            })
        };
        (part(fast), part(slow))
    }
}
