//! A run's life: what `end` and dropping a run release, sequence history across a reload, the
//! synchronous entry points, and the audit trail sealed off the caller's thread.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::json;
use toolgate::audit::{MemorySink, verify_events};
use toolgate::engine::{DecisionCode, RunContext, ToolOutcome};
use toolgate::state::MemoryStateStore;

fn cap_policy(per: &str) -> String {
    rule(
        "cap",
        "tool.before",
        r#"{"name": "*"}"#,
        &format!(
            r#"{{"kind": "maxCalls", "selector": {{"by": "toolName", "patterns": ["*"]}}, "max": 5, "per": "{per}"}}"#
        ),
        "block",
    )
}

#[tokio::test]
async fn end_releases_the_runs_counters_even_after_a_reload_removed_their_rule() {
    let clock = clock();
    let store = Arc::new(MemoryStateStore::new());
    let engine = builder(&cap_policy("run"), &clock)
        .state_store(store.clone())
        .build()
        .unwrap();
    let run = engine.start_run(RunContext::new("r1", "a"));
    assert!(
        run.before_tool(call("c1", "search", json!({})))
            .await
            .is_allowed()
    );
    assert_eq!(store.len(), 1);
    // The rule goes away while the run is live; its counter must still be released at the end.
    engine
        .reload(vec![policy(&rule(
            "other",
            "tool.before",
            r#"{"name": "x"}"#,
            r#"{"kind": "toolName", "op": "eq", "value": "x"}"#,
            "block",
        ))])
        .unwrap();
    run.end("success", None).await;
    assert!(store.is_empty(), "the run's counter was not released");
}

#[tokio::test]
async fn end_keeps_agent_scoped_counters() {
    let clock = clock();
    let store = Arc::new(MemoryStateStore::new());
    let engine = builder(&cap_policy("agent"), &clock)
        .state_store(store.clone())
        .build()
        .unwrap();
    let run = engine.start_run(RunContext::new("r1", "a"));
    assert!(
        run.before_tool(call("c1", "search", json!({})))
            .await
            .is_allowed()
    );
    run.end("success", None).await;
    assert_eq!(store.len(), 1, "agent-scoped state outlives the run");
}

#[tokio::test]
async fn dropping_a_run_releases_its_state_and_ends_its_chain_as_dropped() {
    let clock = clock();
    let store = Arc::new(MemoryStateStore::new());
    let sink = Arc::new(MemorySink::new());
    let engine = builder(&cap_policy("run"), &clock)
        .state_store(store.clone())
        .audit_sink(sink.clone())
        .build()
        .unwrap();
    let run = engine.start_run(RunContext::new("r1", "a"));
    let clone = run.clone();
    assert!(
        run.before_tool(call("c1", "search", json!({})))
            .await
            .is_allowed()
    );
    drop(run);
    assert_eq!(store.len(), 1, "a live handle keeps the run");
    drop(clone);
    assert!(
        store.is_empty(),
        "dropping the last handle releases the run's counters"
    );
    engine.flush().await.unwrap();
    let events = sink.events();
    let last = events.last().expect("events");
    assert_eq!(last.kind().as_str(), "run.ended");
    assert_eq!(last.body()["status"], "dropped");
    assert!(verify_events(events.iter().map(|e| &**e)).is_ok());
}

#[tokio::test]
async fn a_run_ended_then_dropped_is_ended_once() {
    let clock = clock();
    let sink = Arc::new(MemorySink::new());
    let engine = builder(&cap_policy("run"), &clock)
        .audit_sink(sink.clone())
        .build()
        .unwrap();
    let run = engine.start_run(RunContext::new("r1", "a"));
    run.end("success", None).await;
    drop(run);
    engine.flush().await.unwrap();
    let ended: Vec<_> = sink
        .events()
        .into_iter()
        .filter(|e| e.kind().as_str() == "run.ended")
        .collect();
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].body()["status"], "success");
}

const NEEDS_VERIFY: &str = r#"[{"id": "verify-first", "name": "v", "priority": 1, "enabled": true,
    "selector": {"phase": "tool.before", "tool": {"name": "refund"}},
    "condition": {"kind": "sequence", "mustHaveCalled": ["verify_*"]},
    "effect": {"type": "block", "reason": "verify first"}}]"#;

#[tokio::test]
async fn sequence_sees_history_recorded_before_a_reload() {
    let clock = clock();
    // The first policies know nothing of `verify_*`.
    let engine = engine(&cap_policy("run"), &clock);
    let run = engine.start_run(RunContext::new("r1", "a"));
    assert!(
        run.before_tool(call("c1", "verify_identity", json!({})))
            .await
            .is_allowed()
    );
    run.after_tool("c1", ToolOutcome::ok(json!(true), Duration::from_millis(1)))
        .await;
    engine.reload(vec![policy(NEEDS_VERIFY)]).unwrap();
    let d = run.before_tool(call("c2", "refund", json!({}))).await;
    assert!(d.is_allowed(), "{d:?}");
    let other = engine.start_run(RunContext::new("r2", "a"));
    let d = other.before_tool(call("c3", "refund", json!({}))).await;
    assert_eq!(d.code, DecisionCode::BlockedRule);
}

#[test]
fn blocking_entry_points_work_without_a_runtime() {
    let clock = clock();
    let engine = engine(NEEDS_VERIFY, &clock);
    let run = engine.start_run(RunContext::new("r1", "a"));
    assert!(
        !run.before_tool_blocking(call("c0", "refund", json!({})))
            .is_allowed()
    );
    assert!(
        run.before_tool_blocking(call("c1", "verify_id", json!({})))
            .is_allowed()
    );
    assert!(
        run.after_tool_blocking("c1", ToolOutcome::ok(json!(1), Duration::from_millis(1)))
            .is_none()
    );
    assert!(
        run.before_tool_blocking(call("c2", "refund", json!({})))
            .is_allowed()
    );
}

#[test]
fn blocking_entry_point_awaits_signal_providers_on_its_own_runtime() {
    let clock = clock();
    let engine = engine(&risk_rule(), &clock);
    engine.register_signal(
        "risk",
        |_args: serde_json::Map<String, serde_json::Value>| async {
            tokio::time::sleep(Duration::from_millis(1)).await;
            Ok::<_, String>(json!(9))
        },
    );
    let run = engine.start_run(RunContext::new("r1", "a"));
    let d = run.before_tool_blocking(call("c1", "x", json!({})));
    assert_eq!(d.code, DecisionCode::BlockedRule, "{d:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audited_decisions_are_all_sealed_in_order_by_end() {
    let clock = clock();
    let sink = Arc::new(MemorySink::new());
    let engine = builder(&cap_policy("run"), &clock)
        .audit_sink(sink.clone())
        .build()
        .unwrap();
    let mut runs = Vec::new();
    for r in 0..4 {
        let run = engine.start_run(RunContext::new(format!("r{r}"), "a"));
        for i in 0..50 {
            let id = format!("c{i}");
            if run
                .before_tool(call(&id, "search", json!({"i": i})))
                .await
                .is_allowed()
            {
                run.after_tool(&id, ToolOutcome::ok(json!(i), Duration::from_millis(1)))
                    .await;
            }
        }
        runs.push(run);
    }
    for run in &runs {
        run.end("success", None).await;
    }
    let events = sink.events();
    // Per run: started, 50 decisions, 5 results (cap 5), ended.
    assert_eq!(events.len(), 4 * (1 + 50 + 5 + 1));
    let report = verify_events(events.iter().map(|e| &**e));
    assert!(report.is_ok(), "{:?}", report.breaks);
}
