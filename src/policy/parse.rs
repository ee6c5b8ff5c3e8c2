//! Parsing and validation of policy JSON into [`Policy`] values, with errors that name the
//! file, the JSON path and the problem. Every problem in a document is reported, not just the
//! first.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::{Map, Value};

use super::error::{PolicyError, PolicyErrors};
use super::types::*;

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
}

/// Reads the fields of one JSON object, remembering which keys were used so that unknown keys
/// can be reported.
struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
    allowed: &'static [&'static str],
}

impl Parser {
    fn err(&mut self, path: impl Into<String>, msg: impl Into<String>) {
        self.errors.push(PolicyError {
            file: self.file.clone(),
            path: path.into(),
            message: msg.into(),
        });
    }

    /// Starts reading an object; reports unknown keys at once.
    fn obj<'a>(
        &mut self,
        v: &'a Value,
        path: &str,
        what: &str,
        allowed: &'static [&'static str],
    ) -> Option<Obj<'a>> {
        let Some(map) = v.as_object() else {
            self.err(
                path,
                format!("expected {what} (an object), found {}", type_name(v)),
            );
            return None;
        };
        for key in map.keys() {
            if !allowed.contains(&key.as_str()) {
                let hint = suggest(key, allowed);
                self.err(
                    join(path, key),
                    format!(
                        "unknown key \"{key}\" in {what}{hint}; allowed keys: {}",
                        allowed.join(", ")
                    ),
                );
            }
        }
        Some(Obj {
            map,
            path: path.to_string(),
            allowed,
        })
    }

    fn req<'a>(&mut self, o: &Obj<'a>, key: &str) -> Option<&'a Value> {
        debug_assert!(o.allowed.contains(&key));
        match o.map.get(key) {
            Some(v) => Some(v),
            None => {
                self.err(o.path.clone(), format!("missing required key \"{key}\""));
                None
            }
        }
    }

    fn str_value(&mut self, v: &Value, path: &str) -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            other => {
                self.err(
                    path,
                    format!("expected a string, found {}", type_name(other)),
                );
                None
            }
        }
    }

    fn req_str(&mut self, o: &Obj<'_>, key: &str) -> Option<String> {
        let v = self.req(o, key)?;
        self.str_value(v, &join(&o.path, key))
    }

    fn opt_str(&mut self, o: &Obj<'_>, key: &str) -> Option<Option<String>> {
        match o.map.get(key) {
            None => Some(None),
            Some(v) => self.str_value(v, &join(&o.path, key)).map(Some),
        }
    }

    fn non_empty_str(&mut self, o: &Obj<'_>, key: &str) -> Option<String> {
        let s = self.req_str(o, key)?;
        if s.is_empty() {
            self.err(join(&o.path, key), "must not be empty");
            return None;
        }
        Some(s)
    }

    /// A dot path into tool args (`a.b.0.c`): no empty segment.
    fn dot_path(&mut self, o: &Obj<'_>, key: &str) -> Option<String> {
        let p = self.non_empty_str(o, key)?;
        if p.split('.').any(str::is_empty) {
            self.err(
                join(&o.path, key),
                format!("\"{p}\" is not a dot path: segments must not be empty (e.g. \"order.items.0.sku\")"),
            );
            return None;
        }
        Some(p)
    }

    fn str_list(&mut self, v: &Value, path: &str, allow_single: bool) -> Option<Vec<String>> {
        match v {
            Value::String(s) if allow_single => Some(vec![s.clone()]),
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                let mut ok = true;
                for (i, item) in items.iter().enumerate() {
                    match self.str_value(item, &idx(path, i)) {
                        Some(s) => out.push(s),
                        None => ok = false,
                    }
                }
                ok.then_some(out)
            }
            other => {
                let want = if allow_single {
                    "a string or an array of strings"
                } else {
                    "an array of strings"
                };
                self.err(path, format!("expected {want}, found {}", type_name(other)));
                None
            }
        }
    }

    fn req_str_list(&mut self, o: &Obj<'_>, key: &str, allow_single: bool) -> Option<Vec<String>> {
        let v = self.req(o, key)?;
        let path = join(&o.path, key);
        let list = self.str_list(v, &path, allow_single)?;
        if list.is_empty() {
            self.err(path, "must not be empty");
            return None;
        }
        Some(list)
    }

    fn opt_str_list(
        &mut self,
        o: &Obj<'_>,
        key: &str,
        allow_single: bool,
    ) -> Option<Option<Vec<String>>> {
        match o.map.get(key) {
            None => Some(None),
            Some(v) => self
                .str_list(v, &join(&o.path, key), allow_single)
                .map(Some),
        }
    }

    fn number(&mut self, o: &Obj<'_>, key: &str) -> Option<f64> {
        let v = self.req(o, key)?;
        match v.as_f64() {
            Some(n) => Some(n),
            None => {
                self.err(
                    join(&o.path, key),
                    format!("expected a number, found {}", type_name(v)),
                );
                None
            }
        }
    }

    fn non_negative(&mut self, o: &Obj<'_>, key: &str) -> Option<f64> {
        let n = self.number(o, key)?;
        if n < 0.0 {
            self.err(
                join(&o.path, key),
                format!("must not be negative, found {n}"),
            );
            return None;
        }
        Some(n)
    }

    fn count_value(&mut self, v: &Value, path: &str, min: u64) -> Option<u64> {
        let n = match v {
            Value::Number(n) => n,
            other => {
                self.err(
                    path,
                    format!("expected a whole number, found {}", type_name(other)),
                );
                return None;
            }
        };
        if let Some(u) = n.as_u64() {
            if u < min {
                self.err(path, format!("must be at least {min}, found {u}"));
                return None;
            }
            return Some(u);
        }
        match n.as_f64() {
            Some(f) if f < 0.0 => self.err(path, format!("must not be negative, found {n}")),
            _ => self.err(path, format!("expected a whole number, found {n}")),
        }
        None
    }

    fn enum_value<T: Copy>(&mut self, v: &Value, path: &str, choices: &[(&str, T)]) -> Option<T> {
        let names = || {
            choices
                .iter()
                .map(|(n, _)| format!("\"{n}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Value::String(s) = v else {
            self.err(
                path,
                format!("expected one of {}, found {}", names(), type_name(v)),
            );
            return None;
        };
        match choices.iter().find(|(n, _)| *n == s) {
            Some((_, t)) => Some(*t),
            None => {
                self.err(path, format!("\"{s}\" is not one of {}", names()));
                None
            }
        }
    }

    fn req_enum<T: Copy>(&mut self, o: &Obj<'_>, key: &str, choices: &[(&str, T)]) -> Option<T> {
        let v = self.req(o, key)?;
        self.enum_value(v, &join(&o.path, key), choices)
    }

    fn opt_enum<T: Copy>(
        &mut self,
        o: &Obj<'_>,
        key: &str,
        choices: &[(&str, T)],
    ) -> Option<Option<T>> {
        match o.map.get(key) {
            None => Some(None),
            Some(v) => self.enum_value(v, &join(&o.path, key), choices).map(Some),
        }
    }

    fn opt_bool(&mut self, o: &Obj<'_>, key: &str) -> Option<Option<bool>> {
        match o.map.get(key) {
            None => Some(None),
            Some(Value::Bool(b)) => Some(Some(*b)),
            Some(other) => {
                self.err(
                    join(&o.path, key),
                    format!("expected true or false, found {}", type_name(other)),
                );
                None
            }
        }
    }

    fn glob(&mut self, pattern: &str, path: &str) -> bool {
        // Validated in the form `compile` builds (lowercased), so that a glob accepted here
        // also compiles (`[Z-a]` is a valid range, `[z-a]` is not).
        match globset::GlobBuilder::new(&pattern.to_lowercase()).build() {
            Ok(_) => true,
            Err(e) => {
                self.err(path, format!("invalid glob \"{pattern}\": {}", e.kind()));
                false
            }
        }
    }

    fn globs(&mut self, patterns: &[String], path: &str, single: bool) -> bool {
        let mut ok = true;
        for (i, p) in patterns.iter().enumerate() {
            let at = if single {
                path.to_string()
            } else {
                idx(path, i)
            };
            ok &= self.glob(p, &at);
        }
        ok
    }

    fn timezone(&mut self, tz: &str, path: &str) -> bool {
        if tz.parse::<chrono_tz::Tz>().is_ok() {
            true
        } else {
            self.err(
                path,
                format!("\"{tz}\" is not a known IANA timezone (e.g. \"Europe/London\")"),
            );
            false
        }
    }

    // ---------------------------------------------------------------------------------------

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
        if let Some(Some(tz)) = &timezone {
            self.timezone(tz, "policy.timezone");
        }
        if let Some(v) = o.map.get("version") {
            if !(v.is_string() || v.is_u64()) {
                self.err("policy.version", "expected a string or a whole number");
            }
        }
        Some(PolicyMeta {
            name: name?,
            description: description?,
            mode: mode?.unwrap_or(Mode::Enforce),
            combine: combine?.unwrap_or(Combine::MostSevereWins),
            on_missing_default: on_missing_default?.unwrap_or(EffectType::Allow),
            timezone: timezone?,
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
        let condition = self
            .req(&o, "condition")
            .and_then(|c| self.condition(c, &join(path, "condition"), 0));
        let effect = self
            .req(&o, "effect")
            .and_then(|e| self.effect(e, &join(path, "effect")));
        let on_missing = self.opt_enum(&o, "onMissing", EFFECTS);
        let mode = self.opt_enum(&o, "mode", MODES);
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
        })
    }

    fn selector(&mut self, v: &Value, path: &str) -> Option<Selector> {
        let o = self.obj(v, path, "a selector", &["phase", "tool"])?;
        let phase = self.req_enum(
            &o,
            "phase",
            &[("tool.before", Phase::Before), ("tool.after", Phase::After)],
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

    fn tool_name(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(v, path, "a toolName condition", &["kind", "op", "value"])?;
        let op = self.req_enum(
            &o,
            "op",
            &[
                ("eq", 0),
                ("neq", 1),
                ("contains", 2),
                ("startsWith", 3),
                ("endsWith", 4),
                ("glob", 5),
                ("in", 6),
            ],
        )?;
        let sop = self.string_op(&o, op)?;
        if let StringOp::Glob(g) = &sop {
            if !self.glob(g, &join(path, "value")) {
                return None;
            }
        }
        Some(Condition::ToolName(sop))
    }

    /// Reads `value` for a string operator given by its index in
    /// eq, neq, contains, startsWith, endsWith, glob, in, regex.
    fn string_op(&mut self, o: &Obj<'_>, op: u8) -> Option<StringOp> {
        let vp = join(&o.path, "value");
        let v = self.req(o, "value")?;
        if op == 6 {
            let Value::Array(_) = v else {
                self.err(
                    vp,
                    format!(
                        "operator \"in\" needs an array of strings, found {}",
                        type_name(v)
                    ),
                );
                return None;
            };
            return self.str_list(v, &vp, false).map(StringOp::In);
        }
        let s = self.str_value(v, &vp)?;
        Some(match op {
            0 => StringOp::Eq(s),
            1 => StringOp::Neq(s),
            2 => StringOp::Contains(s),
            3 => StringOp::StartsWith(s),
            4 => StringOp::EndsWith(s),
            5 => StringOp::Glob(s),
            _ => {
                if let Err(e) = regex::RegexBuilder::new(&s).size_limit(1 << 20).build() {
                    self.err(vp, format!("invalid regex: {}", last_line(&e.to_string())));
                    return None;
                }
                StringOp::Regex(s)
            }
        })
    }

    fn tool_tag(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "a toolTag condition",
            &["kind", "op", "tag", "tags"],
        )?;
        let op = self.req_enum(&o, "op", &[("has", 0u8), ("anyOf", 1), ("allOf", 2)])?;
        if op == 0 {
            self.forbid(&o, "tags", "op \"has\" takes \"tag\"");
            self.non_empty_str(&o, "tag")
                .map(|t| Condition::ToolTag(TagOp::Has(t)))
        } else {
            self.forbid(&o, "tag", "ops \"anyOf\"/\"allOf\" take \"tags\"");
            let tags = self.req_str_list(&o, "tags", false)?;
            Some(Condition::ToolTag(if op == 1 {
                TagOp::AnyOf(tags)
            } else {
                TagOp::AllOf(tags)
            }))
        }
    }

    fn forbid(&mut self, o: &Obj<'_>, key: &str, why: &str) {
        if o.map.contains_key(key) {
            self.err(
                join(&o.path, key),
                format!("unexpected key \"{key}\": {why}"),
            );
        }
    }

    fn tool_arg(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "a toolArg condition",
            &["kind", "type", "op", "path", "value", "onMissing"],
        )?;
        let arg_path = self.dot_path(&o, "path");
        let on_missing = self.opt_enum(&o, "onMissing", EFFECTS);
        let ty = self.req_enum(
            &o,
            "type",
            &[("string", 0u8), ("number", 1), ("boolean", 2)],
        )?;
        let test = match ty {
            0 => {
                let op = self.req_enum(
                    &o,
                    "op",
                    &[
                        ("eq", 0),
                        ("neq", 1),
                        ("contains", 2),
                        ("startsWith", 3),
                        ("endsWith", 4),
                        ("in", 6),
                        ("regex", 7),
                    ],
                )?;
                ArgTest::String(self.string_op(&o, op)?)
            }
            1 => {
                let op = self.req_enum(&o, "op", CMP_OPS);
                let value = self.number(&o, "value");
                ArgTest::Number(op?, value?)
            }
            _ => {
                self.req_enum(&o, "op", &[("eq", ())])?;
                let v = self.req(&o, "value")?;
                let Value::Bool(b) = v else {
                    self.err(
                        join(path, "value"),
                        format!("expected true or false, found {}", type_name(v)),
                    );
                    return None;
                };
                ArgTest::Boolean(*b)
            }
        };
        Some(Condition::ToolArg {
            path: arg_path?,
            test,
            on_missing: on_missing?,
        })
    }

    fn enduser_tag(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "an enduserTag condition",
            &["kind", "op", "tag", "value", "values"],
        )?;
        let op = self.req_enum(
            &o,
            "op",
            &[("has", 0u8), ("hasValue", 1), ("hasValueAny", 2)],
        )?;
        let tag = self.non_empty_str(&o, "tag");
        let op = match op {
            0 => {
                self.forbid(&o, "value", "op \"has\" takes only \"tag\"");
                self.forbid(&o, "values", "op \"has\" takes only \"tag\"");
                EnduserTagOp::Has { tag: tag? }
            }
            1 => {
                self.forbid(&o, "values", "op \"hasValue\" takes \"value\"");
                let value = self.req_str(&o, "value");
                EnduserTagOp::HasValue {
                    tag: tag?,
                    value: value?,
                }
            }
            _ => {
                self.forbid(&o, "value", "op \"hasValueAny\" takes \"values\"");
                let values = self.req_str_list(&o, "values", false);
                EnduserTagOp::HasValueAny {
                    tag: tag?,
                    values: values?,
                }
            }
        };
        Some(Condition::EnduserTag(op))
    }

    fn execution_time(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "an executionTime condition",
            &["kind", "scope", "op", "ms", "onMissing"],
        )?;
        let scope = self.req_enum(
            &o,
            "scope",
            &[("tool", TimeScope::Tool), ("total", TimeScope::Total)],
        );
        let op = self.req_enum(&o, "op", CMP_OPS);
        let ms = self.non_negative(&o, "ms");
        let on_missing = self.opt_enum(&o, "onMissing", EFFECTS);
        Some(Condition::ExecutionTime {
            scope: scope?,
            op: op?,
            ms: ms?,
            on_missing: on_missing?,
        })
    }

    fn sequence(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "a sequence condition",
            &["kind", "mustHaveCalled", "mustNotHaveCalled"],
        )?;
        let must = self.seq_list(&o, "mustHaveCalled");
        let must_not = self.seq_list(&o, "mustNotHaveCalled");
        let (must, must_not) = (must?, must_not?);
        if must.is_none() && must_not.is_none() {
            self.err(
                path,
                "a sequence needs \"mustHaveCalled\" or \"mustNotHaveCalled\" (or both)",
            );
            return None;
        }
        Some(Condition::Sequence {
            must_have_called: must,
            must_not_have_called: must_not,
        })
    }

    fn seq_list(&mut self, o: &Obj<'_>, key: &str) -> Option<Option<Vec<SequenceEntry>>> {
        let Some(v) = o.map.get(key) else {
            return Some(None);
        };
        let lp = join(&o.path, key);
        let Value::Array(items) = v else {
            self.err(
                lp,
                format!(
                    "expected an array of globs or {{\"by\": \"toolTag\"}} entries, found {}",
                    type_name(v)
                ),
            );
            return None;
        };
        if items.is_empty() {
            self.err(lp, "must not be empty");
            return None;
        }
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let ip = idx(&lp, i);
            match item {
                Value::String(g) => {
                    ok &= self.glob(g, &ip);
                    out.push(SequenceEntry::Glob(g.clone()));
                }
                Value::Object(_) => {
                    let Some(eo) = self.obj(item, &ip, "a sequence entry", &["by", "tags", "op"])
                    else {
                        ok = false;
                        continue;
                    };
                    let by = self.req_enum(&eo, "by", &[("toolTag", ())]);
                    let tags = self.req_str_list(&eo, "tags", false);
                    let all = self.opt_enum(&eo, "op", &[("anyOf", false), ("allOf", true)]);
                    match (by, tags, all) {
                        (Some(()), Some(tags), Some(all)) => out.push(SequenceEntry::Tags {
                            tags,
                            all: all.unwrap_or(false),
                        }),
                        _ => ok = false,
                    }
                }
                other => {
                    self.err(
                        ip,
                        format!(
                            "expected a glob string or a {{\"by\": \"toolTag\"}} object, found {}",
                            type_name(other)
                        ),
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(Some(out))
    }

    fn max_calls(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "a maxCalls condition",
            &["kind", "selector", "max", "windowSeconds", "per"],
        )?;
        let selector = self
            .req(&o, "selector")
            .and_then(|s| self.call_selector(s, &join(path, "selector")));
        let max = self
            .req(&o, "max")
            .and_then(|m| self.count_value(m, &join(path, "max"), 0));
        let window_seconds = match o.map.get("windowSeconds") {
            None => Some(None),
            Some(w) => self
                .count_value(w, &join(path, "windowSeconds"), 1)
                .map(Some),
        };
        let per = self.opt_enum(&o, "per", SCOPES);
        Some(Condition::MaxCalls {
            selector: selector?,
            max: max?,
            window_seconds: window_seconds?,
            per: per?,
        })
    }

    fn call_selector(&mut self, v: &Value, path: &str) -> Option<CallSelector> {
        let o = self.obj(v, path, "a maxCalls selector", &["by", "patterns", "tags"])?;
        let by = self.req_enum(&o, "by", &[("toolName", 0u8), ("toolTag", 1)])?;
        if by == 0 {
            self.forbid(&o, "tags", "`by: toolName` takes \"patterns\"");
            let patterns = self.req_str_list(&o, "patterns", false)?;
            self.globs(&patterns, &join(path, "patterns"), false)
                .then_some(CallSelector::ToolName(patterns))
        } else {
            self.forbid(&o, "patterns", "`by: toolTag` takes \"tags\"");
            self.req_str_list(&o, "tags", false)
                .map(CallSelector::ToolTag)
        }
    }

    fn metric_window(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "a metricWindow condition",
            &[
                "kind",
                "scope",
                "metric",
                "aggregate",
                "windowSeconds",
                "op",
                "value",
                "filter",
                "onMissing",
            ],
        )?;
        let scope = self.req_enum(&o, "scope", SCOPES);
        let metric = self
            .req(&o, "metric")
            .and_then(|m| self.metric_ref(m, &join(path, "metric")));
        let aggregate = self.req_enum(
            &o,
            "aggregate",
            &[
                ("sum", Aggregate::Sum),
                ("avg", Aggregate::Avg),
                ("max", Aggregate::Max),
                ("min", Aggregate::Min),
                ("count", Aggregate::Count),
            ],
        );
        let window = self
            .req(&o, "windowSeconds")
            .and_then(|w| self.count_value(w, &join(path, "windowSeconds"), 1));
        let op = self.req_enum(&o, "op", CMP_OPS);
        let value = self.number(&o, "value");
        let filter = match o.map.get("filter") {
            None => Some(None),
            Some(f) => {
                let fp = join(path, "filter");
                self.obj(f, &fp, "a metric filter", &["toolName", "toolTag"])
                    .and_then(|fo| {
                        let names = self.opt_str_list(&fo, "toolName", true)?;
                        if let Some(names) = &names {
                            let single = matches!(fo.map.get("toolName"), Some(Value::String(_)));
                            if !self.globs(names, &join(&fp, "toolName"), single) {
                                return None;
                            }
                        }
                        let tags = self.opt_str_list(&fo, "toolTag", true)?;
                        Some(Some(MetricFilter {
                            tool_name: names,
                            tool_tag: tags,
                        }))
                    })
            }
        };
        let on_missing = self.opt_enum(&o, "onMissing", EFFECTS);
        Some(Condition::MetricWindow {
            scope: scope?,
            metric: metric?,
            aggregate: aggregate?,
            window_seconds: window?,
            op: op?,
            value: value?,
            filter: filter?,
            on_missing: on_missing?,
        })
    }

    fn metric_ref(&mut self, v: &Value, path: &str) -> Option<MetricRef> {
        let o = self.obj(v, path, "a metric", &["kind", "key"])?;
        let kind = self.req_enum(&o, "kind", &[("inbuilt", true), ("custom", false)])?;
        let key = self.non_empty_str(&o, "key")?;
        if kind {
            match InbuiltMetric::from_key(&key) {
                Some(m) => Some(MetricRef::Inbuilt(m)),
                None => {
                    let names: Vec<&str> = InbuiltMetric::ALL.iter().map(|m| m.key()).collect();
                    self.err(
                        join(path, "key"),
                        format!("\"{key}\" is not an inbuilt metric; one of {} (or use kind \"custom\")", names.join(", ")),
                    );
                    None
                }
            }
        } else {
            Some(MetricRef::Custom(key))
        }
    }

    fn time_gate(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "a timeGate condition",
            &["kind", "timezone", "windows", "onMissing"],
        )?;
        let timezone = self
            .req(&o, "timezone")
            .and_then(|t| self.tz_source(t, &join(path, "timezone")));
        let on_missing = self.opt_enum(&o, "onMissing", EFFECTS);
        let windows = self.req(&o, "windows").and_then(|w| {
            let wp = join(path, "windows");
            let Value::Array(items) = w else {
                self.err(
                    wp,
                    format!("expected an array of windows, found {}", type_name(w)),
                );
                return None;
            };
            if items.is_empty() {
                self.err(wp, "must not be empty");
                return None;
            }
            let mut out = Vec::new();
            let mut ok = true;
            for (i, item) in items.iter().enumerate() {
                match self.window(item, &idx(&wp, i)) {
                    Some(w) => out.push(w),
                    None => ok = false,
                }
            }
            ok.then_some(out)
        });
        Some(Condition::TimeGate {
            timezone: timezone?,
            windows: windows?,
            on_missing: on_missing?,
        })
    }

    fn tz_source(&mut self, v: &Value, path: &str) -> Option<TimezoneSource> {
        let o = self.obj(
            v,
            path,
            "a timezone source",
            &["source", "tag", "fallback", "tz"],
        )?;
        let src = self.req_enum(&o, "source", &[("enduserTag", true), ("static", false)])?;
        if src {
            self.forbid(
                &o,
                "tz",
                "source \"enduserTag\" takes \"tag\" (and \"fallback\")",
            );
            let tag = self.non_empty_str(&o, "tag");
            let fallback = self.opt_enum(&o, "fallback", &[("org", ())]);
            Some(TimezoneSource::EnduserTag {
                tag: tag?,
                fallback_org: fallback?.is_some(),
            })
        } else {
            self.forbid(&o, "tag", "source \"static\" takes \"tz\"");
            self.forbid(&o, "fallback", "source \"static\" takes \"tz\"");
            let tz = self.req_str(&o, "tz")?;
            self.timezone(&tz, &join(path, "tz"))
                .then_some(TimezoneSource::Static { tz })
        }
    }

    fn window(&mut self, v: &Value, path: &str) -> Option<TimeWindow> {
        let o = self.obj(v, path, "a time window", &["days", "start", "end"])?;
        let days = self.req_str_list(&o, "days", false).and_then(|days| {
            let mut out = Vec::new();
            let mut ok = true;
            for (i, d) in days.iter().enumerate() {
                match parse_day(d) {
                    Some(day) => out.push(day),
                    None => {
                        self.err(
                            idx(&join(path, "days"), i),
                            format!("\"{d}\" is not a day; use mon, tue, wed, thu, fri, sat, sun"),
                        );
                        ok = false;
                    }
                }
            }
            ok.then_some(out)
        });
        let mut time = |key: &str| {
            let s = self.req_str(&o, key)?;
            match TimeOfDay::parse(&s) {
                Some(t) => Some(t),
                None => {
                    self.err(
                        join(path, key),
                        format!("\"{s}\" is not HH:MM (00:00 to 24:00)"),
                    );
                    None
                }
            }
        };
        let start = time("start");
        let end = time("end");
        let (start, end) = (start?, end?);
        if start == end {
            self.err(
                path,
                format!("window start and end are both {start}: the window is empty"),
            );
            return None;
        }
        if start.0 == 1440 {
            self.err(join(path, "start"), "a window cannot start at 24:00");
            return None;
        }
        Some(TimeWindow {
            days: days?,
            start,
            end,
        })
    }

    fn require_subject(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "a requireSubject condition",
            &["kind", "subjectType", "idSystem", "role"],
        )?;
        let subject_type = self.non_empty_str(&o, "subjectType");
        let id_system = self.opt_str(&o, "idSystem");
        let role = self.opt_str(&o, "role");
        Some(Condition::RequireSubject(SubjectTest {
            subject_type: subject_type?,
            id_system: id_system?,
            role: role?,
        }))
    }

    fn signal(&mut self, v: &Value, path: &str) -> Option<Condition> {
        let o = self.obj(
            v,
            path,
            "a signal condition",
            &["kind", "key", "args", "op", "value", "onMissing"],
        )?;
        let key = self.non_empty_str(&o, "key");
        let args = match o.map.get("args") {
            None => Some(BTreeMap::new()),
            Some(Value::Object(m)) => {
                let ap = join(path, "args");
                let mut out = BTreeMap::new();
                let mut ok = true;
                for (name, b) in m {
                    match self.binding(b, &join(&ap, name)) {
                        Some(b) => {
                            out.insert(name.clone(), b);
                        }
                        None => ok = false,
                    }
                }
                ok.then_some(out)
            }
            Some(other) => {
                self.err(
                    join(path, "args"),
                    format!("expected an object of bindings, found {}", type_name(other)),
                );
                None
            }
        };
        let op = self.req_enum(
            &o,
            "op",
            &[
                ("eq", SignalOp::Eq),
                ("neq", SignalOp::Neq),
                ("gt", SignalOp::Gt),
                ("gte", SignalOp::Gte),
                ("lt", SignalOp::Lt),
                ("lte", SignalOp::Lte),
                ("in", SignalOp::In),
                ("nin", SignalOp::Nin),
            ],
        );
        let value = self.req(&o, "value").cloned();
        let on_missing = self.opt_enum(&o, "onMissing", EFFECTS);
        let (op, value) = (op?, value?);
        if matches!(op, SignalOp::In | SignalOp::Nin) {
            let is_array = match &value {
                Value::Array(_) => true,
                Value::String(s) => matches!(serde_json::from_str::<Value>(s), Ok(Value::Array(_))),
                _ => false,
            };
            if !is_array {
                self.err(
                    join(path, "value"),
                    format!(
                        "operator \"{}\" needs an array value, found {}",
                        op.as_str(),
                        type_name(&value)
                    ),
                );
                return None;
            }
        }
        Some(Condition::Signal {
            key: key?,
            args: args?,
            op,
            value,
            on_missing: on_missing?,
        })
    }

    fn binding(&mut self, v: &Value, path: &str) -> Option<SignalBinding> {
        let o = self.obj(
            v,
            path,
            "a signal binding",
            &[
                "from",
                "tag",
                "path",
                "subjectType",
                "role",
                "field",
                "value",
            ],
        )?;
        let from = self.req_enum(
            &o,
            "from",
            &[
                ("enduserId", 0u8),
                ("enduserTag", 1),
                ("toolName", 2),
                ("toolTag", 3),
                ("toolArg", 4),
                ("subject", 5),
                ("const", 6),
            ],
        )?;
        let allowed: &[&str] = match from {
            0 | 2 => &["from"],
            1 | 3 => &["from", "tag"],
            4 => &["from", "path"],
            5 => &["from", "subjectType", "role", "field"],
            _ => &["from", "value"],
        };
        let mut ok = true;
        for key in o.map.keys() {
            if !allowed.contains(&key.as_str()) && o.allowed.contains(&key.as_str()) {
                self.err(
                    join(path, key),
                    format!(
                        "unexpected key \"{key}\" for a binding from \"{}\"",
                        o.map["from"].as_str().unwrap_or("")
                    ),
                );
                ok = false;
            }
        }
        let b = match from {
            0 => SignalBinding::EnduserId,
            1 => SignalBinding::EnduserTag(self.non_empty_str(&o, "tag")?),
            2 => SignalBinding::ToolName,
            3 => SignalBinding::ToolTag(self.non_empty_str(&o, "tag")?),
            4 => SignalBinding::ToolArg(self.dot_path(&o, "path")?),
            5 => {
                let subject_type = self.non_empty_str(&o, "subjectType");
                let role = self.opt_str(&o, "role");
                let field = self.opt_enum(
                    &o,
                    "field",
                    &[
                        ("id", SubjectField::Id),
                        ("idSystem", SubjectField::IdSystem),
                    ],
                );
                SignalBinding::Subject {
                    subject_type: subject_type?,
                    role: role?,
                    field: field?.unwrap_or(SubjectField::Id),
                }
            }
            _ => SignalBinding::Const(self.req(&o, "value")?.clone()),
        };
        ok.then_some(b)
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
