//! Calls waiting for their results: one pending call per call id (a second call under an id
//! still waiting is refused, so a result is never decided as another call's), and a bound on
//! how many a run keeps (a caller that never reports results cannot grow a run without end;
//! a result for a call dropped by the bound is decided by the failure mode, never let through).

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
async fn a_second_call_under_a_pending_id_is_refused_and_the_first_keeps_its_after_rules() {
    let clock = clock();
    let engine = engine(SECRETS, &clock);
    let run = engine.start_run(RunContext::new("dup", "a"));
    let first = run
        .before_tool(call("c1", "read_secrets", json!({"which": "api"})))
        .await;
    assert!(first.is_allowed(), "{first:?}");
    // The same id again, for a harmless tool, while the first waits for its result: before,
    // it took the first call's place, and the secret result below was decided as this
    // harmless call's (the after rule skipped: the key went out).
    let second = run
        .before_tool(call("c1", "echo", json!({"text": "hi"})))
        .await;
    assert_eq!(
        (second.effect, second.code),
        (EffectType::Block, DecisionCode::BlockedFailure),
        "{second:?}"
    );
    let why = second.error.clone().unwrap_or_default();
    assert!(
        why.contains("already allowed") && why.contains("\"c1\""),
        "{why}"
    );
    let after = run.after_tool("c1", secret_result()).await;
    let after = after.expect("the first call's after rule decides its result");
    assert_eq!(
        (after.effect, after.rule_id.as_deref()),
        (EffectType::Block, Some("no-keys-out")),
        "{after:?}"
    );
    // Once its result is in, the id is free again.
    let again = run
        .before_tool(call("c1", "echo", json!({"text": "hi"})))
        .await;
    assert!(again.is_allowed(), "{again:?}");
}

#[tokio::test]
async fn a_refused_duplicate_is_refused_under_either_failure_mode_and_blocked_ids_are_free() {
    for mode in [FailureMode::Open, FailureMode::Closed] {
        let clock = clock();
        let engine = builder(SECRETS, &clock)
            .failure_mode(mode)
            .build()
            .expect("engine");
        let run = engine.start_run(RunContext::new("dup", "a"));
        assert!(
            run.before_tool_blocking(call("x", "echo", json!({})))
                .is_allowed()
        );
        let d = run.before_tool_blocking(call("x", "echo", json!({})));
        assert_eq!(d.code, DecisionCode::BlockedFailure, "{mode:?}: {d:?}");
        assert!(!d.is_allowed());
    }
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

/// Counts the effects observers are told.
#[derive(Default)]
struct Seen(std::sync::Mutex<Vec<(String, EffectType)>>);

impl toolgate::engine::DecisionObserver for Seen {
    fn on_decision(
        &self,
        _run: &RunContext,
        call: &toolgate::engine::ToolCall,
        d: &toolgate::engine::Decision,
    ) {
        self.0.lock().unwrap().push((call.id.clone(), d.effect));
    }
}

#[tokio::test]
async fn the_refusal_is_what_the_trail_the_totals_and_the_observers_see() {
    use std::sync::Arc;
    use toolgate::audit::{EventKind, MemorySink};
    for observed in [false, true] {
        let clock = clock();
        let sink = Arc::new(MemorySink::new());
        let seen = Arc::new(Seen::default());
        let mut b = builder(SECRETS, &clock).audit_sink(sink.clone());
        if observed {
            b = b.observer(seen.clone());
        }
        let engine = b.build().expect("engine");
        let run = engine.start_run(RunContext::new("dup", "a"));
        assert!(
            run.before_tool(call("c1", "echo", json!({})))
                .await
                .is_allowed()
        );
        let d = run.before_tool(call("c1", "echo", json!({}))).await;
        assert_eq!(d.code, DecisionCode::BlockedFailure, "{observed}: {d:?}");
        assert!(d.latency_ns > 0, "{d:?}");
        run.end("success", None).await;
        engine.flush().await.expect("flush");
        let events = sink.events();
        let decisions: Vec<_> = events
            .iter()
            .filter(|e| e.kind() == EventKind::ToolDecision)
            .map(|e| e.body()["decision"]["code"].clone())
            .collect();
        assert_eq!(
            decisions,
            vec![json!("ALLOWED"), json!("BLOCKED_FAILURE")],
            "{observed}"
        );
        let ended = events
            .iter()
            .find(|e| e.kind() == EventKind::RunEnded)
            .expect("run.ended")
            .body()["totals"]
            .clone();
        assert_eq!(
            (&ended["calls"], &ended["allowed"], &ended["blocked"]),
            (&json!(2), &json!(1), &json!(1)),
            "{observed}: {ended:?}"
        );
        if observed {
            assert_eq!(
                *seen.0.lock().unwrap(),
                vec![
                    ("c1".to_string(), EffectType::Allow),
                    ("c1".to_string(), EffectType::Block)
                ]
            );
        }
    }
}
