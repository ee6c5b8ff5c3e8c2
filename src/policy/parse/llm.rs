//! What an `llm.before` rule may say (a toolgate extension: Handlebar has no such phase).
//!
//! A model call has a model name and messages; it has no tags, no arguments of its own, no
//! subjects and no result. The conditions that make sense before it are checked here, with
//! the rule's id in the message, so a rule that could never mean anything fails to load:
//! `metricWindow`, `maxCalls` (model calls, selected by `toolName` = the model's name),
//! `executionTime` (`scope: "total"`), `enduserTag`, `timeGate`, `signal` (bindings that exist
//! for a model call), `custom`, `sensitiveData` with `target: "llmInput"`, and `and`/`or`/`not`.

use super::*;

/// The condition kinds allowed in an `llm.before` rule.
pub const LLM_CONDITION_KINDS: &[&str] = &[
    "metricWindow",
    "maxCalls",
    "executionTime",
    "enduserTag",
    "timeGate",
    "signal",
    "custom",
    "sensitiveData",
    "and",
    "or",
    "not",
];

impl Parser {
    /// Checks the selector's `tool` part of an `llm.before` rule: a name glob list or nothing.
    pub(super) fn llm_selector(&mut self, s: &Selector, path: &str, rule_id: &str) {
        if let Some(t) = &s.tool
            && (t.tags_all.is_some() || t.tags_any.is_some())
        {
            self.err(
                join(path, "tool"),
                format!(
                    "rule \"{rule_id}\": an llm.before selector matches the model's name only \
                     (\"tool\": {{\"name\": \"gpt-*\"}}); models have no tags"
                ),
            );
        }
    }

    /// Checks every condition of an `llm.before` rule, reporting each one that does not apply
    /// to a model call.
    pub(super) fn llm_condition(&mut self, c: &Condition, path: &str, rule_id: &str) {
        let bad = |what: String| format!("rule \"{rule_id}\" (phase llm.before): {what}");
        match c {
            Condition::And(cs) | Condition::Or(cs) => {
                let key = if matches!(c, Condition::And(_)) {
                    "all"
                } else {
                    "any"
                };
                for (i, part) in cs.iter().enumerate() {
                    self.llm_condition(part, &idx(&join(path, key), i), rule_id);
                }
            }
            Condition::Not(inner) => self.llm_condition(inner, &join(path, "not"), rule_id),
            Condition::MetricWindow { .. }
            | Condition::EnduserTag(_)
            | Condition::TimeGate { .. }
            | Condition::Custom { .. } => {}
            Condition::MaxCalls {
                selector,
                tag_filter,
                ..
            } => {
                if matches!(selector, CallSelector::ToolTag(_)) {
                    self.err(
                        join(path, "selector"),
                        bad("maxCalls counts model calls by model name: use {\"by\": \
                             \"toolName\", \"patterns\": [\"gpt-*\"]} (models have no tags)"
                            .into()),
                    );
                }
                if tag_filter.is_some() {
                    self.err(
                        join(path, "tagFilter"),
                        bad("models have no tags: tagFilter does not apply".into()),
                    );
                }
            }
            Condition::ExecutionTime { scope, .. } => {
                if *scope != TimeScope::Total {
                    self.err(
                        join(path, "scope"),
                        bad(
                            "only scope \"total\" (time since the run started) is known \
                             before a model call"
                                .into(),
                        ),
                    );
                }
            }
            Condition::Signal { args, .. } => {
                for (name, b) in args {
                    let why = match b {
                        SignalBinding::ToolTag(_) => Some("models have no tags"),
                        SignalBinding::Subject { .. } => Some("a model call has no subjects"),
                        _ => None,
                    };
                    if let Some(why) = why {
                        self.err(
                            join(&join(path, "args"), name),
                            bad(format!(
                                "this binding does not apply to a model call: {why}"
                            )),
                        );
                    }
                }
            }
            Condition::SensitiveData { target, .. } => {
                if *target != SensitiveTarget::LlmInput {
                    self.err(
                        join(path, "target"),
                        bad(format!(
                            "sensitiveData scans the model's messages here: target must be \
                             \"llmInput\", not \"{}\"",
                            target.as_str()
                        )),
                    );
                }
            }
            other => self.err(
                join(path, "kind"),
                bad(format!(
                    "\"{}\" does not apply to a model call; allowed: {}",
                    other.kind(),
                    LLM_CONDITION_KINDS.join(", ")
                )),
            ),
        }
    }
}
