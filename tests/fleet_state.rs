//! Issue 22 on the engine's shared state, through the engine's public API on a real Redis:
//! lost state (a private `redis-server` flushed or restarted without persistence) is a store
//! failure, ids that alias another scope's keys, and reviews at scale. Needs
//! `TOOLGATE_TEST_REDIS_URL` (skipped when unset); the fault cases start their own server.
#![cfg(feature = "redis")]

mod common;
mod redis_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use redis_support::{OwnRedis, free_port, url};
use serde_json::json;
use toolgate::audit::MemorySink;
use toolgate::engine::{DecisionCode, FailureMode, GovernanceEngine, RunContext};
use toolgate::policy::EffectType;
use toolgate::state::redis::RedisConfig;

/// At most 3 calls per agent.
const CAP: &str = r#"[
  {"id": "cap", "name": "cap", "priority": 1, "enabled": true,
   "selector": {"phase": "tool.before", "tool": {}},
   "condition": {"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["*"]}, "max": 3, "per": "agent"},
   "effect": {"type": "block"}}
]"#;

fn config(url: &str, tag: &str) -> RedisConfig {
    let mut cfg = RedisConfig::new(url);
    cfg.prefix = format!("tgtest:fleet-state:{tag}:{}", uuid::Uuid::now_v7().simple());
    cfg.timeout = Duration::from_secs(2);
    cfg.ttl = Duration::from_secs(600);
    cfg
}

fn engine(policy: &str, cfg: RedisConfig, sink: &Arc<MemorySink>) -> GovernanceEngine {
    builder(policy, &clock())
        .redis_state(cfg)
        .failure_mode(FailureMode::Closed)
        .audit_sink(sink.clone())
        .build()
        .expect("engine builds")
}

async fn error_messages(engine: &GovernanceEngine, sink: &MemorySink) -> Vec<String> {
    engine.flush().await.expect("flush");
    sink.events()
        .iter()
        .filter(|e| e.kind().as_str() == "error")
        .map(|e| e.to_json()["message"].as_str().unwrap_or("").to_string())
        .collect()
}

fn flushall(port: u16) {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/0")).expect("url");
    let mut con = client.get_connection().expect("private redis");
    let _: () = redis::cmd("FLUSHALL").query(&mut con).expect("FLUSHALL");
}

/// Fills the cap, then Redis loses everything (`lose`); the next call must not be allowed
/// as if nothing had happened: it is a store failure (closed: blocked) with an `error` event.
async fn lost_state_is_a_store_failure(lose: impl FnOnce(&mut OwnRedis)) {
    let mut server = OwnRedis::start(free_port());
    let mut cfg = config(&server.url(), "lost");
    cfg.timeout = Duration::from_millis(500);
    let sink = Arc::new(MemorySink::new());
    let engine = engine(CAP, cfg, &sink);
    let run = engine.start_run(RunContext::new("r", "agent"));
    for i in 0..3 {
        let d = run
            .before_tool(call(&format!("c{i}"), "search", json!({})))
            .await;
        assert!(d.is_allowed(), "{d:?}");
    }
    let d = run.before_tool(call("over", "search", json!({}))).await;
    assert_eq!(d.code, DecisionCode::BlockedRule, "{d:?}");

    lose(&mut server);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut i = 0;
    let d = loop {
        i += 1;
        let d = run
            .before_tool(call(&format!("after{i}"), "search", json!({})))
            .await;
        let connection_fault = d.code == DecisionCode::BlockedFailure
            && !d
                .reason
                .as_deref()
                .unwrap_or("")
                .contains("lost toolgate's state");
        if !connection_fault {
            break d;
        }
        assert!(Instant::now() < deadline, "Redis did not come back: {d:?}");
        tokio::task::yield_now().await;
    };
    assert_eq!(
        (d.effect, d.code),
        (EffectType::Block, DecisionCode::BlockedFailure),
        "a cap whose counter vanished is not silently reset: {d:?}"
    );
    let errors = error_messages(&engine, &sink).await;
    assert!(
        errors.iter().any(|m| m.contains("lost toolgate's state")),
        "{errors:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_flushed_under_a_running_engine_is_a_store_failure() {
    if url().is_none() {
        return;
    }
    lost_state_is_a_store_failure(|s| flushall(s.port)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_without_persistence_is_a_store_failure() {
    if url().is_none() {
        return;
    }
    lost_state_is_a_store_failure(|s| {
        s.stop();
        *s = OwnRedis::start(s.port);
    })
    .await;
}

/// Blocks once the (agent, end user)'s summed call duration in the last hour passes 1 s.
const USER_WINDOW: &str = r#"[
  {"id": "slow-user", "name": "slow user", "priority": 1, "enabled": true,
   "selector": {"phase": "tool.before", "tool": {}},
   "condition": {"kind": "metricWindow", "scope": "agent_user", "metric": {"kind": "inbuilt", "key": "duration_ms"},
                 "aggregate": "sum", "windowSeconds": 3600, "op": "gt", "value": 1000},
   "effect": {"type": "block"}}
]"#;

async fn call_and_result(run: &toolgate::engine::Run, id: &str) -> toolgate::engine::Decision {
    let d = run.before_tool(call(id, "search", json!({}))).await;
    if d.is_allowed() {
        run.after_tool(
            id,
            toolgate::engine::ToolOutcome::ok(json!(1), Duration::from_millis(5)),
        )
        .await;
    }
    d
}

/// Regression (issue 22, point 4): the end user `u|a`'s metric window was the key of user
/// `u`'s running sum (`K|a`), so `u|a` calling first locked `u` out under fail-closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_user_id_ending_in_a_pipe_suffix_does_not_alias_another_users_window() {
    let Some(url) = url() else { return };
    let sink = Arc::new(MemorySink::new());
    let engine = engine(USER_WINDOW, config(&url, "alias"), &sink);
    for user in ["u|a", "u|v"] {
        let attacker = engine.start_run(ctx_user(&format!("run-{user}"), "agent", user, &[]));
        assert!(call_and_result(&attacker, "a1").await.is_allowed());
    }
    let victim = engine.start_run(ctx_user("run-u", "agent", "u", &[]));
    for i in 0..3 {
        let d = call_and_result(&victim, &format!("v{i}")).await;
        assert!(d.is_allowed(), "the victim is not locked out: {d:?}");
    }
    let errors = error_messages(&engine, &sink).await;
    assert!(errors.is_empty(), "{errors:?}");
}

/// At most one call per (agent, end user).
const ONE_PER_USER: &str = r#"[
  {"id": "once", "name": "once", "priority": 1, "enabled": true,
   "selector": {"phase": "tool.before", "tool": {}},
   "condition": {"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["*"]}, "max": 1, "per": "agent_user"},
   "effect": {"type": "block"}}
]"#;

/// Regression (issue 22, point 4): on the memory store, agent `a␟b` with user `c` and agent
/// `a` with user `b␟c` shared one `maxCalls` counter.
#[tokio::test]
async fn ids_with_the_unit_separator_do_not_share_a_memory_counter() {
    let engine = common::engine(ONE_PER_USER, &clock());
    let one = engine.start_run(ctx_user("r1", "a\u{1f}b", "c", &[]));
    let two = engine.start_run(ctx_user("r2", "a", "b\u{1f}c", &[]));
    assert!(
        one.before_tool(call("c1", "t", json!({})))
            .await
            .is_allowed()
    );
    let d = two.before_tool(call("c2", "t", json!({}))).await;
    assert!(d.is_allowed(), "another (agent, user) pair: {d:?}");
}
