//! The rule-based evaluator: fast, deterministic checks (seeds 000, 001 and 002).

use async_trait::async_trait;
use regex::Regex;
use serde_json::{Map, Value, json};

use super::text::fold;
use super::tokens::{MAX_TOKEN_TEXT_BYTES, count_tokens};
use crate::eval::error::EvalError;
use crate::eval::normalize::score_on_scale;
use crate::eval::types::{
    EvaluationCriteria, EvaluationInput, EvaluationResult, EvaluationScale, Evaluator, Score,
};

mod config;
use config::build_regex;
pub use config::*;

struct Compiled {
    rule: EvaluationRule,
    regex: Option<Result<Regex, String>>,
}

/// Evaluates rules; see [`RuleCheck`] for the checks.
///
/// For each criterion in `criteria` that has rules, one result is produced:
/// * every rule is checked against its source field; a missing or non-string field fails the
///   rule (the reasoning names the field);
/// * if any rule has a configuration problem (e.g. an invalid regex), the result has `error`
///   set and lists the problems;
/// * otherwise, with `passed` = all rules passed and `weighted` = Σ weight of passed rules /
///   Σ weight (weights default to 1; 0 when all weights are 0):
///   * binary, pass/fail and custom scales: score = `passed` (a violated rule marks the
///     output bad, seed 001);
///   * numeric: score = `weighted` (the weighted rule score of seed 002);
///   * likert5: score = 1 + 4·`weighted`.
/// * `metadata`: `rules` (per rule: `id`, `type`, `weight`, `passed`, `reasoning`),
///   `passedCount`, `ruleCount`, `weightedScore`, `markedBad`.
pub struct RuleBasedEvaluator {
    rules: Vec<Compiled>,
}

impl std::fmt::Debug for RuleBasedEvaluator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleBasedEvaluator")
            .field("rules", &self.rules.len())
            .finish()
    }
}

/// Outcome of one rule.
struct Outcome {
    passed: bool,
    reasoning: String,
    error: Option<String>,
    details: Map<String, Value>,
}

impl Outcome {
    fn pass(passed: bool, reasoning: String) -> Self {
        Outcome {
            passed,
            reasoning,
            error: None,
            details: Map::new(),
        }
    }
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

fn keywords_found<'a>(text: &str, keywords: &'a [String], case_sensitive: bool) -> Vec<&'a str> {
    let hay = fold(text, case_sensitive);
    keywords
        .iter()
        .filter(|k| !k.is_empty() && hay.contains(&fold(k, case_sensitive)))
        .map(String::as_str)
        .collect()
}

impl RuleBasedEvaluator {
    /// Builds the evaluator. Never fails: an invalid regex surfaces as an `error` result.
    pub fn new(config: RuleBasedConfig) -> Self {
        let rules = config
            .rules
            .into_iter()
            .map(|rule| {
                let regex = match &rule.config.check {
                    RuleCheck::Regex { pattern, flags, .. } => {
                        Some(build_regex(pattern, flags.as_deref().unwrap_or("")))
                    }
                    RuleCheck::RegexMatch {
                        pattern,
                        ignore_case,
                    } => Some(build_regex(pattern, if *ignore_case { "i" } else { "" })),
                    _ => None,
                };
                Compiled { rule, regex }
            })
            .collect();
        RuleBasedEvaluator { rules }
    }

    fn check(&self, c: &Compiled, input: &EvaluationInput) -> Outcome {
        let field = c.rule.config.source_field.as_deref().unwrap_or("response");
        let text = match input.field_text(field) {
            Ok(t) => t,
            Err(msg) => return Outcome::pass(false, format!("sourceField: {msg}")),
        };
        match &c.rule.config.check {
            RuleCheck::Length { min, max } => {
                let n = chars(&text);
                let too_short = min.is_some_and(|m| n < m);
                let too_long = max.is_some_and(|m| n > m);
                let bounds = format!(
                    "[{}, {}]",
                    min.map_or("-".into(), |m| m.to_string()),
                    max.map_or("-".into(), |m| m.to_string())
                );
                let mut o = Outcome::pass(
                    !too_short && !too_long,
                    if too_short {
                        format!("length {n} is below the minimum {bounds}")
                    } else if too_long {
                        format!("length {n} is above the maximum {bounds}")
                    } else {
                        format!("length {n} is within {bounds}")
                    },
                );
                o.details.insert("length".into(), json!(n));
                o
            }
            RuleCheck::Regex {
                pattern,
                expected_outcome,
                ..
            } => match &c.regex {
                Some(Ok(re)) => {
                    let matched = re.is_match(&text);
                    let want = *expected_outcome == MatchOutcome::Match;
                    Outcome::pass(
                        matched == want,
                        format!(
                            "pattern /{pattern}/ {} (expected {})",
                            if matched { "matched" } else { "did not match" },
                            if want { "match" } else { "no match" }
                        ),
                    )
                }
                Some(Err(e)) => regex_error(e),
                None => regex_error("regex not compiled"),
            },
            RuleCheck::RegexMatch { pattern, .. } => match &c.regex {
                Some(Ok(re)) => {
                    let matched = re.is_match(&text);
                    Outcome::pass(
                        matched,
                        format!(
                            "pattern /{pattern}/ {}",
                            if matched { "matched" } else { "did not match" }
                        ),
                    )
                }
                Some(Err(e)) => regex_error(e),
                None => regex_error("regex not compiled"),
            },
            RuleCheck::Includes {
                keywords,
                case_sensitive,
                expected_outcome,
            } => {
                let found = keywords_found(&text, keywords, *case_sensitive);
                let passed = match expected_outcome {
                    IncludesOutcome::Any => !found.is_empty(),
                    IncludesOutcome::All => found.len() == keywords.len(),
                    IncludesOutcome::None => found.is_empty(),
                };
                let mut o = Outcome::pass(
                    passed,
                    format!(
                        "{} of {} keywords found {:?} (expected {})",
                        found.len(),
                        keywords.len(),
                        found,
                        match expected_outcome {
                            IncludesOutcome::Any => "any",
                            IncludesOutcome::All => "all",
                            IncludesOutcome::None => "none",
                        }
                    ),
                );
                o.details.insert("found".into(), json!(found));
                o
            }
            RuleCheck::JsonParse {} | RuleCheck::JsonValid {} => {
                match serde_json::from_str::<Value>(&text) {
                    Ok(_) => Outcome::pass(true, "text is valid JSON".into()),
                    Err(e) => Outcome::pass(false, format!("text is not valid JSON: {e}")),
                }
            }
            RuleCheck::MaxTokens { .. } if text.len() > MAX_TOKEN_TEXT_BYTES => Outcome {
                passed: false,
                reasoning: format!(
                    "text is {} bytes; max_tokens counts at most {MAX_TOKEN_TEXT_BYTES} bytes",
                    text.len()
                ),
                error: Some(format!(
                    "text too long to count tokens: {} bytes (limit {MAX_TOKEN_TEXT_BYTES})",
                    text.len()
                )),
                details: Map::new(),
            },
            RuleCheck::MaxTokens {
                max_tokens,
                encoding,
            } => {
                let (n, tokenizer) = count_tokens(&text, *encoding);
                let mut o = Outcome::pass(
                    n <= *max_tokens,
                    format!("{n} tokens ({tokenizer}), max {max_tokens}"),
                );
                o.details.insert("tokens".into(), json!(n));
                o.details.insert("tokenizer".into(), json!(tokenizer));
                o
            }
            RuleCheck::MaxChars { max_chars: max } | RuleCheck::MaxLength { max_length: max } => {
                let n = chars(&text);
                let mut o = Outcome::pass(n <= *max, format!("{n} characters, max {max}"));
                o.details.insert("length".into(), json!(n));
                o
            }
            RuleCheck::NonEmpty {} => {
                let empty = text.trim().is_empty();
                Outcome::pass(
                    !empty,
                    if empty {
                        "text is empty after trimming".into()
                    } else {
                        "text is not empty".into()
                    },
                )
            }
            RuleCheck::AllowedValues {
                allowed_values,
                trim,
                ignore_case,
            } => {
                let v = if *trim { text.trim() } else { text.as_str() };
                let v = fold(v, !ignore_case);
                let ok = allowed_values.iter().any(|a| fold(a, !ignore_case) == v);
                Outcome::pass(
                    ok,
                    format!(
                        "value {v:?} is {}one of {allowed_values:?}",
                        if ok { "" } else { "not " }
                    ),
                )
            }
            RuleCheck::ContainsAny {
                keywords,
                ignore_case,
            } => {
                let found = keywords_found(&text, keywords, !ignore_case);
                let mut o = Outcome::pass(
                    !found.is_empty(),
                    if found.is_empty() {
                        format!("none of {keywords:?} found")
                    } else {
                        format!("found {found:?}")
                    },
                );
                o.details.insert("found".into(), json!(found));
                o
            }
            RuleCheck::NotContains {
                substrings,
                ignore_case,
            } => {
                let found = keywords_found(&text, substrings, !ignore_case);
                let mut o = Outcome::pass(
                    found.is_empty(),
                    if found.is_empty() {
                        format!("none of {substrings:?} found")
                    } else {
                        format!("forbidden text found: {found:?}")
                    },
                );
                o.details.insert("found".into(), json!(found));
                o
            }
            RuleCheck::StartsWith {
                prefix,
                ignore_case,
            } => {
                let ok = fold(&text, !ignore_case).starts_with(&fold(prefix, !ignore_case));
                Outcome::pass(
                    ok,
                    format!(
                        "text {} with {prefix:?}",
                        if ok { "starts" } else { "does not start" }
                    ),
                )
            }
            RuleCheck::EndsWith {
                suffix,
                ignore_case,
            } => {
                let ok = fold(&text, !ignore_case).ends_with(&fold(suffix, !ignore_case));
                Outcome::pass(
                    ok,
                    format!(
                        "text {} with {suffix:?}",
                        if ok { "ends" } else { "does not end" }
                    ),
                )
            }
        }
    }
}

fn regex_error(e: &str) -> Outcome {
    Outcome {
        passed: false,
        reasoning: e.to_string(),
        error: Some(e.to_string()),
        details: Map::new(),
    }
}

/// Evaluator type of [`RuleBasedEvaluator`].
pub const RULE_BASED: &str = "ruleBased";

#[async_trait]
impl Evaluator for RuleBasedEvaluator {
    fn evaluator_type(&self) -> &str {
        RULE_BASED
    }

    async fn evaluate(
        &self,
        input: &EvaluationInput,
        criteria: &[EvaluationCriteria],
    ) -> Result<Vec<EvaluationResult>, EvalError> {
        let mut out = Vec::new();
        for criterion in criteria {
            let rules: Vec<(usize, &Compiled)> = self
                .rules
                .iter()
                .enumerate()
                .filter(|(_, c)| c.rule.criterion_name == criterion.name)
                .collect();
            if rules.is_empty() {
                continue;
            }
            let mut entries = Vec::new();
            let mut errors = Vec::new();
            let mut failures = Vec::new();
            let (mut w_sum, mut w_pass, mut passed_count) = (0.0, 0.0, 0usize);
            for (i, c) in &rules {
                let o = self.check(c, input);
                let w = c.rule.weight.unwrap_or(1.0);
                let ty = c.rule.config.check.type_name();
                let label = match &c.rule.id {
                    Some(id) => format!("rule '{id}' ({ty})"),
                    None => format!("rule #{i} ({ty})"),
                };
                w_sum += w;
                if o.passed {
                    w_pass += w;
                    passed_count += 1;
                } else {
                    failures.push(format!("{label} failed: {}", o.reasoning));
                }
                if let Some(e) = &o.error {
                    errors.push(format!("{label}: {e}"));
                }
                let mut entry = Map::new();
                entry.insert(
                    "id".into(),
                    c.rule.id.clone().map_or(Value::Null, Value::String),
                );
                entry.insert("type".into(), json!(ty));
                entry.insert("weight".into(), json!(w));
                entry.insert("passed".into(), json!(o.passed));
                entry.insert("reasoning".into(), json!(o.reasoning));
                entry.insert(
                    "action".into(),
                    json!(c.rule.action.or(c.rule.config.action).unwrap_or_default()),
                );
                if !o.details.is_empty() {
                    entry.insert("details".into(), Value::Object(o.details));
                }
                entries.push(Value::Object(entry));
            }
            let all_passed = passed_count == rules.len();
            let weighted = if w_sum > 0.0 { w_pass / w_sum } else { 0.0 };
            let mut meta = Map::new();
            meta.insert("rules".into(), Value::Array(entries));
            meta.insert("passedCount".into(), json!(passed_count));
            meta.insert("ruleCount".into(), json!(rules.len()));
            meta.insert("weightedScore".into(), json!(weighted));
            meta.insert("markedBad".into(), json!(!all_passed));
            let score = match criterion.scale {
                EvaluationScale::Numeric | EvaluationScale::Likert5 => {
                    score_on_scale(weighted, &criterion.scale, 0.5)
                }
                _ => Score::Bool(all_passed),
            };
            let reasoning = if rules.len() == 1 {
                let ty = rules[0].1.rule.config.check.type_name();
                let r = meta["rules"][0]["reasoning"].as_str().unwrap_or("");
                format!(
                    "Rule {ty} {}: {r}",
                    if all_passed { "passed" } else { "failed" }
                )
            } else if all_passed {
                format!("All {} rules passed", rules.len())
            } else {
                format!(
                    "{passed_count} of {} rules passed (weighted {weighted:.4}); {}",
                    rules.len(),
                    failures.join("; ")
                )
            };
            let mut result = EvaluationResult::new(&criterion.name, RULE_BASED, score, reasoning)
                .with_metadata(meta);
            if !errors.is_empty() {
                result.error = Some(errors.join("; "));
                result.score = Score::Bool(false);
            }
            out.push(result);
        }
        Ok(out)
    }
}
