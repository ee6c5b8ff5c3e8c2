//! Reloads while threads decide: every decision is made under one whole policy set (the old or
//! the new), and once a reload has returned every thread decides under the new set (each thread
//! keeps a copy of the set it last decided under; see `engine/decide/current.rs`).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::*;
use serde_json::json;
use toolgate::engine::{DecisionCode, GovernanceEngine, RunContext};

/// Blocks `tool` (and only it), the reason naming the set.
fn blocking(tool: &str, set: &str) -> toolgate::policy::Policy {
    policy(&format!(
        r#"{{"policy": {{"name": "{set}"}}, "rules": [{{"id": "{set}", "name": "{set}", "priority": 1,
            "enabled": true, "selector": {{"phase": "tool.before", "tool": {{"name": "{tool}"}}}},
            "condition": {{"kind": "toolName", "op": "glob", "value": "*"}},
            "effect": {{"type": "block", "reason": "{set}"}}}}]}}"#
    ))
}

fn engine_on(set: toolgate::policy::Policy) -> GovernanceEngine {
    GovernanceEngine::builder()
        .policy(set)
        .clock(Arc::new(clock()))
        .build()
        .expect("builds")
}

#[test]
fn decisions_during_reloads_follow_one_whole_set_and_see_the_last_one() {
    let engine = Arc::new(engine_on(blocking("a", "A")));
    let stop = Arc::new(AtomicBool::new(false));
    let deciders: Vec<_> = (0..3)
        .map(|t| {
            let (engine, stop) = (engine.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut decided = 0u64;
                let mut k = 0u64;
                while !stop.load(Ordering::Acquire) {
                    let run = engine.start_run(RunContext::new(format!("r{t}-{k}"), "agent"));
                    for tool in ["a", "b", "c"] {
                        k += 1;
                        let d = run.before_tool_blocking(call(&format!("c{k}"), tool, json!({})));
                        match (tool, d.code, d.reason.as_deref()) {
                            ("a", DecisionCode::BlockedRule, Some("A"))
                            | ("b", DecisionCode::BlockedRule, Some("B"))
                            | ("a" | "c", DecisionCode::Allowed, None)
                            | ("b", DecisionCode::Allowed, None) => {}
                            other => panic!("a decision under no whole set: {other:?}"),
                        }
                        decided += 1;
                    }
                }
                decided
            })
        })
        .collect();
    // This thread decides under the first set before any reload: its copy of that set must not
    // outlive the reloads.
    let first = engine.start_run(RunContext::new("first", "agent"));
    assert_eq!(
        first
            .before_tool_blocking(call("f", "a", json!({})))
            .reason
            .as_deref(),
        Some("A")
    );
    for n in 1..=200u64 {
        let (tool, set) = if n % 2 == 1 { ("b", "B") } else { ("a", "A") };
        engine.reload(vec![blocking(tool, set)]).expect("reloads");
        // Right after the reload returned, this thread and a fresh one decide under it.
        let run = engine.start_run(RunContext::new(format!("check-{n}"), "agent"));
        let d = run.before_tool_blocking(call("x", tool, json!({})));
        assert_eq!(d.reason.as_deref(), Some(set), "reload {n} seen at once");
        let e = engine.clone();
        let seen = std::thread::spawn(move || {
            let run = e.start_run(RunContext::new(format!("thread-{n}"), "agent"));
            run.before_tool_blocking(call("y", tool, json!({})))
                .reason
                .map(|r| r.to_string())
        })
        .join()
        .expect("joins");
        assert_eq!(
            seen.as_deref(),
            Some(set),
            "reload {n} seen by another thread"
        );
    }
    stop.store(true, Ordering::Release);
    let decided: u64 = deciders
        .into_iter()
        .map(|h| h.join().expect("a decider"))
        .sum();
    assert!(decided > 0);
    // The deciders' threads decided under many sets; they still follow the last one.
    let run = engine.start_run(RunContext::new("last", "agent"));
    assert!(
        run.before_tool_blocking(call("z", "b", json!({})))
            .is_allowed()
    );
    assert_eq!(
        run.before_tool_blocking(call("z2", "a", json!({})))
            .reason
            .as_deref(),
        Some("A")
    );
}

#[test]
fn one_thread_deciding_for_three_engines_in_turn_keeps_each_engines_rules() {
    let mut engines: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|t| (t.to_string(), engine_on(blocking(t, &t.to_uppercase()))))
        .collect();
    for round in 0..20 {
        for (tool, engine) in &engines {
            let run = engine.start_run(RunContext::new(format!("{tool}-{round}"), "agent"));
            for other in ["a", "b", "c"] {
                let d = run.before_tool_blocking(call(other, other, json!({})));
                assert_eq!(d.is_allowed(), other != tool, "{tool}'s engine on {other}");
            }
        }
        if round == 10 {
            // A reload of one engine changes only its own decisions.
            engines[0]
                .1
                .reload(vec![blocking("c", "A2")])
                .expect("reloads");
            engines[0].0 = "c".to_string();
        }
    }
}

#[test]
fn a_custom_condition_may_decide_on_other_engines_inside_a_decision() {
    // The inner decisions run on the deciding thread, in the middle of the outer one: each
    // reads its own engine's set through the same thread's copies.
    let inner: Vec<_> = ["b", "c", "d"]
        .iter()
        .map(|t| Arc::new(engine_on(blocking(t, &t.to_uppercase()))))
        .collect();
    let engines = inner.clone();
    let outer = GovernanceEngine::builder()
        .policy(policy(
            r#"{"policy": {"name": "outer"}, "rules": [{"id": "o", "name": "o", "priority": 1,
                "enabled": true, "selector": {"phase": "tool.before", "tool": {"name": "a"}},
                "condition": {"kind": "custom", "name": "inner_blocks", "args": {}},
                "effect": {"type": "block", "reason": "inner"}}]}"#,
        ))
        .clock(Arc::new(clock()))
        .custom_condition(
            "inner_blocks",
            move |_args: serde_json::Value, _ctx: toolgate::engine::CustomContext| {
                let blocked = engines
                    .iter()
                    .enumerate()
                    .filter(|(i, e)| {
                        let run = e.start_run(RunContext::new(format!("inner-{i}"), "agent"));
                        !run.before_tool_blocking(call("i", ["b", "c", "d"][*i], json!({})))
                            .is_allowed()
                    })
                    .count();
                async move { Ok(blocked == 3) }
            },
        )
        .build()
        .expect("builds");
    for k in 0..5 {
        let run = outer.start_run(RunContext::new(format!("outer-{k}"), "agent"));
        let d = run.before_tool_blocking(call("o", "a", json!({})));
        assert_eq!(d.reason.as_deref(), Some("inner"), "{d:?}");
        assert!(
            run.before_tool_blocking(call("p", "b", json!({})))
                .is_allowed()
        );
    }
}
