//! Calls waiting for their results: a bound on how many a run keeps (a caller that never
//! reports results cannot grow a run without end; a result for a call dropped by the bound is
//! decided by the failure mode, never let through).

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;
use toolgate::engine::{DecisionCode, FailureMode, RunContext, ToolOutcome};
use toolgate::policy::EffectType;

/// Everything is allowed before; a `read_secrets` result holding a key is blocked after.
const SECRETS: &str = r#"[{"id": "no-keys-out", "name": "no keys out", "priority": 1, "enabled": true,
    "selector": {"phase": "tool.after", "tool": {"name": "read_secrets"}},
    "condition": {"kind": "toolArg", "type": "string", "op": "eq", "path": "which", "value": "api"},
    "effect": {"type": "block", "reason": "keys stay in"}}]"#;

fn secret_result() -> ToolOutcome {
    ToolOutcome::ok(json!({"key": "sk-live-1"}), Duration::ZERO)
}

#[tokio::test]
async fn a_run_keeps_a_bounded_number_of_calls_waiting_and_a_dropped_ones_result_fails_closed() {
    let clock = clock();
    let engine = builder(SECRETS, &clock)
        .failure_mode(FailureMode::Closed)
        .build()
        .expect("engine");
    let run = engine.start_run(RunContext::new("flood", "a"));
    assert!(
        run.before_tool_blocking(call("target", "read_secrets", json!({"which": "api"})))
            .is_allowed()
    );
    // More allowed calls than a run keeps waiting, none of them reported.
    for i in 0..12_000 {
        let d = run.before_tool_blocking(call(&format!("f{i}"), "echo", json!({"i": i})));
        assert!(d.is_allowed(), "{i}: {d:?}");
    }
    // The newest still wait; some of the oldest were dropped.
    assert!(run.awaits_result("f11999"));
    let dropped = (0..12_000)
        .filter(|i| !run.awaits_result(&format!("f{i}")))
        .count();
    assert!(dropped >= 2_000, "calls dropped by the bound: {dropped}");
    // A result for a dropped call is decided by the failure mode (closed: blocked), not
    // ignored as a call never allowed here would be.
    let gone = (0..12_000)
        .map(|i| format!("f{i}"))
        .find(|id| !run.awaits_result(id))
        .expect("a dropped call");
    let d = run
        .after_tool(&gone, ToolOutcome::ok(json!("out"), Duration::ZERO))
        .await
        .expect("decided, not ignored");
    assert_eq!(
        (d.effect, d.code),
        (EffectType::Block, DecisionCode::BlockedFailure),
        "{d:?}"
    );
    // The secret read came first: in the run's own slots, it keeps its after rule.
    let d = run
        .after_tool("target", secret_result())
        .await
        .expect("decided");
    assert_eq!(d.rule_id.as_deref(), Some("no-keys-out"), "{d:?}");
}

#[tokio::test]
async fn a_run_that_dropped_nothing_still_ignores_results_of_calls_it_never_allowed() {
    let clock = clock();
    let engine = engine(SECRETS, &clock);
    let run = engine.start_run(RunContext::new("r", "a"));
    assert!(
        run.after_tool("never", ToolOutcome::ok(json!(1), Duration::ZERO))
            .await
            .is_none()
    );
    assert!(
        run.after_tool_blocking("never", ToolOutcome::ok(json!(1), Duration::ZERO))
            .is_none()
    );
}

#[tokio::test]
async fn the_drop_is_written_to_the_trail_and_the_trail_still_verifies() {
    use std::sync::Arc;
    use toolgate::audit::{EventKind, MemorySink, verify_events};
    let clock = clock();
    let sink = Arc::new(MemorySink::new());
    let engine = builder(SECRETS, &clock)
        .audit_sink(sink.clone())
        .build()
        .expect("engine");
    let run = engine.start_run(RunContext::new("flood", "a"));
    for i in 0..10_050 {
        assert!(
            run.before_tool(call(&format!("f{i}"), "echo", json!({})))
                .await
                .is_allowed()
        );
    }
    run.end("success", None).await;
    engine.flush().await.expect("flush");
    let events = sink.events();
    let drops: Vec<_> = events
        .iter()
        .filter(|e| e.kind() == EventKind::Error)
        .map(|e| e.body().clone())
        .collect();
    assert_eq!(drops.len(), 1, "{drops:?}");
    let n = drops[0]["pendingDropped"].as_u64().expect("a count");
    assert!(n >= 4_000, "{n}");
    assert!(
        drops[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("decided by the failure mode")),
        "{drops:?}"
    );
    assert!(verify_events(events.iter().map(|e| &**e)).is_ok());
}
