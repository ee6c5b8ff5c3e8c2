//! Cedar's stateless authorization workload (`benches/data/cedar-workload.json`, a copy of the
//! shared benchmark workload): the 10 policies of a Cedar benchmark as toolgate rules
//! (optionally padded with fillers that never select a called tool, to 1,000 rules), 6 end
//! users whose tags are the principals' attributes, and 20 calls, each with Cedar's decision.
//!
//! Each call is its own run: start a run for the call's end user, `before_tool`, end.

use serde_json::{Value, json};
use toolgate::engine::{GovernanceEngine, RunContext, ToolCall};
use toolgate::policy::{EffectType, Policy, parse_policy_value};

/// One request of the workload.
pub struct CedarCall {
    /// The end user's context (its tags: the principal's attributes).
    pub context: RunContext,
    /// The call (tags from the tool list).
    pub call: ToolCall,
    /// Cedar's decision.
    pub expect: EffectType,
}

/// The parsed workload.
pub struct CedarWorkload {
    /// The 10 rules, as JSON.
    pub rules10: Vec<Value>,
    /// 990 filler rules.
    pub filler: Vec<Value>,
    /// The 20 requests, in order.
    pub calls: Vec<CedarCall>,
}

impl CedarWorkload {
    /// Reads `benches/data/cedar-workload.json`.
    pub fn load() -> CedarWorkload {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/benches/data/cedar-workload.json"
        );
        let text = std::fs::read_to_string(path).expect("the Cedar workload is readable");
        let w: Value = serde_json::from_str(&text).expect("the Cedar workload is JSON");
        let rules = |k: &str| -> Vec<Value> { w[k].as_array().expect("a rule list").clone() };
        let tags = |v: &Value| -> Vec<String> {
            v.as_array()
                .expect("tags")
                .iter()
                .map(|t| t.as_str().expect("a tag").to_string())
                .collect()
        };
        let calls = w["calls"]
            .as_array()
            .expect("calls")
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let user = c["enduser"].as_str().expect("an end user");
                let user_tags: Vec<(String, String)> = w["endusers"][user]
                    .as_object()
                    .expect("the end user's tags")
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().expect("a tag value").to_string()))
                    .collect();
                let tool = c["tool"].as_str().expect("a tool");
                CedarCall {
                    context: RunContext::new(format!("cedar-{i}"), "cedar-bench")
                        .with_enduser(user, user_tags),
                    call: ToolCall::new(format!("c{i}"), tool, c["args"].clone())
                        .with_tags(tags(&w["tools"][tool])),
                    expect: match c["expect"].as_str().expect("an expected decision") {
                        "allow" => EffectType::Allow,
                        "block" => EffectType::Block,
                        other => panic!("unexpected decision {other}"),
                    },
                }
            })
            .collect();
        CedarWorkload {
            rules10: rules("rules10"),
            filler: rules("filler990"),
            calls,
        }
    }

    /// The policy with `n` rules (10 or up to 1,000): the 10, then fillers.
    pub fn policy(&self, n: usize) -> Policy {
        let mut rules = self.rules10.clone();
        rules.extend(self.filler.iter().take(n.saturating_sub(10)).cloned());
        let doc = json!({"policy": {"name": format!("cedar-{n}")}, "rules": rules});
        parse_policy_value(&doc, None).expect("the Cedar policy parses")
    }

    /// An engine on the `n`-rule policy (the system clock: no rule reads the time).
    pub fn engine(&self, n: usize) -> GovernanceEngine {
        GovernanceEngine::builder()
            .policy(self.policy(n))
            .build()
            .expect("the Cedar policy compiles")
    }
}
