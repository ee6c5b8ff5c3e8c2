//! (on both stores) maxCalls (counted at decision time, exact under concurrency, windows and scopes) and
//! sequence (history = allowed calls whose result was recorded).

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use serde_json::json;
use tokio::sync::Barrier;
use toolgate::engine::{DecisionCode, GovernanceEngine, Run, RunContext, ToolOutcome};
use toolgate::policy::EffectType;

fn max_calls_policy(max: u64, extra: &str) -> String {
    rule(
        "cap",
        "tool.before",
        r#"{"name": "*"}"#,
        &format!(
            r#"{{"kind": "maxCalls", "selector": {{"by": "toolName", "patterns": ["*"]}}, "max": {max}{extra}}}"#
        ),
        "block",
    )
}

/// Releases `n` tasks together, each deciding one call on one of `runs`; returns the allows.
async fn race(runs: Vec<Run>, n: usize) -> usize {
    let barrier = Arc::new(Barrier::new(n));
    let mut tasks = Vec::new();
    for i in 0..n {
        let run = runs[i % runs.len()].clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            run.before_tool(call(&format!("c{i}"), "search", json!({"i": i})))
                .await
        }));
    }
    let mut allowed = 0;
    for t in tasks {
        let d = t.await.expect("task does not panic");
        match d.effect {
            EffectType::Allow => allowed += 1,
            _ => assert_eq!(
                (d.code, d.rule_id.as_deref()),
                (DecisionCode::BlockedRule, Some("cap"))
            ),
        }
    }
    allowed
}

store_test! {
    async fn max_calls_is_exact_under_concurrency_in_one_run(store) {
        let clock = clock();
        let engine = store.engine(&max_calls_policy(10, ""), &clock);
        let run = engine.start_run(RunContext::new("r1", "a"));
        assert_eq!(race(vec![run.clone()], 64).await, 10);
        // Still capped afterwards.
        assert!(
            !run.before_tool(call("late", "search", json!({})))
                .await
                .is_allowed()
        );
    }
}

store_test! {
    async fn max_calls_is_exact_under_concurrency_with_window(store) {
        let clock = clock();
        let engine = store.engine(&max_calls_policy(10, r#", "windowSeconds": 60"#), &clock);
        let run = engine.start_run(RunContext::new("r1", "a"));
        assert_eq!(race(vec![run.clone()], 64).await, 10);
        clock.advance(chrono::Duration::seconds(60));
        // Every slot was taken exactly 60 s ago: all out of the window.
        assert_eq!(race(vec![run], 64).await, 10);
    }
}

store_test! {
    async fn max_calls_is_exact_under_concurrency_per_agent_across_runs(store) {
        let clock = clock();
        let engine = store.engine(&max_calls_policy(10, r#", "per": "agent""#), &clock);
        let runs: Vec<Run> = (0..8)
            .map(|i| engine.start_run(RunContext::new(format!("r{i}"), "a")))
            .collect();
        assert_eq!(race(runs, 64).await, 10);
        // Another agent has its own budget.
        let other = engine.start_run(RunContext::new("rx", "b"));
        assert!(
            other
                .before_tool(call("c", "search", json!({})))
                .await
                .is_allowed()
        );
    }
}

store_test! {
    async fn max_calls_is_exact_under_concurrency_per_agent_user_with_window(store) {
        let clock = clock();
        let engine = store.engine(
            &max_calls_policy(10, r#", "per": "agent_user", "windowSeconds": 3600"#),
            &clock,
        );
        let runs: Vec<Run> = (0..4)
            .map(|i| engine.start_run(ctx_user(&format!("r{i}"), "a", "u1", &[])))
            .collect();
        assert_eq!(race(runs, 64).await, 10);
        // Same agent, another end user: its own budget; another agent, same user: too.
        let u2 = engine.start_run(ctx_user("r-u2", "a", "u2", &[]));
        assert!(
            u2.before_tool(call("c", "search", json!({})))
                .await
                .is_allowed()
        );
        let b = engine.start_run(ctx_user("r-b", "b", "u1", &[]));
        assert!(
            b.before_tool(call("c", "search", json!({})))
                .await
                .is_allowed()
        );
        // The same pair in a new run: still capped.
        let again = engine.start_run(ctx_user("r-again", "a", "u1", &[]));
        assert!(
            !again
                .before_tool(call("c", "search", json!({})))
                .await
                .is_allowed()
        );
    }
}

async fn allowed(run: &Run, id: &str, tool: &str) -> bool {
    run.before_tool(call(id, tool, json!({})))
        .await
        .is_allowed()
}

store_test! {
    async fn max_calls_boundaries(store) {
        let clock = clock();
        // max calls pass, call max+1 triggers.
        let engine = store.engine(&max_calls_policy(3, ""), &clock);
        let run = engine.start_run(RunContext::new("r1", "a"));
        for i in 0..3 {
            assert!(allowed(&run, &format!("c{i}"), "x").await);
        }
        let d = run.before_tool(call("c3", "x", json!({}))).await;
        assert_eq!(
            (d.effect, d.code),
            (EffectType::Block, DecisionCode::BlockedRule)
        );
        assert_eq!(d.reason.as_deref(), Some("cap triggered"));
        // Counted at decision time: no after_tool was needed. A new run has its own count.
        let run2 = engine.start_run(RunContext::new("r2", "a"));
        assert!(allowed(&run2, "c0", "x").await);

        // max: 0 triggers at once.
        let engine = store.engine(&max_calls_policy(0, ""), &clock);
        let run = engine.start_run(RunContext::new("r1", "a"));
        assert!(!allowed(&run, "c0", "x").await);
    }
}

store_test! {
    async fn max_calls_sliding_window_edges(store) {
        let clock = clock();
        let engine = store.engine(&max_calls_policy(2, r#", "windowSeconds": 60"#), &clock);
        let run = engine.start_run(RunContext::new("r1", "a"));
        assert!(allowed(&run, "c0", "x").await); // t = 0
        clock.advance(chrono::Duration::seconds(30));
        assert!(allowed(&run, "c1", "x").await); // t = 30
        clock.advance(chrono::Duration::milliseconds(29_999));
        assert!(!allowed(&run, "c2", "x").await); // t = 59.999: both in
        clock.advance(chrono::Duration::milliseconds(1));
        assert!(allowed(&run, "c3", "x").await); // t = 60: the call at 0 is exactly 60 s old, out
        assert!(!allowed(&run, "c4", "x").await);
    }
}

store_test! {
    async fn max_calls_counts_only_calls_allowed_to_proceed(store) {
        let clock = clock();
        let json = r#"[
          {"id": "no-prod", "name": "no prod", "priority": 10, "enabled": true,
           "selector": {"phase": "tool.before", "tool": {"name": "*"}},
           "condition": {"kind": "toolArg", "type": "string", "op": "eq", "path": "env", "value": "prod"},
           "effect": {"type": "block"}},
          {"id": "review-big", "name": "review big", "priority": 10, "enabled": true,
           "selector": {"phase": "tool.before", "tool": {"name": "*"}},
           "condition": {"kind": "toolArg", "type": "number", "op": "gt", "path": "n", "value": 100},
           "effect": {"type": "hitl"}},
          {"id": "cap", "name": "cap", "priority": 1, "enabled": true,
           "selector": {"phase": "tool.before", "tool": {"name": "*"}},
           "condition": {"kind": "maxCalls", "selector": {"by": "toolTag", "tags": ["DB"]}, "max": 2},
           "effect": {"type": "block"}}
        ]"#;
        let engine = store.engine(json, &clock);
        let run = engine.start_run(RunContext::new("r1", "a"));
        let db = |id: &str, args| call(id, "query", args).with_tags(["db"]);
        // A tool the counter does not select takes no slot.
        for i in 0..3 {
            assert!(
                run.before_tool(call(&format!("x{i}"), "query", json!({})))
                    .await
                    .is_allowed()
            );
        }
        for i in 0..5 {
            let d = run
                .before_tool(db(&format!("p{i}"), json!({"env": "prod"})))
                .await;
            assert_eq!(d.rule_id.as_deref(), Some("no-prod"));
        }
        // hitl in another run (this one would be aborted): not counted either.
        let other = engine.start_run(RunContext::new("r2", "a"));
        assert_eq!(
            other.before_tool(db("h", json!({"n": 500}))).await.effect,
            EffectType::Hitl
        );
        assert!(
            run.before_tool(db("ok1", json!({"env": "dev"})))
                .await
                .is_allowed()
        );
        assert!(
            run.before_tool(db("ok2", json!({"env": "dev"})))
                .await
                .is_allowed()
        );
        let d = run.before_tool(db("ok3", json!({"env": "dev"}))).await;
        assert_eq!(d.rule_id.as_deref(), Some("cap"));
        // Once the budget is used up the rule (in play for every tool) triggers for any call:
        // the condition is `count >= max`.
        let d = run.before_tool(call("x", "query", json!({}))).await;
        assert_eq!(d.rule_id.as_deref(), Some("cap"));
    }
}

store_test! {
    async fn max_calls_counts_calls_of_tools_outside_the_rule_selector_in_the_window(store) {
        // The counter selects every tool; the rule is only in play for `send`. Calls of other tools
        // are counted when allowed, and fall out of the window like any other.
        let clock = clock();
        let json = rule(
            "send-cap",
            "tool.before",
            r#"{"name": "send"}"#,
            r#"{"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["*"]}, "max": 2, "windowSeconds": 60}"#,
            "block",
        );
        let engine = store.engine(&json, &clock);
        let run = engine.start_run(RunContext::new("r1", "a"));
        assert!(allowed(&run, "r0", "read").await);
        assert!(allowed(&run, "r1", "read").await);
        assert!(!allowed(&run, "s0", "send").await);
        clock.advance(chrono::Duration::seconds(61));
        assert!(
            allowed(&run, "s1", "send").await,
            "the reads fell out of the 60 s window"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// sequence

fn seq_policy() -> String {
    r#"[
      {"id": "tests-first", "name": "tests first", "priority": 5, "enabled": true,
       "selector": {"phase": "tool.before", "tool": {"name": "deploy"}},
       "condition": {"kind": "sequence", "mustHaveCalled": ["run_*"]},
       "effect": {"type": "block", "reason": "run the tests first"}},
      {"id": "no-exfil", "name": "no exfil", "priority": 5, "enabled": true,
       "selector": {"phase": "tool.before", "tool": {"name": "http_post"}},
       "condition": {"kind": "sequence", "mustNotHaveCalled": [{"by": "toolTag", "tags": ["secrets"]}]},
       "effect": {"type": "block", "reason": "secrets were read"}},
      {"id": "no-vault", "name": "no vault", "priority": 5, "enabled": true,
       "selector": {"phase": "tool.before", "tool": {"name": "read_vault"}},
       "condition": {"kind": "toolArg", "type": "boolean", "op": "eq", "path": "deny", "value": true},
       "effect": {"type": "block"}},
      {"id": "once", "name": "once", "priority": 5, "enabled": true,
       "selector": {"phase": "tool.after", "tool": {"name": "once"}},
       "condition": {"kind": "sequence", "mustNotHaveCalled": ["once"]},
       "effect": {"type": "block", "reason": "second call of once"}},
      {"id": "after-self", "name": "after self", "priority": 5, "enabled": true,
       "selector": {"phase": "tool.before", "tool": {"name": "selfref"}},
       "condition": {"kind": "sequence", "mustHaveCalled": ["selfref"]},
       "effect": {"type": "block"}}
    ]"#
    .to_string()
}

fn ok() -> ToolOutcome {
    ToolOutcome::ok(json!({"ok": true}), Duration::from_millis(5))
}

store_test! {
    async fn sequence_history_holds_allowed_calls_with_recorded_results(store) {
        let clock = clock();
        let engine = store.engine(&seq_policy(), &clock);
        let run = engine.start_run(RunContext::new("r1", "a"));
        assert!(!allowed(&run, "d0", "deploy").await);
        // Allowed but its result is not recorded yet: not in the history.
        assert!(allowed(&run, "t", "run_tests").await);
        let d = run.before_tool(call("d1", "deploy", json!({}))).await;
        assert_eq!(
            (d.rule_id.as_deref(), d.reason.as_deref()),
            (Some("tests-first"), Some("run the tests first"))
        );
        assert!(
            run.after_tool("t", ok()).await.is_none(),
            "no after-phase rule in play"
        );
        assert!(allowed(&run, "d2", "deploy").await);
        // Another run has its own history.
        let run2 = engine.start_run(RunContext::new("r2", "a"));
        assert!(!allowed(&run2, "d0", "deploy").await);
    }
}

store_test! {
    async fn sequence_errored_results_count(store) {
        let clock = clock();
        let engine = store.engine(&seq_policy(), &clock);
        let run = engine.start_run(RunContext::new("r1", "a"));
        assert!(allowed(&run, "t", "run_tests").await);
        run.after_tool(
            "t",
            ToolOutcome::err("tests crashed", Duration::from_millis(3)),
        )
        .await;
        assert!(allowed(&run, "d", "deploy").await);
    }
}

store_test! {
    async fn sequence_blocked_calls_never_count(store) {
        let clock = clock();
        let engine = store.engine(&seq_policy(), &clock);
        let run = engine.start_run(RunContext::new("r1", "a"));
        let vault =
            |id: &str, deny: bool| call(id, "read_vault", json!({"deny": deny})).with_tags(["Secrets"]);
        assert!(!run.before_tool(vault("v0", true)).await.is_allowed());
        // A result reported for a blocked call is ignored.
        assert!(run.after_tool("v0", ok()).await.is_none());
        assert!(allowed(&run, "p0", "http_post").await);
        // An allowed one with a recorded result counts (tags compared case-insensitively).
        assert!(run.before_tool(vault("v1", false)).await.is_allowed());
        assert!(
            allowed(&run, "p1", "http_post").await,
            "v1's result is not recorded yet"
        );
        run.after_tool("v1", ok()).await;
        let d = run.before_tool(call("p2", "http_post", json!({}))).await;
        assert_eq!(d.rule_id.as_deref(), Some("no-exfil"));
    }
}

store_test! {
    async fn sequence_excludes_the_current_call(store) {
        let clock = clock();
        let engine = store.engine(&seq_policy(), &clock);
        let run = engine.start_run(RunContext::new("r1", "a"));
        // Before phase: the call itself is not in its own history.
        assert!(!allowed(&run, "s0", "selfref").await);
        // After phase: the first `once` is not in the history when its result is decided.
        assert!(allowed(&run, "o1", "once").await);
        let d = run
            .after_tool("o1", ok())
            .await
            .expect("after-phase rule in play");
        assert!(d.is_allowed(), "{d:?}");
        assert!(allowed(&run, "o2", "once").await);
        let d = run
            .after_tool("o2", ok())
            .await
            .expect("after-phase rule in play");
        assert_eq!(
            (d.effect, d.rule_id.as_deref()),
            (EffectType::Block, Some("once"))
        );
    }
}

#[allow(dead_code)]
fn _engine_is_send_sync(e: GovernanceEngine) -> impl Send + Sync {
    e
}

#[tokio::test]
async fn ending_a_run_forgets_its_run_scoped_state_but_keeps_the_agents() {
    use std::sync::Arc;
    use toolgate::engine::GovernanceEngine;
    use toolgate::state::MemoryStateStore;
    let policy = toolgate::policy::parse_policy(
        r#"[{"id": "per-run", "name": "per run", "selector": {"phase": "tool.before", "tool": {}},
             "condition": {"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["*"]}, "max": 5},
             "effect": {"type": "block"}},
            {"id": "per-agent", "name": "per agent", "selector": {"phase": "tool.before", "tool": {}},
             "condition": {"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["*"]}, "max": 1000, "per": "agent"},
             "effect": {"type": "block"}},
            {"id": "bytes", "name": "bytes", "selector": {"phase": "tool.before", "tool": {}},
             "condition": {"kind": "metricWindow", "scope": "run", "metric": {"kind": "inbuilt", "key": "bytes_in"},
                           "aggregate": "sum", "windowSeconds": 60, "op": "gt", "value": 100000},
             "effect": {"type": "block"}}]"#,
        None,
    )
    .unwrap();
    let store = Arc::new(MemoryStateStore::new());
    let engine = GovernanceEngine::builder()
        .policy(policy)
        .state_store(store.clone())
        .build()
        .unwrap();
    for r in 0..20 {
        let run = engine.start_run(toolgate::engine::RunContext::new(format!("r{r}"), "agent"));
        for c in 0..3 {
            let id = format!("c{c}");
            let d = run
                .before_tool(toolgate::engine::ToolCall::new(
                    id.clone(),
                    "t",
                    serde_json::json!({"x": c}),
                ))
                .await;
            assert!(d.is_allowed());
            run.after_tool(
                &id,
                toolgate::engine::ToolOutcome::ok(serde_json::json!(1), std::time::Duration::ZERO),
            )
            .await;
        }
        assert!(store.len() >= 2, "state is kept while the run is live");
        run.end("success", None).await;
    }
    // only the agent-scoped counter is left
    assert_eq!(store.len(), 1);
}
