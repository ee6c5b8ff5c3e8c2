//! Parsing and validation of policy JSON into [`Policy`] values, with errors that name the
//! file, the JSON path and the problem. Every problem in a document is reported, not just the
//! first.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::{Map, Value};

use super::error::{PolicyError, PolicyErrors};
use super::types::*;

mod conditions;
mod document;
mod fields;
mod llm;
pub use llm::LLM_CONDITION_KINDS;
mod rules;
mod sensitive;
mod signals;
mod tools;

/// The error for an empty string where Handlebar's schema needs at least one character.
const EMPTY_STRING: &str = "must not be empty (Handlebar's schema requires at least one character; an empty string never matches, so the rule would silently never apply)";

/// Deepest nesting of `and`/`or`/`not` accepted in a condition.
pub const MAX_CONDITION_DEPTH: usize = 64;

/// Parses and validates a policy document.
///
/// `file` is only used to name the file in errors and, for a bare array of rules, to name the
/// policy after the file stem.
///
/// ```
/// let policy = toolgate::policy::parse_policy(r#"[{"name": "no shell", "priority": 1,
///   "enabled": true, "selector": {"phase": "tool.before", "tool": {"name": "shell*"}},
///   "condition": {"kind": "toolName", "op": "glob", "value": "*"},
///   "effect": {"type": "block", "reason": "no shell here"}}]"#, None).unwrap();
/// assert_eq!(policy.rules[0].id, "no-shell");
/// ```
pub fn parse_policy(text: &str, file: Option<&Path>) -> Result<Policy, PolicyErrors> {
    let file_buf = file.map(Path::to_path_buf);
    if text.trim().is_empty() {
        return Err(PolicyErrors::single(
            file_buf,
            "",
            "the file is empty; expected a JSON policy",
        ));
    }
    let value: Value = crate::json::parse_strict(text).map_err(|e| {
        let (path, msg) = match e.kind {
            crate::json::JsonErrorKind::TooDeep => (
                String::new(),
                format!(
                    "nesting too deep (line {}, column {}): JSON may nest at most {} levels, and conditions may nest at most {MAX_CONDITION_DEPTH} levels",
                    e.line,
                    e.column,
                    crate::json::MAX_JSON_DEPTH
                ),
            ),
            crate::json::JsonErrorKind::DuplicateKey => (
                e.path.clone(),
                format!(
                    "duplicate key (line {}, column {}); each key may appear once",
                    e.line, e.column
                ),
            ),
            crate::json::JsonErrorKind::Syntax => (String::new(), format!("not valid JSON: {e}")),
        };
        PolicyErrors::single(file_buf.clone(), path, msg)
    })?;
    parse_policy_value(&value, file)
}

/// Parses and validates a policy that is already a JSON value.
pub fn parse_policy_value(value: &Value, file: Option<&Path>) -> Result<Policy, PolicyErrors> {
    let mut p = Parser {
        errors: Vec::new(),
        file: file.map(Path::to_path_buf),
        phase: None,
    };
    let default_name = file
        .and_then(|f| f.file_stem())
        .map(|s| s.to_string_lossy().into_owned());
    let policy = p.document(value, default_name);
    if p.errors.is_empty() {
        if let Some(policy) = policy {
            return Ok(policy);
        }
        return Err(PolicyErrors::single(p.file, "", "invalid policy"));
    }
    Err(PolicyErrors(p.errors))
}

/// A slug of a rule name, used as its id when none is given: lowercase ASCII letters and
/// digits, other runs of characters replaced by one `-`.
///
/// ```
/// assert_eq!(toolgate::policy::slug("Block big refunds (EU)!"), "block-big-refunds-eu");
/// ```
pub fn slug(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_alphanumeric() {
            out.extend(c.to_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    out
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn idx(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The parser. The document is read in `document.rs`, rules in `rules.rs`, the condition
/// dispatch in `conditions.rs`; fields in `fields.rs`, the conditions in `tools.rs`,
/// `signals.rs`, `sensitive.rs` and `llm.rs`.
struct Parser {
    errors: Vec<PolicyError>,
    file: Option<std::path::PathBuf>,
    /// The phase of the rule being read (`toolOutput` needs the after phase).
    phase: Option<Phase>,
}

/// Reads the fields of one JSON object, remembering which keys were used so that unknown keys
/// can be reported.
struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
    allowed: &'static [&'static str],
}

const MODES: &[(&str, Mode)] = &[
    ("enforce", Mode::Enforce),
    ("shadow", Mode::Shadow),
    ("off", Mode::Off),
];
const EFFECTS: &[(&str, EffectType)] = &[
    ("allow", EffectType::Allow),
    ("hitl", EffectType::Hitl),
    ("block", EffectType::Block),
];
const CMP_OPS: &[(&str, CmpOp)] = &[
    ("eq", CmpOp::Eq),
    ("neq", CmpOp::Neq),
    ("lt", CmpOp::Lt),
    ("lte", CmpOp::Lte),
    ("gt", CmpOp::Gt),
    ("gte", CmpOp::Gte),
];
const SCOPES: &[(&str, Scope)] = &[
    ("run", Scope::Run),
    ("agent", Scope::Agent),
    ("agent_user", Scope::AgentUser),
];

/// Every condition `kind`.
pub const CONDITION_KINDS: &[&str] = &[
    "toolName",
    "toolTag",
    "toolArg",
    "enduserTag",
    "executionTime",
    "sequence",
    "maxCalls",
    "metricWindow",
    "timeGate",
    "requireSubject",
    "signal",
    "sensitiveData",
    "custom",
    "and",
    "or",
    "not",
];

fn parse_day(d: &str) -> Option<chrono::Weekday> {
    use chrono::Weekday::*;
    Some(match d.to_ascii_lowercase().as_str() {
        "mon" => Mon,
        "tue" => Tue,
        "wed" => Wed,
        "thu" => Thu,
        "fri" => Fri,
        "sat" => Sat,
        "sun" => Sun,
        _ => return None,
    })
}

/// The last non-empty line of a multi-line message (regex errors end with the problem).
fn last_line(s: &str) -> String {
    s.lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or(s)
        .trim()
        .to_string()
}

/// ` (did you mean "x"?)` when a known name is close to `got`.
fn suggest(got: &str, known: &[&str]) -> String {
    known
        .iter()
        .map(|k| {
            (
                strsim::jaro_winkler(&got.to_lowercase(), &k.to_lowercase()),
                k,
            )
        })
        .filter(|(s, _)| *s > 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| format!(" (did you mean \"{k}\"?)"))
        .unwrap_or_default()
}
