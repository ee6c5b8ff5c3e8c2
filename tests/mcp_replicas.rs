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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_runs_counters_and_reviews() {
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
    let args: Vec<String> = [
        "--policy",
        &setup.path("policy.json").display().to_string(),
        "--state",
        &url,
        "--state-prefix",
        &prefix,
        "--token-file",
        &token_file(setup.dir.path()).display().to_string(),
        "--request-state-key",
        &key.display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    let a = Gateway::start(&args, &[fixture()], &[]);
    let b = Gateway::start(&args, &[fixture()], &[]);
    let run = format!("replicated-{}", uuid::Uuid::now_v7());
    let client = |url: &str| {
        let mut c = Client::new(url, "tok-alice", true);
        c.run = Some(run.clone());
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
