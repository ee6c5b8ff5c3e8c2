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
