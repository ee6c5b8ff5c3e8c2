//! The engine writes a verifiable audit trail, and evaluation results ride on its events.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::audit::{AuditEvent, EventKind, MemorySink, RedactionConfig, verify_events};
use toolgate::engine::{GovernanceEngine, ManualClock, RunContext, ToolCall, ToolOutcome};
use toolgate::eval::EvaluationRunConfig;
use toolgate::policy::parse_policy;

fn policy() -> toolgate::policy::Policy {
    parse_policy(
        r#"[{"id": "no-delete", "name": "no delete", "priority": 1,
             "selector": {"phase": "tool.before", "tool": {"name": "delete*"}},
             "condition": {"kind": "toolName", "op": "glob", "value": "*"},
             "effect": {"type": "block", "reason": "no deletes"}}]"#,
        None,
    )
    .unwrap()
}

fn eval_config() -> EvaluationRunConfig {
    serde_json::from_value(json!({
        "criteria": [
            {"name": "NonEmpty", "description": "output is not empty", "scale": "binary"},
            {"name": "Short", "description": "at most 20 characters", "scale": "binary"}
        ],
        "evaluatorConfigs": [{
            "type": "ruleBased",
            "rules": [
                {"criterionName": "NonEmpty", "config": {"type": "non_empty", "action": "mark_bad"}},
                {"criterionName": "Short", "config": {"type": "max_chars", "maxChars": 20, "action": "mark_bad"}}
            ]
        }]
    }))
    .unwrap()
}

fn body_of(events: &[Arc<AuditEvent>], kind: EventKind) -> Vec<serde_json::Map<String, Value>> {
    events
        .iter()
        .filter(|e| e.kind() == kind)
        .map(|e| e.body().clone())
        .collect()
}

#[tokio::test]
async fn every_step_emits_a_chained_event_with_evaluations_attached() {
    let sink = Arc::new(MemorySink::new());
    let clock = ManualClock::new("2026-03-02T10:00:00Z".parse().unwrap());
    let engine = GovernanceEngine::builder()
        .policy(policy())
        .clock(Arc::new(clock.clone()))
        .audit_sink(sink.clone())
        .evaluate_tool("search*", eval_config())
        .evaluate_run(eval_config())
        .build()
        .unwrap();
    let run = engine.start_run(RunContext::new("r1", "agent").with_enduser("u1", []));
    let d = run
        .before_tool(ToolCall::new("c1", "search_docs", json!({"q": "refunds"})))
        .await;
    assert!(d.is_allowed());
    clock.advance(chrono::Duration::seconds(1));
    run.after_tool(
        "c1",
        ToolOutcome::ok(
            json!("a long answer that is way over twenty chars"),
            Duration::from_millis(40),
        ),
    )
    .await;
    let d = run
        .before_tool(ToolCall::new("c2", "delete_user", json!({"id": 7})))
        .await;
    assert!(!d.is_allowed());
    run.record_llm(100, 20, 0.002);
    run.end("success", Some("Done.")).await;

    let events = sink.events();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind().as_str()).collect();
    assert_eq!(
        kinds,
        [
            "run.started",
            "tool.decision",
            "tool.result",
            "tool.decision",
            "llm.result",
            "run.ended"
        ]
    );
    // seq without gaps, chain verifies
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq(), i as u64);
    }
    let report = verify_events(events.iter().map(|e| &**e));
    assert!(report.breaks.is_empty(), "{:?}", report.breaks);

    // the whole decision rides on tool.decision
    let decisions = body_of(&events, EventKind::ToolDecision);
    assert_eq!(decisions[1]["decision"]["code"], "BLOCKED_RULE");
    assert_eq!(decisions[1]["decision"]["ruleId"], "no-delete");
    assert_eq!(decisions[1]["decision"]["evaluated"][0]["triggered"], true);
    assert!(decisions[1]["decision"]["latencyNs"].as_u64().is_some());

    // tool.result: outcome, duration, inbuilt metrics and the evaluation (Short fails: mark_bad)
    let result = &body_of(&events, EventKind::ToolResult)[0];
    assert_eq!(result["durationMs"], 40);
    assert_eq!(result["metrics"]["bytes_in"], 15); // {"q":"refunds"}
    let eval = &result["evaluation"];
    assert_eq!(eval["overallScore"], 0.5, "{eval}");
    let short = eval["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["criterionName"] == "Short")
        .unwrap();
    assert_eq!(short["score"], false);

    // run.ended: status, totals, and the run-level evaluation of the final response
    let ended = &body_of(&events, EventKind::RunEnded)[0];
    assert_eq!(ended["status"], "success");
    assert_eq!(ended["totals"]["calls"], 2);
    assert_eq!(ended["totals"]["blocked"], 1);
    assert_eq!(ended["totals"]["llmTokensIn"], 100);
    assert_eq!(ended["evaluation"]["overallScore"], 1.0);
}

#[tokio::test]
async fn redaction_applies_to_args_and_outputs_before_hashing() {
    let sink = Arc::new(MemorySink::new());
    let redaction: RedactionConfig = serde_json::from_value(json!({
        "rules": [
            {"path": "args.password", "action": "drop"},
            {"path": "output.ssn", "action": "hash"}
        ]
    }))
    .unwrap();
    let engine = GovernanceEngine::builder()
        .audit_sink(sink.clone())
        .redaction(redaction)
        .build()
        .unwrap();
    let run = engine.start_run(RunContext::new("r1", "agent"));
    run.before_tool(ToolCall::new(
        "c1",
        "login",
        json!({"user": "ann", "password": "hunter2"}),
    ))
    .await;
    run.after_tool(
        "c1",
        ToolOutcome::ok(json!({"ssn": "123-45-6789"}), Duration::from_millis(1)),
    )
    .await;
    run.end("success", None).await;
    let text: String = sink
        .events()
        .iter()
        .map(|e| e.to_json().to_string())
        .collect();
    assert!(!text.contains("hunter2"));
    assert!(!text.contains("123-45-6789"));
    assert!(text.contains("sha256:"));
    let events = sink.events();
    assert!(verify_events(events.iter().map(|e| &**e)).breaks.is_empty());
}

/// A local OpenAI-compatible chat endpoint that always judges 4 on a 1–5 scale.
#[cfg(feature = "http")]
async fn judge_server() -> String {
    use axum::{Json, Router, routing::post};
    async fn chat(Json(_body): Json<Value>) -> Json<Value> {
        Json(
            json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0,
            "message": {"role": "assistant", "content": "{\"score\": 4, \"reasoning\": \"fine\"}"},
            "finish_reason": "stop"}]}),
        )
    }
    let app = Router::new().route("/v1/chat/completions", post(chat));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/v1")
}

#[cfg(feature = "http")]
#[tokio::test]
async fn slow_evaluators_emit_a_linked_evaluation_result_event() {
    let base = judge_server().await;
    let config: EvaluationRunConfig = serde_json::from_value(json!({
        "criteria": [
            {"name": "Helpful", "description": "is it helpful", "scale": "likert5"},
            {"name": "NonEmpty", "description": "not empty", "scale": "binary"}
        ],
        "evaluatorConfigs": [
            {"type": "ruleBased", "rules": [
                {"criterionName": "NonEmpty", "config": {"type": "non_empty", "action": "mark_bad"}}]},
            {"type": "llmJudge", "criterionName": "Helpful",
             "model": {"baseUrl": base, "model": "judge", "apiKeyEnv": "TOOLGATE_TEST_NO_KEY", "retryBackoffMs": 10}}
        ]
    }))
    .unwrap();
    let sink = Arc::new(MemorySink::new());
    let engine = GovernanceEngine::builder()
        .audit_sink(sink.clone())
        .evaluate_tool("*", config)
        .build()
        .unwrap();
    let run = engine.start_run(RunContext::new("r1", "agent"));
    run.before_tool(ToolCall::new("c1", "answer", json!({})))
        .await;
    run.after_tool(
        "c1",
        ToolOutcome::ok(json!("Here is your answer."), Duration::from_millis(3)),
    )
    .await;
    run.end("success", None).await;

    let events = sink.events();
    let result = events
        .iter()
        .find(|e| e.kind() == EventKind::ToolResult)
        .unwrap();
    // the fast part (rules) is attached to tool.result
    let fast = &result.body()["evaluation"];
    assert_eq!(fast["results"].as_array().unwrap().len(), 1, "{fast}");
    assert_eq!(fast["results"][0]["criterionName"], "NonEmpty");
    // the judge's result arrives in a later, linked event, before run.ended
    let late = events
        .iter()
        .find(|e| e.kind() == EventKind::EvaluationResult)
        .unwrap();
    assert_eq!(late.body()["forEventId"], result.id().to_string());
    assert_eq!(late.body()["forEventKind"], "tool.result");
    assert_eq!(late.body()["callId"], "c1");
    assert_eq!(
        late.body()["evaluation"]["results"][0]["criterionName"],
        "Helpful"
    );
    assert_eq!(late.body()["evaluation"]["overallScore"], 0.75); // likert 4 → (4-1)/4
    assert!(late.seq() > result.seq());
    assert_eq!(events.last().unwrap().kind(), EventKind::RunEnded);
    assert!(verify_events(events.iter().map(|e| &**e)).breaks.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_runs_each_get_a_complete_chain() {
    let sink = Arc::new(MemorySink::new());
    let engine = GovernanceEngine::builder()
        .policy(policy())
        .audit_sink(sink.clone())
        .build()
        .unwrap();
    let mut tasks = Vec::new();
    for r in 0..40 {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            let run = engine.start_run(RunContext::new(format!("r{r}"), "agent"));
            // several tasks of one run decide at once
            let mut calls = Vec::new();
            for c in 0..10 {
                let run = run.clone();
                calls.push(tokio::spawn(async move {
                    let name = if c % 3 == 0 { "delete_x" } else { "read_x" };
                    let d = run
                        .before_tool(ToolCall::new(format!("c{c}"), name, json!({"c": c})))
                        .await;
                    if d.is_allowed() {
                        run.after_tool(&format!("c{c}"), ToolOutcome::ok(json!(c), Duration::ZERO))
                            .await;
                    }
                }));
            }
            for c in calls {
                c.await.unwrap();
            }
            run.end("success", None).await;
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    engine.flush().await.unwrap();
    let events = sink.events();
    // per run: started + 10 decisions + 6 results (c1,c2,c4,c5,c7,c8) + ended
    assert_eq!(events.len(), 40 * 18);
    let report = verify_events(events.iter().map(|e| &**e));
    assert!(report.breaks.is_empty(), "{:?}", report.breaks);
    assert_eq!(report.runs, 40);
}
