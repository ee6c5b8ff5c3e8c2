//! (on both stores) Handlebar's current spec: maxCalls `tagFilter` (exact under concurrency,
//! with a window), `sequence` entries `{by: "toolName"}`, `metricWindow` scope `run` without
//! `windowSeconds`.

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use serde_json::json;
use tokio::sync::Barrier;
use toolgate::engine::{Run, RunContext, ToolCall, ToolOutcome};
use toolgate::policy::EffectType;

fn tagged_cap(max: u64) -> String {
    rule(
        "cap",
        "tool.before",
        r#"{"name": "*"}"#,
        &format!(
            r#"{{"kind": "maxCalls", "selector": {{"by": "toolName", "patterns": ["send_*"]}}, "max": {max},
                "windowSeconds": 60, "tagFilter": ["External"]}}"#
        ),
        "block",
    )
}

fn send(id: &str, tags: &[&str]) -> ToolCall {
    call(id, "send_mail", json!({})).with_tags(tags.iter().copied())
}

async fn race_tagged(run: Run, n: usize) -> usize {
    let barrier = Arc::new(Barrier::new(n));
    let mut tasks = Vec::new();
    for i in 0..n {
        let run = run.clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            // Every other call lacks the filter's tag: neither counted nor limited.
            let tags: &[&str] = if i % 2 == 0 {
                &["external", "mail"]
            } else {
                &["mail"]
            };
            let d = run.before_tool(send(&format!("c{i}"), tags)).await;
            (i % 2 == 0, d.effect == EffectType::Allow)
        }));
    }
    let mut tagged_allowed = 0;
    for t in tasks {
        let (tagged, allowed) = t.await.expect("task does not panic");
        if tagged {
            tagged_allowed += usize::from(allowed);
        } else {
            assert!(allowed, "an untagged call is not limited");
        }
    }
    tagged_allowed
}

store_test! {
    async fn max_calls_tag_filter_is_exact_under_concurrency_with_window(store) {
        let clock = clock();
        let engine = store.engine(&tagged_cap(5), &clock);
        let run = engine.start_run(RunContext::new("r1", "a"));
        assert_eq!(race_tagged(run.clone(), 40).await, 5);
        assert!(run.before_tool(send("u", &["mail"])).await.is_allowed());
        assert!(!run.before_tool(send("t", &["EXTERNAL"])).await.is_allowed());
        clock.advance(chrono::Duration::seconds(60));
        assert_eq!(race_tagged(run, 40).await, 5);
    }
}

fn ok() -> ToolOutcome {
    ToolOutcome::ok(json!({"ok": true}), Duration::from_millis(5))
}

store_test! {
    async fn sequence_entries_by_tool_name_and_by_tag(store) {
        let clock = clock();
        let policy = r#"[
          {"id": "login-first", "name": "login first", "priority": 1, "enabled": true,
           "selector": {"phase": "tool.before", "tool": {"name": "pay"}},
           "condition": {"kind": "sequence", "mustHaveCalled": [{"by": "toolName", "patterns": ["login", "sso_*"]}]},
           "effect": {"type": "block"}},
          {"id": "no-mail-after-pii", "name": "no mail after pii", "priority": 1, "enabled": true,
           "selector": {"phase": "tool.before", "tool": {"name": "send_mail"}},
           "condition": {"kind": "sequence", "mustNotHaveCalled": [{"by": "toolTag", "tags": ["pii", "export"], "op": "allOf"}]},
           "effect": {"type": "block"}}
        ]"#;
        let engine = store.engine(policy, &clock);
        let run = engine.start_run(RunContext::new("r1", "a"));
        assert!(!run.before_tool(call("p1", "pay", json!({}))).await.is_allowed());
        assert!(run.before_tool(call("s", "SSO_google", json!({}))).await.is_allowed());
        run.after_tool("s", ok()).await;
        assert!(run.before_tool(call("p2", "pay", json!({}))).await.is_allowed());
        // One earlier call must carry both tags for allOf.
        for (id, tags) in [("a", vec!["pii"]), ("b", vec!["export"])] {
            let c = call(id, "read", json!({})).with_tags(tags);
            assert!(run.before_tool(c).await.is_allowed());
            run.after_tool(id, ok()).await;
        }
        assert!(run.before_tool(call("m1", "send_mail", json!({}))).await.is_allowed());
        let c = call("both", "read", json!({})).with_tags(["PII", "export"]);
        assert!(run.before_tool(c).await.is_allowed());
        run.after_tool("both", ok()).await;
        assert!(!run.before_tool(call("m2", "send_mail", json!({}))).await.is_allowed());
    }
}

store_test! {
    async fn metric_window_scope_run_without_window_spans_the_run(store) {
        let clock = clock();
        let policy = rule(
            "run-calls",
            "tool.before",
            r#"{"name": "*"}"#,
            r#"{"kind": "metricWindow", "scope": "run", "metric": {"kind": "inbuilt", "key": "duration_ms"},
                "aggregate": "count", "op": "gte", "value": 3}"#,
            "block",
        );
        let engine = store.engine(&policy, &clock);
        let run = engine.start_run(RunContext::new("r1", "a"));
        for i in 0..3 {
            let id = format!("c{i}");
            assert!(run.before_tool(call(&id, "t", json!({}))).await.is_allowed());
            run.after_tool(&id, ok()).await;
            // Hours apart: a sliding window would have forgotten the first calls.
            clock.advance(chrono::Duration::hours(5));
        }
        assert!(!run.before_tool(call("c3", "t", json!({}))).await.is_allowed());
        // Another run starts from zero.
        let other = engine.start_run(RunContext::new("r2", "a"));
        assert!(other.before_tool(call("c0", "t", json!({}))).await.is_allowed());
    }
}
