//! `Run::before_tool_now`: a decision made at once when nothing has to be awaited, else the
//! rest as a future; either way the same decision, and the same run state, as `before_tool`.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use toolgate::engine::{DecisionCode, RunContext, ToolOutcome};
use toolgate::policy::EffectType;

const CAPPED: &str = r#"[{"id": "cap", "name": "cap", "priority": 1, "enabled": true,
    "selector": {"phase": "tool.before", "tool": {"name": "search"}},
    "condition": {"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["search"]}, "max": 2},
    "effect": {"type": "block", "reason": "two searches a run"}},
   {"id": "no-drop", "name": "no-drop", "priority": 2, "enabled": true,
    "selector": {"phase": "tool.before", "tool": {"name": "drop*"}},
    "condition": {"kind": "toolName", "op": "eq", "value": "dropTable"},
    "effect": {"type": "block", "reason": "never"}}]"#;

#[tokio::test]
async fn without_anything_to_await_it_decides_at_once_as_before_tool_does() {
    let clock = clock();
    let engine = engine(CAPPED, &clock);
    let now = engine.start_run(RunContext::new("now", "a"));
    let awaited = engine.start_run(RunContext::new("awaited", "a"));
    for (i, name) in ["search", "dropTable", "search", "search", "read"]
        .iter()
        .enumerate()
    {
        let id = format!("c{i}");
        let a = now
            .before_tool_now(call(&id, name, json!({"i": i})))
            .expect("nothing to await: decided at once");
        let b = awaited.before_tool(call(&id, name, json!({"i": i}))).await;
        assert_eq!(said(&a), said(&b), "{name}");
    }
    // Past the cap, searches stay blocked.
    let third = now
        .before_tool_now(call("c9", "search", json!({})))
        .expect("at once");
    assert_eq!(third.code, DecisionCode::BlockedRule);
    // An allowed call is recorded: its result is taken.
    let ok = now
        .before_tool_now(call("r1", "read", json!({})))
        .expect("at once");
    assert!(ok.is_allowed());
    assert!(
        now.after_tool("r1", ToolOutcome::ok(json!({"ok": true}), Duration::ZERO))
            .await
            .is_none()
    );
}

#[tokio::test]
async fn with_a_signal_to_await_it_hands_back_the_rest_which_decides_as_before_tool_does() {
    let clock = clock();
    let engine = engine(&risk_rule(), &clock);
    engine.register_signal("risk", |args: serde_json::Map<String, Value>| async move {
        tokio::task::yield_now().await;
        Ok::<_, String>(json!(if args.is_empty() { 9 } else { 0 }))
    });
    let now = engine.start_run(RunContext::new("now", "a"));
    let awaited = engine.start_run(RunContext::new("awaited", "a"));
    let pending = now
        .before_tool_now(call("c1", "pay", json!({"amount": 1})))
        .expect_err("a signal is in play: the rest is handed back");
    let a = tokio::time::timeout(Duration::from_secs(10), pending)
        .await
        .expect("the rest settles");
    let b = awaited
        .before_tool(call("c1", "pay", json!({"amount": 1})))
        .await;
    assert_eq!(a.effect, EffectType::Block);
    assert_eq!(said(&a), said(&b));
    // The run counted the call: its totals match the awaited run's.
    now.end("success", None).await;
    awaited.end("success", None).await;
}

#[tokio::test]
async fn an_ended_run_refuses_at_once() {
    let clock = clock();
    let engine = engine(CAPPED, &clock);
    let run = engine.start_run(RunContext::new("r", "a"));
    run.end("success", None).await;
    let d = run
        .before_tool_now(call("c1", "read", json!({})))
        .expect("refused at once");
    assert!(!d.is_allowed());
}
