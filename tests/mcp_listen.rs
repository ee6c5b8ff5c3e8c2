//! `toolgate mcp-proxy --listen`: one governed streamable-HTTP endpoint for many clients, in
//! front of the fixture server (stdio), over real loopback HTTP: tokens, origins, limits,
//! 2025-11-25 sessions, decisions and approvals per client, and many clients at once.
#![cfg(all(feature = "mcp", feature = "http"))]

mod mcp_client;
mod mcp_http_client;

use mcp_client::{Setup, fixture, read_events};
use mcp_http_client::{Client, Gateway, code, text, token_file};
use serde_json::{Value, json};

fn start(setup: &Setup, extra: &[&str]) -> Gateway {
    let mut args = setup.args();
    args.push("--token-file".into());
    args.push(token_file(setup.dir.path()).display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    Gateway::start(&args, &[fixture()], &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_need_a_token_an_allowed_origin_and_a_small_json_body() {
    let setup = Setup::new();
    let gw = start(&setup, &["--allow-origin", "https://ok.example"]);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    .to_string();
    let mut c = Client::new(&gw.url, "tok-alice", false);
    // No token, a wrong token: 401.
    c.token = None;
    assert_eq!(c.post(&init, &[]).await.status, 401);
    c.token = Some("tok-mallory".into());
    let r = c.post(&init, &[]).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.headers["www-authenticate"], "Bearer");
    c.token = Some("tok-alice".into());
    // An origin not listed: 403; a listed one passes.
    let r = c.post(&init, &[("origin", "https://evil.example")]).await;
    assert_eq!(r.status, 403);
    let r = c.post(&init, &[("origin", "https://ok.example")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    // Bad JSON: a JSON-RPC parse error.
    let r = c.post("{not json", &[]).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.answer()["error"]["code"], -32700);
    // Over 4 MiB: 413.
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{}"}}}}}}"#,
        "x".repeat(4 << 20)
    );
    assert_eq!(c.post(&big, &[]).await.status, 413);
    gw.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_a_run_governed_for_the_token_and_ends_with_delete() {
    let setup = Setup::new();
    let gw = start(&setup, &[]);
    let mut alice = Client::new(&gw.url, "tok-alice", false);
    let init = alice.initialize(false).await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(init["result"]["serverInfo"]["name"], "fixture");
    let tools = alice.request("tools/list", json!({})).await;
    let names: Vec<&str> = tools.answer()["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"echo") && !names.contains(&"secret_tool"));
    let a = alice.call("echo", json!({"text": "hi"})).await;
    assert_eq!(a["id"], json!(3));
    assert_eq!(a["result"]["structuredContent"]["echo"], "hi");
    let b = alice.call("delete_note", json!({"id": "x"})).await;
    assert_eq!(code(&b), "BLOCKED_RULE");
    // Another token cannot use alice's session: 404, as for an unknown one.
    let mut bob = Client::new(&gw.url, "tok-bob", false);
    bob.session = alice.session.clone();
    assert_eq!(bob.request("tools/list", json!({})).await.status, 404);
    bob.session = Some("0123".into());
    assert_eq!(bob.request("tools/list", json!({})).await.status, 404);
    // DELETE ends the session (and its run).
    let del = alice
        .http
        .delete(&gw.url)
        .bearer_auth("tok-alice")
        .header("mcp-session-id", alice.session.clone().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), 200);
    assert_eq!(alice.request("tools/list", json!({})).await.status, 404);
    assert!(gw.stop().success());
    let events = read_events(&setup.path("audit"));
    let started: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "run.started")
        .collect();
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0]["agentId"], "team-agent");
    assert_eq!(
        started[0]["runContext"]["enduser"]["id"], "alice",
        "{started:?}"
    );
    assert!(events.iter().any(|e| e["kind"] == "run.ended"));
    let (ok, out) = setup.toolgate(&["verify", &setup.path("audit").display().to_string()]);
    assert!(ok, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_elicitation_approves_on_the_response_stream() {
    let setup = Setup::new();
    let gw = start(&setup, &[]);
    let mut c = Client::new(&gw.url, "tok-carol", false);
    c.initialize(true).await;
    for (approve, note) in [(true, "n1"), (false, "n2")] {
        let mut ev = c
            .stream(
                "tools/call",
                json!({"name": "publish", "arguments": {"id": note}}),
            )
            .await;
        let ask = ev.next().await.unwrap();
        assert_eq!(ask["method"], "elicitation/create", "{ask}");
        let answer = json!({"jsonrpc": "2.0", "id": ask["id"],
            "result": {"action": "accept", "content": {"approve": approve}}});
        assert_eq!(c.post(&answer.to_string(), &[]).await.status, 202);
        let last = ev.next().await.unwrap();
        if approve {
            assert_eq!(text(&last), "published \"n1\"", "{last}");
        } else {
            assert_eq!(code(&last), "BLOCKED_HITL_DENIED", "{last}");
        }
    }
    gw.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tokens_end_user_governs_max_calls_per_agent_user() {
    let setup = Setup::new();
    let policy = json!({"policy": {"name": "cap"}, "rules": [
        {"id": "cap", "name": "cap", "priority": 1, "enabled": true,
         "selector": {"phase": "tool.before", "tool": {"name": "echo"}},
         "condition": {"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["echo"]},
                       "max": 2, "per": "agent_user"},
         "effect": {"type": "block", "reason": "two echoes per user"}}]});
    std::fs::write(setup.path("policy.json"), policy.to_string()).unwrap();
    let gw = start(&setup, &[]);
    let mut alice = Client::new(&gw.url, "tok-alice", false);
    let mut bob = Client::new(&gw.url, "tok-bob", false);
    alice.initialize(false).await;
    bob.initialize(false).await;
    // Two sessions of alice share her count; bob (the same agent) has his own.
    let mut alice2 = Client::new(&gw.url, "tok-alice", false);
    alice2.initialize(false).await;
    let mut got = Vec::new();
    for c in [&alice, &alice2, &alice, &bob, &bob, &bob] {
        got.push(code(&c.call("echo", json!({"text": "x"})).await));
    }
    assert_eq!(
        got,
        ["", "", "BLOCKED_RULE", "", "", "BLOCKED_RULE"],
        "alice's token counts as alice, bob's as bob"
    );
    gw.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_clients_times_200_calls_each_get_their_own_answers() {
    let setup = Setup::new();
    let gw = start(&setup, &[]);
    let clients = 50usize;
    let calls = 200usize;
    let mut tasks = Vec::new();
    for i in 0..clients {
        let url = gw.url.clone();
        tasks.push(tokio::spawn(async move {
            let modern = i % 2 == 0;
            let token = ["tok-alice", "tok-bob", "tok-carol"][i % 3];
            let mut c = Client::new(&url, token, modern);
            if !modern {
                c.initialize(false).await;
            }
            for j in 0..calls {
                // Every client uses the same ids: the gateway must not mix them up.
                let body = c.body(
                    j as u64,
                    "tools/call",
                    json!({"name": "echo", "arguments": {"text": format!("{i}/{j}")}}),
                );
                let r = c.post(&body.to_string(), &[]).await;
                assert_eq!(r.status, 200);
                let a = r.answer();
                assert_eq!(a["id"], json!(j));
                assert_eq!(a["result"]["structuredContent"]["echo"], format!("{i}/{j}"));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    gw.stop();
}
