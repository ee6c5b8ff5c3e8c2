//! `toolgate mcp-proxy`'s bounds and lifecycle (issue 21 points 9–15): names, message sizes,
//! queues, signals, a client that leaves, approvals nobody answers, and lines that are not JSON.
#![cfg(all(feature = "mcp", unix))]

mod mcp_client;

use std::io::Write;
use std::process::{Command, Stdio};

use mcp_client::{Proxy, Setup, code, fixture, text};
use serde_json::{Value, json};

fn with(s: &Setup, extra: &[&str]) -> Vec<String> {
    let mut a = s.args();
    a.extend(extra.iter().map(|x| x.to_string()));
    a
}

fn ended(s: &Setup) -> Value {
    s.audit_events()
        .into_iter()
        .find(|e| e["kind"] == "run.ended")
        .expect("run.ended")
}

fn verify(s: &Setup) {
    let (ok, out) = s.toolgate(&["verify", s.path("audit").to_str().unwrap()]);
    assert!(ok, "{out}");
}

/// Point 10: a name over 256 bytes never reaches the engine or the tool.
#[test]
fn a_tool_name_over_256_bytes_is_refused() {
    let s = Setup::new();
    let record = s.path("record.jsonl").display().to_string();
    let mut p = Proxy::start_env(
        &s.args(),
        &[fixture(), "--hostile".into()],
        &[("HOSTILE_RECORD", &record)],
    );
    p.initialize("2025-06-18", false);
    let long = "n".repeat(300);
    let r = p.call(&long, json!({}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("256"),
        "{r}"
    );
    assert_eq!(p.finish().code(), Some(0));
    let rec = std::fs::read_to_string(&record).unwrap();
    assert!(!rec.contains(&long), "the name reached the server");
    assert!(
        !s.audit_events()
            .iter()
            .any(|e| e["tool"]["name"].as_str() == Some(long.as_str())),
        "the name reached the engine"
    );
}

/// Point 11: a result over 16 MiB passes under the default limit (64 MiB).
#[test]
fn a_result_over_16_mib_reaches_the_client() {
    let s = Setup::new();
    let mut p = s.start();
    p.initialize("2025-06-18", false);
    let r = p.call("big", json!({"bytes": 17_000_000}));
    assert_eq!(text(&r).len(), 17_000_000);
    assert_eq!(p.finish().code(), Some(0));
    // `toolgate verify` reads lines of up to 128 MiB: the 17 MB result's event verifies.
    verify(&s);
}

/// Point 11: a result over `--max-message-bytes` is answered with −32603 naming the limit and
/// recorded as an error; the session goes on.
#[test]
fn a_result_over_the_message_limit_fails_the_call() {
    let s = Setup::new();
    let mut p = Proxy::start(&with(&s, &["--max-message-bytes", "1048576"]), &[fixture()]);
    p.initialize("2025-06-18", false);
    let r = p.call("big", json!({"bytes": 2_000_000}));
    assert_eq!(r["error"]["code"], -32603, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("1048576"),
        "{r}"
    );
    let r = p.call("echo", json!({"text": "still here"}));
    assert_eq!(text(&r), "still here");
    assert_eq!(p.finish().code(), Some(0));
    verify(&s);
    let big = s
        .audit_events()
        .into_iter()
        .find(|e| e["kind"] == "tool.result" && e["tool"]["name"] == "big")
        .expect("the big call's result");
    assert!(big["error"].as_str().unwrap().contains("1048576"), "{big}");
}

/// Point 13: SIGTERM ends the run (`run.ended` written, the trail verifies).
#[test]
fn sigterm_ends_the_run_and_flushes_the_trail() {
    let s = Setup::new();
    let mut p = s.start();
    p.initialize("2025-06-18", false);
    let r = p.call("echo", json!({"text": "x"}));
    assert_eq!(text(&r), "x");
    let ok = Command::new("kill")
        .args(["-TERM", &p.pid().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    assert_eq!(p.wait().code(), Some(143));
    verify(&s);
    assert_eq!(ended(&s)["status"], "interrupted");
}

/// Point 13: a client that leaves with a call in flight: the call is an error outcome "client
/// gone" and the run ends `incomplete`.
#[test]
fn a_client_gone_with_calls_in_flight_ends_the_run_incomplete() {
    let s = Setup::new();
    let mut p = Proxy::start(&s.args(), &[fixture(), "--hostile".into()]);
    p.initialize("2025-06-18", false);
    p.send_request("tools/call", json!({"name": "stubborn", "arguments": {}}));
    p.wait_for(|v| v["params"]["data"] == "stubborn waiting");
    assert_eq!(p.finish().code(), Some(0));
    verify(&s);
    let events = s.audit_events();
    let slow = events
        .iter()
        .find(|e| e["kind"] == "tool.result" && e["tool"]["name"] == "stubborn")
        .expect("the call's result");
    assert_eq!(slow["error"], "client gone");
    assert_eq!(ended(&s)["status"], "incomplete");
}

/// Point 14: an approval question nobody answers is denied after `--approval-timeout`.
#[test]
fn an_unanswered_approval_times_out_denied() {
    let s = Setup::new();
    let mut p = Proxy::start(&with(&s, &["--approval-timeout", "1"]), &[fixture()]);
    p.initialize("2025-11-25", true);
    let id = p.send_request(
        "tools/call",
        json!({"name": "publish", "arguments": {"id": "t"}}),
    );
    p.wait_for(|v| v["method"] == "elicitation/create");
    let r = p.response(&id);
    assert_eq!(code(&r), "BLOCKED_HITL_DENIED", "{r}");
    assert_eq!(p.finish().code(), Some(0));
}

/// Point 14: a user who cancels the question leaves the review pending, and is told the
/// command that approves it.
#[test]
fn a_cancelled_question_leaves_the_review_pending() {
    let s = Setup::new();
    let mut p = s.start();
    p.initialize("2025-11-25", true);
    let id = p.send_request(
        "tools/call",
        json!({"name": "publish", "arguments": {"id": "c"}}),
    );
    let ask = p.wait_for(|v| v["method"] == "elicitation/create");
    p.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "cancel"}}));
    let r = p.response(&id);
    let t = text(&r);
    assert!(t.contains("toolgate review --store"), "{t}");
    assert!(!t.contains("use a client that supports elicitation"), "{t}");
    assert_eq!(p.finish().code(), Some(0));
    let (ok, out) = s.toolgate(&[
        "review",
        "--store",
        s.path("reviews.json").to_str().unwrap(),
        "list",
    ]);
    assert!(ok, "{out}");
    assert!(out.to_lowercase().contains("pending"), "{out}");
}

/// Point 15: a line that is not JSON gets a JSON-RPC parse error with id null.
#[test]
fn a_line_that_is_not_json_gets_a_parse_error() {
    let s = Setup::new();
    let mut p = s.start();
    p.initialize("2025-06-18", false);
    p.send_line("{not json");
    p.send(json!({"jsonrpc": "2.0", "id": 77, "method": "ping"}));
    let first = p.recv().unwrap();
    assert_eq!(first["error"]["code"], -32700, "{first}");
    assert_eq!(first["id"], Value::Null, "{first}");
    assert_eq!(p.finish().code(), Some(0));
}

/// The gateway's resident memory in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Bytes a process wrote so far.
fn written(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    io.lines()
        .find_map(|l| l.strip_prefix("wchar:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Point 9: a client that does not read stops the gateway from reading the server; the
/// gateway does not buffer what the server floods (300 MiB of notifications).
#[test]
fn a_client_that_does_not_read_gets_backpressure() {
    const FLOOD: u64 = 300 << 20;
    let s = Setup::new();
    // A client that writes and never reads.
    let mut gw = Command::new(mcp_client::TOOLGATE)
        .arg("mcp-proxy")
        .args(s.args())
        .args(["--", &fixture(), "--hostile"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = gw.stdin.take().unwrap();
    let _stdout = gw.stdout.take().unwrap();
    for m in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "flood", "arguments": {"bytes": FLOOD}}}),
    ] {
        writeln!(stdin, "{m}").unwrap();
    }
    stdin.flush().unwrap();
    // The server either finishes its flood (the gateway took it all in) or stalls well before
    // (backpressure); a stall cannot be awaited, so the server's output is watched until it
    // stops growing.
    let server = loop {
        if let Some(c) = children(gw.id()).into_iter().next() {
            break c;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let (mut last, mut still) = (0, 0);
    loop {
        let w = written(server);
        if w >= FLOOD || still >= 20 {
            break;
        }
        still = if w == last { still + 1 } else { 0 };
        last = w;
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let rss = rss_kib(gw.id());
    let _ = gw.kill();
    let _ = gw.wait();
    assert!(
        written(server) < FLOOD || rss < 150 * 1024,
        "the gateway holds {rss} KiB while the client does not read"
    );
    assert!(
        rss < 150 * 1024,
        "the gateway holds {rss} KiB while the client does not read"
    );
}

/// Bytes a process read so far.
fn read_bytes(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    io.lines()
        .find_map(|l| l.strip_prefix("rchar:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Point 9: a server that does not read stops the gateway from reading the client; the
/// gateway does not buffer what the client sends (300 MiB of requests).
#[test]
fn a_server_that_does_not_read_gets_backpressure() {
    const FLOOD: usize = 300 << 20;
    let s = Setup::new();
    let mut gw = Command::new(mcp_client::TOOLGATE)
        .arg("mcp-proxy")
        .args(s.args())
        .args(["--", &fixture(), "--hostile"])
        .env("HOSTILE_STALL", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = gw.stdin.take().unwrap();
    let pid = gw.id();
    let writer = std::thread::spawn(move || {
        let head = [
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        ];
        for m in head {
            writeln!(stdin, "{m}").ok()?;
        }
        let pad = "y".repeat(64 * 1024);
        let mut sent = 0;
        let mut id = 3u64;
        while sent < FLOOD {
            let line = format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/x","params":{{"n":{id},"pad":"{pad}"}}}}"#
            );
            writeln!(stdin, "{line}").ok()?;
            sent += line.len() + 1;
            id += 1;
        }
        Some(())
    });
    let (mut last, mut still) = (0, 0);
    loop {
        let r = read_bytes(pid);
        if writer.is_finished() || still >= 20 {
            break;
        }
        still = if r == last { still + 1 } else { 0 };
        last = r;
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let rss = rss_kib(pid);
    let _ = gw.kill();
    let _ = gw.wait();
    let _ = writer.join();
    assert!(
        rss < 150 * 1024,
        "the gateway holds {rss} KiB while the server does not read"
    );
}

fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .collect()
}
