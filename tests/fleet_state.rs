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

fn review(i: usize) -> toolgate::engine::Review {
    toolgate::engine::Review {
        id: uuid::Uuid::now_v7().to_string(),
        fingerprint: format!("fp-{i:08}"),
        status: toolgate::engine::ReviewStatus::Pending,
        agent_id: "agent".into(),
        rule_id: "rule".into(),
        tool_name: "pay".into(),
        args: json!({"n": i}),
        redacted: Vec::new(),
        enduser_id: None,
        run_id: "r".into(),
        call_id: format!("c{i}"),
        reason: None,
        created_at: chrono::Utc::now(),
        decided_at: None,
        expires_at: None,
        on_expire: None,
        decided_by: None,
        comment: None,
    }
}

/// Stores `n` reviews under `cfg` from 8 threads (each its own connection); returns one id.
fn fill_reviews(cfg: &RedisConfig, n: usize) -> String {
    use toolgate::engine::ReviewStore;
    let threads = 8;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let mut cfg = cfg.clone();
            cfg.timeout = Duration::from_secs(5);
            std::thread::spawn(move || {
                let store = toolgate::state::redis::RedisReviewStore::new(&cfg).expect("store");
                let mut last = String::new();
                for i in (t..n).step_by(threads) {
                    last = store.insert_if_absent(review(i)).id;
                }
                last
            })
        })
        .collect();
    let ids: Vec<String> = handles
        .into_iter()
        .map(|h| h.join().expect("thread"))
        .collect();
    ids[0].clone()
}

/// Deletes this test's keys from the shared server when dropped (only keys under `prefix`).
struct Cleanup(String, String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Ok(client) = redis::Client::open(self.0.as_str()) else {
            return;
        };
        let Ok(mut con) = client.get_connection() else {
            return;
        };
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}:*", self.1))
            .query(&mut con)
            .unwrap_or_default();
        for chunk in keys.chunks(1000) {
            let _: Result<(), _> = redis::cmd("DEL").arg(chunk).query(&mut con);
        }
    }
}

fn toolgate_review(url: &str, prefix: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("review")
        .args(args)
        .args(["--state", url, "--state-prefix", prefix])
        .output()
        .expect("toolgate runs")
}

/// Regression (issue 22, point 5): with 100,000 reviews on Redis, `review approve` and
/// `review list` work at the default timeout (50 ms per call): approving reads one review,
/// listing goes page by page.
#[test]
fn approve_and_list_work_with_a_hundred_thousand_reviews() {
    let Some(url) = url() else { return };
    let n = 100_000;
    let cfg = config(&url, "reviews-100k");
    let _cleanup = Cleanup(url.clone(), cfg.prefix.clone());
    let t0 = Instant::now();
    let id = fill_reviews(&cfg, n);
    eprintln!("{n} reviews stored in {:?}", t0.elapsed());
    let t0 = Instant::now();
    let approve = toolgate_review(&url, &cfg.prefix, &["approve", &id]);
    eprintln!(
        "review approve: {:?} (reported, not asserted)",
        t0.elapsed()
    );
    assert!(approve.status.success(), "{approve:?}");
    assert!(String::from_utf8_lossy(&approve.stdout).contains("approved"));
    let t0 = Instant::now();
    let list = toolgate_review(&url, &cfg.prefix, &["list"]);
    eprintln!("review list: {:?} (reported, not asserted)", t0.elapsed());
    assert!(
        list.status.success(),
        "{:?}",
        String::from_utf8_lossy(&list.stderr)
    );
    let lines = String::from_utf8_lossy(&list.stdout).lines().count();
    assert_eq!(
        lines,
        n - 1,
        "every pending review, the approved one left out"
    );
    let all = toolgate_review(&url, &cfg.prefix, &["list", "--all"]);
    assert!(
        all.status.success(),
        "{:?}",
        String::from_utf8_lossy(&all.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&all.stdout).lines().count(), n);
}

/// Regression (issue 22, point 5): every write refreshed one hash's TTL, so decided reviews
/// never expired. Now each review expires on its own: a decided one after the retention
/// period (7 days), a pending one 30 days after it was raised, whatever else is written.
#[test]
fn each_review_expires_on_its_own() {
    use toolgate::engine::ReviewStore;
    use toolgate::state::redis::{DECIDED_RETENTION_SECS, PENDING_TTL_SECS, RedisReviewStore};
    let Some(url) = url() else { return };
    let cfg = config(&url, "reviews-ttl");
    let _cleanup = Cleanup(url.clone(), cfg.prefix.clone());
    let store = RedisReviewStore::new(&cfg).expect("store");
    let decided = store.insert_if_absent(review(1));
    let pending = store.insert_if_absent(review(2));
    store
        .decide(
            &decided.id,
            toolgate::engine::ReviewStatus::Denied,
            chrono::Utc::now(),
        )
        .expect("deny");
    for i in 3..20 {
        store.insert_if_absent(review(i));
    }
    let client = redis::Client::open(url.as_str()).expect("url");
    let mut con = client.get_connection().expect("redis");
    let mut ttl = |key: String| -> i64 { redis::cmd("TTL").arg(key).query(&mut con).expect("TTL") };
    let base = format!("{}:{{reviews}}:", cfg.prefix);
    let t_decided = ttl(format!("{base}r:{}", decided.id));
    let t_pending = ttl(format!("{base}r:{}", pending.id));
    let retention = i64::try_from(DECIDED_RETENTION_SECS).expect("secs");
    let pending_ttl = i64::try_from(PENDING_TTL_SECS).expect("secs");
    assert!(
        t_decided > 0 && t_decided <= retention,
        "the decided review goes after the retention period: TTL {t_decided}"
    );
    assert!(
        t_pending > retention && t_pending <= pending_ttl,
        "the pending review keeps its own TTL: {t_pending}"
    );
    let t_fp = ttl(format!("{base}fp:{}", decided.fingerprint));
    assert!(
        t_fp > 0 && t_fp <= retention,
        "its fingerprint goes with it: {t_fp}"
    );
}
