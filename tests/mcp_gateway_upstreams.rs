//! `toolgate mcp-proxy --listen` and its upstreams, over real processes and loopback HTTP
//! (issue 31 points 3 and 6): one upstream process per token or per session
//! (`--upstream-per`), what each sends on its own reaching only its token (or session), the
//! processes bounded and freed; a message of a shared upstream that cannot be attributed
//! written as an `error` audit event; the official TypeScript SDK's streamable HTTP server
//! (server-everything `streamableHttp`) as the upstream.
#![cfg(all(feature = "mcp", feature = "http"))]

mod common;
mod mcp_client;
mod mcp_http_client;

use std::time::Duration;

use common::process::node_streamable_http;
use mcp_client::{Setup, fixture, read_events};
use mcp_http_client::{Client, Events, Gateway, children, text, token_file, until};
use serde_json::{Value, json};

fn start(setup: &Setup, extra: &[&str], env: &[(&str, &str)]) -> Gateway {
    let mut args = setup.args();
    args.push("--token-file".into());
    args.push(token_file(setup.dir.path()).display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    Gateway::start(&args, &[fixture(), "--hostile".into()], env)
}

/// The `data` of the next message on a stream that is a logging notification.
async fn next_note(ev: &mut Events) -> String {
    let m = ev.next().await.expect("a message");
    assert_eq!(m["method"], "notifications/message", "{m}");
    m["params"]["data"].as_str().unwrap().to_string()
}

/// The upstream sends `size` bytes of `y` in a notification of its own, after the call's
/// answer (nothing in flight then).
async fn note_after(c: &Client, size: usize) {
    let a = c
        .call("flood", json!({"bytes": 1, "size": size, "after": true}))
        .await;
    assert_eq!(text(&a), "flooding");
}

async fn delete(c: &Client) {
    let r = c
        .http
        .delete(&c.url)
        .bearer_auth(c.token.as_deref().unwrap())
        .header("mcp-session-id", c.session.as_deref().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// `--upstream-per token`: one upstream process per token; what alice's upstream asks or tells
/// on its own reaches alice only, bob's reaches bob only; a second session of alice's shares
/// her process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_token_each_token_has_its_own_upstream_and_only_its_messages() {
    let setup = Setup::new();
    let gw = start(&setup, &["--upstream-per", "token"], &[]);
    let mut alice = Client::new(&gw.url, "tok-alice", false);
    alice.initialize(true).await;
    let mut bob = Client::new(&gw.url, "tok-bob", false);
    bob.initialize(true).await;
    // The boot process, alice's, bob's.
    assert_eq!(children(gw.pid()).len(), 3);
    let mut alice_get = alice.get_stream().await;
    let mut bob_get = bob.get_stream().await;
    note_after(&alice, 7).await;
    assert_eq!(next_note(&mut alice_get).await, "y".repeat(7));
    note_after(&bob, 5).await;
    // Bob's stream's first message is his own upstream's: alice's never reached it.
    assert_eq!(next_note(&mut bob_get).await, "y".repeat(5));

    // With bob's call in flight, alice's upstream asks alice (sampling-like: elicitation).
    let mut bob2 = Client::new(&gw.url, "tok-bob", false);
    bob2.session = bob.session.clone();
    let held = tokio::spawn(async move { bob2.call("held", json!({})).await });
    let mut ev = alice
        .stream(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "elicit"}}),
        )
        .await;
    let ask = ev.next().await.unwrap();
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    let answer = json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept",
        "content": {"approve": true}}});
    assert_eq!(alice.post(&answer.to_string(), &[]).await.status, 202);
    let done = ev.next().await.unwrap();
    assert!(text(&done).starts_with("elicited: {"), "{done}");
    assert!(text(&done).contains("accept"), "{done}");
    // Bob's held call is answered by his own upstream.
    let r = bob.call("release", json!({})).await;
    assert_eq!(text(&r), "released");
    assert_eq!(text(&held.await.unwrap()), "classified: the launch codes");
    // A second session of alice's: no new process.
    let mut alice2 = Client::new(&gw.url, "tok-alice", false);
    alice2.initialize(false).await;
    assert_eq!(
        text(&alice2.call("echo", json!({"text": "a2"})).await),
        "a2"
    );
    assert_eq!(children(gw.pid()).len(), 3);
    gw.stop();
}

/// `--upstream-per session`: one upstream process per session, its messages to that session
/// only (not another session of the same token), at most `--max-sessions-per-token` per token,
/// each stopped when its session ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_session_each_session_has_its_own_upstream_freed_when_it_ends() {
    let setup = Setup::new();
    let gw = start(
        &setup,
        &["--upstream-per", "session", "--max-sessions-per-token", "2"],
        &[],
    );
    let mut one = Client::new(&gw.url, "tok-alice", false);
    one.initialize(false).await;
    let mut two = Client::new(&gw.url, "tok-alice", false);
    two.initialize(false).await;
    assert_eq!(children(gw.pid()).len(), 3);
    let mut one_get = one.get_stream().await;
    let mut two_get = two.get_stream().await;
    note_after(&one, 7).await;
    assert_eq!(next_note(&mut one_get).await, "y".repeat(7));
    note_after(&two, 5).await;
    assert_eq!(next_note(&mut two_get).await, "y".repeat(5));
    // A third session of alice's is refused, and starts no process.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let three = Client::new(&gw.url, "tok-alice", false);
    assert_eq!(three.post(&init.to_string(), &[]).await.status, 429);
    assert_eq!(children(gw.pid()).len(), 3);
    // Ending a session stops its process (the boot one stays).
    delete(&one).await;
    until(
        "session one's upstream stops",
        Duration::from_secs(30),
        || children(gw.pid()).len() == 2,
    )
    .await;
    assert_eq!(text(&two.call("echo", json!({"text": "2"})).await), "2");
    delete(&two).await;
    until(
        "session two's upstream stops",
        Duration::from_secs(30),
        || children(gw.pid()).len() == 1,
    )
    .await;
    gw.stop();
}

/// Point 3's refusal is audited: with calls of three tokens in flight on the shared upstream,
/// its `elicitation/create` cannot be attributed: the upstream gets an error, and an `error`
/// event naming the method (not the message) is written into each candidate run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unattributable_upstream_request_is_refused_and_audited() {
    let setup = Setup::new();
    let record = setup.path("record.jsonl");
    let record_s = record.display().to_string();
    let gw = start(&setup, &[], &[("HOSTILE_RECORD", &record_s)]);
    let mut alice = Client::new(&gw.url, "tok-alice", false);
    alice.initialize(true).await;
    let mut bob = Client::new(&gw.url, "tok-bob", false);
    bob.initialize(true).await;
    let mut carol = Client::new(&gw.url, "tok-carol", false);
    carol.initialize(true).await;
    let mut a2 = Client::new(&gw.url, "tok-alice", false);
    a2.session = alice.session.clone();
    let mut b2 = Client::new(&gw.url, "tok-bob", false);
    b2.session = bob.session.clone();
    let held_a = tokio::spawn(async move { a2.call("held", json!({})).await });
    let held_b = tokio::spawn(async move { b2.call("held", json!({})).await });
    until(
        "both held calls reach the server",
        Duration::from_secs(30),
        || {
            std::fs::read_to_string(&record)
                .unwrap_or_default()
                .matches("\"held\"")
                .count()
                >= 2
        },
    )
    .await;
    let r = carol.call("echo", json!({"text": "elicit"})).await;
    assert_eq!(text(&r), "elicited: null", "refused with an error");
    assert_eq!(text(&alice.call("release", json!({})).await), "released");
    held_a.await.unwrap();
    held_b.await.unwrap();
    until("the refusal is logged", Duration::from_secs(30), || {
        gw.logged("not attributable")
    })
    .await;
    gw.stop();
    let events = read_events(&setup.path("audit"));
    let errors: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "error" && e["upstreamMethod"] == "elicitation/create")
        .collect();
    let runs: std::collections::BTreeSet<&str> = errors
        .iter()
        .map(|e| e["runId"].as_str().unwrap())
        .collect();
    assert_eq!(runs.len(), 3, "one event in each candidate run: {errors:?}");
    for e in &errors {
        let s = e.to_string();
        assert!(!s.contains("weather"), "the message is not copied: {s}");
        assert!(s.contains("--upstream-per"), "{s}");
    }
    let (ok, out) = setup.toolgate(&["verify", &setup.path("audit").display().to_string()]);
    assert!(ok, "{out}");
}

/// Point 6: the official TypeScript SDK's streamable HTTP server answers the `server/discover`
/// probe with HTTP 400 and a JSON-RPC error with id `null`: read as "not supported", the
/// gateway falls back to `initialize` and serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typescript_sdk_http_upstream_is_served_after_its_400_to_the_probe() {
    let Some(js) = mcp_client::npm_server("TOOLGATE_TEST_MCP_EVERYTHING", "server-everything")
    else {
        return;
    };
    let (_server, port) = node_streamable_http(&js);
    let setup = Setup::new();
    let mut args = setup.args();
    args.push("--token-file".into());
    args.push(token_file(setup.dir.path()).display().to_string());
    args.push("--upstream".into());
    args.push(format!("http://127.0.0.1:{port}/mcp"));
    let started = std::time::Instant::now();
    let gw = Gateway::start(&args, &[], &[]);
    eprintln!("listening after {:?}", started.elapsed());
    let mut c = Client::new(&gw.url, "tok-alice", false);
    let init = c.initialize(false).await;
    assert_eq!(
        init["result"]["serverInfo"]["name"],
        "mcp-servers/everything"
    );
    let r = c.call("echo", json!({"message": "hi"})).await;
    assert_eq!(text(&r), "Echo: hi", "{r}");
    let m = Client::new(&gw.url, "tok-bob", true);
    let r = m
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "modern"}}),
        )
        .await;
    assert_eq!(text(r.answer()), "Echo: modern", "{r:?}");
    gw.stop();
}
