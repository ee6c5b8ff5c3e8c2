//! Issue 34 over MCP replicas (`mcp-proxy --listen --state`): a replica killed (`kill -9`)
//! while it holds a client's run mid-call; the other replica takes the run over once the
//! lease lapses (`run.resumed`), and `toolgate verify` over both trails passes, reporting the
//! takeover. Needs `TOOLGATE_TEST_REDIS_URL` set (the Redis is a private `redis-server`).
#![cfg(all(feature = "mcp", feature = "http", feature = "redis"))]

mod mcp_client;
mod mcp_http_client;
mod redis_support;

use std::time::{Duration, Instant};

use mcp_client::{Setup, fixture, read_events};
use mcp_http_client::{Client, Gateway, code, token_file};
use redis_support::{OwnRedis, free_port, url};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_mid_call_has_its_run_taken_over() {
    takeover(false).await;
}

/// The same with replica A frozen (SIGSTOP) past its lease and woken (SIGCONT) after B took
/// the run over: A's late result goes to its side chain, never into the run's chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_frozen_mid_call_appends_nothing_to_the_run_after_waking() {
    takeover(true).await;
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(ok.success());
}

async fn takeover(freeze: bool) {
    if url().is_none() {
        return;
    }
    let server = OwnRedis::start(free_port());
    let setup = Setup::new();
    let args = |n: &str| -> Vec<String> {
        [
            "--policy",
            &setup.path("policy.json").display().to_string(),
            "--state",
            &server.url(),
            "--state-timeout-ms",
            "1000",
            "--state-lease-ms",
            "1500",
            "--token-file",
            &token_file(setup.dir.path()).display().to_string(),
            "--audit",
            &setup.path(n).display().to_string(),
        ]
        .map(String::from)
        .to_vec()
    };
    let a = Gateway::start(&args("audit-a"), &[fixture()], &[]);
    let b = Gateway::start(&args("audit-b"), &[fixture()], &[]);
    let run = format!("taken-over-{}", uuid::Uuid::now_v7());
    let client = |url: &str| {
        let mut c = Client::new(url, "tok-alice", true);
        c.run = Some(run.clone());
        c
    };
    let (ca, cb) = (client(&a.url), client(&b.url));
    let r = ca.call("echo", json!({"text": "1"})).await;
    assert_eq!(code(&r), "", "{r}");
    // A slow call holds the run on replica A; A dies in the middle of it.
    let ms = if freeze { 3000 } else { 30000 };
    let slow = tokio::spawn(async move { ca.call("slow", json!({"ms": ms})).await });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !read_events(&setup.path("audit-a"))
        .iter()
        .any(|e| e["kind"] == "tool.decision" && e["tool"]["name"] == "slow")
    {
        assert!(Instant::now() < deadline, "the slow call was not decided");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    signal(a.pid(), if freeze { "STOP" } else { "KILL" });
    let r = cb.call("echo", json!({"text": "2"})).await;
    assert_eq!(code(&r), "", "the other replica continues the run: {r}");
    if freeze {
        signal(a.pid(), "CONT");
        let _ = slow.await;
        a.stop();
        let side = read_events(&setup.path("audit-a"))
            .into_iter()
            .filter(|e| {
                e["runId"]
                    .as_str()
                    .is_some_and(|r| r.contains("#lease-lost-"))
            })
            .count();
        assert!(side >= 1, "the woken replica writes into its side chain");
    } else {
        slow.abort();
    }
    b.stop();
    let events = read_events(&setup.path("audit-b"));
    let resumed = events
        .iter()
        .find(|e| e["kind"] == "run.resumed")
        .unwrap_or_else(|| panic!("a run.resumed event: {events:?}"));
    assert!(
        resumed["replacedHolder"]
            .as_str()
            .is_some_and(|h| !h.is_empty())
    );
    let out = std::process::Command::new(mcp_client::TOOLGATE)
        .arg("verify")
        .arg(setup.path("audit-a"))
        .arg(setup.path("audit-b"))
        .output()
        .expect("verify runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("taken over"), "{text}");
}
