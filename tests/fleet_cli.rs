//! Issue 22 (trust at fleet scale), on real processes: `toolgate` runs against a real Redis
//! (the shared one under unique prefixes, or a private `redis-server` for faults), a TCP
//! listener that accepts and never answers, and a closed pipe. Redis cases need
//! `TOOLGATE_TEST_REDIS_URL` (skipped when unset).
#![cfg(feature = "redis")]

mod common;
mod redis_support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::collect::Collect;
use common::process::{run_bounded, toolgate};
use redis_support::{OwnRedis, free_port, url};
use serde_json::{Value, json};

const POLICY: &str = r#"[
  {"id": "cap", "name": "cap", "priority": 1, "enabled": true,
   "selector": {"phase": "tool.before", "tool": {}},
   "condition": {"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["*"]}, "max": 1000, "per": "run"},
   "effect": {"type": "block"}}
]"#;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

fn prefix(tag: &str) -> String {
    format!("tgtest:fleet-cli:{tag}:{}", uuid::Uuid::now_v7().simple())
}

/// A TCP server that accepts connections and never answers (holds them open).
fn silent_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().flatten() {
            held.push(s);
        }
    });
    port
}

fn trail_events(dir: &Path) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for f in entries {
        let text = std::fs::read_to_string(f.expect("entry").path()).expect("read");
        out.extend(
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).expect("json")),
        );
    }
    out
}

/// Run `r` in two traces: the first starts it and makes one call (leaving it open), the
/// second starts it again, makes another call and ends it.
fn run_in_two_traces() -> (String, String) {
    let start = r#"{"type":"run.start","runId":"r","agentId":"agent","at":"2026-01-05T09:00:00Z"}"#;
    let a = format!(
        "{start}\n{}\n",
        r#"{"type":"tool.call","runId":"r","id":"c1","tool":{"name":"search"},"args":{},"at":"2026-01-05T09:00:01Z"}"#
    );
    let b = format!(
        "{start}\n{}\n{}\n",
        r#"{"type":"tool.call","runId":"r","id":"c2","tool":{"name":"search"},"args":{},"at":"2026-01-05T09:00:02Z"}"#,
        r#"{"type":"run.end","runId":"r","status":"success","at":"2026-01-05T09:00:03Z"}"#
    );
    (a, b)
}

/// Two `toolgate replay` processes on one Redis: the first trace leaves run `r` open (no
/// `run.end` line), the second continues and ends it. The two trails verify as one chain.
#[test]
fn replay_leaves_a_run_open_and_another_process_continues_its_chain() {
    let Some(url) = url() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = write(dir.path(), "p.json", POLICY);
    let (a, b) = run_in_two_traces();
    let prefix = prefix("chain");
    for (name, text) in [("a", &a), ("b", &b)] {
        let trace = write(dir.path(), &format!("{name}.jsonl"), text);
        let out = toolgate()
            .args(["replay", "--policy"])
            .arg(&policy)
            .arg("--trace")
            .arg(&trace)
            .args(["--state", &url, "--state-prefix", &prefix, "--audit"])
            .arg(dir.path().join(format!("trail-{name}")))
            .output()
            .expect("toolgate runs");
        assert!(out.status.success(), "{out:?}");
    }
    let read = |name: &str| trail_events(&dir.path().join(format!("trail-{name}")));
    let (first, second) = (read("a"), read("b"));
    assert!(
        first.iter().all(|e| e["kind"] != "run.ended"),
        "the first process leaves the run open: {first:?}"
    );
    let last = first.last().expect("events");
    assert_eq!(second[0]["seq"], last["seq"].as_u64().expect("seq") + 1);
    assert_eq!(second[0]["prevHash"], last["hash"]);
    let verify = toolgate()
        .arg("verify")
        .arg(dir.path().join("trail-a"))
        .arg(dir.path().join("trail-b"))
        .output()
        .expect("toolgate runs");
    assert!(verify.status.success(), "{verify:?}");
}

fn one_call_trace(dir: &Path) -> PathBuf {
    write(
        dir,
        "one.jsonl",
        concat!(
            r#"{"type":"run.start","runId":"r1","agentId":"agent","at":"2026-01-05T09:00:00Z"}"#,
            "\n",
            r#"{"type":"tool.call","runId":"r1","id":"c1","tool":{"name":"search"},"args":{},"at":"2026-01-05T09:00:01Z"}"#,
            "\n",
            r#"{"type":"run.end","runId":"r1","status":"success","at":"2026-01-05T09:00:02Z"}"#,
            "\n"
        ),
    )
}

/// A Redis that accepts and never answers (a silent listener, or a private redis-server
/// frozen by SIGSTOP): `replay` and `review` finish (bounded by one connect and the store
/// timeout); `closed` refuses with exit 2 and an error naming the server without its
/// password; `open` starts, allows, and writes `error` events.
fn start_up_against(url: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = write(dir.path(), "p.json", POLICY);
    let trace = one_call_trace(dir.path());
    let limit = Duration::from_secs(30);
    let closed = run_bounded(
        toolgate()
            .args(["replay", "--policy"])
            .arg(&policy)
            .arg("--trace")
            .arg(&trace)
            .args(["--state", url, "--failure-mode", "closed"]),
        limit,
    );
    let stderr = String::from_utf8_lossy(&closed.stderr);
    assert_eq!(closed.status.code(), Some(2), "{closed:?}");
    assert!(stderr.contains("127.0.0.1"), "names the server: {stderr}");
    assert!(!stderr.contains("s3cret"), "never the password: {stderr}");

    let audit = dir.path().join("trail");
    let open = run_bounded(
        toolgate()
            .args(["replay", "--format", "jsonl", "--policy"])
            .arg(&policy)
            .arg("--trace")
            .arg(&trace)
            .args(["--state", url, "--failure-mode", "open", "--audit"])
            .arg(&audit),
        limit,
    );
    assert!(open.status.success(), "{open:?}");
    let rows: Vec<Value> = String::from_utf8_lossy(&open.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("jsonl"))
        .collect();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["effect"], "allow", "{rows:?}");
    let errors: Vec<Value> = trail_events(&audit)
        .into_iter()
        .filter(|e| e["kind"] == "error")
        .collect();
    assert!(!errors.is_empty(), "error events in the trail");
    assert!(
        errors.iter().all(|e| !e.to_string().contains("s3cret")),
        "{errors:?}"
    );

    let review = run_bounded(toolgate().args(["review", "list", "--state", url]), limit);
    assert_eq!(review.status.code(), Some(2), "{review:?}");
    assert!(!String::from_utf8_lossy(&review.stderr).contains("s3cret"));
}

#[test]
fn a_redis_that_accepts_and_never_answers_does_not_hang_start_up() {
    let port = silent_server();
    start_up_against(&format!("redis://:s3cret@127.0.0.1:{port}/0"));
}

#[test]
fn a_frozen_redis_server_does_not_hang_start_up() {
    if url().is_none() {
        return;
    }
    let server = OwnRedis::start(free_port());
    let pid = server.pid().to_string();
    let stop = Command::new("kill").args(["-STOP", &pid]).status();
    assert!(stop.expect("kill").success());
    start_up_against(&format!("redis://:s3cret@127.0.0.1:{}/0", server.port));
    let _ = Command::new("kill").args(["-CONT", &pid]).status();
}

/// `toolgate review list | head`: the reader goes away; toolgate stops writing quietly.
#[test]
fn review_list_into_a_closed_pipe_exits_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let reviews: Vec<Value> = (0..3000)
        .map(|i| {
            json!({"id": format!("rev-{i:06}"), "fingerprint": format!("fp{i}"), "status": "pending",
                   "agentId": "agent", "ruleId": "rule", "toolName": "pay", "args": {"n": i},
                   "runId": "r", "callId": format!("c{i}"), "createdAt": "2026-01-05T09:00:00Z"})
        })
        .collect();
    let store = write(
        dir.path(),
        "reviews.json",
        &Value::Array(reviews).to_string(),
    );
    let mut child = toolgate()
        .args(["review", "list", "--store"])
        .arg(&store)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("toolgate runs");
    // `head -0`: the reader closes the pipe at once.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.is_empty(), "quiet: {stderr}");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// The same two processes shipping to one collector: it holds one unbroken chain (nothing
/// rejected as a fork), which `toolgate verify` checks whole.
#[test]
fn a_collector_holds_one_chain_for_a_run_continued_by_another_process() {
    let Some(url) = url() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("collected");
    let collector = Collect::start(&store);
    let policy = write(dir.path(), "p.json", POLICY);
    let (a, b) = run_in_two_traces();
    let prefix = prefix("collector");
    for (name, text) in [("a", &a), ("b", &b)] {
        let trace = write(dir.path(), &format!("{name}.jsonl"), text);
        let out = run_bounded(
            toolgate()
                .args(["replay", "--policy"])
                .arg(&policy)
                .arg("--trace")
                .arg(&trace)
                .args(["--state", &url, "--state-prefix", &prefix])
                .args(["--collector", &collector.url()])
                // the HTTP sink's spool goes under the working directory
                .current_dir(dir.path()),
            Duration::from_secs(60),
        );
        assert!(out.status.success(), "{out:?}");
    }
    let verify = run_bounded(
        toolgate().arg("verify").arg(&store),
        Duration::from_secs(60),
    );
    let shown = String::from_utf8_lossy(&verify.stdout);
    assert!(verify.status.success(), "{verify:?}");
    // run.started, decision; run.started, decision, run.ended
    assert!(shown.contains("5 events, 1 runs"), "{shown}");
}
