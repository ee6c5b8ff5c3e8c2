//! Protocol 2026-07-28 downstream of `toolgate mcp-proxy --listen` (in front of the fixture
//! server, which speaks 2025-11-25 and is initialized once by the gateway): stateless requests,
//! `server/discover`, `resultType`, the `Mcp-Method`/`Mcp-Name` header checks, runs per
//! `_meta` run id, the per-token run that ends when idle, `subscriptions/listen`, and approvals through `input_required` with a sealed `requestState`.
#![cfg(all(feature = "mcp", feature = "http"))]

mod mcp_client;
mod mcp_http_client;

use mcp_client::{Setup, fixture, read_events};
use mcp_http_client::{Client, Gateway, code, text, token_file};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const KEY: &[u8] = b"0123456789abcdef0123456789abcdef-test-key";

fn start(setup: &Setup) -> Gateway {
    start_with(setup, &[])
}

fn start_with(setup: &Setup, extra: &[&str]) -> Gateway {
    let key = setup.path("state.key");
    std::fs::write(&key, KEY).unwrap();
    let mut args = setup.args();
    args.extend(
        [
            "--token-file",
            &token_file(setup.dir.path()).display().to_string(),
            "--request-state-key",
            &key.display().to_string(),
        ]
        .map(String::from),
    );
    args.extend(extra.iter().map(|a| a.to_string()));
    Gateway::start(&args, &[fixture()], &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_requests_discover_and_header_checks() {
    let setup = Setup::new();
    let gw = start(&setup);
    let c = Client::new(&gw.url, "tok-alice", true);
    let d = c.request("server/discover", json!({})).await;
    assert_eq!(d.status, 200);
    let r = &d.answer()["result"];
    assert_eq!(r["resultType"], "complete");
    assert!(
        r["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!("2026-07-28"))
    );
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "fixture"
    );
    // No initialize, no session: a call right away, its result `complete`.
    let a = c.call("echo", json!({"text": "hi"})).await;
    assert_eq!(a["result"]["resultType"], "complete");
    assert_eq!(a["result"]["structuredContent"]["echo"], "hi");
    let tools = c.request("tools/list", json!({})).await;
    let t = &tools.answer()["result"];
    assert_eq!(t["resultType"], "complete");
    assert_eq!(
        (t["ttlMs"].clone(), t["cacheScope"].clone()),
        (json!(0), json!("private"))
    );
    // Headers that do not match the body: −32020, HTTP 400.
    let body = c
        .body(
            9,
            "tools/call",
            json!({"name": "delete_note", "arguments": {"id": "x"}}),
        )
        .to_string();
    for extra in [
        [("mcp-name", "echo")],
        [("mcp-method", "tools/list")],
        [("mcp-protocol-version", "2025-11-25")],
    ] {
        let r = c.post(&body, &extra).await;
        assert_eq!(r.status, 400, "{extra:?}");
        assert_eq!(r.answer()["error"]["code"], -32020, "{extra:?}");
    }
    // Base64-encoded names are decoded before the comparison.
    let r = c
        .post(
            &c.body(
                10,
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "b"}}),
            )
            .to_string(),
            &[("mcp-name", "=?base64?ZWNobw==?=")],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    gw.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_id_in_meta_names_the_run() {
    let setup = Setup::new();
    let gw = start(&setup);
    let mut c = Client::new(&gw.url, "tok-bob", true);
    c.run = Some("run-from-client-1".into());
    c.call("echo", json!({"text": "1"})).await;
    c.call("echo", json!({"text": "2"})).await;
    let other = Client::new(&gw.url, "tok-bob", true);
    other.call("echo", json!({"text": "3"})).await;
    assert!(gw.stop().success());
    let events = read_events(&setup.path("audit"));
    let runs: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "run.started")
        .map(|e| &e["runId"])
        .collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    // A named run lives inside the token: `<name>@<16 hex digits of the token's key>`.
    let named = |v: &Value| {
        v.as_str()
            .is_some_and(|r| r.starts_with("run-from-client-1@"))
    };
    assert!(runs.iter().any(|r| named(r)), "{runs:?}");
    let calls_in_run = events
        .iter()
        .filter(|e| named(&e["runId"]) && e["kind"] == "tool.decision")
        .count();
    assert!(calls_in_run >= 2, "{calls_in_run}");
}

fn seal(payload: &Value) -> String {
    // The gateway's format: v1.<hex payload>.<hex HMAC-SHA256 over "v1.<hex payload>">.
    let signed = format!("v1.{}", hex::encode(payload.to_string()));
    let mut k = [0u8; 64];
    k[..KEY.len()].copy_from_slice(KEY);
    let (mut ipad, mut opad) = ([0x36u8; 64], [0x5cu8; 64]);
    for i in 0..64 {
        ipad[i] ^= k[i];
        opad[i] ^= k[i];
    }
    let inner = Sha256::new()
        .chain_update(ipad)
        .chain_update(signed.as_bytes())
        .finalize();
    let mac = Sha256::new()
        .chain_update(opad)
        .chain_update(inner)
        .finalize();
    format!("{signed}.{}", hex::encode(mac))
}

/// Sends a call and its retry with `state` and an answer; the retry's answer.
async fn retry(c: &Client, args: &Value, state: &str, approve: bool) -> Value {
    let r = c
        .request(
            "tools/call",
            json!({"name": "publish", "arguments": args, "requestState": state,
                   "inputResponses": {"dev.toolgate/approval": {"action": "accept", "content": {"approve": approve}}}}),
        )
        .await;
    assert_eq!(r.status, 200);
    r.answer().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_through_input_required_and_bad_states_rejected() {
    let setup = Setup::new();
    let gw = start(&setup);
    let mut c = Client::new(&gw.url, "tok-alice", true);
    c.elicitation = true;
    c.run = Some("hitl-run".into());
    let args = json!({"id": "n1"});
    let first = c.call("publish", args.clone()).await;
    let r = &first["result"];
    assert_eq!(r["resultType"], "input_required", "{first}");
    let ask = &r["inputRequests"]["dev.toolgate/approval"];
    assert_eq!(ask["method"], "elicitation/create");
    assert!(
        ask["params"]["message"]
            .as_str()
            .unwrap()
            .contains("publish")
    );
    let state = r["requestState"].as_str().unwrap().to_string();
    // Tampered: one character of the payload changed.
    let mut t = state.clone().into_bytes();
    t[4] = if t[4] == b'7' { b'6' } else { b'7' };
    let tampered = retry(&c, &args, &String::from_utf8(t).unwrap(), true).await;
    assert_eq!(code(&tampered), "BLOCKED_REQUEST_STATE", "{tampered}");
    // For another call: mismatched.
    let other = retry(&c, &json!({"id": "n2"}), &state, true).await;
    assert_eq!(code(&other), "BLOCKED_REQUEST_STATE", "{other}");
    // Another principal (bob's token, the same agent, run and call): mismatched.
    let mut bob = Client::new(&gw.url, "tok-bob", true);
    bob.elicitation = true;
    bob.run = Some("hitl-run".into());
    let stolen = retry(&bob, &args, &state, true).await;
    assert_eq!(code(&stolen), "BLOCKED_REQUEST_STATE", "{stolen}");
    // Expired: a correctly sealed state whose time is past.
    let payload: Value =
        serde_json::from_slice(&hex::decode(state.split('.').nth(1).unwrap()).unwrap()).unwrap();
    let mut old = payload.clone();
    old["e"] = json!(1_000);
    let expired = retry(&c, &args, &seal(&old), true).await;
    assert_eq!(code(&expired), "BLOCKED_REQUEST_STATE", "{expired}");
    assert!(text(&expired).contains("expired"), "{expired}");
    // The real state, approved: the call runs.
    let ok = retry(&c, &args, &state, true).await;
    assert_eq!(text(&ok), "published \"n1\"", "{ok}");
    assert_eq!(ok["result"]["resultType"], "complete");
    // Replayed: the review is resolved already.
    let replay = retry(&c, &args, &state, true).await;
    assert_eq!(code(&replay), "BLOCKED_REQUEST_STATE", "{replay}");
    assert!(text(&replay).contains("replayed"), "{replay}");
    // Denied through input_required.
    let args2 = json!({"id": "n3"});
    let again = c.call("publish", args2.clone()).await;
    let state2 = again["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_string();
    let denied = retry(&c, &args2, &state2, false).await;
    assert_eq!(code(&denied), "BLOCKED_HITL_DENIED", "{denied}");
    assert!(gw.stop().success());
    let events = read_events(&setup.path("audit"));
    let errors: Vec<String> = events
        .iter()
        .filter(|e| e["kind"] == "error")
        .map(|e| e.to_string())
        .collect();
    assert!(errors.len() >= 5, "{errors:?}");
    for why in [
        "forged",
        "another call",
        "another agent",
        "expired",
        "replayed",
    ] {
        assert!(errors.iter().any(|m| m.contains(why)), "{why}: {errors:?}");
    }
}

/// The audit events written so far (a line still being written is skipped).
fn events_so_far(dir: &std::path::Path) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .flat_map(|t| {
            t.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_per_token_ends_when_idle_and_a_later_call_starts_another() {
    let setup = Setup::new();
    let gw = start_with(&setup, &["--run-idle-secs", "1"]);
    let c = Client::new(&gw.url, "tok-alice", true);
    assert_eq!(c.run, None);
    let a = c.call("echo", json!({"text": "1"})).await;
    assert_eq!(a["result"]["structuredContent"]["echo"], "1", "{a}");
    // The idle end is time-based: poll the trail (every 50 ms, at most 15 s) for it.
    let audit = setup.path("audit");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let ended = loop {
        let events = events_so_far(&audit);
        if let Some(e) = events.iter().find(|e| e["kind"] == "run.ended") {
            break e.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no run.ended within 15 s: {events:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(ended["status"], "idle", "{ended}");
    let first = ended["runId"].clone();
    assert!(first.is_string(), "{ended}");
    let b = c.call("echo", json!({"text": "2"})).await;
    assert_eq!(b["result"]["structuredContent"]["echo"], "2", "{b}");
    assert!(gw.stop().success());
    let events = read_events(&audit);
    let runs: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "run.started")
        .map(|e| &e["runId"])
        .collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(runs.contains(&&first), "{runs:?}");
    assert_ne!(runs[0], runs[1], "{runs:?}");
    // One call in each run: the first before the idle end, the second after.
    for r in &runs {
        let calls = events
            .iter()
            .filter(|e| e["kind"] == "tool.decision" && &&e["runId"] == r)
            .count();
        assert_eq!(calls, 1, "{r}: {events:?}");
    }
    let (ok, out) = setup.toolgate(&["verify", &audit.display().to_string()]);
    assert!(ok, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_listen_acknowledges_and_streams_tools_list_changed() {
    let setup = Setup::new();
    let gw = start(&setup);
    let c = Client::new(&gw.url, "tok-alice", true);
    let mut listen = c
        .stream(
            "subscriptions/listen",
            json!({"notifications": {"toolsListChanged": true}}),
        )
        .await;
    // The acknowledgment first: the opted-in notifications, the subscription id = the request id.
    let ack = listen.next().await.expect("the acknowledgment");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true}),
        "{ack}"
    );
    let sub = ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].clone();
    assert_eq!(sub, json!(1), "{ack}");
    // The fixture's `mutable` changes its definition and sends tools/list_changed upstream.
    let m = c.call("mutable", json!({})).await;
    assert_eq!(text(&m), "mutated", "{m}");
    let note = listen.next().await.expect("the list change");
    assert_eq!(note["method"], "notifications/tools/list_changed", "{note}");
    assert!(note.get("id").is_none(), "{note}");
    assert_eq!(
        note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], sub,
        "{note}"
    );
    drop(listen);
    assert!(gw.stop().success());
}

/// A `slow` call with `progressToken` "p" whose upstream progress messages are `label`: every
/// message of its reply (progress first, the answer last).
async fn slow_with_progress(c: &Client, label: &str) -> Vec<Value> {
    let mut body = c.body(
        c.id(),
        "tools/call",
        json!({"name": "slow", "arguments": {"ms": 400, "label": label}}),
    );
    body["params"]["_meta"]["progressToken"] = json!("p");
    let r = c.post(&body.to_string(), &[]).await;
    assert_eq!(r.status, 200, "{r:?}");
    r.msgs
}

/// Each of `replies` (of calls labelled `labels`) holds its own two progress notifications, in
/// order, under the client's own token, then its answer.
fn each_got_its_own_progress(replies: &[Vec<Value>], labels: &[&str]) {
    for (msgs, label) in replies.iter().zip(labels) {
        let progress: Vec<&Value> = msgs
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .collect();
        assert_eq!(progress.len(), 2, "{label}: {msgs:?}");
        for (i, p) in progress.iter().enumerate() {
            assert_eq!(p["params"]["message"], *label, "{label}: {msgs:?}");
            assert_eq!(p["params"]["progressToken"], "p", "{label}: {msgs:?}");
            let step = p["params"]["progress"].as_f64();
            assert_eq!(step, Some((i + 1) as f64), "{label}: {msgs:?}");
        }
        let last = msgs.last().expect("an answer");
        assert_eq!(text(last), "slept 400", "{label}: {msgs:?}");
        assert_eq!(msgs.len(), 3, "{label}: {msgs:?}");
    }
}

/// Issue 26: upstream `notifications/progress` reach the request they report on, on its own
/// response stream — for 2026-07-28 clients (two of one token, so one run, with the same
/// progress token, and one of another token, all at once) and for two requests at once in one
/// 2025-11-25 session — never another request's stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_reaches_the_request_it_reports_on_and_no_other() {
    let setup = Setup::new();
    let gw = start(&setup);
    let a1 = Client::new(&gw.url, "tok-alice", true);
    let a2 = Client::new(&gw.url, "tok-alice", true);
    let b = Client::new(&gw.url, "tok-bob", true);
    let (r1, r2, r3) = tokio::join!(
        slow_with_progress(&a1, "alice-1"),
        slow_with_progress(&a2, "alice-2"),
        slow_with_progress(&b, "bob"),
    );
    each_got_its_own_progress(&[r1, r2, r3], &["alice-1", "alice-2", "bob"]);
    // 2025-11-25: one session, two requests in flight at once.
    let mut legacy = Client::new(&gw.url, "tok-carol", false);
    legacy.initialize(false).await;
    let call = |label: &'static str, id: u64| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "slow", "arguments": {"ms": 400, "label": label},
            "_meta": {"progressToken": "p"}}});
        let legacy = &legacy;
        async move {
            let r = legacy.post(&body.to_string(), &[]).await;
            assert_eq!(r.status, 200, "{r:?}");
            r.msgs
        }
    };
    let (l1, l2) = tokio::join!(call("carol-1", 101), call("carol-2", 102));
    each_got_its_own_progress(&[l1, l2], &["carol-1", "carol-2"]);
    assert!(gw.stop().success());
}
