//! The document: a bare rule list or an object with its metadata (name, mode, expiry,
//! agents) and rules.

use super::*;

impl Parser {
    pub(super) fn document(&mut self, v: &Value, default_name: Option<String>) -> Option<Policy> {
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

    pub(super) fn meta(&mut self, v: &Value, default_name: Option<String>) -> Option<PolicyMeta> {
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
    pub(super) fn expiry(
        &mut self,
        o: &Obj<'_>,
    ) -> (Option<Option<u64>>, Option<Option<OnExpire>>) {
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

    pub(super) fn agent_selector(&mut self, v: &Value, path: &str) -> Option<AgentSelector> {
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
}
