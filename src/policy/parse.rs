//! Parsing and validation of policy JSON into [`Policy`] values, with errors that name the
//! file, the JSON path and the problem. Every problem in a document is reported, not just the
//! first.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::{Map, Value};

use super::error::{PolicyError, PolicyErrors};
use super::types::*;

mod fields;
mod llm;
pub use llm::LLM_CONDITION_KINDS;
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

/// The document, its rules and the condition dispatch. Fields are read in `fields.rs`, the
/// conditions in `tools.rs` and `signals.rs`.
impl Parser {
    fn document(&mut self, v: &Value, default_name: Option<String>) -> Option<Policy> {
        match v {
            Value::Array(_) => {
                let rules = self.rules(v, "rules")?;
                let meta = PolicyMeta {
                    name: default_name.unwrap_or_else(|| "policy".into()),
                    ..PolicyMeta::default()
                };
                Some(Policy { meta, rules })
            }
            Value::Object(_) => {
                let o = self.obj(v, "", "a policy document", &["policy", "rules"])?;
                let meta = match o.map.get("policy") {
                    Some(m) => self.meta(m, default_name),
                    None => Some(PolicyMeta {
                        name: default_name.unwrap_or_else(|| "policy".into()),
                        ..PolicyMeta::default()
                    }),
                };
                let rules = match self.req(&o, "rules") {
                    Some(r) => self.rules(r, "rules"),
                    None => None,
                };
                Some(Policy {
                    meta: meta?,
                    rules: rules?,
                })
            }
            other => {
                self.err(
                    "",
                    format!(
                        "expected a policy: an object {{\"policy\": {{..}}, \"rules\": [..]}} or an array of rules, found {}",
                        type_name(other)
                    ),
                );
                None
            }
        }
    }

    fn meta(&mut self, v: &Value, default_name: Option<String>) -> Option<PolicyMeta> {
        let o = self.obj(
            v,
            "policy",
            "the policy metadata",
            &[
                "name",
                "description",
                "mode",
                "combine",
                "onMissingDefault",
                "timezone",
                "version",
                "redactDetected",
                "enabled",
                "agentSelector",
                "reviewTtlSeconds",
                "onExpire",
            ],
        )?;
        let name = match o.map.get("name") {
            Some(_) => self.non_empty_str(&o, "name"),
            None => Some(default_name.unwrap_or_else(|| "policy".into())),
        };
        let description = self.opt_str(&o, "description");
        let mode = self.opt_enum(&o, "mode", MODES);
        let combine = self.opt_enum(
            &o,
            "combine",
            &[
                ("most_severe_wins", Combine::MostSevereWins),
                ("priority_first", Combine::PriorityFirst),
            ],
        );
        let on_missing_default = self.opt_enum(&o, "onMissingDefault", EFFECTS);
        let timezone = self.opt_str(&o, "timezone");
        let redact_detected = self.opt_bool(&o, "redactDetected");
        let enabled = self.opt_bool(&o, "enabled");
        let agent_selector = match o.map.get("agentSelector") {
            None => Some(None),
            Some(v) => self.agent_selector(v, "policy.agentSelector").map(Some),
        };
        let (review_ttl_seconds, on_expire) = self.expiry(&o);
        if let Some(Some(tz)) = &timezone {
            self.timezone(tz, "policy.timezone");
        }
        if let Some(v) = o.map.get("version")
            && !(v.is_string() || v.is_u64())
        {
            self.err("policy.version", "expected a string or a whole number");
        }
        Some(PolicyMeta {
            name: name?,
            description: description?,
            mode: mode?.unwrap_or(Mode::Enforce),
            combine: combine?.unwrap_or(Combine::MostSevereWins),
            on_missing_default: on_missing_default?.unwrap_or(EffectType::Allow),
            timezone: timezone?,
            redact_detected: redact_detected?.unwrap_or(true),
            enabled: enabled?.unwrap_or(true),
            agent_selector: agent_selector?,
            review_ttl_seconds: review_ttl_seconds?,
            on_expire: on_expire?,
        })
    }

    /// `reviewTtlSeconds` (a whole number of seconds, at least 1) and `onExpire` (`deny` |
    /// `allow`) of a policy or a rule.
    fn expiry(&mut self, o: &Obj<'_>) -> (Option<Option<u64>>, Option<Option<OnExpire>>) {
        let ttl = match o.map.get("reviewTtlSeconds") {
            None => Some(None),
            Some(v) => self
                .count_value(v, &join(&o.path, "reviewTtlSeconds"), 1)
                .map(Some),
        };
        let on_expire = self.opt_enum(
            o,
            "onExpire",
            &[("deny", OnExpire::Deny), ("allow", OnExpire::Allow)],
        );
        (ttl, on_expire)
    }

    fn agent_selector(&mut self, v: &Value, path: &str) -> Option<AgentSelector> {
        let o = self.obj(
            v,
            path,
            "an agentSelector",
            &["anyOfSlugs", "anyOfTags", "allOfTags"],
        )?;
        let list = |p: &mut Parser, key: &str| -> Option<Option<Vec<String>>> {
            match o.map.get(key) {
                None => Some(None),
                Some(_) => p.req_str_list(&o, key, false).map(Some),
            }
        };
        let slugs = list(self, "anyOfSlugs");
        let any = list(self, "anyOfTags");
        let all = list(self, "allOfTags");
        if let Some(Some(s)) = &slugs
            && !self.globs(s, &join(path, "anyOfSlugs"), false)
        {
            return None;
        }
        Some(AgentSelector {
            any_of_slugs: slugs?,
            any_of_tags: any?,
            all_of_tags: all?,
        })
    }

    fn rules(&mut self, v: &Value, path: &str) -> Option<Vec<Rule>> {
        let Value::Array(items) = v else {
            self.err(
                path,
                format!("expected an array of rules, found {}", type_name(v)),
            );
            return None;
        };
        let mut rules = Vec::with_capacity(items.len());
        let mut ok = true;
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, item) in items.iter().enumerate() {
            let at = idx(path, i);
            match self.rule(item, &at) {
                Some(rule) => {
                    if let Some(first) = seen.get(&rule.id) {
                        self.err(
                            join(&at, "id"),
                            format!(
                                "duplicate rule id \"{}\" (first used by {path}[{first}])",
                                rule.id
                            ),
                        );
                        ok = false;
                    } else {
                        seen.insert(rule.id.clone(), i);
                    }
                    rules.push(rule);
                }
                None => ok = false,
            }
        }
        ok.then_some(rules)
    }

    fn rule(&mut self, v: &Value, path: &str) -> Option<Rule> {
        let o = self.obj(
            v,
            path,
            "a rule",
            &[
                "id",
                "name",
                "description",
                "priority",
                "enabled",
                "selector",
                "condition",
                "effect",
                "onMissing",
                "mode",
                "policyId",
                "createdAt",
                "updatedAt",
                "reviewTtlSeconds",
                "onExpire",
            ],
        )?;
        let name = self.non_empty_str(&o, "name");
        // Handlebar platform fields: `policyId` is kept (null means none); the `createdAt` and
        // `updatedAt` timestamps are accepted whatever their form and ignored.
        let policy_id = match o.map.get("policyId") {
            Some(Value::Null) => Some(None),
            _ => self.opt_str(&o, "policyId"),
        };
        let id = match o.map.get("id") {
            Some(_) => self.non_empty_str(&o, "id"),
            None => name.as_deref().map(slug).and_then(|s| {
                if s.is_empty() {
                    self.err(
                        join(path, "name"),
                        "cannot derive a rule id from this name; give the rule an \"id\"",
                    );
                    None
                } else {
                    Some(s)
                }
            }),
        };
        let description = self.opt_str(&o, "description");
        let priority = match o.map.get("priority") {
            None => Some(0),
            Some(Value::Number(n)) if n.as_i64().is_some() => n.as_i64(),
            Some(other) => {
                self.err(
                    join(path, "priority"),
                    format!("expected a whole number, found {other}"),
                );
                None
            }
        };
        let enabled = self.opt_bool(&o, "enabled");
        let selector = self
            .req(&o, "selector")
            .and_then(|s| self.selector(s, &join(path, "selector")));
        self.phase = selector.as_ref().map(|s| s.phase);
        let condition = self
            .req(&o, "condition")
            .and_then(|c| self.condition(c, &join(path, "condition"), 0));
        let effect = self
            .req(&o, "effect")
            .and_then(|e| self.effect(e, &join(path, "effect")));
        if let (Some(s), Some(rule_id)) = (&selector, &id)
            && s.phase == Phase::LlmBefore
        {
            self.llm_selector(s, &join(path, "selector"), rule_id);
            if let Some(c) = &condition {
                self.llm_condition(c, &join(path, "condition"), rule_id);
            }
        }
        let on_missing = self.opt_enum(&o, "onMissing", EFFECTS);
        let mode = self.opt_enum(&o, "mode", MODES);
        let (review_ttl_seconds, on_expire) = self.expiry(&o);
        Some(Rule {
            policy_id: policy_id?,
            id: id?,
            name: name?,
            description: description?,
            priority: priority?,
            enabled: enabled?.unwrap_or(true),
            selector: selector?,
            condition: condition?,
            effect: effect?,
            on_missing: on_missing?,
            mode: mode?,
            review_ttl_seconds: review_ttl_seconds?,
            on_expire: on_expire?,
        })
    }

    fn selector(&mut self, v: &Value, path: &str) -> Option<Selector> {
        let o = self.obj(v, path, "a selector", &["phase", "tool"])?;
        let phase = self.req_enum(
            &o,
            "phase",
            &[
                ("tool.before", Phase::Before),
                ("tool.after", Phase::After),
                ("llm.before", Phase::LlmBefore),
            ],
        );
        let tool = match o.map.get("tool") {
            None => Some(None),
            Some(t) => {
                let tp = join(path, "tool");
                self.obj(t, &tp, "a tool selector", &["name", "tagsAll", "tagsAny"])
                    .and_then(|to| {
                        let name = self.opt_str_list(&to, "name", true);
                        if let Some(Some(names)) = &name {
                            let single = matches!(to.map.get("name"), Some(Value::String(_)));
                            self.globs(names, &join(&tp, "name"), single);
                        }
                        let tags_all = self.opt_str_list(&to, "tagsAll", false);
                        let tags_any = self.opt_str_list(&to, "tagsAny", false);
                        Some(Some(ToolSelector {
                            name: name?,
                            tags_all: tags_all?,
                            tags_any: tags_any?,
                        }))
                    })
            }
        };
        Some(Selector {
            phase: phase?,
            tool: tool?,
        })
    }

    fn effect(&mut self, v: &Value, path: &str) -> Option<Effect> {
        let o = self.obj(v, path, "an effect", &["type", "reason"])?;
        let kind = self.req_enum(&o, "type", EFFECTS);
        let reason = self.opt_str(&o, "reason");
        Some(Effect {
            kind: kind?,
            reason: reason?,
        })
    }

    fn condition(&mut self, v: &Value, path: &str, depth: usize) -> Option<Condition> {
        if depth > MAX_CONDITION_DEPTH {
            self.err(
                path,
                format!("conditions nest deeper than {MAX_CONDITION_DEPTH} levels"),
            );
            return None;
        }
        let Some(map) = v.as_object() else {
            self.err(
                path,
                format!(
                    "expected a condition (an object with \"kind\"), found {}",
                    type_name(v)
                ),
            );
            return None;
        };
        let Some(kind) = map.get("kind") else {
            self.err(
                path,
                format!(
                    "missing required key \"kind\"; one of {}",
                    CONDITION_KINDS.join(", ")
                ),
            );
            return None;
        };
        let Some(kind) = kind.as_str() else {
            self.err(
                join(path, "kind"),
                format!("expected a string, found {}", type_name(kind)),
            );
            return None;
        };
        match kind {
            "toolName" => self.tool_name(v, path),
            "toolTag" => self.tool_tag(v, path),
            "toolArg" => self.tool_arg(v, path),
            "enduserTag" => self.enduser_tag(v, path),
            "executionTime" => self.execution_time(v, path),
            "sequence" => self.sequence(v, path),
            "maxCalls" => self.max_calls(v, path),
            "metricWindow" => self.metric_window(v, path),
            "timeGate" => self.time_gate(v, path),
            "requireSubject" => self.require_subject(v, path),
            "signal" => self.signal(v, path),
            "sensitiveData" => self.sensitive_data(v, path),
            "custom" => {
                let o = self.obj(v, path, "a custom condition", &["kind", "name", "args"])?;
                let name = self.non_empty_str(&o, "name")?;
                Some(Condition::Custom {
                    name,
                    args: o.map.get("args").cloned(),
                })
            }
            "and" | "or" => {
                let key = if kind == "and" { "all" } else { "any" };
                let keys: &'static [&'static str] = if kind == "and" {
                    &["kind", "all"]
                } else {
                    &["kind", "any"]
                };
                let o = self.obj(v, path, "a condition", keys)?;
                let list = self.req(&o, key)?;
                let lp = join(path, key);
                let Value::Array(items) = list else {
                    self.err(
                        lp,
                        format!("expected an array of conditions, found {}", type_name(list)),
                    );
                    return None;
                };
                if items.is_empty() {
                    self.err(lp, format!("`{kind}` needs at least one condition"));
                    return None;
                }
                let mut out = Vec::with_capacity(items.len());
                let mut ok = true;
                for (i, item) in items.iter().enumerate() {
                    match self.condition(item, &idx(&lp, i), depth + 1) {
                        Some(c) => out.push(c),
                        None => ok = false,
                    }
                }
                if !ok {
                    return None;
                }
                Some(if kind == "and" {
                    Condition::And(out)
                } else {
                    Condition::Or(out)
                })
            }
            "not" => {
                let o = self.obj(v, path, "a condition", &["kind", "not"])?;
                let inner = self.req(&o, "not")?;
                let c = self.condition(inner, &join(path, "not"), depth + 1)?;
                Some(Condition::Not(Box::new(c)))
            }
            other => {
                let hint = suggest(other, CONDITION_KINDS);
                self.err(
                    join(path, "kind"),
                    format!(
                        "unknown condition kind \"{other}\"{hint}; one of {}",
                        CONDITION_KINDS.join(", ")
                    ),
                );
                None
            }
        }
    }
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
