//! Design §8 (amended): a run continued by another process continues its audit chain, through
//! the chain head kept in the state store; two writers on one run at once are a fork, written
//! as an `error` event. On Redis (two engines, as two processes would be) and on the memory
//! store within one engine. Needs `TOOLGATE_TEST_REDIS_URL` for the Redis cases (skipped when
//! unset).
#![cfg(feature = "redis")]

mod common;
mod redis_support;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use redis_support::url;
use serde_json::json;
use toolgate::audit::{AuditEvent, MemorySink, verify_events};
use toolgate::engine::{GovernanceEngine, RunContext};
use toolgate::state::redis::RedisConfig;

const POLICY: &str = r#"[
  {"id": "cap", "name": "cap", "priority": 1, "enabled": true,
   "selector": {"phase": "tool.before", "tool": {}},
   "condition": {"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["*"]}, "max": 1000, "per": "run"},
   "effect": {"type": "block"}}
]"#;

fn config(url: &str) -> RedisConfig {
    let mut cfg = RedisConfig::new(url);
    cfg.prefix = format!("tgtest:fleet-chain:{}", uuid::Uuid::now_v7().simple());
    cfg.timeout = Duration::from_secs(2);
    cfg.ttl = Duration::from_secs(600);
    cfg
}

fn on_redis(cfg: &RedisConfig, sink: &Arc<MemorySink>) -> GovernanceEngine {
    builder(POLICY, &clock())
        .redis_state(cfg.clone())
        .audit_sink(sink.clone())
        .build()
        .expect("engine builds")
}

fn in_memory(sink: &Arc<MemorySink>) -> GovernanceEngine {
    builder(POLICY, &clock())
        .audit_sink(sink.clone())
        .build()
        .expect("engine builds")
}

async fn events(engine: &GovernanceEngine, sink: &MemorySink) -> Vec<Arc<AuditEvent>> {
    engine.flush().await.expect("flush");
    sink.events()
}

fn errors(events: &[Arc<AuditEvent>]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.kind().as_str() == "error")
        .map(|e| e.to_json()["message"].as_str().unwrap_or("").to_string())
        .collect()
}

/// One engine leaves the run open, the other continues and ends it: the two trails are one
/// unbroken chain (seq 0..n, each `prevHash` the hash before it).
async fn continued_run_is_one_chain(
    one: &GovernanceEngine,
    s1: &Arc<MemorySink>,
    two: &GovernanceEngine,
    s2: &Arc<MemorySink>,
) {
    let a = one.start_run(RunContext::new("continued", "agent"));
    assert!(
        a.before_tool(call("c1", "search", json!({})))
            .await
            .is_allowed()
    );
    a.leave().await;
    let first = events(one, s1).await;
    let b = two.start_run(RunContext::new("continued", "agent"));
    assert!(
        b.before_tool(call("c2", "search", json!({})))
            .await
            .is_allowed()
    );
    b.end("success", None).await;
    let mut second = events(two, s2).await;
    if Arc::ptr_eq(s1, s2) {
        second.drain(..first.len());
    }
    assert!(
        first.iter().all(|e| e.kind().as_str() != "run.ended"),
        "leaving writes no run.ended"
    );
    let last = first.last().expect("events");
    let next = second
        .iter()
        .find(|e| e.run_id() == "continued")
        .expect("events");
    assert_eq!(
        next.seq(),
        last.seq() + 1,
        "B's first event follows A's last"
    );
    assert_eq!(next.prev_hash(), Some(last.hash()), "and links to it");
    let all: Vec<Arc<AuditEvent>> = first.into_iter().chain(second).collect();
    let report = verify_events(all.iter().map(|e| &**e));
    assert!(report.is_ok(), "one verifiable chain: {report:?}");
    assert!(errors(&all).is_empty(), "{:?}", errors(&all));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_continued_on_redis_continues_its_audit_chain() {
    let Some(url) = url() else { return };
    let cfg = config(&url);
    let (s1, s2) = (Arc::new(MemorySink::new()), Arc::new(MemorySink::new()));
    let (one, two) = (on_redis(&cfg, &s1), on_redis(&cfg, &s2));
    continued_run_is_one_chain(&one, &s1, &two, &s2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_continued_in_one_engine_continues_its_audit_chain() {
    let sink = Arc::new(MemorySink::new());
    let engine = in_memory(&sink);
    continued_run_is_one_chain(&engine, &sink, &engine, &sink).await;
}

/// Two holders of one run at once: the second start and the first holder's leave each write
/// an `error` event naming the fork.
async fn two_writers_are_a_fork(
    one: &GovernanceEngine,
    s1: &Arc<MemorySink>,
    two: &GovernanceEngine,
    s2: &Arc<MemorySink>,
) {
    let a = one.start_run(RunContext::new("forked", "agent"));
    assert!(
        a.before_tool(call("c1", "search", json!({})))
            .await
            .is_allowed()
    );
    let b = two.start_run(RunContext::new("forked", "agent"));
    assert!(
        b.before_tool(call("c2", "search", json!({})))
            .await
            .is_allowed()
    );
    a.leave().await;
    b.leave().await;
    let second = errors(&events(two, s2).await);
    assert!(
        second
            .iter()
            .any(|m| m.starts_with("fork") && m.contains("forked")),
        "the second writer reports the fork: {second:?}"
    );
    let first = errors(&events(one, s1).await);
    assert!(
        first
            .iter()
            .any(|m| m.starts_with("fork") && m.contains("forked")),
        "the first writer finds it when it leaves: {first:?}"
    );
}

/// On Redis a run is held under a lease (issue 34): a second holder waits for the first to
/// hand it over (bounded by the lease), and when it does not, appends nothing to the run's
/// chain (its events go to a side chain, its calls fail by the failure mode). Never a fork.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_holder_on_redis_never_forks_a_run() {
    let Some(url) = url() else { return };
    let mut cfg = config(&url);
    cfg.lease = Duration::from_millis(500);
    let (s1, s2) = (Arc::new(MemorySink::new()), Arc::new(MemorySink::new()));
    let (one, two) = (on_redis(&cfg, &s1), on_redis(&cfg, &s2));
    let a = one.start_run(RunContext::new("forked", "agent"));
    assert!(
        a.before_tool(call("c1", "search", json!({})))
            .await
            .is_allowed()
    );
    let b = two.start_run(RunContext::new("forked", "agent"));
    let d = b.before_tool(call("c2", "search", json!({}))).await;
    assert!(
        d.error.is_some(),
        "the second holder does not hold the run: {d:?}"
    );
    assert!(
        a.before_tool(call("c3", "search", json!({})))
            .await
            .is_allowed(),
        "the holder goes on"
    );
    a.leave().await;
    b.leave().await;
    let second = events(&two, &s2).await;
    assert!(
        second
            .iter()
            .all(|e| e.run_id().starts_with("forked#held-elsewhere-")),
        "nothing of the second holder in the run's chain"
    );
    assert!(
        errors(&second)
            .iter()
            .any(|m| m.contains("held by another live process")),
        "{:?}",
        errors(&second)
    );
    let first = events(&one, &s1).await;
    assert!(errors(&first).is_empty(), "{:?}", errors(&first));
    let all: Vec<Arc<AuditEvent>> = first.into_iter().chain(second).collect();
    let report = verify_events(all.iter().map(|e| &**e));
    assert!(report.is_ok(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_handles_appending_to_one_run_in_one_engine_is_a_fork() {
    let sink = Arc::new(MemorySink::new());
    let engine = in_memory(&sink);
    two_writers_are_a_fork(&engine, &sink, &engine, &sink).await;
}

/// In one engine a dropped run is over, its chain head forgotten with its state (as at
/// `end`): starting its id again starts a new chain, with no fork reported and nothing kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_run_in_one_engine_is_forgotten_with_its_state() {
    let sink = Arc::new(MemorySink::new());
    let engine = in_memory(&sink);
    let a = engine.start_run(RunContext::new("dropped", "agent"));
    assert!(
        a.before_tool(call("c1", "search", json!({})))
            .await
            .is_allowed()
    );
    drop(a);
    let first = events(&engine, &sink).await.len();
    let b = engine.start_run(RunContext::new("dropped", "agent"));
    b.end("success", None).await;
    let all = events(&engine, &sink).await;
    assert_eq!(all[first].seq(), 0, "a new chain: {:?}", all[first]);
    assert!(errors(&all).is_empty(), "{:?}", errors(&all));
}
