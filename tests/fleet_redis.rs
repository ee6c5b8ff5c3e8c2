//! A fleet on one Redis: several `toolgate` processes (`--state redis://…`) decide as one
//! engine. Needs a Redis server: `TOOLGATE_TEST_REDIS_URL` (set by `.ci/run`); fails when it is
//! set and the server does not answer, skips with a printed reason when it is not set.

mod mcp_client;
mod redis_support;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

const TOOLGATE: &str = env!("CARGO_BIN_EXE_toolgate");

/// A key prefix no other test (or earlier run) uses.
fn prefix(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("tgtest-{tag}-{}-{nanos}", std::process::id())
}

fn write_policy(dir: &Path, rule: Value) -> String {
    let path = dir.join("policy.json");
    let policy = json!({"policy": {"name": "fleet"}, "rules": [rule]});
    std::fs::write(&path, policy.to_string()).unwrap();
    path.display().to_string()
}

/// A trace of one run making `calls` calls of `tool` (each with a 10 ms result) for agent
/// `fleet` and end user `u1`.
fn trace(run: &str, tool: &str, calls: usize) -> String {
    let mut out = String::new();
    let mut line = |v: Value| {
        out.push_str(&v.to_string());
        out.push('\n');
    };
    line(
        json!({"type": "run.start", "runId": run, "agentId": "fleet",
        "enduser": {"id": "u1"}, "at": "2026-01-05T10:00:00Z"}),
    );
    for i in 0..calls {
        let at = format!("2026-01-05T10:{:02}:{:02}Z", 1 + i / 60, i % 60);
        line(
            json!({"type": "tool.call", "runId": run, "id": format!("c{i}"),
            "tool": {"name": tool}, "args": {"i": i}, "at": at}),
        );
        line(
            json!({"type": "tool.result", "runId": run, "id": format!("c{i}"),
            "output": "ok", "durationMs": 10, "at": at}),
        );
    }
    out
}

/// Starts `n` replays of `calls` calls each on the same Redis, all waiting on their standard
/// input; then hands every one its trace at once, so their decisions overlap. Returns how many
/// `tool.before` decisions allowed the call, per process.
fn replay_fleet(
    url: &str,
    prefix: &str,
    policy: &str,
    tool: &str,
    n: usize,
    calls: usize,
) -> Vec<usize> {
    let mut children: Vec<_> = (0..n)
        .map(|_| {
            Command::new(TOOLGATE)
                .args([
                    "replay",
                    "--policy",
                    policy,
                    "--trace",
                    "-",
                    "--format",
                    "jsonl",
                    "--state",
                    url,
                    "--state-prefix",
                    prefix,
                    // What is tested is the shared budget, not the per-call limit: a loaded
                    // machine (CI on 2 cores) once took longer than the default 50 ms and
                    // the call failed closed.
                    "--state-timeout-ms",
                    "5000",
                ])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // Every process is started (and connecting) before any gets its calls.
    let inputs: Vec<_> = children
        .iter_mut()
        .map(|c| c.stdin.take().unwrap())
        .collect();
    for (i, mut stdin) in inputs.into_iter().enumerate() {
        stdin
            .write_all(trace(&format!("p{i}"), tool, calls).as_bytes())
            .unwrap();
    }
    children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "replay failed: {}{stdout}",
                String::from_utf8_lossy(&out.stderr)
            );
            stdout
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .filter(|r| r["phase"] == "tool.before")
                .inspect(|r| assert!(r["code"] != "BLOCKED_FAILURE", "{r}"))
                .filter(|r| r["effect"] == "allow")
                .count()
        })
        .collect()
}

#[test]
fn four_processes_share_one_max_calls_budget_exactly() {
    let Some(url) = redis_support::url() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let policy = write_policy(
        dir.path(),
        json!({"id": "cap", "name": "cap",
            "selector": {"phase": "tool.before", "tool": {"name": "lookup"}},
            "condition": {"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["lookup"]},
                "max": 10, "per": "agent_user"},
            "effect": {"type": "block", "reason": "at most 10 lookups per user"}}),
    );
    let allowed = replay_fleet(&url, &prefix("maxcalls"), &policy, "lookup", 4, 25);
    assert_eq!(
        allowed.iter().sum::<usize>(),
        10,
        "allowed per process: {allowed:?}"
    );
}

fn budget_rule() -> Value {
    // Block a payment once the tools' recorded durations (10 ms per allowed call) sum to 100.
    json!({"id": "budget", "name": "budget",
        "selector": {"phase": "tool.before", "tool": {"name": "pay"}},
        "condition": {"kind": "metricWindow", "scope": "agent_user",
            "metric": {"kind": "inbuilt", "key": "duration_ms"},
            "aggregate": "sum", "windowSeconds": 86400, "op": "gte", "value": 100},
        "effect": {"type": "block", "reason": "budget spent"}})
}

#[test]
fn a_metric_window_budget_is_shared_by_processes() {
    let Some(url) = redis_support::url() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let policy = write_policy(dir.path(), budget_rule());
    // One after another: each process sees what the earlier ones spent, so the budget of 100
    // allows exactly 10 calls in all (not 10 per process).
    let p = prefix("budget-seq");
    let allowed: Vec<usize> = (0..4)
        .flat_map(|_| replay_fleet(&url, &p, &policy, "pay", 1, 25))
        .collect();
    assert_eq!(allowed, vec![10, 0, 0, 0]);

    // At the same time: a check reads the window before the call and the call's duration is
    // recorded after it, so while a call is in flight the other processes may each pass one
    // more (check-then-act, as with parallel calls in one process): never more than that.
    let allowed = replay_fleet(&url, &prefix("budget-par"), &policy, "pay", 4, 25);
    let total: usize = allowed.iter().sum();
    assert!(
        (10..=13).contains(&total),
        "allowed per process: {allowed:?}"
    );
}

#[test]
fn a_review_approved_with_toolgate_review_is_honoured_by_a_running_gateway() {
    let Some(url) = redis_support::url() else {
        return;
    };
    let s = mcp_client::Setup::new();
    let p = prefix("review");
    let path = |n: &str| s.path(n).display().to_string();
    let args: Vec<String> = vec![
        "--policy".into(),
        path("policy.json"),
        "--tools".into(),
        path("tools.json"),
        "--audit".into(),
        path("audit"),
        "--state".into(),
        url.clone(),
        "--state-prefix".into(),
        p.clone(),
    ];
    let mut proxy = mcp_client::Proxy::start(&args, &[mcp_client::fixture()]);
    proxy.initialize("2025-06-18", false);

    let r = proxy.call("publish", json!({"id": "a"}));
    assert_eq!(mcp_client::code(&r), "BLOCKED_HITL_REQUESTED");
    let review = r["result"]["_meta"]["toolgate"]["reviewId"]
        .as_str()
        .unwrap()
        .to_string();
    let note = mcp_client::text(&r);
    assert!(
        note.contains(&format!("review --state {url} approve {review}")),
        "{note}"
    );

    // Another process sees the pending review, and approves it.
    let (ok, out) = s.toolgate(&["review", "--state", &url, "--state-prefix", &p, "list"]);
    assert!(ok && out.contains(&review), "{out}");
    let (ok, out) = s.toolgate(&[
        "review",
        "approve",
        &review,
        "--state",
        &url,
        "--state-prefix",
        &p,
    ]);
    assert!(ok, "{out}");

    // The running gateway honours it at its next call: the retry is allowed.
    let r = proxy.call("publish", json!({"id": "a"}));
    assert_eq!(mcp_client::text(&r), "published \"a\"");
    assert_eq!(proxy.finish().code(), Some(0));
}

#[test]
fn an_unreachable_state_server_is_a_clear_error_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write_policy(
        dir.path(),
        json!({"id": "cap", "name": "cap",
            "selector": {"phase": "tool.before", "tool": {"name": "lookup"}},
            "condition": {"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["lookup"]}, "max": 1},
            "effect": {"type": "block", "reason": "cap"}}),
    );
    let port = redis_support::free_port();
    let url = format!("redis://:hunter2@127.0.0.1:{port}/0");
    let out = Command::new(TOOLGATE)
        .args([
            "replay", "--policy", &policy, "--trace", "-", "--state", &url,
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot reach Redis"), "{err}");
    assert!(!err.contains("hunter2"), "the password leaked: {err}");

    let out = Command::new(TOOLGATE)
        .args(["review", "list", "--state", "http://x"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("expected redis://"), "{err}");
}
