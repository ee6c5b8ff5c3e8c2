//! One rule: its selector (tools, phase, agents), effect and conditions.

use super::*;

impl Parser {
    pub(super) fn rules(&mut self, v: &Value, path: &str) -> Option<Vec<Rule>> {
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

    pub(super) fn rule(&mut self, v: &Value, path: &str) -> Option<Rule> {
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

    pub(super) fn selector(&mut self, v: &Value, path: &str) -> Option<Selector> {
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

    pub(super) fn effect(&mut self, v: &Value, path: &str) -> Option<Effect> {
        let o = self.obj(v, path, "an effect", &["type", "reason"])?;
        let kind = self.req_enum(&o, "type", EFFECTS);
        let reason = self.opt_str(&o, "reason");
        Some(Effect {
            kind: kind?,
            reason: reason?,
        })
    }
}
