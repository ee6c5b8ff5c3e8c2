//! Sentiment of a text with the AFINN-165 lexicon (PRD FR2.5).
//!
//! The lexicon (3,382 English words and phrases rated −5…+5 by Finn Årup Nielsen) ships with
//! toolgate in `src/eval/data/afinn-165.txt`; its licence notice is
//! `src/eval/data/AFINN-165-LICENSE.txt` (MIT).

use std::collections::HashMap;
use std::sync::OnceLock;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, json};

use crate::eval::error::EvalError;
use crate::eval::types::{EvaluationCriteria, EvaluationInput, EvaluationResult, Evaluator, Score};

const AFINN_165: &str = include_str!("../data/afinn-165.txt");

/// Longest phrase in the lexicon, in tokens.
const MAX_PHRASE: usize = 3;

/// Words that flip the sign of the next scored word.
pub const NEGATORS: &[&str] = &[
    "not",
    "no",
    "never",
    "none",
    "nobody",
    "nothing",
    "neither",
    "nor",
    "without",
    "cannot",
    "can't",
    "cant",
    "don't",
    "dont",
    "doesn't",
    "doesnt",
    "didn't",
    "didnt",
    "isn't",
    "isnt",
    "aren't",
    "arent",
    "wasn't",
    "wasnt",
    "weren't",
    "werent",
    "won't",
    "wont",
    "wouldn't",
    "wouldnt",
    "shouldn't",
    "shouldnt",
    "couldn't",
    "couldnt",
    "hasn't",
    "hasnt",
    "haven't",
    "havent",
    "hadn't",
    "hadnt",
    "ain't",
    "aint",
];

/// The AFINN-165 lexicon: word or phrase → valence (−5…+5).
pub fn afinn_lexicon() -> &'static HashMap<String, i32> {
    static LEXICON: OnceLock<HashMap<String, i32>> = OnceLock::new();
    LEXICON.get_or_init(|| {
        AFINN_165
            .lines()
            .filter_map(|line| {
                let (word, score) = line.split_once('\t')?;
                Some((word.to_string(), score.trim().parse().ok()?))
            })
            .collect()
    })
}

/// Splits text into lower-case tokens: letters, digits, `'` and `-` are kept (curly
/// apostrophes become `'`), every other character separates tokens.
pub fn tokenize(text: &str) -> Vec<String> {
    let cleaned: String = text
        .to_lowercase()
        .chars()
        .map(|c| match c {
            '\u{2019}' | '\u{2018}' => '\'',
            c if c.is_alphanumeric() || c == '\'' || c == '-' => c,
            _ => ' ',
        })
        .collect();
    cleaned
        .split_whitespace()
        .map(|t| t.trim_matches(|c| c == '\'' || c == '-').to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

/// Result of [`analyze`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SentimentAnalysis {
    /// Sum of the valences of the matched words/phrases (after negation).
    pub raw_score: i32,
    /// `raw_score / number of tokens` (0 for a text without tokens).
    pub comparative: f64,
    /// `clamp((comparative + 5) / 10, 0, 1)`.
    pub comparative_normalized: f64,
    /// Number of tokens.
    pub tokens: usize,
    /// Words/phrases that contributed positively.
    pub positive: Vec<String>,
    /// Words/phrases that contributed negatively.
    pub negative: Vec<String>,
}

/// Scores a text with AFINN-165.
///
/// Tokens ([`tokenize`]) are scanned left to right; at each position the longest lexicon
/// phrase of up to 3 tokens wins (`not good` is −2 as a phrase). A single word right after a
/// negator ([`NEGATORS`]) has its valence negated (`not happy` = −3). Unknown tokens score 0.
pub fn analyze(text: &str) -> SentimentAnalysis {
    let lex = afinn_lexicon();
    let tokens = tokenize(text);
    let mut raw = 0i32;
    let (mut positive, mut negative) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < tokens.len() {
        let mut matched = None;
        for len in (1..=MAX_PHRASE.min(tokens.len() - i)).rev() {
            let phrase = tokens[i..i + len].join(" ");
            if let Some(v) = lex.get(&phrase) {
                matched = Some((phrase, *v, len));
                break;
            }
        }
        match matched {
            Some((phrase, mut v, len)) => {
                let mut label = phrase;
                if len == 1 && i > 0 && NEGATORS.contains(&tokens[i - 1].as_str()) {
                    v = -v;
                    label = format!("{} {label}", tokens[i - 1]);
                }
                raw += v;
                if v > 0 {
                    positive.push(label);
                } else if v < 0 {
                    negative.push(label);
                }
                i += len;
            }
            None => i += 1,
        }
    }
    let comparative = if tokens.is_empty() {
        0.0
    } else {
        f64::from(raw) / tokens.len() as f64
    };
    SentimentAnalysis {
        raw_score: raw,
        comparative,
        comparative_normalized: ((comparative + 5.0) / 10.0).clamp(0.0, 1.0),
        tokens: tokens.len(),
        positive,
        negative,
    }
}

/// What [`SentimentEvaluator`] reports as the score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SentimentOutput {
    /// `comparativeNormalized` (0–1, 0.5 neutral); default. Normalizes on numeric scales.
    #[default]
    ComparativeNormalized,
    /// The raw AFINN sum (an integer, possibly negative).
    RawScore,
    /// `"positive"`, `"negative"` or `"neutral"` by the thresholds on `comparative`.
    Category,
}

fn default_response() -> String {
    "response".into()
}
fn default_pos() -> f64 {
    0.2
}
fn default_neg() -> f64 {
    -0.2
}

/// Configuration of [`SentimentEvaluator`] (`"type": "sentiment"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SentimentConfig {
    /// Criterion this evaluator scores.
    pub criterion_name: String,
    /// Text analysed; default `response` (alias `sourceField`).
    #[serde(default = "default_response", alias = "sourceField")]
    pub source_text_field: String,
    /// Score reported; default `comparativeNormalized`.
    #[serde(default)]
    pub output_type: SentimentOutput,
    /// `comparative` above this is positive (default 0.2).
    #[serde(default = "default_pos")]
    pub positive_threshold: f64,
    /// `comparative` below this is negative (default −0.2).
    #[serde(default = "default_neg")]
    pub negative_threshold: f64,
}

/// Evaluates the tone of a text with [`analyze`]. The score is chosen by `outputType`
/// ([`SentimentOutput`]); `metadata` always holds `rawScore`, `comparative`,
/// `comparativeNormalized`, `category`, `positive`, `negative`. A missing or non-string field
/// gives a result with `error`.
#[derive(Debug, Clone)]
pub struct SentimentEvaluator {
    config: SentimentConfig,
}

impl SentimentEvaluator {
    /// Builds the evaluator.
    pub fn new(config: SentimentConfig) -> Self {
        SentimentEvaluator { config }
    }

    /// The category of a comparative score under this evaluator's thresholds.
    pub fn category(&self, comparative: f64) -> &'static str {
        if comparative > self.config.positive_threshold {
            "positive"
        } else if comparative < self.config.negative_threshold {
            "negative"
        } else {
            "neutral"
        }
    }
}

/// Evaluator type of [`SentimentEvaluator`].
pub const SENTIMENT: &str = "sentiment";

#[async_trait]
impl Evaluator for SentimentEvaluator {
    fn evaluator_type(&self) -> &str {
        SENTIMENT
    }

    async fn evaluate(
        &self,
        input: &EvaluationInput,
        criteria: &[EvaluationCriteria],
    ) -> Result<Vec<EvaluationResult>, EvalError> {
        let c = &self.config;
        if !criteria.iter().any(|k| k.name == c.criterion_name) {
            return Ok(vec![]);
        }
        let text = match input.field_text(&c.source_text_field) {
            Ok(t) => t,
            Err(e) => {
                return Ok(vec![EvaluationResult::failed(
                    &c.criterion_name,
                    SENTIMENT,
                    e,
                )]);
            }
        };
        let a = analyze(&text);
        let category = self.category(a.comparative);
        let score = match c.output_type {
            SentimentOutput::ComparativeNormalized => Score::Number(a.comparative_normalized),
            SentimentOutput::RawScore => Score::Number(f64::from(a.raw_score)),
            SentimentOutput::Category => Score::Text(category.to_string()),
        };
        let mut meta = Map::new();
        meta.insert("rawScore".into(), json!(a.raw_score));
        meta.insert("comparative".into(), json!(a.comparative));
        meta.insert(
            "comparativeNormalized".into(),
            json!(a.comparative_normalized),
        );
        meta.insert("category".into(), json!(category));
        meta.insert("tokens".into(), json!(a.tokens));
        meta.insert("positive".into(), json!(a.positive));
        meta.insert("negative".into(), json!(a.negative));
        Ok(vec![
            EvaluationResult::new(
                &c.criterion_name,
                SENTIMENT,
                score,
                format!(
                    "AFINN-165: raw {}, comparative {:.4} over {} tokens → {category}",
                    a.raw_score, a.comparative, a.tokens
                ),
            )
            .with_metadata(meta),
        ])
    }
}
