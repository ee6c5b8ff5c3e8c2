//! Helpers shared by the integration tests: engine set-ups here, child processes in
//! `process` and a `toolgate collect` server in `collect`.
#![allow(dead_code)]

pub mod collect;
pub mod process;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;
use toolgate::engine::{
    Decision, EngineBuilder, GovernanceEngine, ManualClock, Run, RunContext, ToolCall,
};
use toolgate::policy::{Policy, parse_policy};

/// Parses a policy, panicking with the errors.
pub fn policy(json: &str) -> Policy {
    parse_policy(json, None).unwrap_or_else(|e| panic!("policy does not parse: {e}"))
}

/// A UTC instant from RFC 3339.
pub fn at(s: &str) -> DateTime<Utc> {
    s.parse().unwrap_or_else(|e| panic!("bad time {s}: {e}"))
}

/// A manual clock at 2026-01-05T09:00:00Z (a Monday).
pub fn clock() -> ManualClock {
    ManualClock::new(at("2026-01-05T09:00:00Z"))
}

/// A builder with `policy` and `clock`.
pub fn builder(json: &str, clock: &ManualClock) -> EngineBuilder {
    GovernanceEngine::builder()
        .policy(policy(json))
        .clock(Arc::new(clock.clone()))
}

/// An engine with `policy` and `clock`.
pub fn engine(json: &str, clock: &ManualClock) -> GovernanceEngine {
    builder(json, clock).build().expect("engine builds")
}

/// A call.
pub fn call(id: &str, name: &str, args: Value) -> ToolCall {
    ToolCall::new(id, name, args)
}

/// A run context with an end user.
pub fn ctx_user(run: &str, agent: &str, user: &str, tags: &[(&str, &str)]) -> RunContext {
    RunContext::new(run, agent).with_enduser(
        user,
        tags.iter().map(|(k, v)| (k.to_string(), v.to_string())),
    )
}

/// One rule as a bare-array policy.
pub fn rule(id: &str, phase: &str, tool: &str, condition: &str, effect: &str) -> String {
    format!(
        r#"[{{"id": "{id}", "name": "{id}", "priority": 1, "enabled": true,
            "selector": {{"phase": "{phase}", "tool": {tool}}},
            "condition": {condition},
            "effect": {{"type": "{effect}", "reason": "{id} triggered"}}}}]"#
    )
}

/// One rule, `sig`, blocking every tool while signal `risk` (no args) is above 5.
pub fn risk_rule() -> String {
    rule(
        "sig",
        "tool.before",
        r#"{"name": "*"}"#,
        r#"{"kind": "signal", "key": "risk", "args": {}, "op": "gt", "value": 5}"#,
        "block",
    )
}

/// A policy of rules each in play only for the tool named like the rule (probe it with
/// [`probe`] / [`triggered`]).
pub fn probes(meta: &str, rules: &[(&str, &str)]) -> String {
    let rules: Vec<String> = rules
        .iter()
        .map(|(id, cond)| {
            format!(
                r#"{{"id": "{id}", "name": "{id}", "priority": 1, "enabled": true,
                    "selector": {{"phase": "tool.before", "tool": {{"name": "{id}"}}}},
                    "condition": {cond}, "effect": {{"type": "block"}}}}"#
            )
        })
        .collect();
    format!(
        r#"{{"policy": {{"name": "p"{meta}}}, "rules": [{}]}}"#,
        rules.join(",")
    )
}

pub async fn probe(run: &Run, id: &str) -> Decision {
    run.before_tool(call("probe", id, serde_json::json!({})))
        .await
}

pub async fn triggered(run: &Run, id: &str) -> bool {
    let d = probe(run, id).await;
    assert_eq!(d.evaluated.len(), 1, "{d:?}");
    d.evaluated[0].triggered
}

/// What a decision says, without what differs between two runs deciding alike: its latency,
/// its signals' durations, a review's id.
pub fn said(d: &Decision) -> Value {
    let mut v = serde_json::to_value(d).expect("a decision serializes");
    let o = v.as_object_mut().expect("an object");
    o.remove("latencyNs");
    for s in o
        .get_mut("signals")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(s) = s.as_object_mut() {
            s.remove("durationUs");
        }
    }
    if let Some(h) = o.get_mut("hitl").and_then(Value::as_object_mut) {
        h.remove("reviewId");
    }
    v
}
