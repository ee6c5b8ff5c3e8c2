//! Two `toolgate mcp-proxy --listen` replicas on one Redis (`--state`): a 2026-07-28 client's
//! calls alternate between them (as behind a load balancer without sticky sessions) and they
//! share its run, its `maxCalls` counter and its reviews.
//!
//! Needs `TOOLGATE_TEST_REDIS_URL`; skipped without it, except under CI (`CI` set), where the
//! test fails.
#![cfg(all(feature = "mcp", feature = "http", feature = "redis"))]

mod mcp_client;
mod mcp_http_client;

use mcp_client::{Setup, fixture};
use mcp_http_client::{Client, Gateway, code, text, token_file};
use serde_json::json;

fn redis_url() -> Option<String> {
    match std::env::var("TOOLGATE_TEST_REDIS_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ if std::env::var_os("CI").is_some() => {
            panic!("TOOLGATE_TEST_REDIS_URL is not set (required under CI)")
        }
        _ => {
            eprintln!("skipped: TOOLGATE_TEST_REDIS_URL is not set");
            None
        }
    }
}

/// A replica's arguments: the setup's `policy.json` and token file, state on Redis `url` under
/// `prefix` (shared by the replicas), then `extra`.
fn replica_args(setup: &Setup, url: &str, prefix: &str, extra: &[String]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--policy",
        &setup.path("policy.json").display().to_string(),
        "--state",
        url,
        "--state-prefix",
        prefix,
        "--token-file",
        &token_file(setup.dir.path()).display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    args.extend_from_slice(extra);
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_runs_counters_and_reviews() {
    share_counters_and_reviews(true).await;
}

/// The same for a client without a run id (its token's run, shared by the replicas).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_a_token_runs_counters_and_reviews() {
    share_counters_and_reviews(false).await;
}

async fn share_counters_and_reviews(with_run_id: bool) {
    let Some(url) = redis_url() else { return };
    let setup = Setup::new();
    let policy = json!({"policy": {"name": "cap"}, "rules": [
        {"id": "cap", "name": "cap", "priority": 2, "enabled": true,
         "selector": {"phase": "tool.before", "tool": {"name": "echo"}},
         "condition": {"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["echo"]},
                       "max": 7, "per": "agent_user"},
         "effect": {"type": "block", "reason": "seven echoes per user"}},
        {"id": "publish-needs-approval", "name": "approval", "priority": 1, "enabled": true,
         "selector": {"phase": "tool.before", "tool": {"name": "publish"}},
         "condition": {"kind": "toolName", "op": "glob", "value": "*"},
         "effect": {"type": "hitl", "reason": "publishing needs approval"}}]});
    std::fs::write(setup.path("policy.json"), policy.to_string()).unwrap();
    let key = setup.path("state.key");
    std::fs::write(&key, "a-key-shared-by-both-replicas-0123456789").unwrap();
    let prefix = format!("tg-http-test-{}", uuid::Uuid::now_v7());
    let args = replica_args(
        &setup,
        &url,
        &prefix,
        &["--request-state-key".into(), key.display().to_string()],
    );
    let a = Gateway::start(&args, &[fixture()], &[]);
    let b = Gateway::start(&args, &[fixture()], &[]);
    let run = format!("replicated-{}", uuid::Uuid::now_v7());
    let client = |url: &str| {
        let mut c = Client::new(url, "tok-alice", true);
        c.run = with_run_id.then(|| run.clone());
        c.elicitation = true;
        c
    };
    let (ca, cb) = (client(&a.url), client(&b.url));
    let mut allowed = 0;
    for i in 0..20 {
        let c = if i % 2 == 0 { &ca } else { &cb };
        let r = c.call("echo", json!({"text": format!("{i}")})).await;
        match code(&r).as_str() {
            "" => allowed += 1,
            "BLOCKED_RULE" => {}
            other => panic!("call {i}: {other} {r}"),
        }
    }
    assert_eq!(allowed, 7, "maxCalls is exact across the replicas");
    // A review asked by one replica is approved through the other.
    let first = ca.call("publish", json!({"id": "p"})).await;
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let state = first["result"]["requestState"].as_str().unwrap();
    let r = cb
        .request(
            "tools/call",
            json!({"name": "publish", "arguments": {"id": "p"}, "requestState": state,
               "inputResponses": {"dev.toolgate/approval": {"action": "accept", "content": {"approve": true}}}}),
        )
        .await;
    assert_eq!(text(r.answer()), "published \"p\"", "{r:?}");
    // Replayed on the first replica: the review is resolved already.
    let r = ca
        .request(
            "tools/call",
            json!({"name": "publish", "arguments": {"id": "p"}, "requestState": state,
               "inputResponses": {"dev.toolgate/approval": {"action": "accept", "content": {"approve": true}}}}),
        )
        .await;
    assert_eq!(code(r.answer()), "BLOCKED_REQUEST_STATE", "{r:?}");
    a.stop();
    b.stop();
}

/// The audit events written so far under `dir` (a line still being written is skipped).
fn events_so_far(dir: &std::path::Path) -> Vec<serde_json::Value> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .flat_map(|t| {
            t.lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Issue 26: a 2026-07-28 client without a run id alternating between two replicas on one
/// Redis gets one run per token — one run id in both trails, one audit chain (`verify` passes
/// on both trails together, no fork), `maxCalls … per: run` exact across the replicas — and
/// after `--run-idle-secs` without calls the run ends once (one `run.ended`, status `idle`)
/// and the next call starts another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_run_is_one_run_across_replicas_and_ends_once_when_idle() {
    one_run_across_replicas_ending_once(false).await;
}

/// The same for a run the client names (`_meta["dev.toolgate/runId"]`): both replicas serve it
/// and hand it over between calls, so it is one audit chain (no fork `error`), `maxCalls … per:
/// run` is exact and it ends once when idle (before, each replica held it until idle: a fork
/// and two `run.ended`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_run_is_one_run_across_replicas_and_ends_once_when_idle() {
    one_run_across_replicas_ending_once(true).await;
}

async fn one_run_across_replicas_ending_once(with_run_id: bool) {
    let Some(url) = redis_url() else { return };
    let setup = Setup::new();
    let policy = json!({"policy": {"name": "per-run"}, "rules": [
        {"id": "cap", "name": "cap", "priority": 1, "enabled": true,
         "selector": {"phase": "tool.before", "tool": {"name": "echo"}},
         "condition": {"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["echo"]},
                       "max": 5, "per": "run"},
         "effect": {"type": "block", "reason": "five echoes per run"}}]});
    std::fs::write(setup.path("policy.json"), policy.to_string()).unwrap();
    let prefix = format!("tg-http-test-{}", uuid::Uuid::now_v7());
    let (trail_a, trail_b) = (setup.path("trail-a"), setup.path("trail-b"));
    let args = |trail: &std::path::Path| {
        let extra = [
            "--audit".to_string(),
            trail.display().to_string(),
            "--state-timeout-ms".to_string(),
            "2000".to_string(),
            "--run-idle-secs".to_string(),
            "2".to_string(),
        ];
        replica_args(&setup, &url, &prefix, &extra)
    };
    let a = Gateway::start(&args(&trail_a), &[fixture()], &[]);
    let b = Gateway::start(&args(&trail_b), &[fixture()], &[]);
    let run = format!("named-{}", uuid::Uuid::now_v7());
    let client = |url: &str, run: &str| {
        let mut c = Client::new(url, "tok-alice", true);
        c.run = with_run_id.then(|| run.to_string());
        c
    };
    let (ca, cb) = (client(&a.url, &run), client(&b.url, &run));
    let mut allowed = 0;
    for i in 0..12 {
        let c = if i % 2 == 0 { &ca } else { &cb };
        let r = c.call("echo", json!({"text": format!("{i}")})).await;
        match code(&r).as_str() {
            "" => allowed += 1,
            "BLOCKED_RULE" => {}
            other => panic!("call {i}: {other} {r}"),
        }
    }
    assert_eq!(allowed, 5, "maxCalls per run is exact across the replicas");
    // The idle end is time-based: poll both trails (every 50 ms, at most 20 s) for it.
    let both = || {
        let mut v = events_so_far(&trail_a);
        v.extend(events_so_far(&trail_b));
        v
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let ended = loop {
        let events = both();
        if let Some(e) = events.iter().find(|e| e["kind"] == "run.ended") {
            break e.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no run.ended within 20 s: {events:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(ended["status"], "idle", "{ended}");
    if with_run_id {
        // A named run lives inside the caller's token: `<name>@<16 hex of the token's key>`.
        let id = ended["runId"].as_str().unwrap_or_default();
        let key = id.strip_prefix(&format!("{run}@")).unwrap_or_default();
        assert!(
            key.len() == 16 && key.bytes().all(|b| b.is_ascii_hexdigit()),
            "{ended}"
        );
    }
    // A later call (of another run when the client names them): a new run, with its own
    // counter.
    let cb = client(&b.url, &format!("{run}-next"));
    let r = cb.call("echo", json!({"text": "after"})).await;
    assert_eq!(code(&r), "", "{r}");
    assert!(a.stop().success());
    assert!(b.stop().success());
    let events = both();
    let decisions = |run: &serde_json::Value| {
        events
            .iter()
            .filter(|e| e["kind"] == "tool.decision" && &e["runId"] == run)
            .count()
    };
    let mut runs: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["kind"] == "tool.decision")
        .map(|e| &e["runId"])
        .collect();
    runs.dedup();
    runs.sort_by_key(|r| r.to_string());
    runs.dedup();
    assert_eq!(
        runs.len(),
        2,
        "one run, then one after the idle end: {runs:?}"
    );
    assert_eq!(decisions(&ended["runId"]), 12, "{events:?}");
    for (trail, name) in [(&trail_a, "a"), (&trail_b, "b")] {
        let here = events_so_far(trail)
            .iter()
            .filter(|e| e["kind"] == "tool.decision" && e["runId"] == ended["runId"])
            .count();
        assert!(
            here >= 6,
            "replica {name} decided {here} of the run's calls"
        );
    }
    let idle_ends: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["kind"] == "run.ended" && e["runId"] == ended["runId"])
        .collect();
    assert_eq!(idle_ends.len(), 1, "the run ends once: {idle_ends:?}");
    let errors: Vec<&serde_json::Value> = events.iter().filter(|e| e["kind"] == "error").collect();
    assert!(errors.is_empty(), "no fork, no store error: {errors:?}");
    let (ok, out) = setup.toolgate(&[
        "verify",
        &trail_a.display().to_string(),
        &trail_b.display().to_string(),
    ]);
    assert!(ok, "{out}");
}

/// Issue 26: an upstream's `notifications/tools/list_changed` only marks a replica's listing
/// stale; the listing again (and the `tool.changed` event a changed pin writes) happens inside
/// the next call, while that call holds the shared run — never outside a call, where taking up
/// the run would fork its chain. A token's run alternating between two replicas with `--pin`,
/// one replica's upstream changing a tool: one chain, no `error`, `verify` passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_change_upstream_does_not_fork_a_shared_run() {
    let Some(url) = redis_url() else { return };
    let setup = Setup::new();
    std::fs::write(
        setup.path("policy.json"),
        json!({"policy": {"name": "none"}, "rules": []}).to_string(),
    )
    .unwrap();
    let prefix = format!("tg-http-test-{}", uuid::Uuid::now_v7());
    let args = |name: &str| {
        let extra = [
            "--audit".to_string(),
            setup.path(&format!("trail-{name}")).display().to_string(),
            "--pin".to_string(),
            setup
                .path(&format!("pins-{name}.json"))
                .display()
                .to_string(),
            "--state-timeout-ms".to_string(),
            "2000".to_string(),
        ];
        replica_args(&setup, &url, &prefix, &extra)
    };
    let a = Gateway::start(&args("a"), &[fixture()], &[]);
    let b = Gateway::start(&args("b"), &[fixture()], &[]);
    let (ca, cb) = (
        Client::new(&a.url, "tok-alice", true),
        Client::new(&b.url, "tok-alice", true),
    );
    let r = ca.call("echo", json!({"text": "listed"})).await;
    assert_eq!(code(&r), "", "{r}");
    // A's upstream changes `mutable` and says so (before its answer, on the same stream).
    let r = cb.call("echo", json!({"text": "b"})).await;
    assert_eq!(code(&r), "", "{r}");
    let r = ca.call("mutable", json!({})).await;
    assert_eq!(text(&r), "mutated", "{r}");
    for i in 0..4 {
        let c = if i % 2 == 0 { &cb } else { &ca };
        let r = c.call("echo", json!({"text": format!("{i}")})).await;
        assert_eq!(code(&r), "", "{r}");
    }
    let r = ca.call("mutable", json!({})).await;
    assert_eq!(code(&r), "BLOCKED_TOOL_CHANGED", "{r}");
    let r = cb.call("mutable", json!({})).await;
    assert_eq!(text(&r), "mutated", "B's upstream is unchanged: {r}");
    assert!(a.stop().success());
    assert!(b.stop().success());
    let (trail_a, trail_b) = (setup.path("trail-a"), setup.path("trail-b"));
    let mut events = events_so_far(&trail_a);
    events.extend(events_so_far(&trail_b));
    let mut runs: Vec<String> = events
        .iter()
        .filter(|e| e["kind"] == "tool.decision")
        .map(|e| e["runId"].to_string())
        .collect();
    runs.sort();
    runs.dedup();
    assert_eq!(runs.len(), 1, "one run: {runs:?}");
    assert!(
        events.iter().any(|e| e["kind"] == "tool.changed"),
        "the change is in the run: {events:?}"
    );
    let errors: Vec<&serde_json::Value> = events.iter().filter(|e| e["kind"] == "error").collect();
    assert!(errors.is_empty(), "no fork: {errors:?}");
    let (ok, out) = setup.toolgate(&[
        "verify",
        &trail_a.display().to_string(),
        &trail_b.display().to_string(),
    ]);
    assert!(ok, "{out}");
}

/// Not a check: the cost of the hand-over between replicas. Prints the median and 90th
/// percentile of a `tools/call` (allowed, audited) alternating between two replicas on one
/// Redis, for a token's run and a named run. `cargo test --test mcp_replicas -- --ignored
/// handover_cost --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement"]
async fn handover_cost() {
    let Some(url) = redis_url() else { return };
    let setup = Setup::new();
    let policy = json!({"policy": {"name": "all"}, "rules": [
        {"id": "cap", "name": "cap", "priority": 1, "enabled": true,
         "selector": {"phase": "tool.before", "tool": {"name": "echo"}},
         "condition": {"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["echo"]},
                       "max": 1000000, "per": "run"},
         "effect": {"type": "block", "reason": "never"}}]});
    std::fs::write(setup.path("policy.json"), policy.to_string()).unwrap();
    let prefix = format!("tg-http-test-{}", uuid::Uuid::now_v7());
    let args = |trail: &str| {
        let extra = [
            "--audit".to_string(),
            setup.path(trail).display().to_string(),
        ];
        replica_args(&setup, &url, &prefix, &extra)
    };
    let a = Gateway::start(&args("trail-a"), &[fixture()], &[]);
    let b = Gateway::start(&args("trail-b"), &[fixture()], &[]);
    for (name, run) in [("token run", None), ("named run", Some("measured"))] {
        let client = |url: &str| {
            let mut c = Client::new(url, "tok-alice", true);
            c.run = run.map(str::to_string);
            c
        };
        let (ca, cb) = (client(&a.url), client(&b.url));
        let mut took = Vec::new();
        for i in 0..220 {
            let c = if i % 2 == 0 { &ca } else { &cb };
            let t = std::time::Instant::now();
            let r = c.call("echo", json!({"text": "x"})).await;
            if i >= 20 {
                took.push(t.elapsed());
            }
            assert_eq!(code(&r), "", "{r}");
        }
        took.sort();
        println!(
            "{name}, alternating replicas: median {:?}, p90 {:?} ({} calls)",
            took[took.len() / 2],
            took[took.len() * 9 / 10],
            took.len()
        );
    }
    a.stop();
    b.stop();
}
