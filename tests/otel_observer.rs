//! The engine's observer seam: each hook is called once per event, in order.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use toolgate::engine::{
    Decision, DecisionObserver, GovernanceEngine, RunContext, ToolCall, ToolOutcome,
};
use toolgate::policy::parse_policy;

#[derive(Default)]
struct Log(Mutex<Vec<String>>);

impl DecisionObserver for Log {
    fn on_run_start(&self, run: &RunContext) {
        self.0.lock().unwrap().push(format!("start {}", run.run_id));
    }
    fn on_decision(&self, _run: &RunContext, call: &ToolCall, d: &Decision) {
        self.0
            .lock()
            .unwrap()
            .push(format!("decision {} {} {}", call.id, d.effect, d.code));
    }
    fn on_result(&self, _run: &RunContext, id: &str, o: &ToolOutcome, d: Option<&Decision>) {
        let after = d.map_or("-".to_string(), |d| d.code.to_string());
        let err = o.error.as_deref().unwrap_or("-");
        self.0
            .lock()
            .unwrap()
            .push(format!("result {id} {err} {after}"));
    }
    fn on_run_end(&self, run: &RunContext, status: &str) {
        self.0
            .lock()
            .unwrap()
            .push(format!("end {} {status}", run.run_id));
    }
}

#[tokio::test]
async fn observers_see_every_decision_result_and_run_end_once() {
    let policy = parse_policy(
        r#"[{"id": "no-delete", "name": "n", "priority": 1, "enabled": true,
            "selector": {"phase": "tool.before", "tool": {"name": "delete*"}},
            "condition": {"kind": "toolName", "op": "glob", "value": "*"},
            "effect": {"type": "block"}},
           {"id": "big-output", "name": "n", "priority": 2, "enabled": true,
            "selector": {"phase": "tool.after", "tool": {"name": "export*"}},
            "condition": {"kind": "executionTime", "scope": "tool", "op": "gt", "ms": 100},
            "effect": {"type": "block"}}]"#,
        None,
    )
    .unwrap();
    let log = Arc::new(Log::default());
    let engine = GovernanceEngine::builder()
        .policy(policy)
        .observer(log.clone())
        .build()
        .unwrap();
    let run = engine.start_run(RunContext::new("r1", "bot"));
    run.before_tool(ToolCall::new("c1", "readUser", json!({})))
        .await;
    run.after_tool("c1", ToolOutcome::err("boom", Duration::from_millis(3)))
        .await;
    run.before_tool(ToolCall::new("c2", "deleteUser", json!({})))
        .await;
    // A result for a call that was not allowed is ignored: no hook.
    run.after_tool("c2", ToolOutcome::ok(json!(1), Duration::ZERO))
        .await;
    run.before_tool(ToolCall::new("c3", "exportAll", json!({})))
        .await;
    run.after_tool("c3", ToolOutcome::ok(json!([]), Duration::from_millis(500)))
        .await;
    run.end("success", None).await;
    run.end("success", None).await;
    assert_eq!(
        *log.0.lock().unwrap(),
        [
            "start r1",
            "decision c1 allow ALLOWED",
            "result c1 boom -",
            "decision c2 block BLOCKED_RULE",
            "decision c3 allow ALLOWED",
            "result c3 - BLOCKED_RULE",
            "end r1 success",
        ]
    );
}

struct Panics;

impl DecisionObserver for Panics {
    fn on_decision(&self, _run: &RunContext, _call: &ToolCall, _d: &Decision) {
        panic!("observer bug");
    }
}

#[tokio::test]
async fn a_panicking_observer_does_not_change_the_decision() {
    let log = Arc::new(Log::default());
    let engine = GovernanceEngine::builder()
        .observer(Arc::new(Panics))
        .observer(log.clone())
        .build()
        .unwrap();
    let run = engine.start_run(RunContext::new("r2", "bot"));
    let d = run
        .before_tool(ToolCall::new("c1", "readUser", json!({})))
        .await;
    assert!(d.is_allowed());
    // Observers after the one that panicked are still told.
    assert!(
        log.0
            .lock()
            .unwrap()
            .contains(&"decision c1 allow ALLOWED".to_string())
    );
}
