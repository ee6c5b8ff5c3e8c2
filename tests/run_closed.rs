//! Issue 33, point 10: an ended run and a shut-down engine decide nothing more and write
//! nothing into an ended chain, whoever races the end; `verify` reports an event after a run's
//! `run.ended` as a break.

mod common;

use std::sync::Arc;

use chrono::Utc;
use common::*;
use serde_json::{Map, json};
use toolgate::audit::verify::BreakKind;
use toolgate::audit::{EventKind, MemorySink, RunChain, verify_events};
use toolgate::engine::{DecisionCode, RunClosed, RunContext, ToolOutcome};

const ALLOW_ALL: &str = r#"{"policy": {"name": "p"}, "rules": []}"#;

fn kinds(sink: &MemorySink, run: &str) -> Vec<String> {
    sink.events()
        .iter()
        .filter(|e| e.run_id() == run)
        .map(|e| e.kind().as_str().to_string())
        .collect()
}

#[tokio::test]
async fn an_ended_run_refuses_its_calls_and_writes_nothing() {
    let clock = clock();
    let sink = Arc::new(MemorySink::new());
    let engine = builder(ALLOW_ALL, &clock)
        .audit_sink(sink.clone())
        .build()
        .unwrap();
    let run = engine.start_run(RunContext::new("r1", "a"));
    assert!(
        run.before_tool(call("c1", "x", json!({})))
            .await
            .is_allowed()
    );
    run.end("success", None).await;
    assert_eq!(run.closed(), Some(RunClosed::Ended));
    let d = run.before_tool(call("c2", "x", json!({}))).await;
    assert!(!d.is_allowed());
    assert_eq!(d.code, DecisionCode::BlockedFailure);
    assert_eq!(d.error.as_deref(), Some(RunClosed::Ended.message()));
    let d = run.before_tool_blocking(call("c3", "x", json!({})));
    assert_eq!(d.code, DecisionCode::BlockedFailure);
    let after = run
        .after_tool("c1", ToolOutcome::ok(json!(1), Default::default()))
        .await
        .expect("a refusal");
    assert!(!after.is_allowed());
    run.record_llm(10, 10, 0.1);
    engine.flush().await.unwrap();
    assert_eq!(
        kinds(&sink, "r1"),
        ["run.started", "tool.decision", "run.ended"]
    );
    assert!(verify_events(sink.events().iter().map(|e| &**e)).is_ok());
}

#[tokio::test]
async fn after_shutdown_no_run_decides_or_writes() {
    let clock = clock();
    let sink = Arc::new(MemorySink::new());
    let engine = builder(ALLOW_ALL, &clock)
        .audit_sink(sink.clone())
        .build()
        .unwrap();
    let live = engine.start_run(RunContext::new("live", "a"));
    engine.shutdown().await.unwrap();
    assert!(engine.is_shut_down());
    let d = live.before_tool(call("c1", "x", json!({}))).await;
    assert_eq!(
        d.error.as_deref(),
        Some(RunClosed::EngineShutDown.message())
    );
    let late = engine.start_run(RunContext::new("late", "a"));
    assert_eq!(late.closed(), Some(RunClosed::Ended));
    assert!(
        !late
            .before_tool(call("c1", "x", json!({})))
            .await
            .is_allowed()
    );
    assert!(kinds(&sink, "late").is_empty());
    assert_eq!(kinds(&sink, "live"), ["run.started"]);
}

/// Calls decided while the run ends land before its `run.ended` or are refused: every
/// allowed call is in the trail, nothing follows `run.ended`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn decisions_racing_the_end_land_before_it_or_are_refused() {
    for round in 0..20 {
        let clock = clock();
        let sink = Arc::new(MemorySink::new());
        let engine = builder(ALLOW_ALL, &clock)
            .audit_sink(sink.clone())
            .build()
            .unwrap();
        let run_id = format!("race-{round}");
        let run = engine.start_run(RunContext::new(run_id.clone(), "a"));
        let mut tasks = Vec::new();
        for t in 0..4 {
            let run = run.clone();
            tasks.push(tokio::spawn(async move {
                let mut allowed = 0usize;
                for i in 0..200 {
                    let d = run
                        .before_tool(call(&format!("c{t}-{i}"), "x", json!({})))
                        .await;
                    if d.is_allowed() {
                        allowed += 1;
                    } else {
                        assert_eq!(d.code, DecisionCode::BlockedFailure);
                    }
                    tokio::task::yield_now().await;
                }
                allowed
            }));
        }
        tokio::task::yield_now().await;
        run.end("success", None).await;
        let mut allowed = 0;
        for t in tasks {
            allowed += t.await.unwrap();
        }
        engine.flush().await.unwrap();
        let k = kinds(&sink, &run_id);
        assert_eq!(k.last().map(String::as_str), Some("run.ended"), "{round}");
        let decisions = k.iter().filter(|k| *k == "tool.decision").count();
        assert_eq!(
            decisions, allowed,
            "round {round}: every allowed call is audited"
        );
        let report = verify_events(sink.events().iter().map(|e| &**e));
        assert!(report.is_ok(), "{:?}", report.breaks);
    }
}

fn body(i: u64) -> Map<String, serde_json::Value> {
    let mut m = Map::new();
    m.insert("i".into(), json!(i));
    m
}

#[test]
fn verify_reports_an_event_after_run_ended() {
    let mut c = RunChain::new("r", "a", None);
    let now = Utc::now();
    let events = vec![
        c.seal(EventKind::RunStarted, now, body(0)),
        c.seal(EventKind::RunEnded, now, body(1)),
        c.seal(EventKind::ToolDecision, now, body(2)),
        c.seal(EventKind::RunEnded, now, body(3)),
    ];
    let r = verify_events(&events);
    let after: Vec<_> = r
        .breaks
        .iter()
        .filter(|b| b.kind == BreakKind::AfterEnd)
        .map(|b| b.seq)
        .collect();
    assert_eq!(after, [Some(2), Some(3)], "{:?}", r.breaks);
    assert!(r.breaks[0].message.contains("after the run's run.ended"));
}

#[test]
fn the_ends_own_events_may_follow_run_ended() {
    let mut c = RunChain::new("r", "a", None);
    let now = Utc::now();
    let events = vec![
        c.seal(EventKind::RunStarted, now, body(0)),
        c.seal(EventKind::RunEnded, now, body(1)),
        c.seal(EventKind::EvaluationResult, now, body(2)),
        c.seal(EventKind::Error, now, body(3)),
        c.seal(EventKind::Checkpoint, now, body(4)),
    ];
    let r = verify_events(&events);
    assert!(r.is_ok(), "{:?}", r.breaks);
}
