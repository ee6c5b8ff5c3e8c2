//! Issue 36: the model's side through the public API — `Run::before_llm` decided by
//! `llm.before` rules (budgets on `llm_*` metrics, `maxCalls` on model calls, `sensitiveData`
//! on the messages, hitl), usage priced from the engine's table, the `llm.decision`,
//! `llm.result` and `llm.messages` events.

mod common;

use std::sync::Arc;

use common::*;
use serde_json::{Value, json};
use toolgate::audit::{MemorySink, verify_events};
use toolgate::engine::{
    DecisionCode, EngineBuilder, GovernanceEngine, LlmCall, LlmUsage, ManualClock, Prices,
    RunContext, STATUS_BUDGET_EXCEEDED,
};
use toolgate::policy::{EffectType, Phase};

fn llm_rule(id: &str, tool: &str, condition: &str, effect: &str) -> String {
    let sel = if tool.is_empty() {
        r#"{"phase": "llm.before"}"#.to_string()
    } else {
        format!(r#"{{"phase": "llm.before", "tool": {tool}}}"#)
    };
    format!(
        r#"{{"id": "{id}", "name": "{id}", "priority": 1, "selector": {sel},
            "condition": {condition}, "effect": {{"type": "{effect}", "reason": "{id}"}}}}"#
    )
}

fn doc(rules: &[String]) -> String {
    format!(
        r#"{{"policy": {{"name": "p"}}, "rules": [{}]}}"#,
        rules.join(",")
    )
}

/// An engine of `policy` on `clock` (`with` adds to its builder) auditing to a memory sink;
/// and the sink.
fn sinked(
    policy: &str,
    clock: &ManualClock,
    with: impl FnOnce(EngineBuilder) -> EngineBuilder,
) -> (GovernanceEngine, Arc<MemorySink>) {
    let sink = Arc::new(MemorySink::new());
    let engine = with(builder(policy, clock))
        .audit_sink(sink.clone())
        .build()
        .unwrap();
    (engine, sink)
}

/// A policy blocking model calls once the run's priced cost reaches `usd` dollars.
fn cost_budget(usd: &str) -> String {
    let cost_gte = format!(
        r#"{{"kind": "metricWindow", "scope": "run",
        "metric": {{"kind": "inbuilt", "key": "llm_cost_usd"}}, "aggregate": "sum", "op": "gte",
        "value": {usd}}}"#
    );
    doc(&[llm_rule("cost", "", &cost_gte, "block")])
}

const TOKENS_IN_GTE_1000: &str = r#"{"kind": "metricWindow", "scope": "run",
    "metric": {"kind": "inbuilt", "key": "llm_tokens_in"}, "aggregate": "sum", "op": "gte",
    "value": 1000}"#;

fn msgs(text: &str) -> Value {
    json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": text}])
}

fn sink_events(sink: &MemorySink, kind: &str) -> Vec<Value> {
    sink.events()
        .iter()
        .filter(|e| e.kind().as_str() == kind)
        .map(|e| serde_json::to_value(&**e).expect("json"))
        .collect()
}

#[tokio::test]
async fn a_token_budget_blocks_the_next_model_call() {
    let clock = clock();
    let (engine, sink) = sinked(
        &doc(&[llm_rule("budget", "", TOKENS_IN_GTE_1000, "block")]),
        &clock,
        |b| b,
    );
    let run = engine.start_run(RunContext::new("r1", "a"));
    let call = LlmCall::new("gpt-4o").with_messages(msgs("hi"));
    let d = run.before_llm(&call).await;
    assert!(d.is_allowed());
    assert_eq!(d.phase, Phase::LlmBefore);
    run.record_llm_usage(
        LlmUsage::new(600, 10)
            .with_model("gpt-4o")
            .with_duration_ms(120.0),
    );
    assert!(run.before_llm(&call).await.is_allowed(), "600 < 1000");
    run.record_llm(500, 10, 0.01);
    let d = run.before_llm(&call).await;
    assert_eq!(d.effect, EffectType::Block);
    assert_eq!(d.code, DecisionCode::BlockedRule);
    assert_eq!(d.rule_id.as_deref(), Some("budget"));
    run.end(STATUS_BUDGET_EXCEEDED, None).await;
    engine.flush().await.unwrap();
    let decisions = sink_events(&sink, "llm.decision");
    assert_eq!(decisions.len(), 3);
    assert_eq!(decisions[0]["callId"], "llm-1");
    assert_eq!(decisions[0]["model"], "gpt-4o");
    assert_eq!(decisions[2]["decision"]["effect"], "block");
    assert_eq!(decisions[2]["decision"]["phase"], "llm.before");
    let results = sink_events(&sink, "llm.result");
    assert_eq!(results[0]["model"], "gpt-4o");
    assert_eq!(results[0]["durationMs"], 120);
    assert_eq!(results[0]["costUsd"], Value::Null, "no price, no cost");
    let ended = sink_events(&sink, "run.ended");
    assert_eq!(ended[0]["status"], "budget_exceeded");
    assert!(verify_events(sink.events().iter().map(|e| &**e)).is_ok());
}

#[tokio::test]
async fn without_llm_rules_before_llm_allows_and_writes_nothing() {
    let clock = clock();
    let (engine, sink) = sinked(
        &rule(
            "t",
            "tool.before",
            r#"{"name": "x"}"#,
            r#"{"kind": "toolName", "op": "eq", "value": "x"}"#,
            "block",
        ),
        &clock,
        |b| b,
    );
    assert!(!engine.policies().has_llm_rules());
    let run = engine.start_run(RunContext::new("r1", "a"));
    let d = run.before_llm(&LlmCall::new("m")).await;
    assert!(d.is_allowed());
    assert_eq!(d.code, DecisionCode::Allowed);
    engine.flush().await.unwrap();
    assert!(sink_events(&sink, "llm.decision").is_empty());
}

#[tokio::test]
async fn a_cost_budget_reads_costs_priced_from_the_table() {
    let clock = clock();
    let prices = Prices::from_json(&json!({"gpt-4o": {"in": 2.5, "out": 10.0}})).expect("prices");
    let (engine, sink) = sinked(&cost_budget("0.05"), &clock, |b| b.prices(prices));
    let run = engine.start_run(RunContext::new("r1", "a"));
    let call = LlmCall::new("gpt-4o");
    // 10,000 in × 2.5 + 1,000 out × 10 per million = 0.025 + 0.01 = 0.035.
    run.record_llm_usage(LlmUsage::new(10_000, 1_000).with_model("gpt-4o"));
    assert!(run.before_llm(&call).await.is_allowed());
    // A model without a price records no cost: the budget does not move.
    run.record_llm_usage(LlmUsage::new(1_000_000, 0).with_model("unpriced"));
    assert!(run.before_llm(&call).await.is_allowed());
    run.record_llm_usage(LlmUsage::new(10_000, 0).with_model("GPT-4o"));
    assert!(!run.before_llm(&call).await.is_allowed(), "0.06 ≥ 0.05");
    engine.flush().await.unwrap();
    let results = sink_events(&sink, "llm.result");
    assert_eq!(results[0]["costUsd"], 0.035);
    assert_eq!(results[1]["costUsd"], Value::Null);
}

#[tokio::test]
async fn a_hostile_cost_cannot_lower_or_poison_a_budget() {
    let clock = clock();
    let prices = Prices::from_json(&json!({"m": {"in": 1000.0, "out": 0}})).expect("prices");
    let (engine, sink) = sinked(&cost_budget("1.0"), &clock, |b| b.prices(prices));
    let run = engine.start_run(RunContext::new("r1", "a"));
    run.record_llm(0, 0, 1.5);
    for bad in [-10.0, f64::NAN, f64::NEG_INFINITY, f64::INFINITY] {
        run.record_llm(0, 0, bad);
    }
    let d = run.before_llm(&LlmCall::new("m")).await;
    assert!(
        !d.is_allowed(),
        "negative/NaN costs are refused, 1.5 stands"
    );
    // A refused cost falls back to the price: 2,000 tokens × 1000/M = 2 USD.
    let run2 = engine.start_run(RunContext::new("r2", "a"));
    run2.record_llm_usage(LlmUsage::new(2_000, 0).with_model("m").with_cost_usd(-5.0));
    assert!(!run2.before_llm(&LlmCall::new("m")).await.is_allowed());
    // Giant token counts are counted, not wrapped.
    let run3 = engine.start_run(RunContext::new("r3", "a"));
    run3.record_llm_usage(LlmUsage::new(u64::MAX, u64::MAX).with_model("m"));
    assert!(!run3.before_llm(&LlmCall::new("m")).await.is_allowed());
    engine.flush().await.unwrap();
    let errors = sink_events(&sink, "error");
    assert_eq!(errors.len(), 5, "{errors:?}");
    assert!(verify_events(sink.events().iter().map(|e| &**e)).is_ok());
}

#[tokio::test]
async fn max_calls_counts_model_calls_of_matching_models_only() {
    let clock = clock();
    let cap = r#"{"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["gpt-*"]},
        "max": 2}"#;
    let engine = engine(
        &doc(&[llm_rule("cap", r#"{"name": "gpt-*"}"#, cap, "block")]),
        &clock,
    );
    let run = engine.start_run(RunContext::new("r1", "a"));
    // A tool named like a model is not a model call: it takes no slot.
    assert!(
        run.before_tool(call("t1", "gpt-4o", json!({})))
            .await
            .is_allowed()
    );
    assert!(run.before_llm(&LlmCall::new("claude")).await.is_allowed());
    assert!(run.before_llm(&LlmCall::new("gpt-4o")).await.is_allowed());
    assert!(
        run.before_llm(&LlmCall::new("GPT-4o-mini"))
            .await
            .is_allowed()
    );
    let d = run.before_llm(&LlmCall::new("gpt-4o")).await;
    assert_eq!(d.rule_id.as_deref(), Some("cap"));
    assert!(run.before_llm(&LlmCall::new("claude")).await.is_allowed());
}

#[tokio::test]
async fn sensitive_data_in_the_messages_blocks_and_is_redacted_from_the_trail() {
    let clock = clock();
    let secret = r#"{"kind": "sensitiveData", "target": "llmInput",
        "detectors": [{"detector": "credit_card"}, {"detector": "private_key"}]}"#;
    let (engine, sink) = sinked(
        &doc(&[llm_rule("no-secrets", "", secret, "block")]),
        &clock,
        |b| b.record_messages(true),
    );
    let run = engine.start_run(RunContext::new("r1", "a"));
    let clean = LlmCall::new("m").with_messages(msgs("what is 2+2?"));
    assert!(run.before_llm(&clean).await.is_allowed());
    let card = LlmCall::new("m")
        .with_id("c2")
        .with_messages(msgs("charge card 4111 1111 1111 1111 now"));
    let d = run.before_llm(&card).await;
    assert!(!d.is_allowed());
    assert_eq!(d.rule_id.as_deref(), Some("no-secrets"));
    run.end("success", None).await;
    engine.flush().await.unwrap();
    let messages = sink_events(&sink, "llm.messages");
    assert_eq!(messages.len(), 2);
    assert_eq!(
        messages[0]["messages"],
        json!([{"role": "system", "kind": "text", "content": "be brief"},
               {"role": "user", "kind": "text", "content": "what is 2+2?"}])
    );
    assert_eq!(messages[1]["callId"], "c2");
    let content = messages[1]["messages"][1]["content"].as_str().unwrap();
    assert_eq!(content, "charge card [redacted:credit_card] now");
    let all: String = sink
        .events()
        .iter()
        .map(|e| serde_json::to_string(&**e).unwrap())
        .collect();
    assert!(
        !all.contains("4111 1111"),
        "the card number is nowhere in the trail"
    );
    assert!(verify_events(sink.events().iter().map(|e| &**e)).is_ok());
}

#[tokio::test]
async fn hitl_before_a_model_call_raises_a_review_and_pauses_the_run() {
    let clock = clock();
    let engine = engine(
        &doc(&[llm_rule("ask", "", TOKENS_IN_GTE_1000, "hitl")]),
        &clock,
    );
    let run = engine.start_run(RunContext::new("r1", "a"));
    run.record_llm(2000, 0, 0.0);
    let call = LlmCall::new("m").with_messages(msgs("go on"));
    let d = run.before_llm(&call).await;
    assert_eq!(d.effect, EffectType::Hitl);
    assert_eq!(d.code, DecisionCode::BlockedHitlRequested);
    assert!(d.abort_run && run.is_aborted());
    let review = d.hitl.as_ref().expect("a review").review_id.clone();
    // Paused: tool calls and model calls are refused meanwhile.
    let t = run.before_tool(call_tool("t")).await;
    assert_eq!(t.code, DecisionCode::BlockedRunAborted);
    let again = run.before_llm(&call).await;
    assert_eq!(again.code, DecisionCode::BlockedRunAborted);
    assert_eq!(again.phase, Phase::LlmBefore);
    engine.reviews().approve(&review).unwrap();
    run.resume();
    let d = run.before_llm(&call).await;
    assert_eq!(d.code, DecisionCode::AllowedHitlApproved);
    // The approval binds the exact messages: other messages ask again.
    let other = LlmCall::new("m").with_messages(msgs("something else"));
    assert_eq!(run.before_llm(&other).await.effect, EffectType::Hitl);
}

fn call_tool(name: &str) -> toolgate::engine::ToolCall {
    call("c", name, json!({}))
}

#[tokio::test]
async fn a_run_that_ended_refuses_model_calls_and_records_nothing() {
    let clock = clock();
    let (engine, sink) = sinked(
        &doc(&[llm_rule("budget", "", TOKENS_IN_GTE_1000, "block")]),
        &clock,
        |b| b.record_messages(true),
    );
    let run = engine.start_run(RunContext::new("r1", "a"));
    run.end("success", None).await;
    let d = run
        .before_llm(&LlmCall::new("m").with_messages(msgs("x")))
        .await;
    assert_eq!(d.code, DecisionCode::BlockedFailure);
    assert_eq!(d.phase, Phase::LlmBefore);
    let d = run.before_llm_blocking(&LlmCall::new("m"));
    assert_eq!(d.code, DecisionCode::BlockedFailure);
    run.record_llm_usage(LlmUsage::new(5, 5).with_model("m"));
    engine.flush().await.unwrap();
    let kinds: Vec<String> = sink
        .events()
        .iter()
        .map(|e| e.kind().as_str().to_string())
        .collect();
    assert_eq!(kinds, ["run.started", "run.ended"]);
    // A run of an engine without llm rules refuses after its end too.
    let plain = builder(&doc(&[]), &clock).build().unwrap();
    let r = plain.start_run(RunContext::new("r2", "a"));
    r.end("success", None).await;
    assert!(!r.before_llm(&LlmCall::new("m")).await.is_allowed());
}

#[tokio::test]
async fn messages_nested_too_deep_are_refused() {
    let clock = clock();
    let (engine, sink) = sinked(
        &doc(&[llm_rule("budget", "", TOKENS_IN_GTE_1000, "block")]),
        &clock,
        |b| b,
    );
    let run = engine.start_run(RunContext::new("r1", "a"));
    let mut deep = json!("x");
    for _ in 0..150 {
        deep = json!([deep]);
    }
    let d = run.before_llm(&LlmCall::new("m").with_messages(deep)).await;
    assert_eq!(d.code, DecisionCode::BlockedFailure);
    engine.flush().await.unwrap();
    assert!(verify_events(sink.events().iter().map(|e| &**e)).is_ok());
}

#[test]
fn parallel_model_calls_never_exceed_a_model_call_cap() {
    let clock = clock();
    let cap = r#"{"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["*"]},
        "max": 10, "per": "agent"}"#;
    let engine = engine(&doc(&[llm_rule("cap", "", cap, "block")]), &clock);
    let allowed = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..8 {
            let engine = &engine;
            let allowed = &allowed;
            s.spawn(move || {
                let run = engine.start_run(RunContext::new(format!("r{t}"), "a"));
                for i in 0..25 {
                    let call = LlmCall::new("m").with_id(format!("c{i}"));
                    if run.before_llm_blocking(&call).is_allowed() {
                        allowed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(
        allowed.into_inner(),
        10,
        "exactly the cap, across 8 threads"
    );
}

/// On Redis (TOOLGATE_TEST_REDIS_URL): two engines (two processes' worth) share one agent's
/// model-call cap and token budget.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_two_engines_share_the_model_call_cap_and_the_token_budget() {
    let Ok(url) = std::env::var("TOOLGATE_TEST_REDIS_URL") else {
        return;
    };
    let mut cfg = toolgate::state::redis::RedisConfig::new(url);
    cfg.prefix = format!("tgtest:llm:{}", uuid::Uuid::now_v7().simple());
    let cap = r#"{"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["gpt-*"]},
        "max": 3, "per": "agent"}"#;
    let budget = r#"{"kind": "metricWindow", "scope": "agent", "windowSeconds": 3600,
        "metric": {"kind": "inbuilt", "key": "llm_tokens_in"}, "aggregate": "sum", "op": "gte",
        "value": 1000}"#;
    let policy = doc(&[
        llm_rule("cap", r#"{"name": "gpt-*"}"#, cap, "block"),
        llm_rule("budget", "", budget, "block"),
    ]);
    let clock = clock();
    let a = builder(&policy, &clock)
        .redis_state(cfg.clone())
        .build()
        .unwrap();
    let b = builder(&policy, &clock).redis_state(cfg).build().unwrap();
    let ra = a.start_run(RunContext::new("ra", "agent"));
    let rb = b.start_run(RunContext::new("rb", "agent"));
    let call = LlmCall::new("gpt-4o");
    assert!(ra.before_llm(&call).await.is_allowed());
    assert!(rb.before_llm(&call).await.is_allowed());
    assert!(ra.before_llm(&call).await.is_allowed());
    let d = rb.before_llm(&call).await;
    assert_eq!(d.rule_id.as_deref(), Some("cap"), "{d:?}");
    assert_eq!(d.phase, Phase::LlmBefore);
    // Other models are not capped; the shared token budget stops them once spent elsewhere.
    assert!(rb.before_llm(&LlmCall::new("claude")).await.is_allowed());
    ra.record_llm_usage(LlmUsage::new(1500, 0).with_model("gpt-4o"));
    ra.flush_state().await;
    let d = rb.before_llm(&LlmCall::new("claude")).await;
    assert_eq!(d.rule_id.as_deref(), Some("budget"), "{d:?}");
}
