//! The lexical suite: string similarity, keyword coverage and toxic-term detection.

use std::collections::HashMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::text::{contains_term, fold, normalize_whitespace};
use crate::eval::error::EvalError;
use crate::eval::normalize::{bool_on_scale, score_on_scale};
use crate::eval::types::{EvaluationCriteria, EvaluationInput, EvaluationResult, Evaluator, Score};

fn default_response() -> String {
    "response".into()
}
fn default_ground_truth() -> String {
    "groundTruth".into()
}
fn default_true() -> bool {
    true
}
fn default_threshold() -> f64 {
    0.8
}

/// Similarity algorithm of [`LexicalSimilarityEvaluator`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SimilarityAlgorithm {
    /// Sørensen–Dice coefficient on character bigrams (default; see [`sorensen_dice`]).
    #[default]
    #[serde(alias = "sorensenDice", alias = "dice")]
    SorensenDice,
    /// Jaro–Winkler similarity (prefix scale 0.1, as in `strsim`).
    #[serde(alias = "jaroWinkler")]
    JaroWinkler,
    /// `1 − levenshtein(a, b) / max(len a, len b)` over characters; 1 when both are empty.
    Levenshtein,
}

/// Configuration of [`LexicalSimilarityEvaluator`] (`"type": "lexicalSimilarity"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LexicalSimilarityConfig {
    /// Criterion this evaluator scores.
    pub criterion_name: String,
    /// Text to compare; default `response`.
    #[serde(default = "default_response")]
    pub source_field: String,
    /// Reference text; default `groundTruth`.
    #[serde(default = "default_ground_truth")]
    pub reference_field: String,
    /// Algorithm; default `sorensen-dice`.
    #[serde(default)]
    pub algorithm: SimilarityAlgorithm,
    /// Compare case-sensitively (default false: both texts are lower-cased).
    #[serde(default)]
    pub case_sensitive: bool,
    /// Trim and collapse whitespace runs to one space first (default true).
    #[serde(default = "default_true")]
    pub normalize_whitespace: bool,
    /// Binary/pass-fail criteria pass when similarity ≥ threshold (default 0.8).
    #[serde(default = "default_threshold")]
    pub threshold: f64,
}

/// Sørensen–Dice coefficient on character bigrams: `2·|A ∩ B| / (|A| + |B|)` where A and B are
/// the multisets of adjacent character pairs (whitespace included). Equal strings score 1
/// (also two empty strings); otherwise a string shorter than 2 characters scores 0.
///
/// Example: `night` {ni, ig, gh, ht} vs `nacht` {na, ac, ch, ht} share 1 → 2·1/8 = 0.25.
pub fn sorensen_dice(a: &str, b: &str) -> f64 {
    if a == b {
        return 1.0;
    }
    let bigrams = |s: &str| -> Vec<(char, char)> {
        let cs: Vec<char> = s.chars().collect();
        cs.windows(2).map(|w| (w[0], w[1])).collect()
    };
    let (ba, bb) = (bigrams(a), bigrams(b));
    if ba.is_empty() || bb.is_empty() {
        return 0.0;
    }
    let mut counts: HashMap<(char, char), usize> = HashMap::new();
    for g in &ba {
        *counts.entry(*g).or_default() += 1;
    }
    let mut common = 0usize;
    for g in &bb {
        if let Some(c) = counts.get_mut(g)
            && *c > 0
        {
            *c -= 1;
            common += 1;
        }
    }
    2.0 * common as f64 / (ba.len() + bb.len()) as f64
}

/// `1 − distance / max length` (characters); 1 when both strings are empty.
pub fn levenshtein_similarity(a: &str, b: &str) -> f64 {
    let max = a.chars().count().max(b.chars().count());
    if max == 0 {
        return 1.0;
    }
    1.0 - strsim::levenshtein(a, b) as f64 / max as f64
}

/// Computes a similarity in 0–1 with `algorithm`.
pub fn similarity(algorithm: SimilarityAlgorithm, a: &str, b: &str) -> f64 {
    match algorithm {
        SimilarityAlgorithm::SorensenDice => sorensen_dice(a, b),
        SimilarityAlgorithm::JaroWinkler => strsim::jaro_winkler(a, b),
        SimilarityAlgorithm::Levenshtein => levenshtein_similarity(a, b),
    }
}

fn criterion<'a>(criteria: &'a [EvaluationCriteria], name: &str) -> Option<&'a EvaluationCriteria> {
    criteria.iter().find(|c| c.name == name)
}

/// Measures how close a text is to a reference (PRD FR2.5).
///
/// Both texts are prepared (whitespace normalization, case folding) and compared with the
/// configured algorithm. Score: the similarity on numeric/custom scales, `similarity ≥
/// threshold` on binary/pass-fail, `1 + 4·similarity` on likert5 (see
/// [`score_on_scale`]). A missing or non-string field gives a result with `error`.
/// `metadata`: `similarity`, `algorithm`.
#[derive(Debug, Clone)]
pub struct LexicalSimilarityEvaluator {
    config: LexicalSimilarityConfig,
}

impl LexicalSimilarityEvaluator {
    /// Builds the evaluator.
    pub fn new(config: LexicalSimilarityConfig) -> Self {
        LexicalSimilarityEvaluator { config }
    }

    fn prepare(&self, s: &str) -> String {
        let s = if self.config.normalize_whitespace {
            normalize_whitespace(s)
        } else {
            s.to_string()
        };
        fold(&s, self.config.case_sensitive)
    }
}

/// Evaluator type of [`LexicalSimilarityEvaluator`].
pub const LEXICAL_SIMILARITY: &str = "lexicalSimilarity";

#[async_trait]
impl Evaluator for LexicalSimilarityEvaluator {
    fn evaluator_type(&self) -> &str {
        LEXICAL_SIMILARITY
    }

    async fn evaluate(
        &self,
        input: &EvaluationInput,
        criteria: &[EvaluationCriteria],
    ) -> Result<Vec<EvaluationResult>, EvalError> {
        let c = &self.config;
        let Some(crit) = criterion(criteria, &c.criterion_name) else {
            return Ok(vec![]);
        };
        let texts = input
            .field_text(&c.source_field)
            .and_then(|a| input.field_text(&c.reference_field).map(|b| (a, b)));
        let (a, b) = match texts {
            Ok(t) => t,
            Err(e) => {
                return Ok(vec![EvaluationResult::failed(
                    &c.criterion_name,
                    LEXICAL_SIMILARITY,
                    e,
                )]);
            }
        };
        let sim = similarity(c.algorithm, &self.prepare(&a), &self.prepare(&b));
        let alg = serde_json::to_value(c.algorithm).unwrap_or(Value::Null);
        let mut meta = Map::new();
        meta.insert("similarity".into(), json!(sim));
        meta.insert("algorithm".into(), alg.clone());
        Ok(vec![
            EvaluationResult::new(
                &c.criterion_name,
                LEXICAL_SIMILARITY,
                score_on_scale(sim, &crit.scale, c.threshold),
                format!(
                    "{} similarity between {} and {}: {sim:.4}",
                    alg.as_str().unwrap_or("?"),
                    c.source_field,
                    c.reference_field
                ),
            )
            .with_metadata(meta),
        ])
    }
}

/// Configuration of [`KeywordCoverageEvaluator`] (`"type": "keywordCoverage"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeywordCoverageConfig {
    /// Criterion this evaluator scores.
    pub criterion_name: String,
    /// Keywords (literal text). Either this or `keywordsSourceField`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_keywords: Option<Vec<String>>,
    /// Field holding the keywords (`groundTruth`, `context.keywords`, …): an array of strings,
    /// or a string split on commas (each part trimmed, empty parts dropped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keywords_source_field: Option<String>,
    /// Text searched; default `response` (alias `sourceField`).
    #[serde(default = "default_response", alias = "sourceField")]
    pub source_text_field: String,
    /// Default false.
    #[serde(default)]
    pub case_sensitive: bool,
    /// Match whole words only (default false); a keyword counts only when the characters around it are not letters, digits or `_`.
    #[serde(default)]
    pub match_whole_word: bool,
    /// Normalize whitespace in text and keywords first (default true).
    #[serde(default = "default_true")]
    pub normalize_whitespace: bool,
    /// Binary/pass-fail criteria pass when coverage ≥ threshold (default 0.8).
    #[serde(default = "default_threshold")]
    pub threshold: f64,
}

/// Fraction of expected keywords found in a text (PRD FR2.5).
///
/// Coverage = found / total, where keywords are literal text (`c++` is `c++`), duplicates
/// counted once. Score on the criterion's scale via [`score_on_scale`] (threshold for
/// binary/pass-fail). No keywords, or a missing keyword/text field, gives a result with
/// `error`. `metadata`: `coverage`, `found`, `missing`, `total`.
#[derive(Debug, Clone)]
pub struct KeywordCoverageEvaluator {
    config: KeywordCoverageConfig,
}

impl KeywordCoverageEvaluator {
    /// Builds the evaluator.
    pub fn new(config: KeywordCoverageConfig) -> Self {
        KeywordCoverageEvaluator { config }
    }

    fn keywords(&self, input: &EvaluationInput) -> Result<Vec<String>, String> {
        let mut kws: Vec<String> = match (
            &self.config.expected_keywords,
            &self.config.keywords_source_field,
        ) {
            (Some(k), _) => k.clone(),
            (None, Some(field)) => match input.field_value(field)? {
                Value::Array(a) => a
                    .iter()
                    .map(|v| {
                        v.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| format!("field '{field}' must hold strings, found {v}"))
                    })
                    .collect::<Result<_, _>>()?,
                Value::String(s) => s.split(',').map(str::to_string).collect(),
                other => {
                    return Err(format!(
                        "field '{field}' must be an array of strings or a comma-separated string (found {})",
                        crate::eval::fields::type_name(&other)
                    ));
                }
            },
            (None, None) => {
                return Err("no keywords: set expectedKeywords or keywordsSourceField".into());
            }
        };
        for k in kws.iter_mut() {
            *k = if self.config.normalize_whitespace {
                normalize_whitespace(k)
            } else {
                k.trim().to_string()
            };
        }
        kws.retain(|k| !k.is_empty());
        let mut seen = std::collections::HashSet::new();
        kws.retain(|k| seen.insert(fold(k, self.config.case_sensitive)));
        if kws.is_empty() {
            return Err("the keyword list is empty".into());
        }
        Ok(kws)
    }
}

/// Evaluator type of [`KeywordCoverageEvaluator`].
pub const KEYWORD_COVERAGE: &str = "keywordCoverage";

#[async_trait]
impl Evaluator for KeywordCoverageEvaluator {
    fn evaluator_type(&self) -> &str {
        KEYWORD_COVERAGE
    }

    async fn evaluate(
        &self,
        input: &EvaluationInput,
        criteria: &[EvaluationCriteria],
    ) -> Result<Vec<EvaluationResult>, EvalError> {
        let c = &self.config;
        let Some(crit) = criterion(criteria, &c.criterion_name) else {
            return Ok(vec![]);
        };
        let prepared = self
            .keywords(input)
            .and_then(|k| input.field_text(&c.source_text_field).map(|t| (k, t)));
        let (kws, text) = match prepared {
            Ok(v) => v,
            Err(e) => {
                return Ok(vec![EvaluationResult::failed(
                    &c.criterion_name,
                    KEYWORD_COVERAGE,
                    e,
                )]);
            }
        };
        let text = if c.normalize_whitespace {
            normalize_whitespace(&text)
        } else {
            text
        };
        let hay = fold(&text, c.case_sensitive);
        let (found, missing): (Vec<String>, Vec<String>) = kws
            .into_iter()
            .partition(|k| contains_term(&hay, &fold(k, c.case_sensitive), c.match_whole_word));
        let total = found.len() + missing.len();
        let coverage = found.len() as f64 / total as f64;
        let mut meta = Map::new();
        meta.insert("coverage".into(), json!(coverage));
        meta.insert("found".into(), json!(found));
        meta.insert("missing".into(), json!(missing));
        meta.insert("total".into(), json!(total));
        Ok(vec![
            EvaluationResult::new(
                &c.criterion_name,
                KEYWORD_COVERAGE,
                score_on_scale(coverage, &crit.scale, c.threshold),
                format!(
                    "{} of {total} keywords found ({coverage:.4}); missing: {missing:?}",
                    found.len()
                ),
            )
            .with_metadata(meta),
        ])
    }
}

/// Configuration of [`ToxicityEvaluator`] (`"type": "toxicity"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToxicityConfig {
    /// Criterion this evaluator scores.
    pub criterion_name: String,
    /// Terms that make a text toxic (literal text).
    pub toxic_terms: Vec<String>,
    /// Text searched; default `response` (alias `sourceField`).
    #[serde(default = "default_response", alias = "sourceField")]
    pub source_text_field: String,
    /// Default false.
    #[serde(default)]
    pub case_sensitive: bool,
    /// Match whole words only (default true, so `scrap` does not match `crap`).
    #[serde(default = "default_true")]
    pub match_whole_word: bool,
}

/// Flags texts containing any of a list of terms (PRD FR2.5).
///
/// Score: `true` when **no** term is found (not toxic), `false` otherwise, on binary,
/// pass/fail and custom scales; 1.0/0.0 on numeric; 5/1 on likert5 ([`bool_on_scale`]).
/// `metadata`: `foundTerms`, `toxic`.
#[derive(Debug, Clone)]
pub struct ToxicityEvaluator {
    config: ToxicityConfig,
}

impl ToxicityEvaluator {
    /// Builds the evaluator.
    pub fn new(config: ToxicityConfig) -> Self {
        ToxicityEvaluator { config }
    }
}

/// Evaluator type of [`ToxicityEvaluator`].
pub const TOXICITY: &str = "toxicity";

#[async_trait]
impl Evaluator for ToxicityEvaluator {
    fn evaluator_type(&self) -> &str {
        TOXICITY
    }

    async fn evaluate(
        &self,
        input: &EvaluationInput,
        criteria: &[EvaluationCriteria],
    ) -> Result<Vec<EvaluationResult>, EvalError> {
        let c = &self.config;
        let Some(crit) = criterion(criteria, &c.criterion_name) else {
            return Ok(vec![]);
        };
        let text = match input.field_text(&c.source_text_field) {
            Ok(t) => t,
            Err(e) => {
                return Ok(vec![EvaluationResult::failed(
                    &c.criterion_name,
                    TOXICITY,
                    e,
                )]);
            }
        };
        let hay = fold(&text, c.case_sensitive);
        let found: Vec<&String> = c
            .toxic_terms
            .iter()
            .filter(|t| contains_term(&hay, &fold(t.trim(), c.case_sensitive), c.match_whole_word))
            .collect();
        let toxic = !found.is_empty();
        let mut meta = Map::new();
        meta.insert("foundTerms".into(), json!(found));
        meta.insert("toxic".into(), json!(toxic));
        let score: Score = bool_on_scale(!toxic, &crit.scale);
        Ok(vec![
            EvaluationResult::new(
                &c.criterion_name,
                TOXICITY,
                score,
                if toxic {
                    format!("toxic terms found: {found:?}")
                } else {
                    "no toxic terms found".to_string()
                },
            )
            .with_metadata(meta),
        ])
    }
}
