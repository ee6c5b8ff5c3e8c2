//! The official Python SDK (`mcp`, pinned in `.ci/mcp-constraints.txt`) as a 2026-07-28 client
//! and as a 2025-11-25 client at the same time through one `toolgate mcp-proxy --listen`, in
//! front of the npm filesystem server (stdio) and of a Python-SDK server speaking 2026-07-28
//! over HTTP (tests/mcp_python/).
//!
//! Found through `TOOLGATE_TEST_MCP_PYTHON` (a Python with `mcp` installed; `.ci/run` makes
//! one) and `TOOLGATE_TEST_MCP_FS` (the filesystem server's `dist/index.js`). Missing: skipped,
//! except under CI (`CI` set), where the test fails.
#![cfg(all(feature = "mcp", feature = "http"))]

mod mcp_client;
mod mcp_http_client;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use mcp_http_client::{Gateway, token_file};
use serde_json::{Value, json};

fn python() -> Option<String> {
    match std::env::var("TOOLGATE_TEST_MCP_PYTHON") {
        Ok(p) if !p.is_empty() => Some(p),
        _ if std::env::var_os("CI").is_some() => {
            panic!("TOOLGATE_TEST_MCP_PYTHON is not set (required under CI)")
        }
        _ => {
            eprintln!("skipped: TOOLGATE_TEST_MCP_PYTHON is not set");
            None
        }
    }
}

fn script(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp_python")
        .join(name)
        .display()
        .to_string()
}

/// A policy asking approval for `tool`.
fn policy(dir: &std::path::Path, tool: &str) -> Vec<String> {
    let p = json!({"policy": {"name": "py"}, "rules": [
        {"id": "approve-writes", "name": "approve", "priority": 1, "enabled": true,
         "selector": {"phase": "tool.before", "tool": {"name": tool}},
         "condition": {"kind": "toolName", "op": "glob", "value": "*"},
         "effect": {"type": "hitl", "reason": "needs approval"}}]});
    let path = dir.join("policy.json");
    std::fs::write(&path, p.to_string()).unwrap();
    vec![
        "--policy".into(),
        path.display().to_string(),
        "--token-file".into(),
        token_file(dir).display().to_string(),
        "--audit".into(),
        dir.join("audit").display().to_string(),
    ]
}

fn clients(python: &str, url: &str, args: &[&str]) -> Value {
    let out = Command::new(python)
        .arg(script("clients.py"))
        .arg(url)
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "clients.py failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap()
}

#[test]
fn python_sdk_clients_of_both_revisions_through_one_gateway_to_the_filesystem_server() {
    let Some(py) = python() else { return };
    let Some(fs) = mcp_client::npm_server("TOOLGATE_TEST_MCP_FS", "server-filesystem") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let data = data.canonicalize().unwrap();
    let args = policy(dir.path(), "write_file");
    let gw = Gateway::start(
        &args,
        &[
            "node".into(),
            fs.display().to_string(),
            data.display().to_string(),
        ],
        &[],
    );
    let got = clients(&py, &gw.url, &["fs", &data.display().to_string()]);
    let (m, l) = (&got["modern"], &got["legacy"]);
    assert_eq!(m["protocol"], "2026-07-28", "{got}");
    assert_eq!(l["protocol"], "2025-11-25", "{got}");
    assert!(
        m["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("write_file"))
    );
    // The 2026-07-28 client approved through input_required; the 2025-11-25 one denied
    // through elicitation/create.
    assert_eq!(m["write"]["code"], "", "{got}");
    assert_eq!(
        std::fs::read_to_string(data.join("modern.txt")).unwrap(),
        "from 2026-07-28"
    );
    assert_eq!(l["write"]["code"], "BLOCKED_HITL_DENIED", "{got}");
    assert!(!data.join("legacy.txt").exists());
    // The SDK reports the 401 with the JSON-RPC error in its body.
    assert!(
        got["bad_token"]
            .as_str()
            .unwrap()
            .contains("a valid bearer token is required"),
        "{got}"
    );
    assert!(gw.stop().success());
}

/// The Python-SDK server on a free port; killed when dropped.
struct PyServer(std::process::Child);

impl Drop for PyServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the Python-SDK server (tests/mcp_python/server.py) on a free port: it and its URL.
fn py_server(py: &str) -> (PyServer, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(py)
        .arg(script("server.py"))
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let server = PyServer(child);
    // Wait for the server to say it runs (reading its log, not sleeping).
    let mut lines = BufReader::new(stderr).lines();
    loop {
        let line = lines.next().expect("the server's log").unwrap();
        if line.contains("Uvicorn running") {
            break;
        }
    }
    std::thread::spawn(move || lines.for_each(drop));
    (server, format!("http://127.0.0.1:{port}/mcp"))
}

#[test]
fn python_sdk_clients_through_one_gateway_to_a_2026_07_28_server_over_http() {
    let Some(py) = python() else { return };
    let (_server, upstream) = py_server(&py);
    let dir = tempfile::tempdir().unwrap();
    let mut args = policy(dir.path(), "publish");
    args.push("--upstream".into());
    args.push(upstream);
    let gw = Gateway::start(&args, &[], &[]);
    let got = clients(&py, &gw.url, &["py"]);
    let (m, l) = (&got["modern"], &got["legacy"]);
    assert_eq!(m["protocol"], "2026-07-28", "{got}");
    assert_eq!(l["protocol"], "2025-11-25", "{got}");
    assert_eq!(m["add"]["text"], "5", "{got}");
    assert_eq!(l["add"]["text"], "9", "{got}");
    assert_eq!(m["publish"]["text"], "published m", "{got}");
    assert_eq!(l["publish"]["code"], "BLOCKED_HITL_DENIED", "{got}");
    assert!(gw.stop().success());
}

/// Issue 26: the Python-SDK server reports progress (`ctx.report_progress`); three Python-SDK
/// 2026-07-28 clients call it at once through the gateway — two of one token (one run) — and
/// each one's `progress_callback` gets exactly its own call's progress, in order.
#[test]
fn python_sdk_2026_07_28_clients_each_get_their_own_progress() {
    let Some(py) = python() else { return };
    let (_server, upstream) = py_server(&py);
    let dir = tempfile::tempdir().unwrap();
    let mut args = policy(dir.path(), "publish");
    args.push("--upstream".into());
    args.push(upstream);
    let gw = Gateway::start(&args, &[], &[]);
    let got = clients(&py, &gw.url, &["progress"]);
    for (label, steps) in [("alice-1", 3), ("alice-2", 4), ("bob", 5)] {
        let c = &got[label];
        assert_eq!(c["text"], format!("counted {steps}"), "{got}");
        let seen = c["progress"].as_array().expect("progress seen");
        assert_eq!(seen.len(), steps, "{label}: {got}");
        for (i, p) in seen.iter().enumerate() {
            assert_eq!(p["message"], label, "{label}: {got}");
            assert_eq!(
                p["progress"].as_f64(),
                Some((i + 1) as f64),
                "{label}: {got}"
            );
            assert_eq!(p["total"].as_f64(), Some(steps as f64), "{label}: {got}");
        }
    }
    assert!(gw.stop().success());
}
