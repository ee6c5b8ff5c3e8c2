//! Redaction of event bodies (tool args, outputs, ...) before events are sealed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use globset::{GlobSet, GlobSetBuilder};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{AuditError, EventKind, canonical_json, sha256_hex};
use crate::policy::Detector;

/// What to do with a value a redaction rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RedactAction {
    /// Remove the member (or replace an array element by `null`, keeping indexes stable).
    Drop,
    /// Replace the value by `"sha256:<hex>"` of its canonical JSON (prefixed by the salt, if set).
    Hash,
}

/// One redaction rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RedactionRule {
    /// Dot path into the event body, e.g. `args.password`, `output.items.*.email`
    /// (an optional leading `$.` is ignored). A segment is an object key or an array index;
    /// `*` matches every key or index at that level.
    pub path: String,
    /// Drop or hash.
    pub action: RedactAction,
    /// Only for tools whose name matches one of these globs (case-insensitive); all tools when
    /// absent. Events without a `tool.name` match only when this is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Only for these event kinds; all kinds when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<EventKind>>,
}

/// Redaction configuration: rules applied in order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RedactionConfig {
    /// The rules.
    #[serde(default)]
    pub rules: Vec<RedactionRule>,
    /// Prepended to the canonical JSON before hashing, so that low-entropy values (ids, phone
    /// numbers) cannot be recovered by hashing guesses. Keep it secret and stable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub salt: Option<String>,
}

#[derive(Debug, Clone)]
enum Segment {
    Any,
    Key(String),
}

#[derive(Debug, Clone)]
struct CompiledRule {
    path: Vec<Segment>,
    action: RedactAction,
    tools: Option<GlobSet>,
    kinds: Option<Vec<EventKind>>,
}

/// A compiled [`RedactionConfig`], plus the detectors of the engine's redacting
/// `sensitiveData` conditions (shared by the clones: set when policies are loaded).
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    rules: Vec<CompiledRule>,
    salt: String,
    found: Arc<FoundDetectors>,
}

/// The detectors whose findings are redacted from every event (see
/// [`Redactor::set_detectors`]).
#[derive(Debug, Default)]
struct FoundDetectors {
    any: AtomicBool,
    list: RwLock<Arc<[Detector]>>,
}

impl RedactionConfig {
    /// Compiles the configuration.
    pub fn compile(&self) -> Result<Redactor, AuditError> {
        Redactor::new(self)
    }
}

impl Redactor {
    /// Compiles `config`; an empty path or an invalid tool glob is an error.
    pub fn new(config: &RedactionConfig) -> Result<Redactor, AuditError> {
        let mut rules = Vec::with_capacity(config.rules.len());
        for (i, rule) in config.rules.iter().enumerate() {
            let text = rule.path.strip_prefix("$.").unwrap_or(&rule.path);
            if text.is_empty() || text.split('.').any(str::is_empty) {
                return Err(AuditError::Config(format!(
                    "redaction.rules[{i}].path: {:?} is not a dot path",
                    rule.path
                )));
            }
            let path = text
                .split('.')
                .map(|s| {
                    if s == "*" {
                        Segment::Any
                    } else {
                        Segment::Key(s.to_string())
                    }
                })
                .collect();
            let tools = match &rule.tools {
                None => None,
                Some(globs) => {
                    let mut b = GlobSetBuilder::new();
                    for (j, g) in globs.iter().enumerate() {
                        let glob = globset::GlobBuilder::new(g)
                            .case_insensitive(true)
                            .build()
                            .map_err(|e| {
                                AuditError::Config(format!(
                                    "redaction.rules[{i}].tools[{j}]: {g:?}: {e}"
                                ))
                            })?;
                        b.add(glob);
                    }
                    Some(b.build().map_err(|e| {
                        AuditError::Config(format!("redaction.rules[{i}].tools: {e}"))
                    })?)
                }
            };
            rules.push(CompiledRule {
                path,
                action: rule.action,
                tools,
                kinds: rule.kinds.clone(),
            });
        }
        Ok(Redactor {
            rules,
            salt: config.salt.clone().unwrap_or_default(),
            found: Arc::default(),
        })
    }

    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Sets the detectors whose findings are redacted from every event body, wherever they
    /// lie (strings, keys, integers for `credit_card`): those of the loaded policies'
    /// redacting `sensitiveData` conditions.
    pub(crate) fn set_detectors(&self, detectors: Arc<[Detector]>) {
        self.found
            .any
            .store(!detectors.is_empty(), Ordering::Release);
        *self.found.list.write() = detectors;
    }

    /// Whether a rule may apply to events of `kind` (its `kinds` include it or are absent;
    /// tools are not looked at), or detectors are set. When neither, the body needs no
    /// redaction.
    pub fn applies_to(&self, kind: EventKind) -> bool {
        self.found.any.load(Ordering::Acquire)
            || self
                .rules
                .iter()
                .any(|r| r.kinds.as_ref().is_none_or(|k| k.contains(&kind)))
    }

    /// Redacts `body` of an event of `kind` in place. Call it before [`super::RunChain::seal`],
    /// so the hash covers the redacted body.
    pub fn redact(&self, kind: EventKind, body: &mut Map<String, Value>) {
        if self.found.any.load(Ordering::Acquire) {
            let detectors = self.found.list.read().clone();
            let mut v = Value::Object(std::mem::take(body));
            crate::detect::redact_found(&mut v, &detectors);
            if let Value::Object(m) = v {
                *body = m;
            }
        }
        if self.rules.is_empty() {
            return;
        }
        let tool_name = body
            .get("tool")
            .and_then(|t| t.get("name"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        for rule in &self.rules {
            if let Some(kinds) = &rule.kinds
                && !kinds.contains(&kind)
            {
                continue;
            }
            if let Some(tools) = &rule.tools {
                match &tool_name {
                    Some(name) if tools.is_match(name) => {}
                    _ => continue,
                }
            }
            redact_map(body, &rule.path, rule.action, &self.salt);
        }
    }

    fn hash_value(v: &Value, salt: &str) -> Value {
        let mut text = String::with_capacity(salt.len() + 64);
        text.push_str(salt);
        text.push_str(&canonical_json(v));
        Value::String(format!("sha256:{}", sha256_hex(&text)))
    }
}

fn redact_map(map: &mut Map<String, Value>, path: &[Segment], action: RedactAction, salt: &str) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let keys: Vec<String> = match first {
        Segment::Any => map.keys().cloned().collect(),
        Segment::Key(k) => {
            if map.contains_key(k) {
                vec![k.clone()]
            } else {
                Vec::new()
            }
        }
    };
    for key in keys {
        if rest.is_empty() {
            match action {
                RedactAction::Drop => {
                    map.remove(&key);
                }
                RedactAction::Hash => {
                    if let Some(v) = map.get_mut(&key) {
                        *v = Redactor::hash_value(v, salt);
                    }
                }
            }
        } else if let Some(child) = map.get_mut(&key) {
            redact_value(child, rest, action, salt);
        }
    }
}

fn redact_value(v: &mut Value, path: &[Segment], action: RedactAction, salt: &str) {
    match v {
        Value::Object(map) => redact_map(map, path, action, salt),
        Value::Array(items) => {
            let Some((first, rest)) = path.split_first() else {
                return;
            };
            let indexes: Vec<usize> = match first {
                Segment::Any => (0..items.len()).collect(),
                Segment::Key(k) => match k.parse::<usize>() {
                    Ok(i) if i < items.len() => vec![i],
                    _ => Vec::new(),
                },
            };
            for i in indexes {
                let Some(item) = items.get_mut(i) else {
                    continue;
                };
                if rest.is_empty() {
                    *item = match action {
                        RedactAction::Drop => Value::Null,
                        RedactAction::Hash => Redactor::hash_value(item, salt),
                    };
                } else {
                    redact_value(item, rest, action, salt);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn drops_and_hashes_by_path() {
        let cfg: RedactionConfig = serde_json::from_value(json!({
            "rules": [
                {"path": "args.password", "action": "drop"},
                {"path": "$.output.items.*.email", "action": "hash"},
                {"path": "args.card", "action": "hash", "tools": ["pay*"]},
                {"path": "args.ssn", "action": "drop", "kinds": ["tool.result"]}
            ]
        }))
        .unwrap();
        let r = cfg.compile().unwrap();
        let mut body = json!({
            "tool": {"name": "getUser"},
            "args": {"password": "x", "card": "4111", "ssn": "1"},
            "output": {"items": [{"email": "a@b"}, {"name": "n"}]}
        })
        .as_object()
        .cloned()
        .unwrap();
        r.redact(EventKind::ToolDecision, &mut body);
        assert_eq!(body["args"], json!({"card": "4111", "ssn": "1"}));
        let expected = format!("sha256:{}", sha256_hex("\"a@b\""));
        assert_eq!(body["output"]["items"][0]["email"], json!(expected));
        assert_eq!(body["output"]["items"][1], json!({"name": "n"}));

        let mut body2 =
            json!({"tool": {"name": "PayInvoice"}, "args": {"card": "4111", "ssn": "1"}})
                .as_object()
                .cloned()
                .unwrap();
        r.redact(EventKind::ToolResult, &mut body2);
        assert!(
            body2["args"]["card"]
                .as_str()
                .unwrap()
                .starts_with("sha256:")
        );
        assert!(body2["args"].get("ssn").is_none());
    }

    #[test]
    fn bad_paths_are_errors() {
        let cfg = RedactionConfig {
            rules: vec![RedactionRule {
                path: "a..b".into(),
                action: RedactAction::Drop,
                tools: None,
                kinds: None,
            }],
            salt: None,
        };
        assert!(cfg.compile().is_err());
    }
}
