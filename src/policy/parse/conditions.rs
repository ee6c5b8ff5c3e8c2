//! The condition dispatch: `allOf` / `anyOf` / `not` and every condition kind, handed to
//! the readers in `tools.rs`, `signals.rs`, `sensitive.rs` and `llm.rs`.

use super::*;

impl Parser {
    pub(super) fn condition(&mut self, v: &Value, path: &str, depth: usize) -> Option<Condition> {
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
