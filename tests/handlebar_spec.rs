//! Handlebar's current rule spec (design §11), beyond sensitiveData and the stateful kinds:
//! toolArg scan mode and exists/notExists, custom conditions (builder and run-time
//! registration, context, failures), policy agentSelector and enabled, and the new shapes'
//! validation with JSON paths.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use toolgate::engine::{CustomContext, GovernanceEngine, RunContext};
use toolgate::policy::{EffectType, parse_policy};

async fn effect(engine: &GovernanceEngine, tool: &str, args: Value) -> EffectType {
    let run = engine.start_run(RunContext::new("r", "a"));
    run.before_tool(call("c", tool, args)).await.effect
}

#[tokio::test]
async fn tool_arg_scan_mode_tests_every_leaf_of_its_type() {
    let policy = probes(
        "",
        &[
            (
                "str",
                r#"{"kind": "toolArg", "type": "string", "op": "contains", "value": "DROP TABLE"}"#,
            ),
            (
                "num",
                r#"{"kind": "toolArg", "type": "number", "op": "gt", "value": 1000}"#,
            ),
            (
                "bool",
                r#"{"kind": "toolArg", "type": "boolean", "op": "eq", "value": true}"#,
            ),
        ],
    );
    let engine = engine(&policy, &clock());
    let nested = json!({"a": [1, {"b": "x; DROP TABLE users"}], "n": {"m": [5, 2000]}, "f": [false, {"g": true}]});
    assert_eq!(
        effect(&engine, "str", nested.clone()).await,
        EffectType::Block
    );
    assert_eq!(
        effect(&engine, "num", nested.clone()).await,
        EffectType::Block
    );
    assert_eq!(effect(&engine, "bool", nested).await, EffectType::Block);
    let clean = json!({"a": ["select"], "n": 5, "f": false, "s": "1001"});
    for probe in ["str", "num", "bool"] {
        // No leaf of the type satisfies the test (or none of that type): false, not missing.
        let run = engine.start_run(RunContext::new("r", "a"));
        let d = run.before_tool(call("c", probe, clean.clone())).await;
        assert_eq!(d.effect, EffectType::Allow, "{probe}");
        assert!(d.evaluated[0].missing.is_empty());
    }
}

#[tokio::test]
async fn tool_arg_exists_and_not_exists_are_never_missing_data() {
    let policy = probes(
        r#", "onMissingDefault": "block""#,
        &[
            (
                "has",
                r#"{"kind": "toolArg", "op": "exists", "path": "cc.0"}"#,
            ),
            (
                "lacks",
                r#"{"kind": "toolArg", "op": "notExists", "path": "reason"}"#,
            ),
        ],
    );
    let engine = engine(&policy, &clock());
    assert_eq!(
        effect(&engine, "has", json!({"cc": ["x"]})).await,
        EffectType::Block
    );
    assert_eq!(
        effect(&engine, "has", json!({"cc": [null]})).await,
        EffectType::Block,
        "null exists"
    );
    assert_eq!(
        effect(&engine, "has", json!({"cc": []})).await,
        EffectType::Allow
    );
    assert_eq!(
        effect(&engine, "has", json!("scalar")).await,
        EffectType::Allow
    );
    assert_eq!(effect(&engine, "lacks", json!({})).await, EffectType::Block);
    assert_eq!(
        effect(&engine, "lacks", json!({"reason": ""})).await,
        EffectType::Allow
    );
}

/// What a custom condition was called with: args, tool name, tool tags, call args, run id,
/// end user.
type Seen = (Value, String, Vec<String>, Value, String, Option<String>);

const CUSTOM: &str = r#"[{"id": "vip", "name": "vip", "priority": 1, "enabled": true,
    "selector": {"phase": "tool.before", "tool": {"name": "refund"}},
    "condition": {"kind": "custom", "name": "over_limit", "args": {"limit": 100}},
    "effect": {"type": "block", "reason": "over the customer's limit"}}]"#;

#[tokio::test]
async fn custom_conditions_get_args_and_context_and_fail_like_signals() {
    let seen: Arc<parking_lot::Mutex<Vec<Seen>>> = Arc::default();
    let s = seen.clone();
    let engine = builder(CUSTOM, &clock())
        .signal_timeout(Duration::from_millis(50))
        .custom_condition("over_limit", move |args: Value, ctx: CustomContext| {
            let s = s.clone();
            async move {
                let over = ctx.args["amount"].as_f64().unwrap_or(0.0)
                    > args["limit"].as_f64().unwrap_or(0.0);
                s.lock().push((
                    args,
                    ctx.tool_name.clone(),
                    ctx.tool_tags.clone(),
                    ctx.args.clone(),
                    ctx.run.run_id.clone(),
                    ctx.run.enduser.as_ref().map(|u| u.id.clone()),
                ));
                if ctx.args["amount"] == json!("boom") {
                    return Err("cannot tell".to_string());
                }
                Ok(over)
            }
        })
        .build()
        .unwrap();
    let run = engine.start_run(ctx_user("r9", "a", "u1", &[]));
    let c = call("c1", "refund", json!({"amount": 500})).with_tags(["money"]);
    let d = run.before_tool(c).await;
    assert_eq!(
        (d.effect, d.reason.as_deref()),
        (EffectType::Block, Some("over the customer's limit"))
    );
    assert_eq!(
        seen.lock()[0],
        (
            json!({"limit": 100}),
            "refund".into(),
            vec!["money".to_string()],
            json!({"amount": 500}),
            "r9".into(),
            Some("u1".into())
        )
    );
    assert!(
        run.before_tool(call("c2", "refund", json!({"amount": 5})))
            .await
            .is_allowed()
    );
    // An error is missing data: the policy default (allow) applies, and it is recorded.
    let d = run
        .before_tool(call("c3", "refund", json!({"amount": "boom"})))
        .await;
    assert_eq!(d.effect, EffectType::Allow);
    assert_eq!(
        d.evaluated[0].missing,
        ["custom over_limit: the function failed: cannot tell"]
    );
}

#[tokio::test]
async fn custom_conditions_unregistered_slow_or_panicking_are_missing_data_and_register_at_run_time()
 {
    let policy = CUSTOM.replace(r#""effect""#, r#""onMissing": "hitl", "effect""#);
    let engine = builder(&policy, &clock())
        .signal_timeout(Duration::from_millis(30))
        .build()
        .unwrap();
    let run = engine.start_run(RunContext::new("r1", "a"));
    let d = run
        .before_tool(call("c1", "refund", json!({"amount": 1})))
        .await;
    assert_eq!(d.effect, EffectType::Hitl);
    assert_eq!(
        d.evaluated[0].missing,
        ["custom over_limit: no function registered"]
    );

    let calls = Arc::new(AtomicUsize::new(0));
    let n = calls.clone();
    engine.register_condition("over_limit", move |_args: Value, ctx: CustomContext| {
        n.fetch_add(1, Ordering::SeqCst);
        async move {
            match ctx.args["mode"].as_str() {
                Some("slow") => {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    Ok(false)
                }
                Some("panic") => panic!("custom condition panicked"),
                _ => Ok(false),
            }
        }
    });
    let run = engine.start_run(RunContext::new("r2", "a"));
    assert!(
        run.before_tool(call("c1", "refund", json!({})))
            .await
            .is_allowed()
    );
    for (i, mode) in ["slow", "panic"].into_iter().enumerate() {
        // hitl stops a run: one run per case.
        let run = engine.start_run(RunContext::new(format!("m{i}"), "a"));
        let d = run
            .before_tool(call(&format!("x{i}"), "refund", json!({"mode": mode})))
            .await;
        assert_eq!(d.effect, EffectType::Hitl, "{mode}");
        assert!(
            d.evaluated[0].missing[0].starts_with("custom over_limit: "),
            "{:?}",
            d.evaluated[0].missing
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

fn gated(selector: &str) -> String {
    format!(
        r#"{{"policy": {{"name": "gated", "agentSelector": {selector}}}, "rules": [{{"id": "no-shell", "name": "no shell",
          "priority": 1, "enabled": true, "selector": {{"phase": "tool.before", "tool": {{"name": "shell"}}}},
          "condition": {{"kind": "toolName", "op": "eq", "value": "shell"}}, "effect": {{"type": "block"}}}}]}}"#
    )
}

#[tokio::test]
async fn agent_selector_applies_a_policy_only_to_the_runs_it_selects() {
    let cases: [(&str, &str, &[&str], bool); 8] = [
        (r#"{"anyOfSlugs": ["support-*"]}"#, "Support-Bot", &[], true),
        (r#"{"anyOfSlugs": ["support-*"]}"#, "coder", &[], false),
        (r#"{"anyOfTags": ["prod", "beta"]}"#, "x", &["BETA"], true),
        (r#"{"anyOfTags": ["prod", "beta"]}"#, "x", &["dev"], false),
        (
            r#"{"allOfTags": ["prod", "eu"]}"#,
            "x",
            &["eu", "prod", "z"],
            true,
        ),
        (r#"{"allOfTags": ["prod", "eu"]}"#, "x", &["prod"], false),
        (
            r#"{"anyOfSlugs": ["s*"], "allOfTags": ["prod"]}"#,
            "s1",
            &["dev"],
            false,
        ),
        (r#"{}"#, "anyone", &[], true),
    ];
    for (selector, agent, tags, applies) in cases {
        let engine = engine(&gated(selector), &clock());
        let run =
            engine.start_run(RunContext::new("r", agent).with_agent_tags(tags.iter().copied()));
        let d = run.before_tool(call("c", "shell", json!({}))).await;
        assert_eq!(d.is_allowed(), !applies, "{selector} {agent} {tags:?}");
        assert_eq!(d.evaluated.len(), usize::from(applies));
    }
    // A disabled policy applies to no run.
    let off = gated("{}").replace(
        r#""name": "gated","#,
        r#""name": "gated", "enabled": false,"#,
    );
    assert_eq!(
        effect(&engine(&off, &clock()), "shell", json!({})).await,
        EffectType::Allow
    );
}

/// Each invalid shape and the JSON path + message its error must name.
#[test]
fn new_shapes_are_validated_with_json_paths() {
    let cases: &[(&str, &str, &str)] = &[
        (
            r#"{"kind": "sensitiveData", "detectors": [{"detector": "email"}]}"#,
            "rules[0].condition",
            "missing required key \"target\"",
        ),
        (
            r#"{"kind": "sensitiveData", "target": "toolOutput", "detectors": [{"detector": "email"}]}"#,
            "rules[0].condition.target",
            "only in a rule whose selector.phase is \"tool.after\"",
        ),
        (
            r#"{"kind": "sensitiveData", "target": "toolArg", "detectors": []}"#,
            "rules[0].condition.detectors",
            "must not be empty",
        ),
        (
            r#"{"kind": "sensitiveData", "target": "toolArg", "detectors": [{"detector": "ssn"}]}"#,
            "rules[0].condition.detectors[0].detector",
            "\"ssn\" is not one of",
        ),
        (
            r#"{"kind": "sensitiveData", "target": "toolArg", "op": "someOf", "detectors": [{"detector": "jwt"}]}"#,
            "rules[0].condition.op",
            "is not one of",
        ),
        (
            r#"{"kind": "sensitiveData", "target": "toolArg", "path": "a..b", "detectors": [{"detector": "jwt"}]}"#,
            "rules[0].condition.path",
            "not a dot path",
        ),
        (
            r#"{"kind": "sensitiveData", "target": "toolArg", "detectors": [{"detector": "jwt", "extra": 1}]}"#,
            "rules[0].condition.detectors[0].extra",
            "unknown key",
        ),
        (
            r#"{"kind": "sensitiveData", "target": "toolArg", "detectors": [{"detector": "credit_card", "subCondition": {"check": "domain", "op": "eq", "value": "x"}}]}"#,
            "rules[0].condition.detectors[0].subCondition.check",
            "takes no subCondition",
        ),
        (
            r#"{"kind": "sensitiveData", "target": "toolArg", "detectors": [{"detector": "email_domain", "subCondition": {"check": "scheme", "op": "eq", "value": "x"}}]}"#,
            "rules[0].condition.detectors[0].subCondition.check",
            "not \"scheme\"",
        ),
        (
            r#"{"kind": "sensitiveData", "target": "toolArg", "detectors": [{"detector": "url", "subCondition": {"check": "tld", "op": "endsWith", "value": "x"}}]}"#,
            "rules[0].condition.detectors[0].subCondition.op",
            "is not one of",
        ),
        (
            r#"{"kind": "sensitiveData", "target": "toolArg", "detectors": [{"detector": "url", "subCondition": {"check": "domain", "op": "in", "value": "a.com"}}]}"#,
            "rules[0].condition.detectors[0].subCondition.value",
            "needs a non-empty list",
        ),
        (
            r#"{"kind": "sensitiveData", "target": "toolArg", "detectors": [{"detector": "url", "subCondition": {"check": "domain", "op": "in", "value": []}}]}"#,
            "rules[0].condition.detectors[0].subCondition.value",
            "must not be empty",
        ),
        (
            r#"{"kind": "sensitiveData", "target": "toolArg", "detectors": [{"detector": "url", "subCondition": {"check": "domain", "op": "in", "value": ["a", ""]}}]}"#,
            "rules[0].condition.detectors[0].subCondition.value[1]",
            "must not be empty",
        ),
        (
            r#"{"kind": "toolArg", "op": "exists"}"#,
            "rules[0].condition",
            "missing required key \"path\"",
        ),
        (
            r#"{"kind": "toolArg", "op": "exists", "path": "a", "type": "string"}"#,
            "rules[0].condition.type",
            "take only \"path\"",
        ),
        (
            r#"{"kind": "toolArg", "op": "notExists", "path": "a", "value": 1}"#,
            "rules[0].condition.value",
            "take only \"path\"",
        ),
        (
            r#"{"kind": "toolArg", "type": "string", "op": "exists", "path": "a"}"#,
            "rules[0].condition.type",
            "take only \"path\"",
        ),
        (
            r#"{"kind": "sequence", "mustHaveCalled": [{"by": "toolName"}]}"#,
            "rules[0].condition.mustHaveCalled[0]",
            "missing required key \"patterns\"",
        ),
        (
            r#"{"kind": "sequence", "mustHaveCalled": [{"by": "toolName", "patterns": ["a["]}]}"#,
            "rules[0].condition.mustHaveCalled[0].patterns[0]",
            "invalid glob",
        ),
        (
            r#"{"kind": "sequence", "mustHaveCalled": [{"by": "toolName", "patterns": ["a"], "tags": ["x"]}]}"#,
            "rules[0].condition.mustHaveCalled[0].tags",
            "takes \"patterns\"",
        ),
        (
            r#"{"kind": "sequence", "mustHaveCalled": [{"by": "toolArg", "patterns": ["a"]}]}"#,
            "rules[0].condition.mustHaveCalled[0].by",
            "is not one of",
        ),
        (
            r#"{"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["*"]}, "max": 1, "tagFilter": []}"#,
            "rules[0].condition.tagFilter",
            "must not be empty",
        ),
        (
            r#"{"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["*"]}, "max": 1, "tagFilter": "x"}"#,
            "rules[0].condition.tagFilter",
            "expected an array",
        ),
        (
            r#"{"kind": "metricWindow", "scope": "agent", "metric": {"kind": "inbuilt", "key": "bytes_in"}, "aggregate": "sum", "op": "gt", "value": 1}"#,
            "rules[0].condition.windowSeconds",
            "need a window",
        ),
        (
            r#"{"kind": "custom"}"#,
            "rules[0].condition",
            "missing required key \"name\"",
        ),
        (
            r#"{"kind": "custom", "name": ""}"#,
            "rules[0].condition.name",
            "empty",
        ),
        (
            r#"{"kind": "custom", "name": "f", "argz": 1}"#,
            "rules[0].condition.argz",
            "unknown key",
        ),
    ];
    for (cond, path, msg) in cases {
        let text = format!(
            r#"[{{"id": "r", "name": "r", "priority": 1, "enabled": true,
                "selector": {{"phase": "tool.before", "tool": {{}}}}, "condition": {cond}, "effect": {{"type": "block"}}}}]"#
        );
        let err = parse_policy(&text, None).expect_err(cond).to_string();
        assert!(
            err.contains(&format!("{path}:")) && err.contains(msg),
            "{cond}\n  want {path}: …{msg}…\n  got {err}"
        );
    }
    let metas: &[(&str, &str, &str)] = &[
        (
            r#""agentSelector": {"anyOfSlugs": []}"#,
            "policy.agentSelector.anyOfSlugs",
            "must not be empty",
        ),
        (
            r#""agentSelector": {"anyTags": ["x"]}"#,
            "policy.agentSelector.anyTags",
            "unknown key",
        ),
        (
            r#""agentSelector": {"anyOfSlugs": ["[a"]}"#,
            "policy.agentSelector.anyOfSlugs",
            "",
        ),
        (r#""enabled": "yes""#, "policy.enabled", ""),
        (r#""redactDetected": 0"#, "policy.redactDetected", ""),
    ];
    for (meta, path, msg) in metas {
        let text = format!(r#"{{"policy": {{"name": "p", {meta}}}, "rules": []}}"#);
        let err = parse_policy(&text, None).expect_err(meta).to_string();
        assert!(
            err.contains(*path) && err.contains(msg),
            "{meta}\n  want {path}: …{msg}…\n  got {err}"
        );
    }
}

#[test]
fn new_shapes_round_trip() {
    let text = r#"{"policy": {"name": "p", "enabled": true, "redactDetected": false,
        "agentSelector": {"anyOfSlugs": ["support-*"], "anyOfTags": ["prod"], "allOfTags": ["eu"]}},
      "rules": [{"id": "r", "name": "r", "priority": 1, "enabled": true,
        "selector": {"phase": "tool.before", "tool": {}},
        "condition": {"kind": "or", "any": [
          {"kind": "sensitiveData", "target": "toolArg", "path": "a.b", "op": "allOf", "detectors": [
             {"detector": "email_domain", "subCondition": {"check": "domain", "op": "in", "value": ["a.com", "b.org"]}},
             {"detector": "url", "subCondition": {"check": "scheme", "op": "eq", "value": "http"}},
             {"detector": "secret_key"}]},
          {"kind": "toolArg", "type": "string", "op": "regex", "value": "^x"},
          {"kind": "toolArg", "op": "notExists", "path": "z"},
          {"kind": "sequence", "mustHaveCalled": [{"by": "toolName", "patterns": ["a*", "b"]}, "c"]},
          {"kind": "maxCalls", "selector": {"by": "toolTag", "tags": ["t"]}, "max": 3, "windowSeconds": 9, "per": "agent", "tagFilter": ["x", "y"]},
          {"kind": "metricWindow", "scope": "run", "metric": {"kind": "custom", "key": "k"}, "aggregate": "sum", "op": "gt", "value": 1},
          {"kind": "custom", "name": "f", "args": [1, {"a": null}]},
          {"kind": "custom", "name": "g"}]},
        "effect": {"type": "block"}}]}"#;
    let p = parse_policy(text, None).unwrap();
    let again = parse_policy(&p.to_json().to_string(), None).unwrap();
    assert_eq!(p, again);
    let json = p.to_json();
    assert_eq!(json["policy"]["agentSelector"]["allOfTags"], json!(["eu"]));
    assert_eq!(
        json["rules"][0]["condition"]["any"][0]["detectors"][0]["subCondition"]["value"],
        json!(["a.com", "b.org"])
    );
}
