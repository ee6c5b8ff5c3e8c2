//! `toolgate mcp-proxy --listen` in front of a flooding upstream, with clients that do not read
//! (issue 31 point 2), over real loopback sockets and the real binary: every stream a session
//! writes to is bounded in bytes; one that falls behind is cut (logged, counted) and its memory
//! freed, the gateway stays small and the other clients keep working; an upstream's request
//! that cannot reach its client is answered with an error, not left waiting.
#![cfg(all(feature = "mcp", feature = "http"))]

mod mcp_client;
mod mcp_http_client;

use std::time::Duration;

use mcp_client::{Setup, fixture};
use mcp_http_client::{
    Client, Gateway, children, raw_request, read_to_end_of_response, rss_kib, text, token_file,
    until, written,
};
use serde_json::json;

/// 200,000 notifications of about 1 KB each.
const NOTES: u64 = 200_000;
const NOTE_DATA: u64 = 1000;
/// The most the gateway may grow while flooded.
const GROWTH_KIB: u64 = 50 * 1024;

fn start(setup: &Setup, extra: &[&str]) -> Gateway {
    let mut args = setup.args();
    args.push("--token-file".into());
    args.push(token_file(setup.dir.path()).display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    Gateway::start(&args, &[fixture(), "--hostile".into()], &[])
}

/// The bytes of the flood (each line: the note's JSON and a newline).
fn flood_bytes() -> u64 {
    let line = json!({"jsonrpc": "2.0", "method": "notifications/message",
        "params": {"level": "info", "data": "y".repeat(NOTE_DATA as usize)}})
    .to_string();
    NOTES * (line.len() as u64 + 1)
}

/// The bytes every upstream process of the gateway wrote so far.
fn upstreams_wrote(gw: &Gateway) -> u64 {
    children(gw.pid()).into_iter().map(written).sum()
}

fn auth(c: &Client) -> Vec<(&'static str, String)> {
    vec![
        (
            "authorization",
            format!("Bearer {}", c.token.as_deref().unwrap()),
        ),
        ("mcp-session-id", c.session.clone().unwrap()),
    ]
}

/// The 2025-11-25 GET stream of a session is opened and never read, and the session's own
/// upstream (`--upstream-per session`) floods it with 200,000 × 1 KB notifications.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_stream_never_read_is_cut_and_the_gateway_stays_small() {
    let setup = Setup::new();
    let gw = start(&setup, &["--upstream-per", "session"]);
    let mut alice = Client::new(&gw.url, "tok-alice", false);
    alice.initialize(false).await;
    let mut bob = Client::new(&gw.url, "tok-bob", false);
    bob.initialize(false).await;
    let h = auth(&alice);
    let headers: Vec<(&str, &str)> = h
        .iter()
        .map(|(k, v)| (*k, v.as_str()))
        .chain([("accept", "text/event-stream")])
        .collect();
    let mut get = raw_request(&gw.url, "GET", &headers, "", true);
    let (base, _) = rss_kib(gw.pid());
    let total = flood_bytes();
    let before = upstreams_wrote(&gw);
    // The answer first, then the flood: nothing is in flight, so all of it is for the GET
    // stream.
    let a = alice
        .call(
            "flood",
            json!({"bytes": total, "size": NOTE_DATA, "after": true}),
        )
        .await;
    assert_eq!(text(&a), "flooding");
    // Bob keeps working while alice's stream is flooded.
    for i in 0..20 {
        let b = bob.call("echo", json!({"text": format!("bob {i}")})).await;
        assert_eq!(text(&b), format!("bob {i}"));
    }
    until(
        "the upstream wrote its flood",
        Duration::from_secs(300),
        || upstreams_wrote(&gw) >= before + total,
    )
    .await;
    // Alice's next answer comes after every notification of the flood was read.
    let a = alice.call("echo", json!({"text": "after"})).await;
    assert_eq!(text(&a), "after");
    let (rss, peak) = rss_kib(gw.pid());
    eprintln!("rss: {base} KiB before, {rss} KiB after, peak {peak} KiB");
    assert!(
        peak.saturating_sub(base) <= GROWTH_KIB,
        "the gateway grew from {base} KiB to a peak of {peak} KiB (bound: +{GROWTH_KIB} KiB)"
    );
    assert!(
        gw.logged("fell behind") && gw.logged("streams cut so far"),
        "the cut is logged and counted"
    );
    // The stream was ended: reading it now finds its end.
    assert!(
        read_to_end_of_response(&mut get),
        "the cut stream ends (its last chunk)"
    );
    drop(get);
    let b = bob.call("echo", json!({"text": "still"})).await;
    assert_eq!(text(&b), "still");
    let (after_close, _) = rss_kib(gw.pid());
    assert!(
        after_close.saturating_sub(base) <= GROWTH_KIB,
        "after the stream closed the gateway holds {after_close} KiB (from {base} KiB)"
    );
    gw.stop();
}

/// A 2025-11-25 POST whose response stream is never read, on the shared upstream: the
/// notifications its call raises (200,000 × 1 KB) are bounded, the stream is cut, and another
/// token's session keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_stream_never_read_is_cut_and_other_sessions_keep_working() {
    let setup = Setup::new();
    let gw = start(&setup, &[]);
    let mut alice = Client::new(&gw.url, "tok-alice", false);
    alice.initialize(false).await;
    let mut bob = Client::new(&gw.url, "tok-bob", false);
    bob.initialize(false).await;
    // Bob's session lists the tools now: listed behind the flood, the gateway's own tools/list
    // could outlast its 60 s limit on a loaded machine (then "Unknown tool").
    let warm = bob.call("echo", json!({"text": "warm"})).await;
    assert_eq!(text(&warm), "warm");
    let (base, _) = rss_kib(gw.pid());
    let total = flood_bytes();
    let before = upstreams_wrote(&gw);
    let h = auth(&alice);
    let headers: Vec<(&str, &str)> = h
        .iter()
        .map(|(k, v)| (*k, v.as_str()))
        .chain([
            ("accept", "application/json, text/event-stream"),
            ("content-type", "application/json"),
        ])
        .collect();
    let call = json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
        "params": {"name": "flood", "arguments": {"bytes": total, "size": NOTE_DATA}}});
    let post = raw_request(&gw.url, "POST", &headers, &call.to_string(), false);
    // Until the stream is cut, or (without a bound) the whole flood was taken in.
    until(
        "the stream is cut or the flood taken in",
        Duration::from_secs(300),
        || gw.logged("fell behind") || upstreams_wrote(&gw) >= before + total,
    )
    .await;
    // Bob's call is answered after the rest of the flood (the server answers in order).
    let b = bob.call("echo", json!({"text": "bob"})).await;
    assert_eq!(text(&b), "bob", "Bob's answer: {b}");
    let (rss, peak) = rss_kib(gw.pid());
    eprintln!("rss: {base} KiB before, {rss} KiB after, peak {peak} KiB");
    assert!(
        peak.saturating_sub(base) <= GROWTH_KIB,
        "the gateway grew from {base} KiB to a peak of {peak} KiB (bound: +{GROWTH_KIB} KiB)"
    );
    assert!(gw.logged("fell behind"), "the cut is logged");
    drop(post);
    // Alice's session goes on after her stream was cut.
    let a = alice.call("echo", json!({"text": "alice"})).await;
    assert_eq!(text(&a), "alice");
    gw.stop();
}

/// An upstream's request for a client no stream can carry it to (a 2026-07-28 client has
/// none) is answered at once with a JSON-RPC error: the call that raised it completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_request_that_cannot_be_delivered_is_answered_with_an_error() {
    let setup = Setup::new();
    let gw = start(&setup, &[]);
    let c = Client::new(&gw.url, "tok-alice", true);
    // The server asks the client (elicitation/create) and answers the call once answered.
    let r = tokio::time::timeout(
        Duration::from_secs(60),
        c.request(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "elicit"}}),
        ),
    )
    .await
    .expect("the call is answered (the server's question was not left waiting)");
    assert_eq!(r.status, 200, "{r:?}");
    // The server got an error for its question (no result): `elicited: null`.
    assert_eq!(text(r.answer()), "elicited: null", "{r:?}");
    gw.stop();
}
