//! The configuration of the rule-based evaluator: rules and their checks, validated.

use regex::{Regex, RegexBuilder};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::eval::error::EvalError;
use crate::eval::evaluators::tokens::TokenEncoding;
use crate::eval::fields::check_path;

/// Configuration of the rule-based evaluator: `{"type": "ruleBased", "rules": [...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuleBasedConfig {
    /// The rules, each linked to a criterion by name.
    pub rules: Vec<EvaluationRule>,
}

/// What happens when a rule is violated (seed 001). The only action is `mark_bad`: the
/// criterion's result is marked bad (`false`), and `metadata.markedBad` is `true`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum RuleAction {
    /// Mark the output as bad.
    #[default]
    #[serde(rename = "mark_bad")]
    MarkBad,
}

/// One rule: `{"criterionName": "...", "config": {"type": "length", ...}, "weight": 2, "id": "..."}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EvaluationRule {
    /// The criterion this rule evaluates.
    pub criterion_name: String,
    /// Optional rule id (reported in metadata and by `toolgate eval stats`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Weight of the rule within its criterion (seed 002); default 1, must be ≥ 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    /// Action on violation (seed 001); default `mark_bad`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<RuleAction>,
    /// The check.
    pub config: RuleConfig,
}

/// A rule's check plus the options every check has.
///
/// In JSON these are one object: `{"type": "regex", "pattern": "^\\d+$", "sourceField": "response"}`.
/// `sourceField` (alias `target`, where `output` means `response`) picks the text to check;
/// default `response`. `action` may also be written here.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleConfig {
    /// The check itself.
    #[serde(flatten)]
    pub check: RuleCheck,
    /// Field path of the checked text (see [`crate::eval::fields`]); default `response`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_field: Option<String>,
    /// Action on violation; default `mark_bad`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<RuleAction>,
}

impl RuleConfig {
    /// A check on the response.
    pub fn new(check: RuleCheck) -> Self {
        RuleConfig {
            check,
            source_field: None,
            action: None,
        }
    }

    /// Sets the source field.
    pub fn on(mut self, source_field: impl Into<String>) -> Self {
        self.source_field = Some(source_field.into());
        self
    }
}

impl<'de> Deserialize<'de> for RuleConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut m = Map::deserialize(d)?;
        let field = |v: Value, name: &str| -> Result<String, D::Error> {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| D::Error::custom(format!("`{name}` must be a string")))
        };
        let source_field = match (m.remove("sourceField"), m.remove("target")) {
            (Some(_), Some(_)) => {
                return Err(D::Error::custom(
                    "give either `sourceField` or `target`, not both",
                ));
            }
            (Some(v), None) => Some(field(v, "sourceField")?),
            (None, Some(v)) => Some(field(v, "target")?),
            (None, None) => None,
        }
        .map(|s| if s == "output" { "response".into() } else { s });
        let action = m
            .remove("action")
            .map(|v| serde_json::from_value::<RuleAction>(v).map_err(D::Error::custom))
            .transpose()?;
        let check =
            serde_json::from_value::<RuleCheck>(Value::Object(m)).map_err(D::Error::custom)?;
        Ok(RuleConfig {
            check,
            source_field,
            action,
        })
    }
}

/// `expectedOutcome` of a `regex` rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchOutcome {
    /// The pattern must match (default).
    #[default]
    Match,
    /// The pattern must not match.
    NoMatch,
}

/// `expectedOutcome` of an `includes` rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IncludesOutcome {
    /// At least one keyword is present (default).
    #[default]
    Any,
    /// Every keyword is present.
    All,
    /// No keyword is present.
    None,
}

fn default_true() -> bool {
    true
}

/// The checks a rule can perform, tagged by `type`. Lengths are counted in Unicode characters
/// (`chars`), bounds are inclusive. Case-insensitive comparisons lower-case both sides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum RuleCheck {
    /// Seed 000: `min ≤ chars ≤ max` (either bound optional).
    #[serde(rename_all = "camelCase")]
    Length {
        /// Minimum length (inclusive).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min: Option<usize>,
        /// Maximum length (inclusive).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max: Option<usize>,
    },
    /// Seed 000: the pattern matches (or, with `expectedOutcome: "no_match"`, does not match).
    /// Flags: `i` case-insensitive, `m` multi-line (`^`/`$` at line ends), `s` dot matches
    /// newline; `g` and `u` are accepted and ignored. An invalid pattern or flag gives a result
    /// with `error`.
    #[serde(rename_all = "camelCase")]
    Regex {
        /// The pattern (Rust `regex` syntax).
        pattern: String,
        /// Flags, e.g. `"is"`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        flags: Option<String>,
        /// `match` (default) or `no_match`.
        #[serde(default)]
        expected_outcome: MatchOutcome,
    },
    /// Seed 000: keyword presence (`any`, `all` or `none` of the keywords), literal substrings.
    #[serde(rename_all = "camelCase")]
    Includes {
        /// Keywords (literal text).
        keywords: Vec<String>,
        /// Default false.
        #[serde(default)]
        case_sensitive: bool,
        /// `any` (default), `all` or `none`.
        #[serde(default)]
        expected_outcome: IncludesOutcome,
    },
    /// Seed 000: the text parses as JSON.
    JsonParse {},
    /// Seed 001: at most `maxTokens` tokens (real BPE tokenizer, `cl100k_base` by default).
    #[serde(rename_all = "camelCase")]
    MaxTokens {
        /// Maximum number of tokens (inclusive).
        #[serde(alias = "max_tokens")]
        max_tokens: usize,
        /// Tokenizer; default `cl100k_base`.
        #[serde(default)]
        encoding: TokenEncoding,
    },
    /// Seed 001: at most `maxChars` characters.
    #[serde(rename_all = "camelCase")]
    MaxChars {
        /// Maximum number of characters (inclusive).
        #[serde(alias = "max_chars")]
        max_chars: usize,
    },
    /// Seed 001: not empty after trimming whitespace.
    NonEmpty {},
    /// Seed 001: the text is one of `allowedValues` (after trimming, when `trim`, default true).
    #[serde(rename_all = "camelCase")]
    AllowedValues {
        /// The allowed values.
        #[serde(alias = "allowed_values")]
        allowed_values: Vec<String>,
        /// Trim the text first (default true).
        #[serde(default = "default_true")]
        trim: bool,
        /// Compare case-insensitively (default false).
        #[serde(default, alias = "ignore_case")]
        ignore_case: bool,
    },
    /// Seeds 001/002: at least one keyword is present (literal substrings).
    #[serde(rename_all = "camelCase")]
    ContainsAny {
        /// Keywords (alias `substrings`).
        #[serde(alias = "substrings")]
        keywords: Vec<String>,
        /// Default false.
        #[serde(default, alias = "ignore_case")]
        ignore_case: bool,
    },
    /// Seed 001: the pattern matches somewhere in the text (`ignoreCase` default false).
    #[serde(rename_all = "camelCase")]
    RegexMatch {
        /// The pattern.
        pattern: String,
        /// Default false.
        #[serde(default, alias = "ignore_case")]
        ignore_case: bool,
    },
    /// Seed 001: the text starts with `prefix`.
    #[serde(rename_all = "camelCase")]
    StartsWith {
        /// The required prefix.
        prefix: String,
        /// Default false.
        #[serde(default, alias = "ignore_case")]
        ignore_case: bool,
    },
    /// Seed 001: the text ends with `suffix`.
    #[serde(rename_all = "camelCase")]
    EndsWith {
        /// The required suffix.
        suffix: String,
        /// Default false.
        #[serde(default, alias = "ignore_case")]
        ignore_case: bool,
    },
    /// Seed 002: none of the substrings is present.
    #[serde(rename_all = "camelCase")]
    NotContains {
        /// Forbidden substrings (alias `keywords`).
        #[serde(alias = "keywords")]
        substrings: Vec<String>,
        /// Default false.
        #[serde(default, alias = "ignore_case")]
        ignore_case: bool,
    },
    /// Seed 002: at most `maxLength` characters.
    #[serde(rename_all = "camelCase")]
    MaxLength {
        /// Maximum number of characters (inclusive).
        #[serde(alias = "max_length")]
        max_length: usize,
    },
    /// Seed 002: the text is valid JSON (same check as `json_parse`).
    JsonValid {},
}

impl RuleCheck {
    /// The rule type as written in JSON (`length`, `max_tokens`, …).
    pub fn type_name(&self) -> &'static str {
        match self {
            RuleCheck::Length { .. } => "length",
            RuleCheck::Regex { .. } => "regex",
            RuleCheck::Includes { .. } => "includes",
            RuleCheck::JsonParse {} => "json_parse",
            RuleCheck::MaxTokens { .. } => "max_tokens",
            RuleCheck::MaxChars { .. } => "max_chars",
            RuleCheck::NonEmpty {} => "non_empty",
            RuleCheck::AllowedValues { .. } => "allowed_values",
            RuleCheck::ContainsAny { .. } => "contains_any",
            RuleCheck::RegexMatch { .. } => "regex_match",
            RuleCheck::StartsWith { .. } => "starts_with",
            RuleCheck::EndsWith { .. } => "ends_with",
            RuleCheck::NotContains { .. } => "not_contains",
            RuleCheck::MaxLength { .. } => "max_length",
            RuleCheck::JsonValid {} => "json_valid",
        }
    }
}

pub(super) fn build_regex(pattern: &str, flags: &str) -> Result<Regex, String> {
    let mut b = RegexBuilder::new(pattern);
    for f in flags.chars() {
        match f {
            'i' => {
                b.case_insensitive(true);
            }
            'm' => {
                b.multi_line(true);
            }
            's' => {
                b.dot_matches_new_line(true);
            }
            'g' | 'u' => {}
            other => return Err(format!("unsupported regex flag '{other}' (use i, m, s)")),
        }
    }
    b.build()
        .map_err(|e| format!("invalid regex pattern /{pattern}/: {e}"))
}

/// Validates a rule (used by config validation); `path` locates it in error messages.
pub(crate) fn validate_rule(rule: &EvaluationRule, path: &str) -> Result<(), EvalError> {
    if rule.criterion_name.trim().is_empty() {
        return Err(EvalError::config(
            format!("{path}.criterionName"),
            "must not be empty",
        ));
    }
    if let Some(w) = rule.weight
        && (!w.is_finite() || w < 0.0)
    {
        return Err(EvalError::config(
            format!("{path}.weight"),
            format!("must be a finite number ≥ 0, got {w}"),
        ));
    }
    if let Some(sf) = &rule.config.source_field {
        check_path(sf).map_err(|m| EvalError::config(format!("{path}.config.sourceField"), m))?;
    }
    let cfg = format!("{path}.config");
    match &rule.config.check {
        RuleCheck::Length {
            min: Some(min),
            max: Some(max),
        } if min > max => Err(EvalError::config(
            cfg,
            format!("min ({min}) is greater than max ({max})"),
        )),
        RuleCheck::Regex { pattern, flags, .. } => {
            build_regex(pattern, flags.as_deref().unwrap_or(""))
                .map(|_| ())
                .map_err(|m| EvalError::config(format!("{cfg}.pattern"), m))
        }
        RuleCheck::RegexMatch {
            pattern,
            ignore_case,
        } => build_regex(pattern, if *ignore_case { "i" } else { "" })
            .map(|_| ())
            .map_err(|m| EvalError::config(format!("{cfg}.pattern"), m)),
        RuleCheck::Includes { keywords, .. } | RuleCheck::ContainsAny { keywords, .. }
            if keywords.is_empty() =>
        {
            Err(EvalError::config(
                format!("{cfg}.keywords"),
                "must not be empty",
            ))
        }
        RuleCheck::AllowedValues { allowed_values, .. } if allowed_values.is_empty() => Err(
            EvalError::config(format!("{cfg}.allowedValues"), "must not be empty"),
        ),
        _ => Ok(()),
    }
}
