//! `toolgate mcp-proxy --listen` under hostile and many clients (issue 31): no freeze with a
//! shared state store, nothing crossing between tokens, conformance of what it answers.
#![cfg(all(feature = "mcp", feature = "http", feature = "redis"))]

mod mcp_client;
mod mcp_http_client;

use std::time::{Duration, Instant};

use mcp_client::{Setup, fixture};
use mcp_http_client::{Client, Events, Gateway, text, token_file};
use serde_json::{Value, json};

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

fn start(setup: &Setup, extra: &[&str]) -> Gateway {
    let mut args = setup.args();
    if extra.contains(&"--state") {
        // Reviews live on the state store then.
        let at = args.iter().position(|a| a == "--reviews").unwrap();
        args.drain(at..at + 2);
    }
    args.push("--token-file".into());
    args.push(token_file(setup.dir.path()).display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    Gateway::start(&args, &[fixture()], &[])
}

/// Point 1: 8 clients × 40 concurrent calls on one 2026-07-28 run, with `--state redis://…`
/// and `--audit`: every call is answered (the gateway froze for ever on three: a mutex was held
/// while the run's start waited on Redis through `block_on`), and SIGTERM ends it within 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_calls_on_one_run_with_a_state_store_never_freeze_the_gateway() {
    let Some(url) = redis_url() else { return };
    let setup = Setup::new();
    let prefix = format!("tg-h31-freeze-{}", uuid::Uuid::now_v7());
    let gw = start(
        &setup,
        &[
            "--state",
            &url,
            "--state-prefix",
            &prefix,
            "--state-timeout-ms",
            "1000",
            // 320 connections from one address: over the default per-address cap (64).
            "--max-connections-per-address",
            "400",
        ],
    );
    let mut tasks = Vec::new();
    for c in 0..8 {
        let url = gw.url.clone();
        tasks.push(tokio::spawn(async move {
            let mut client = Client::new(&url, "tok-alice", true);
            client.run = Some("one-shared-run".into());
            let client = std::sync::Arc::new(client);
            let calls: Vec<_> = (0..40)
                .map(|i| {
                    let client = client.clone();
                    tokio::spawn(async move {
                        let t = Instant::now();
                        let r = client
                            .request(
                                "tools/call",
                                json!({"name": "echo", "arguments": {"text": format!("{c}-{i}")}}),
                            )
                            .await;
                        (r.status, r.answer().clone(), t.elapsed())
                    })
                })
                .collect();
            let mut out = Vec::new();
            for t in calls {
                out.push(t.await.unwrap());
            }
            out
        }));
    }
    // The state timeout (1 s) + the upstream + 2 s bounds each call; the whole batch is given
    // far more, so a frozen gateway fails here rather than hanging the test.
    let all = tokio::time::timeout(Duration::from_secs(120), async {
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all
    })
    .await
    .expect("the gateway froze: 320 concurrent calls on one run were not all answered");
    let slowest = all.iter().map(|(_, _, d)| *d).max().unwrap();
    eprintln!("320 calls answered; slowest {slowest:?}");
    for (status, answer, _) in &all {
        assert_eq!(*status, 200, "{answer}");
        assert!(
            answer["result"]["structuredContent"]["echo"].is_string(),
            "{answer}"
        );
    }
    // A request on another path still answers, then SIGTERM ends the gateway promptly.
    let probe = Client::new(&gw.url, "tok-bob", true);
    assert_eq!(
        probe.request("server/discover", Value::Null).await.status,
        200
    );
    let t = Instant::now();
    let status = gw.stop();
    let took = t.elapsed();
    eprintln!("SIGTERM -> exit {status} in {took:?}");
    assert!(
        took <= Duration::from_secs(5),
        "SIGTERM took {took:?} to end the gateway"
    );
}

/// An upstream (stdio, Python) whose `sample` tool raises a `sampling/createMessage` with the
/// caller's prompt and a logging notification with an SSN while serving the call, and whose
/// `hold` tool answers after `ms`.
const SCRIPTED: &str = r#"
import json, sys, threading, time
out = threading.Lock()
answers = {}
cond = threading.Condition()
def send(m):
    with out:
        sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
def text(t): return {"content": [{"type": "text", "text": t}]}
def call(req):
    name, args = req["params"]["name"], req["params"].get("arguments", {})
    if name == "hold":
        time.sleep(args.get("ms", 1000) / 1000.0)
        return send({"jsonrpc": "2.0", "id": req["id"], "result": text("held")})
    time.sleep(args.get("delay", 0) / 1000.0)
    send({"jsonrpc": "2.0", "method": "notifications/message",
          "params": {"level": "info", "data": "SSN 123-45-6789 of " + args.get("who", "?")}})
    ask = "up-%s" % req["id"]
    send({"jsonrpc": "2.0", "id": ask, "method": "sampling/createMessage",
          "params": {"messages": [{"role": "user", "content": {"type": "text",
                     "text": "prompt of " + args.get("who", "?")}}], "maxTokens": 5}})
    with cond:
        cond.wait_for(lambda: ask in answers, timeout=5)
        got = answers.get(ask, "no answer")
    send({"jsonrpc": "2.0", "id": req["id"], "result": text(json.dumps(got))})
for line in sys.stdin:
    m = json.loads(line)
    meth = m.get("method")
    if meth is None and "id" in m:
        with cond:
            answers[m["id"]] = m.get("result", m.get("error")); cond.notify_all()
    elif meth == "initialize":
        send({"jsonrpc": "2.0", "id": m["id"], "result": {"protocolVersion": "2025-11-25",
              "capabilities": {"tools": {}, "logging": {}}, "serverInfo": {"name": "scripted", "version": "1"}}})
    elif meth == "tools/list":
        send({"jsonrpc": "2.0", "id": m["id"], "result": {"tools": [
            {"name": "hold", "inputSchema": {"type": "object"}},
            {"name": "sample", "inputSchema": {"type": "object"}}]}})
    elif meth == "tools/call":
        threading.Thread(target=call, args=(m,), daemon=True).start()
    elif "id" in m:
        send({"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32601, "message": "Method not found"}})
"#;

fn start_scripted(setup: &Setup, extra: &[&str]) -> Gateway {
    let script = setup.path("scripted.py");
    std::fs::write(&script, SCRIPTED).unwrap();
    let mut args: Vec<String> = vec![
        "--policy".into(),
        setup.path("policy.json").display().to_string(),
        "--token-file".into(),
        token_file(setup.dir.path()).display().to_string(),
        "--audit".into(),
        setup.path("audit").display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    Gateway::start(
        &args,
        &["python3".into(), script.display().to_string()],
        &[],
    )
}

fn has_method(msgs: &[Value], method: &str) -> bool {
    msgs.iter().any(|m| m["method"] == method)
}

/// Point 3: a server→client request (with carol's prompt) and a notification (with an SSN)
/// raised while serving carol's call never reach alice, who has a newer call in flight: with
/// calls of two tokens in flight the upstream's request is refused and the notification
/// dropped; with carol's alone, both reach carol and her answer reaches her call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_request_raised_for_one_token_never_reaches_another() {
    let setup = Setup::new();
    let gw = start_scripted(&setup, &[]);
    let mut alice = Client::new(&gw.url, "tok-alice", false);
    alice.initialize(false).await;
    let mut carol = Client::new(&gw.url, "tok-carol", false);
    carol.initialize(false).await;
    let carol = std::sync::Arc::new(carol);
    // Carol's call raises its request 600 ms after it reaches the upstream; alice's newer call
    // is in flight by then.
    let c = carol.clone();
    let carols = tokio::spawn(async move {
        c.request(
            "tools/call",
            json!({"name": "sample", "arguments": {"who": "carol", "delay": 600}}),
        )
        .await
    });
    let alices = alice
        .request(
            "tools/call",
            json!({"name": "hold", "arguments": {"ms": 1500}}),
        )
        .await;
    let carols = carols.await.unwrap();
    assert!(
        !has_method(&alices.msgs, "sampling/createMessage"),
        "carol's sampling request reached alice: {:?}",
        alices.msgs
    );
    assert!(
        !has_method(&alices.msgs, "notifications/message"),
        "carol's notification reached alice: {:?}",
        alices.msgs
    );
    assert_eq!(text(alices.answer()), "held");
    // The upstream got the gateway's refusal as its answer.
    let got = text(carols.answer());
    assert!(got.contains("cannot tell which client"), "{got}");
    // Carol alone: her request and notification reach her, her answer reaches her call.
    let mut events = carol
        .stream(
            "tools/call",
            json!({"name": "sample", "arguments": {"who": "carol"}}),
        )
        .await;
    let mut saw_note = false;
    let ask = loop {
        let m = events.next().await.expect("carol's stream ended early");
        if m["method"] == "notifications/message" {
            saw_note = true;
        }
        if m["method"] == "sampling/createMessage" {
            break m;
        }
    };
    assert!(saw_note);
    assert_eq!(
        ask["params"]["messages"][0]["content"]["text"],
        "prompt of carol"
    );
    let reply = json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"role": "assistant",
        "content": {"type": "text", "text": "carol's answer"}, "model": "m"}});
    assert_eq!(carol.post(&reply.to_string(), &[]).await.status, 202);
    let last = loop {
        let m = events.next().await.expect("carol's answer");
        if m.get("result").is_some() || m.get("error").is_some() {
            break m;
        }
    };
    assert!(text(&last).contains("carol's answer"), "{last}");
    // Alice cannot answer a request asked of carol.
    let forged = json!({"jsonrpc": "2.0", "id": ask["id"], "result": {}});
    assert_eq!(alice.post(&forged.to_string(), &[]).await.status, 202);
    gw.stop();
}

/// Point 4: a run id names a run inside the caller's token: bob naming alice's run gets
/// another run (alice's counters, pause and chain are hers), and the trail verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_run_is_the_tokens_own() {
    let setup = Setup::new();
    let gw = start(&setup, &[]);
    let mut alice = Client::new(&gw.url, "tok-alice", true);
    alice.run = Some("shared-name".into());
    let mut bob = Client::new(&gw.url, "tok-bob", true);
    bob.run = Some("shared-name".into());
    for i in 0..5 {
        let who = if i % 2 == 0 { &alice } else { &bob };
        let a = who.call("echo", json!({"text": format!("{i}")})).await;
        assert_eq!(a["result"]["structuredContent"]["echo"], format!("{i}"));
    }
    gw.stop();
    let events = mcp_client::read_events(&setup.path("audit"));
    let mut runs: Vec<String> = events
        .iter()
        .filter(|e| e["kind"] == "tool.decision")
        .map(|e| e["runId"].as_str().unwrap().to_string())
        .collect();
    runs.sort();
    runs.dedup();
    assert_eq!(runs.len(), 2, "one run per token: {runs:?}");
    let (ok, out) = setup.toolgate(&["verify", &setup.path("audit").display().to_string()]);
    assert!(ok, "verify: {out}");
}

/// Point 5: a 2025-11-25 client's `notifications/cancelled` names its own request id: it
/// cancels that request (the gateway renumbered it), and an id of no request cancels nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancellation_names_the_clients_own_request_id() {
    let setup = Setup::new();
    let gw = start(&setup, &[]);
    let mut c = Client::new(&gw.url, "tok-alice", false);
    c.initialize(false).await;
    // Both calls are started with a progress token; the first progress of each (half way)
    // proves the gateway forwarded it, so the cancellations below race nothing.
    let call = |id: &str, ms: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "slow", "arguments": {"ms": ms}, "_meta": {"progressToken": id}}})
        .to_string()
    };
    let (a, b) = (call("call-A", 4000), call("call-B", 3000));
    let (a, b) = tokio::join!(c.send(&a, &[]), c.send(&b, &[]));
    let (mut a, mut b) = (Events::of(a), Events::of(b));
    for (events, name) in [(&mut a, "call-A"), (&mut b, "call-B")] {
        let first = events.next().await.expect("a first message");
        assert_eq!(first["method"], "notifications/progress", "{name}: {first}");
    }
    // An unused id (the gateway's number of a request in flight, on the old code) cancels
    // nothing; the client's own id cancels its request.
    for rid in [json!(3), json!(2), json!(1), json!("call-A")] {
        let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": rid, "reason": "test"}});
        assert_eq!(c.post(&note.to_string(), &[]).await.status, 202);
    }
    let mut b_msgs = Vec::new();
    while let Some(m) = tokio::time::timeout(Duration::from_secs(20), b.next())
        .await
        .expect("call-B was never answered (a cancellation meant for another id reached it)")
    {
        b_msgs.push(m);
    }
    let answer = b_msgs.last().expect("call-B's answer");
    assert_eq!(answer["id"], "call-B", "{b_msgs:?}");
    assert!(answer.get("result").is_some(), "B answered: {b_msgs:?}");
    // A cancelled: its stream ends without the 4 s result (or with an error).
    let mut a_msgs = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(5), a.next()).await {
        a_msgs.push(m);
    }
    assert!(
        a_msgs.iter().all(|m| m.get("result").is_none()),
        "call-A was not cancelled: {a_msgs:?}"
    );
    gw.stop();
}

/// Point 7: a token holds at most `--max-sessions-per-token` sessions: the next
/// `initialize` gets 429; another token is not affected; SIGTERM ends it within 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_per_token_are_capped() {
    let setup = Setup::new();
    let gw = start(&setup, &["--max-sessions-per-token", "5"]);
    for _ in 0..5 {
        let mut c = Client::new(&gw.url, "tok-alice", false);
        c.initialize(false).await;
    }
    let c = Client::new(&gw.url, "tok-alice", false);
    let r = c
        .request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}),
        )
        .await;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.answer()["error"]["code"], -32600);
    let mut bob = Client::new(&gw.url, "tok-bob", false);
    bob.initialize(false).await;
    // Named 2026-07-28 runs count apart, under the same cap.
    let mut modern = Client::new(&gw.url, "tok-alice", true);
    for i in 0..5 {
        modern.run = Some(format!("r{i}"));
        assert_eq!(modern.request("tools/list", Value::Null).await.status, 200);
    }
    modern.run = Some("r5".into());
    assert_eq!(modern.request("tools/list", Value::Null).await.status, 429);
    let t = Instant::now();
    gw.stop();
    // Bounded, not timed: requests in flight get 2 s, then the upstreams and the audit trail
    // are closed; a stop that hangs on a held session would take minutes. (5 s was seen
    // exceeded by 13 ms on a loaded 2-core machine.)
    assert!(t.elapsed() <= Duration::from_secs(15), "{:?}", t.elapsed());
}

/// Point 8: `server/discover` carries `ttlMs` and `cacheScope`; `id: null`, object and array
/// ids get −32600 (as over stdio); a body that is not declared JSON gets 415.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_gateway_answers_conforms() {
    let setup = Setup::new();
    let gw = start(&setup, &[]);
    let m = Client::new(&gw.url, "tok-alice", true);
    let d = m.request("server/discover", Value::Null).await;
    let r = &d.answer()["result"];
    assert!(r["ttlMs"].is_u64(), "{r}");
    assert!(r["cacheScope"].is_string(), "{r}");
    for id in [json!(null), json!({"a": 1}), json!([1]), json!(true)] {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}}});
        let r = m.post(&body.to_string(), &[]).await;
        assert_eq!(r.status, 400, "id {id}: {r:?}");
        assert_eq!(r.answer()["error"]["code"], -32600, "id {id}");
    }
    let body = m.body(m.id(), "tools/list", Value::Null).to_string();
    let r = m
        .http
        .post(&gw.url)
        .bearer_auth("tok-alice")
        .header("content-type", "text/plain")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/list")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 415);
    gw.stop();
}

/// An upstream that answers `initialize` (other requests: an error) but never `tools/list`: each
/// `tools/list` it gets is a line in the file named by its first argument.
const NEVER_LISTS: &str = r#"
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("method") == "initialize":
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": {
            "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
            "serverInfo": {"name": "mute", "version": "1"}}}) + "\n")
        sys.stdout.flush()
    elif m.get("method") == "tools/list":
        with open(sys.argv[1], "a") as f:
            f.write("list\n")
    elif m.get("method") and "id" in m:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": m["id"], "error": {
            "code": -32601, "message": "Method not found"}}) + "\n")
        sys.stdout.flush()
"#;

/// SIGTERM with many sessions whose calls are still being decided (waiting on a tool list the
/// upstream never sends) is bounded: each session gives its calls the same 2 s grace, at once.
/// The sessions were closed one after another, each waiting its 2 s (12 sessions: about 24 s;
/// 20 sessions measured 45.9 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_many_sessions_still_deciding_is_bounded() {
    const SESSIONS: usize = 12;
    let setup = Setup::new();
    let script = setup.path("mute.py");
    std::fs::write(&script, NEVER_LISTS).unwrap();
    let lists = setup.path("lists.txt");
    let args: Vec<String> = vec![
        "--policy".into(),
        setup.path("policy.json").display().to_string(),
        "--token-file".into(),
        token_file(setup.dir.path()).display().to_string(),
        "--audit".into(),
        setup.path("audit").display().to_string(),
    ];
    let gw = Gateway::start(
        &args,
        &[
            "python3".into(),
            script.display().to_string(),
            lists.display().to_string(),
        ],
        &[],
    );
    let mut calls = Vec::new();
    for _ in 0..SESSIONS {
        let mut c = Client::new(&gw.url, "tok-alice", false);
        c.initialize(false).await;
        calls.push(tokio::spawn(async move {
            c.request("tools/call", json!({"name": "echo", "arguments": {}}))
                .await
        }));
    }
    // Every session's call is being decided: its gateway asked the upstream for the tools.
    let listed = || {
        std::fs::read_to_string(&lists)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    mcp_http_client::until(
        "every call waits on the tool list",
        Duration::from_secs(30),
        || listed() >= SESSIONS,
    )
    .await;
    let t = Instant::now();
    gw.stop();
    let took = t.elapsed();
    eprintln!("SIGTERM with {SESSIONS} sessions deciding -> stopped in {took:?}");
    assert!(took <= Duration::from_secs(15), "{took:?}");
    for c in calls {
        c.abort();
    }
    let ended = mcp_client::read_events(&setup.path("audit"))
        .iter()
        .filter(|e| e["kind"] == "run.ended")
        .count();
    assert_eq!(ended, SESSIONS);
}
