//! Model-backed evaluators: [`LlmJudgeEvaluator`] (PRD FR2.2) and
//! [`EmbeddingSimilarityEvaluator`] (PRD FR2.3), behind the [`JudgeModel`] and [`Embedder`]
//! traits, with an OpenAI-compatible HTTP client ([`OpenAiCompatibleClient`], feature `http`).
//!
//! These evaluators are *slow* (a network call each): see
//! [`EvaluationRunConfig::split_by_speed`](crate::eval::EvaluationRunConfig::split_by_speed).

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::eval::error::EvalError;
use crate::eval::fields::render_template;
use crate::eval::normalize::{normalize_score, score_on_scale};
use crate::eval::types::{EvaluationCriteria, EvaluationInput, EvaluationResult, Evaluator, Score};

/// A chat model that answers a judge prompt with text.
#[async_trait]
pub trait JudgeModel: Send + Sync {
    /// Name of the model (recorded in result metadata).
    fn model_name(&self) -> &str;

    /// Sends a system prompt and a user prompt; returns the model's reply text.
    async fn complete(&self, system: &str, prompt: &str) -> Result<String, EvalError>;
}

/// An embedding model.
#[async_trait]
pub trait Embedder: Send + Sync {
    /// Name of the model (recorded in result metadata).
    fn model_name(&self) -> &str;

    /// Embeds each text; returns one vector per text, in order.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f64>>, EvalError>;
}

fn default_api_key_env() -> String {
    "OPENAI_API_KEY".into()
}
fn default_timeout_ms() -> u64 {
    30_000
}
fn default_retries() -> u32 {
    2
}
fn default_backoff_ms() -> u64 {
    250
}
fn default_deadline_ms() -> u64 {
    120_000
}

/// Largest `retries` a model endpoint accepts.
pub const MAX_RETRIES: u32 = 10;
/// Smallest `retryBackoffMs` (the client waits at least this long before a retry).
pub const MIN_RETRY_BACKOFF_MS: u64 = 10;
/// Largest `retryBackoffMs`, `timeoutMs` and `deadlineMs` (one hour).
pub const MAX_MODEL_WAIT_MS: u64 = 3_600_000;

/// Settings of an OpenAI-compatible endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelSettings {
    /// Base URL including the version prefix, e.g. `https://api.openai.com/v1` or
    /// `http://127.0.0.1:8080/v1`; `/chat/completions` and `/embeddings` are appended.
    pub base_url: String,
    /// Model name sent in requests.
    pub model: String,
    /// Environment variable holding the API key (default `OPENAI_API_KEY`). When the variable
    /// is unset or empty, requests are sent without `Authorization` (local servers).
    #[serde(default = "default_api_key_env")]
    pub api_key_env: String,
    /// Timeout of each HTTP attempt in milliseconds (default 30000).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Retries after a failed attempt (connection error, timeout, HTTP 429 or 5xx); default 2,
    /// at most [`MAX_RETRIES`].
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// Delay before retry n is n × this many milliseconds (default 250, at least
    /// [`MIN_RETRY_BACKOFF_MS`]).
    #[serde(default = "default_backoff_ms")]
    pub retry_backoff_ms: u64,
    /// Overall deadline of one request, all attempts and backoffs included, in milliseconds
    /// (default 120000).
    #[serde(default = "default_deadline_ms")]
    pub deadline_ms: u64,
    /// Sampling temperature for the judge (omitted from requests when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
}

impl ModelSettings {
    /// Settings for `base_url` and `model` with the defaults.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        ModelSettings {
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: default_api_key_env(),
            timeout_ms: default_timeout_ms(),
            retries: default_retries(),
            retry_backoff_ms: default_backoff_ms(),
            deadline_ms: default_deadline_ms(),
            temperature: None,
        }
    }

    pub(crate) fn validate(&self, path: &str) -> Result<(), EvalError> {
        if !(self.base_url.starts_with("http://") || self.base_url.starts_with("https://")) {
            return Err(EvalError::config(
                format!("{path}.baseUrl"),
                format!("must be an http(s) URL, got {:?}", self.base_url),
            ));
        }
        if self.model.trim().is_empty() {
            return Err(EvalError::config(
                format!("{path}.model"),
                "must not be empty",
            ));
        }
        let in_range = |field: &str, value: u64, min: u64, max: u64| {
            if (min..=max).contains(&value) {
                Ok(())
            } else {
                Err(EvalError::config(
                    format!("{path}.{field}"),
                    format!("must be from {min} to {max}, got {value}"),
                ))
            }
        };
        in_range("timeoutMs", self.timeout_ms, 1, MAX_MODEL_WAIT_MS)?;
        in_range(
            "retries",
            u64::from(self.retries),
            0,
            u64::from(MAX_RETRIES),
        )?;
        in_range(
            "retryBackoffMs",
            self.retry_backoff_ms,
            MIN_RETRY_BACKOFF_MS,
            MAX_MODEL_WAIT_MS,
        )?;
        in_range("deadlineMs", self.deadline_ms, 1, MAX_MODEL_WAIT_MS)?;
        Ok(())
    }
}

/// The default judge prompt. Placeholders: see [`render_template`].
pub const DEFAULT_JUDGE_TEMPLATE: &str = "Evaluate the response below against one criterion.\n\n\
Criterion: {{criterion.name}}\nDescription: {{criterion.description}}\nScale: {{criterion.scale}}\n\n\
Prompt:\n{{prompt}}\n\nResponse:\n{{response}}\n\nReference answer (may be empty):\n{{groundTruth}}\n\n\
Reply with only a JSON object: {\"score\": <score on the scale>, \"reasoning\": \"<one or two sentences>\"}.";

/// The default system prompt of the judge.
pub const DEFAULT_JUDGE_SYSTEM: &str = "You are a strict, impartial evaluator of AI agent outputs. \
Scales: binary = true/false; pass/fail = \"pass\"/\"fail\"; likert5 = an integer 1-5; numeric = a number from 0 to 1. \
Answer with JSON only.";

/// Configuration of [`LlmJudgeEvaluator`] (`"type": "llmJudge"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LlmJudgeConfig {
    /// Criterion judged.
    pub criterion_name: String,
    /// Prompt template (default [`DEFAULT_JUDGE_TEMPLATE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_template: Option<String>,
    /// System prompt (default [`DEFAULT_JUDGE_SYSTEM`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// The model endpoint.
    pub model: ModelSettings,
}

/// Extracts `{"score": …, "reasoning": …}` from a judge reply: the whole reply as JSON, or else
/// the text from the first `{` to the last `}` (so code fences and prose around the object are
/// tolerated).
pub fn parse_judge_reply(reply: &str) -> Result<(Score, Option<String>), String> {
    let obj: Value = serde_json::from_str(reply.trim())
        .ok()
        .filter(Value::is_object)
        .or_else(|| {
            let start = reply.find('{')?;
            let end = reply.rfind('}')?;
            (start < end)
                .then(|| serde_json::from_str(&reply[start..=end]).ok())
                .flatten()
        })
        .ok_or_else(|| {
            format!(
                "judge reply is not a JSON object: {:?}",
                truncate(reply, 200)
            )
        })?;
    let score = match obj.get("score") {
        Some(Value::Bool(b)) => Score::Bool(*b),
        Some(Value::Number(n)) => Score::Number(n.as_f64().unwrap_or(f64::NAN)),
        Some(Value::String(s)) => Score::Text(s.clone()),
        _ => return Err("judge reply has no usable \"score\"".into()),
    };
    let reasoning = obj
        .get("reasoning")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok((score, reasoning))
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Asks a model to judge one criterion (PRD FR2.2).
///
/// The prompt is [`render_template`]d with the input and the criterion, sent with the system
/// prompt, and the reply parsed with [`parse_judge_reply`]. The score must normalize on the
/// criterion's scale ([`normalize_score`]); otherwise, or when the model call fails, the result
/// has `error`. `metadata`: `model`, `missingPlaceholders` (if any).
#[derive(Clone)]
pub struct LlmJudgeEvaluator {
    criterion_name: String,
    template: String,
    system: String,
    model: Arc<dyn JudgeModel>,
}

impl std::fmt::Debug for LlmJudgeEvaluator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmJudgeEvaluator")
            .field("criterion_name", &self.criterion_name)
            .field("model", &self.model.model_name())
            .finish()
    }
}

/// Evaluator type of [`LlmJudgeEvaluator`].
pub const LLM_JUDGE: &str = "llmJudge";

impl LlmJudgeEvaluator {
    /// A judge for `criterion_name` with the default prompts.
    pub fn new(criterion_name: impl Into<String>, model: Arc<dyn JudgeModel>) -> Self {
        LlmJudgeEvaluator {
            criterion_name: criterion_name.into(),
            template: DEFAULT_JUDGE_TEMPLATE.into(),
            system: DEFAULT_JUDGE_SYSTEM.into(),
            model,
        }
    }

    /// Sets the prompt template.
    pub fn with_template(mut self, template: impl Into<String>) -> Self {
        self.template = template.into();
        self
    }

    /// Sets the system prompt.
    pub fn with_system_prompt(mut self, system: impl Into<String>) -> Self {
        self.system = system.into();
        self
    }
}

#[async_trait]
impl Evaluator for LlmJudgeEvaluator {
    fn evaluator_type(&self) -> &str {
        LLM_JUDGE
    }

    fn is_slow(&self) -> bool {
        true
    }

    async fn evaluate(
        &self,
        input: &EvaluationInput,
        criteria: &[EvaluationCriteria],
    ) -> Result<Vec<EvaluationResult>, EvalError> {
        let Some(crit) = criteria.iter().find(|c| c.name == self.criterion_name) else {
            return Ok(vec![]);
        };
        let (prompt, missing) = render_template(&self.template, input, Some(crit));
        let mut meta = Map::new();
        meta.insert("model".into(), json!(self.model.model_name()));
        if !missing.is_empty() {
            meta.insert("missingPlaceholders".into(), json!(missing));
        }
        let reply = match self.model.complete(&self.system, &prompt).await {
            Ok(r) => r,
            Err(e) => {
                return Ok(vec![
                    EvaluationResult::failed(&crit.name, LLM_JUDGE, e.to_string())
                        .with_metadata(meta),
                ]);
            }
        };
        let result = match parse_judge_reply(&reply) {
            Ok((score, reasoning)) => {
                if normalize_score(&score, &crit.scale).is_none() {
                    let mut r = EvaluationResult::failed(
                        &crit.name,
                        LLM_JUDGE,
                        format!(
                            "judge returned score {score} which is not on the {} scale",
                            crit.scale
                        ),
                    );
                    r.score = score;
                    r
                } else {
                    EvaluationResult {
                        reasoning: reasoning.or_else(|| Some("(no reasoning given)".into())),
                        ..EvaluationResult::new(&crit.name, LLM_JUDGE, score, "")
                    }
                }
            }
            Err(e) => EvaluationResult::failed(&crit.name, LLM_JUDGE, e),
        };
        Ok(vec![result.with_metadata(meta)])
    }
}

fn default_response() -> String {
    "response".into()
}
fn default_ground_truth() -> String {
    "groundTruth".into()
}
fn default_threshold() -> f64 {
    0.8
}

/// Configuration of [`EmbeddingSimilarityEvaluator`] (`"type": "embeddingSimilarity"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EmbeddingSimilarityConfig {
    /// Criterion scored.
    pub criterion_name: String,
    /// Text embedded; default `response`.
    #[serde(default = "default_response")]
    pub source_field: String,
    /// Reference text; default `groundTruth`.
    #[serde(default = "default_ground_truth")]
    pub reference_field: String,
    /// Binary/pass-fail criteria pass when cosine ≥ threshold (default 0.8).
    #[serde(default = "default_threshold")]
    pub threshold: f64,
    /// The embedding endpoint.
    pub model: ModelSettings,
}

/// Cosine similarity of two vectors; `None` when lengths differ or a vector has norm 0.
pub fn cosine_similarity(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() != b.len() || a.is_empty() {
        return None;
    }
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    (na > 0.0 && nb > 0.0).then(|| dot / (na * nb))
}

/// Semantic similarity of a text and a reference by embedding cosine (PRD FR2.3).
///
/// Score: cosine clamped to 0–1 on numeric/custom scales, `cosine ≥ threshold` on
/// binary/pass-fail, `1 + 4·cosine` on likert5 ([`score_on_scale`]). `metadata`: `cosine`
/// (unclamped), `model`. Missing fields, model errors and unusable vectors give `error`.
#[derive(Clone)]
pub struct EmbeddingSimilarityEvaluator {
    config: EmbeddingSimilarityConfig,
    embedder: Arc<dyn Embedder>,
}

impl std::fmt::Debug for EmbeddingSimilarityEvaluator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddingSimilarityEvaluator")
            .field("criterion_name", &self.config.criterion_name)
            .field("model", &self.embedder.model_name())
            .finish()
    }
}

/// Evaluator type of [`EmbeddingSimilarityEvaluator`].
pub const EMBEDDING_SIMILARITY: &str = "embeddingSimilarity";

impl EmbeddingSimilarityEvaluator {
    /// Builds the evaluator; `config.model` is only informative here, `embedder` is used.
    pub fn new(config: EmbeddingSimilarityConfig, embedder: Arc<dyn Embedder>) -> Self {
        EmbeddingSimilarityEvaluator { config, embedder }
    }
}

#[async_trait]
impl Evaluator for EmbeddingSimilarityEvaluator {
    fn evaluator_type(&self) -> &str {
        EMBEDDING_SIMILARITY
    }

    fn is_slow(&self) -> bool {
        true
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
        let fail = |e: String| {
            Ok(vec![EvaluationResult::failed(
                &c.criterion_name,
                EMBEDDING_SIMILARITY,
                e,
            )])
        };
        let texts = match input
            .field_text(&c.source_field)
            .and_then(|a| input.field_text(&c.reference_field).map(|b| vec![a, b]))
        {
            Ok(t) => t,
            Err(e) => return fail(e),
        };
        let vectors = match self.embedder.embed(&texts).await {
            Ok(v) => v,
            Err(e) => return fail(e.to_string()),
        };
        let cos = match vectors.as_slice() {
            [a, b] => cosine_similarity(a, b),
            _ => None,
        };
        let Some(cos) = cos else {
            return fail(format!(
                "embedding model returned unusable vectors ({} vectors)",
                vectors.len()
            ));
        };
        let mut meta = Map::new();
        meta.insert("cosine".into(), json!(cos));
        meta.insert("model".into(), json!(self.embedder.model_name()));
        Ok(vec![
            EvaluationResult::new(
                &c.criterion_name,
                EMBEDDING_SIMILARITY,
                score_on_scale(cos, &crit.scale, c.threshold),
                format!("cosine similarity {cos:.4} (threshold {})", c.threshold),
            )
            .with_metadata(meta),
        ])
    }
}

#[cfg(feature = "http")]
pub use http_client::OpenAiCompatibleClient;

#[cfg(feature = "http")]
mod http_client;
