//! Field paths into an [`EvaluationInput`] and prompt templating.
//!
//! # Path syntax
//!
//! A path is a root name optionally followed by `.`-separated segments:
//!
//! | root | value |
//! |---|---|
//! | `response` (alias `output`) | the response |
//! | `prompt` | the prompt |
//! | `groundTruth` | the ground truth |
//! | `context` | the context object |
//! | `metadata` | the input metadata |
//! | `agentConfig` | the agent config snapshot |
//! | `messageHistory` | the message history (array) |
//! | `toolCalls` | the tool calls (array of `{name, args, output?, error?}`) |
//!
//! Each further segment is an object key, or an index when the value is an array
//! (`context.items.0.title`). A path that cannot be followed is *missing*.

use regex::Regex;
use serde_json::Value;
use std::sync::OnceLock;

use super::types::{EvaluationCriteria, EvaluationInput};

/// The roots a field path may start with.
pub const FIELD_ROOTS: &[&str] = &[
    "response",
    "output",
    "prompt",
    "groundTruth",
    "context",
    "metadata",
    "agentConfig",
    "messageHistory",
    "toolCalls",
];

// Field paths are read here, on the input's behalf (the input type does not depend on this file).
impl EvaluationInput {
    /// Resolves a field path to a JSON value; see [`crate::eval::fields`] for the path syntax.
    pub fn field_value(&self, path: &str) -> Result<Value, String> {
        resolve_value(self, path)
    }

    /// Resolves a field path to text; see [`resolve_text`] for the rules.
    pub fn field_text(&self, path: &str) -> Result<String, String> {
        resolve_text(self, path)
    }
}

/// Checks that `path` starts with a known root (used by config validation).
pub fn check_path(path: &str) -> Result<(), String> {
    let root = path.split('.').next().unwrap_or("");
    if FIELD_ROOTS.contains(&root) {
        Ok(())
    } else {
        Err(format!(
            "unknown field '{path}': a field path starts with one of {}",
            FIELD_ROOTS.join(", ")
        ))
    }
}

fn root_value(input: &EvaluationInput, root: &str) -> Option<Value> {
    match root {
        "response" | "output" => Some(input.response.clone()),
        "prompt" => input.prompt.clone().map(Value::String),
        "groundTruth" => input.ground_truth.clone(),
        "context" => input.context.clone(),
        "metadata" => input.metadata.clone(),
        "agentConfig" => input.agent_config.clone(),
        "messageHistory" => input.message_history.clone().map(Value::Array),
        "toolCalls" => input
            .tool_calls
            .as_ref()
            .and_then(|t| serde_json::to_value(t).ok()),
        _ => None,
    }
}

/// Follows `.`-separated segments (object keys or array indices) into a JSON value.
pub fn walk<'a>(mut value: &'a Value, segments: &[&str]) -> Option<&'a Value> {
    for seg in segments {
        value = match value {
            Value::Object(m) => m.get(*seg)?,
            Value::Array(a) => a.get(seg.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(value)
}

/// Resolves `path` to a JSON value. Errors name the path and say why it is missing.
pub fn resolve_value(input: &EvaluationInput, path: &str) -> Result<Value, String> {
    check_path(path)?;
    let mut parts = path.split('.');
    let root = parts.next().unwrap_or("");
    let rest: Vec<&str> = parts.collect();
    let base = root_value(input, root).ok_or_else(|| format!("field '{path}' is missing"))?;
    if base.is_null() && rest.is_empty() {
        return Err(format!("field '{path}' is missing"));
    }
    walk(&base, &rest)
        .filter(|v| !v.is_null())
        .cloned()
        .ok_or_else(|| format!("field '{path}' is missing"))
}

/// Extracts the text of an agent message: a string, `{content: string}`, or
/// `{content: [{type: "text", text}...]}` (text parts joined with newlines).
pub fn message_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Object(m) => match m.get("content")? {
            Value::String(s) => Some(s.clone()),
            Value::Array(parts) => {
                let texts: Vec<&str> = parts
                    .iter()
                    .filter_map(|p| match p {
                        Value::String(s) => Some(s.as_str()),
                        Value::Object(o) => o.get("text").and_then(Value::as_str),
                        _ => None,
                    })
                    .collect();
                if texts.is_empty() {
                    None
                } else {
                    Some(texts.join("\n"))
                }
            }
            _ => None,
        },
        _ => None,
    }
}

/// Returns a JSON type name for messages ("number", "object", …).
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Resolves `path` to text.
///
/// * `response` (exactly) is always text: a string as is, an agent message's text (see
///   [`message_text`]), any other JSON as its compact serialization (so a tool's JSON output
///   can be checked with `json_valid`, `length`, …). A null/absent response is missing.
/// * Every other path must lead to a string; a missing path or a non-string value is an
///   error whose message names the path and what was found.
pub fn resolve_text(input: &EvaluationInput, path: &str) -> Result<String, String> {
    if path == "response" || path == "output" {
        return match &input.response {
            Value::Null => Err(format!("field '{path}' is missing")),
            v => Ok(message_text(v).unwrap_or_else(|| v.to_string())),
        };
    }
    let v = resolve_value(input, path)?;
    match v {
        Value::String(s) => Ok(s),
        other => Err(format!(
            "field '{path}' is not a string (found {})",
            type_name(&other)
        )),
    }
}

fn placeholder_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    // A constant pattern: compiling it cannot fail.
    RE.get_or_init(|| Regex::new(r"\{\{\s*([A-Za-z0-9_.\-]+)\s*\}\}").expect("constant regex"))
}

/// Renders a prompt template.
///
/// Placeholders are `{{name}}` (spaces inside the braces are allowed):
/// * `{{criterion.name}}`, `{{criterion.description}}`, `{{criterion.scale}}`,
///   `{{criterion.weight}}` — the criterion being judged;
/// * any field path (see the module docs): `{{response}}`, `{{prompt}}`, `{{groundTruth}}`,
///   `{{context.customer.tier}}`, `{{metadata.x}}`, `{{toolCalls}}` …
///
/// Strings are inserted as they are, other JSON values as compact JSON. A placeholder whose
/// value is missing is replaced by an empty string and its name is returned in the second
/// element, so callers can report it.
pub fn render_template(
    template: &str,
    input: &EvaluationInput,
    criterion: Option<&EvaluationCriteria>,
) -> (String, Vec<String>) {
    let mut missing = Vec::new();
    let out = placeholder_re().replace_all(template, |caps: &regex::Captures<'_>| {
        let name = caps.get(1).map(|m| m.as_str()).unwrap_or("");
        let value = if let Some(field) = name.strip_prefix("criterion.") {
            criterion.and_then(|c| match field {
                "name" => Some(c.name.clone()),
                "description" => Some(c.description.clone()),
                "scale" => Some(c.scale.to_string()),
                "weight" => Some(c.effective_weight().to_string()),
                _ => None,
            })
        } else if name == "response" || name == "output" {
            resolve_text(input, name).ok()
        } else {
            resolve_value(input, name).ok().map(|v| match v {
                Value::String(s) => s,
                other => other.to_string(),
            })
        };
        match value {
            Some(v) => v,
            None => {
                missing.push(name.to_string());
                String::new()
            }
        }
    });
    (out.into_owned(), missing)
}
