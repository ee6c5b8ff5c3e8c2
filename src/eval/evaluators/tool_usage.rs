//! Tool usage: were the expected tools called, with acceptable arguments? (PRD FR2.4)

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::eval::error::EvalError;
use crate::eval::fields::{type_name, walk};
use crate::eval::normalize::bool_on_scale;
use crate::eval::types::{
    EvaluationCriteria, EvaluationInput, EvaluationResult, Evaluator, ToolCallRecord,
};

/// Comparison of a declarative [`ArgumentCheck`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CheckOp {
    /// The path exists (and is not null).
    Exists,
    /// The path does not exist (or is null).
    NotExists,
    /// JSON equality with `value` (numbers compare numerically: 1 equals 1.0).
    Equals,
    /// Not [`CheckOp::Equals`].
    NotEquals,
    /// A string containing the string `value`, or an array containing `value`.
    Contains,
    /// A string matching the regex `value`.
    Matches,
    /// A number greater than `value`.
    Gt,
    /// A number ≥ `value`.
    Gte,
    /// A number less than `value`.
    Lt,
    /// A number ≤ `value`.
    Lte,
    /// Equal to one element of the array `value`.
    OneOf,
    /// JSON type equals `value` (`string`, `number`, `boolean`, `array`, `object`, `null`).
    Type,
}

/// A declarative argument check: `{"path": "$.query", "op": "matches", "value": "^SELECT"}`.
///
/// `path` is a dot path into the call's `args` (`$` or empty for the whole object, `$.` prefix
/// optional, array indices as numbers: `items.0.id`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ArgumentCheck {
    /// Path into the arguments.
    pub path: String,
    /// Comparison.
    pub op: CheckOp,
    /// Operand (not needed for `exists` / `notExists`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

fn as_f64(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

impl ArgumentCheck {
    fn target<'a>(&self, args: &'a Value) -> Option<&'a Value> {
        let p = self.path.trim();
        let p = p.strip_prefix('$').unwrap_or(p);
        let p = p.strip_prefix('.').unwrap_or(p);
        if p.is_empty() {
            return Some(args).filter(|v| !v.is_null());
        }
        let segs: Vec<&str> = p.split('.').collect();
        walk(args, &segs).filter(|v| !v.is_null())
    }

    /// Checks the call's arguments; `Err` explains the failure.
    pub fn check(&self, args: &Value) -> Result<(), String> {
        let target = self.target(args);
        let operand = || {
            self.value
                .as_ref()
                .ok_or_else(|| format!("check on '{}' needs a value", self.path))
        };
        let fail = |what: String| Err(format!("argument '{}' {what}", self.path));
        let Some(t) = target else {
            return match self.op {
                CheckOp::NotExists => Ok(()),
                _ => fail("is missing".into()),
            };
        };
        match self.op {
            CheckOp::Exists => Ok(()),
            CheckOp::NotExists => fail(format!("is present ({t})")),
            CheckOp::Equals => {
                let v = operand()?;
                if json_eq(t, v) {
                    Ok(())
                } else {
                    fail(format!("is {t}, expected {v}"))
                }
            }
            CheckOp::NotEquals => {
                let v = operand()?;
                if json_eq(t, v) {
                    fail(format!("must not be {v}"))
                } else {
                    Ok(())
                }
            }
            CheckOp::Contains => {
                let v = operand()?;
                let ok = match (t, v) {
                    (Value::String(s), Value::String(n)) => s.contains(n.as_str()),
                    (Value::Array(a), v) => a.iter().any(|x| json_eq(x, v)),
                    _ => false,
                };
                if ok {
                    Ok(())
                } else {
                    fail(format!("({t}) does not contain {v}"))
                }
            }
            CheckOp::Matches => {
                let pattern = operand()?.as_str().ok_or_else(|| {
                    format!("check on '{}': matches needs a string pattern", self.path)
                })?;
                let re = Regex::new(pattern)
                    .map_err(|e| format!("check on '{}': invalid regex: {e}", self.path))?;
                match t.as_str() {
                    Some(s) if re.is_match(s) => Ok(()),
                    Some(s) => fail(format!("({s:?}) does not match /{pattern}/")),
                    None => fail(format!("is a {}, not a string", type_name(t))),
                }
            }
            CheckOp::Gt | CheckOp::Gte | CheckOp::Lt | CheckOp::Lte => {
                let v = operand()?;
                let (Some(x), Some(y)) = (as_f64(t), as_f64(v)) else {
                    return fail(format!("({t}) is not comparable with {v}"));
                };
                let (ok, sym) = match self.op {
                    CheckOp::Gt => (x > y, ">"),
                    CheckOp::Gte => (x >= y, "≥"),
                    CheckOp::Lt => (x < y, "<"),
                    _ => (x <= y, "≤"),
                };
                if ok {
                    Ok(())
                } else {
                    fail(format!("is {x}, expected {sym} {y}"))
                }
            }
            CheckOp::OneOf => {
                let v = operand()?;
                let Value::Array(options) = v else {
                    return Err(format!("check on '{}': oneOf needs an array", self.path));
                };
                if options.iter().any(|o| json_eq(o, t)) {
                    Ok(())
                } else {
                    fail(format!("is {t}, expected one of {v}"))
                }
            }
            CheckOp::Type => {
                let v = operand()?;
                let want = v.as_str().unwrap_or("");
                if type_name(t) == want {
                    Ok(())
                } else {
                    fail(format!("is a {}, expected {want}", type_name(t)))
                }
            }
        }
    }
}

/// A Rust closure checking a call's arguments (library users; not loadable from JSON).
/// Returns `Err(reason)` when the arguments are not acceptable.
#[derive(Clone)]
pub struct ArgumentCheckFn(pub Arc<ArgumentPredicate>);

/// The closure type of [`ArgumentCheckFn`]: arguments in, `Err(reason)` when unacceptable.
pub type ArgumentPredicate = dyn Fn(&Value) -> Result<(), String> + Send + Sync;

impl ArgumentCheckFn {
    /// Wraps a closure.
    pub fn new(f: impl Fn(&Value) -> Result<(), String> + Send + Sync + 'static) -> Self {
        ArgumentCheckFn(Arc::new(f))
    }
}

impl fmt::Debug for ArgumentCheckFn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ArgumentCheckFn(..)")
    }
}

fn default_true() -> bool {
    true
}

/// One tool usage rule.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolUsageRule {
    /// Criterion this rule scores.
    pub criterion_name: String,
    /// Name of the tool expected to be called.
    pub expected_tool_name: String,
    /// The tool must be called (default true). When false, not calling it passes.
    #[serde(default = "default_true")]
    pub is_required: bool,
    /// Declarative checks every call to the tool must pass.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub argument_checks: Vec<ArgumentCheck>,
    /// A closure every call to the tool must pass (library only).
    #[serde(skip)]
    pub argument_check_fn: Option<ArgumentCheckFn>,
}

impl ToolUsageRule {
    /// A required-tool rule without argument checks.
    pub fn new(criterion_name: impl Into<String>, tool: impl Into<String>) -> Self {
        ToolUsageRule {
            criterion_name: criterion_name.into(),
            expected_tool_name: tool.into(),
            is_required: true,
            argument_checks: Vec::new(),
            argument_check_fn: None,
        }
    }

    /// Adds a declarative check.
    pub fn check(mut self, path: &str, op: CheckOp, value: Option<Value>) -> Self {
        self.argument_checks.push(ArgumentCheck {
            path: path.into(),
            op,
            value,
        });
        self
    }

    /// Sets the closure check.
    pub fn check_fn(
        mut self,
        f: impl Fn(&Value) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.argument_check_fn = Some(ArgumentCheckFn::new(f));
        self
    }
}

/// Where tool calls are read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ToolDataSource {
    /// `toolCalls` if present, else `messageHistory` if present, else `context.<contextPath>`.
    #[default]
    Auto,
    /// The input's `toolCalls` (inside the engine: the run's real tool calls).
    ToolCalls,
    /// Tool calls found in `messageHistory` (see [`tool_calls_from_messages`]).
    MessageHistory,
    /// An array of `{name, args}` at `context.<contextPath>`.
    Context,
}

fn default_context_path() -> String {
    "toolCalls".into()
}

/// Configuration of [`ToolUsageEvaluator`] (`"type": "toolUsage"`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolUsageConfig {
    /// The rules.
    pub rules: Vec<ToolUsageRule>,
    /// Where to read tool calls; default `auto`.
    #[serde(default)]
    pub tool_data_source: ToolDataSource,
    /// Path inside `context` for the `context` source; default `toolCalls`.
    #[serde(default = "default_context_path")]
    pub context_path: String,
}

fn parse_args(v: Option<&Value>) -> Value {
    match v {
        // OpenAI encodes arguments as a JSON string.
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
        Some(v) => v.clone(),
        None => Value::Object(Map::new()),
    }
}

fn call_from_object(o: &Map<String, Value>) -> Option<ToolCallRecord> {
    let name = o
        .get("name")
        .or_else(|| o.get("toolName"))
        .or_else(|| o.get("function").and_then(|f| f.get("name")))?
        .as_str()?
        .to_string();
    let args = o
        .get("args")
        .or_else(|| o.get("arguments"))
        .or_else(|| o.get("input"))
        .or_else(|| o.get("function").and_then(|f| f.get("arguments")));
    Some(ToolCallRecord {
        name,
        args: parse_args(args),
        output: o.get("output").or_else(|| o.get("result")).cloned(),
        error: o.get("error").and_then(Value::as_str).map(str::to_string),
    })
}

/// Extracts tool calls from agent messages. Recognized shapes:
/// * OpenAI: `{"role": "assistant", "tool_calls": [{"function": {"name", "arguments": "<json>"}}]}`
///   (also `toolCalls`);
/// * content parts: `{"content": [{"type": "tool_call" | "tool-call" | "tool_use", "toolName" | "name", "args" | "input"}]}`;
/// * a bare part as a message: `{"type": "tool_call", "name", "args"}`.
pub fn tool_calls_from_messages(messages: &[Value]) -> Vec<ToolCallRecord> {
    let is_call_part = |o: &Map<String, Value>| {
        matches!(
            o.get("type").and_then(Value::as_str),
            Some("tool_call" | "tool-call" | "tool_use" | "toolCall")
        )
    };
    let mut out = Vec::new();
    for m in messages {
        let Some(o) = m.as_object() else { continue };
        if is_call_part(o) {
            out.extend(call_from_object(o));
            continue;
        }
        for key in ["tool_calls", "toolCalls"] {
            if let Some(Value::Array(calls)) = o.get(key) {
                out.extend(
                    calls
                        .iter()
                        .filter_map(|c| c.as_object().and_then(call_from_object)),
                );
            }
        }
        if let Some(Value::Array(parts)) = o.get("content") {
            out.extend(
                parts
                    .iter()
                    .filter_map(Value::as_object)
                    .filter(|p| is_call_part(p))
                    .filter_map(call_from_object),
            );
        }
    }
    out
}

/// Checks tool calls against rules (PRD FR2.4).
///
/// For each rule whose criterion is in `criteria`, the calls to `expectedToolName` are found:
/// * none: passes when `isRequired` is false, fails otherwise;
/// * some: passes when **every** call passes all `argumentChecks` and the closure check.
///
/// Score on the criterion's scale via [`bool_on_scale`] (a boolean on binary/pass-fail).
/// `metadata`: `toolName`, `callCount`, `failures`, `source`. Unreadable tool data (e.g. a
/// `context` path that is not an array) gives a result with `error`.
#[derive(Debug, Clone)]
pub struct ToolUsageEvaluator {
    config: ToolUsageConfig,
}

/// Evaluator type of [`ToolUsageEvaluator`].
pub const TOOL_USAGE: &str = "toolUsage";

impl ToolUsageEvaluator {
    /// Builds the evaluator.
    pub fn new(config: ToolUsageConfig) -> Self {
        ToolUsageEvaluator { config }
    }

    /// An evaluator over `rules` with the `auto` data source.
    pub fn with_rules(rules: Vec<ToolUsageRule>) -> Self {
        Self::new(ToolUsageConfig {
            rules,
            tool_data_source: ToolDataSource::Auto,
            context_path: default_context_path(),
        })
    }

    fn calls_from_context(&self, input: &EvaluationInput) -> Result<Vec<ToolCallRecord>, String> {
        let path = format!("context.{}", self.config.context_path);
        match input.field_value(&path) {
            Ok(Value::Array(a)) => Ok(a
                .iter()
                .filter_map(|c| c.as_object().and_then(call_from_object))
                .collect()),
            Ok(other) => Err(format!(
                "field '{path}' must be an array of tool calls (found {})",
                type_name(&other)
            )),
            Err(e) => Err(e),
        }
    }

    /// The tool calls this evaluator sees for `input`, and the source they came from.
    pub fn tool_calls(
        &self,
        input: &EvaluationInput,
    ) -> Result<(Vec<ToolCallRecord>, &'static str), String> {
        match self.config.tool_data_source {
            ToolDataSource::ToolCalls => {
                Ok((input.tool_calls.clone().unwrap_or_default(), "toolCalls"))
            }
            ToolDataSource::MessageHistory => Ok((
                tool_calls_from_messages(input.message_history.as_deref().unwrap_or_default()),
                "messageHistory",
            )),
            ToolDataSource::Context => Ok((self.calls_from_context(input)?, "context")),
            ToolDataSource::Auto => {
                if let Some(t) = &input.tool_calls {
                    Ok((t.clone(), "toolCalls"))
                } else if let Some(m) = &input.message_history {
                    Ok((tool_calls_from_messages(m), "messageHistory"))
                } else if input
                    .context
                    .as_ref()
                    .and_then(|c| walk(c, &self.config.context_path.split('.').collect::<Vec<_>>()))
                    .is_some()
                {
                    Ok((self.calls_from_context(input)?, "context"))
                } else {
                    Ok((Vec::new(), "none"))
                }
            }
        }
    }
}

#[async_trait]
impl Evaluator for ToolUsageEvaluator {
    fn evaluator_type(&self) -> &str {
        TOOL_USAGE
    }

    async fn evaluate(
        &self,
        input: &EvaluationInput,
        criteria: &[EvaluationCriteria],
    ) -> Result<Vec<EvaluationResult>, EvalError> {
        let calls = self.tool_calls(input);
        let mut out = Vec::new();
        for rule in &self.config.rules {
            let Some(crit) = criteria.iter().find(|c| c.name == rule.criterion_name) else {
                continue;
            };
            let (calls, source) = match &calls {
                Ok(c) => c,
                Err(e) => {
                    out.push(EvaluationResult::failed(
                        &rule.criterion_name,
                        TOOL_USAGE,
                        e.clone(),
                    ));
                    continue;
                }
            };
            let matching: Vec<&ToolCallRecord> = calls
                .iter()
                .filter(|c| c.name == rule.expected_tool_name)
                .collect();
            let mut failures = Vec::new();
            for (i, call) in matching.iter().enumerate() {
                for check in &rule.argument_checks {
                    if let Err(e) = check.check(&call.args) {
                        failures.push(format!("call {} of {}: {e}", i + 1, matching.len()));
                    }
                }
                if let Some(f) = &rule.argument_check_fn
                    && let Err(e) = (f.0)(&call.args)
                {
                    failures.push(format!("call {} of {}: {e}", i + 1, matching.len()));
                }
            }
            let tool = &rule.expected_tool_name;
            let (pass, reasoning) = if matching.is_empty() {
                if rule.is_required {
                    (false, format!("required tool '{tool}' was not called"))
                } else {
                    (true, format!("optional tool '{tool}' was not called"))
                }
            } else if failures.is_empty() {
                (
                    true,
                    format!(
                        "tool '{tool}' called {} time(s) with valid arguments",
                        matching.len()
                    ),
                )
            } else {
                (
                    false,
                    format!(
                        "tool '{tool}' called with invalid arguments: {}",
                        failures.join("; ")
                    ),
                )
            };
            let mut meta = Map::new();
            meta.insert("toolName".into(), json!(tool));
            meta.insert("callCount".into(), json!(matching.len()));
            meta.insert("failures".into(), json!(failures));
            meta.insert("source".into(), json!(source));
            out.push(
                EvaluationResult::new(
                    &rule.criterion_name,
                    TOOL_USAGE,
                    bool_on_scale(pass, &crit.scale),
                    reasoning,
                )
                .with_metadata(meta),
            );
        }
        Ok(out)
    }
}
