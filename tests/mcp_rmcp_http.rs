//! The gateway in front of the fixture server (tests/mcp_fixture, written with rmcp) served by
//! rmcp's streamable HTTP server on loopback (`--upstream URL`), and an HTTP upstream that dies
//! or cannot be reached.
#![cfg(all(feature = "mcp", feature = "http"))]

mod mcp_client;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use mcp_client::{Proxy, Setup, code, text};
use serde_json::json;

/// The fixture serving streamable HTTP; killed when the test ends, however it ends.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    /// Starts `mcp_fixture --http` and reads the endpoint it prints (no sleeping).
    fn start() -> Server {
        Server::start_env(&[])
    }

    fn start_env(env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(mcp_client::fixture())
            .envs(env.iter().copied())
            .arg("--http")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut url = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut url)
            .unwrap();
        let url = url.trim().to_string();
        assert!(url.starts_with("http://127.0.0.1:"), "{url:?}");
        Server { child, url }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn proxy(s: &Setup, url: &str) -> Proxy {
    let mut args = s.args();
    args.extend(["--upstream".to_string(), url.to_string()]);
    Proxy::start(&args, &[])
}

#[test]
fn the_rmcp_fixture_over_streamable_http_is_governed() {
    let server = Server::start();
    let s = Setup::new();
    let mut p = proxy(&s, &server.url);
    let init = p.initialize_with("2025-06-18", json!({}));
    assert_eq!(init["serverInfo"]["name"], "fixture");
    assert_eq!(init["protocolVersion"], "2025-06-18");
    let list = p.request("tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().unwrap();
    assert!(
        tools.iter().all(|t| t["name"] != "secret_tool") && tools.len() == 10,
        "{list}"
    );

    let r = p.call("echo", json!({"text": "over rmcp"}));
    assert_eq!(text(&r), "over rmcp", "{r}");
    let r = p.call("delete_note", json!({"id": "n1"}));
    assert_eq!(code(&r), "BLOCKED_RULE", "{r}");
    assert_eq!(r["result"]["_meta"]["toolgate"]["ruleId"], "no-destructive");
    let params = json!({"odd": [1, 2.5, {"deep": null}]});
    let r = p.request("fixture/echo", params.clone());
    assert_eq!(r["result"]["echo"], params, "{r}");

    // Progress notifications come back on the call's event stream, before its result.
    let id = p.send_request(
        "tools/call",
        json!({"name": "slow", "arguments": {"ms": 20}, "_meta": {"progressToken": 7}}),
    );
    let r = p.response(&id);
    assert_eq!(text(&r), "slept 20", "{r}");
    assert_eq!(
        p.seen
            .iter()
            .filter(|v| v["method"] == "notifications/progress")
            .count(),
        2,
        "{:?}",
        p.seen
    );

    assert_eq!(p.finish().code(), Some(0));
    let (ok, out) = s.toolgate(&["verify", s.path("audit").to_str().unwrap()]);
    assert!(ok, "{out}");
}

#[test]
fn a_dying_http_upstream_fails_pending_calls_and_exits_1() {
    let server = Server::start();
    let s = Setup::new();
    let mut p = proxy(&s, &server.url);
    p.initialize("2025-11-25", false);
    let slow = p.send_request(
        "tools/call",
        json!({"name": "slow", "arguments": {"ms": 60000}}),
    );
    let crash = p.send_request("tools/call", json!({"name": "crash", "arguments": {}}));
    for id in [&slow, &crash] {
        let r = p.response(id);
        assert_eq!(r["error"]["code"], -32603, "{r}");
        assert_eq!(r["error"]["message"], "upstream server exited", "{r}");
    }
    assert_eq!(p.wait().code(), Some(1));
    let (ok, out) = s.toolgate(&["verify", s.path("audit").to_str().unwrap()]);
    assert!(ok, "{out}");
    let events = s.audit_events();
    let ended = events.iter().find(|e| e["kind"] == "run.ended").unwrap();
    assert_eq!(ended["status"], "upstream_exited");
}

#[test]
fn an_unreachable_http_upstream_exits_1_with_a_clear_error() {
    // A loopback port nothing listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let s = Setup::new();
    let out = Command::new(mcp_client::TOOLGATE)
        .arg("mcp-proxy")
        .args(s.args())
        .args(["--upstream", &url])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("cannot reach the upstream server at {url}")),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // "localhost:3001/mcp" parses with the scheme "localhost": the gateway cannot start (2).
    let out = Command::new(mcp_client::TOOLGATE)
        .arg("mcp-proxy")
        .args(s.args())
        .args(["--upstream", "localhost:3001/mcp"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not an http(s) URL"), "{stderr}");
}

/// Issue 21 point 12: a response over `--max-message-bytes` from an HTTP upstream (an event
/// stream) fails the call with −32603 naming the limit; the session goes on.
#[test]
fn an_http_result_over_the_message_limit_fails_the_call() {
    let server = Server::start();
    let s = Setup::new();
    let mut args = s.args();
    args.extend(["--upstream", &server.url, "--max-message-bytes", "1048576"].map(String::from));
    let mut p = Proxy::start(&args, &[]);
    p.initialize("2025-11-25", false);
    let r = p.call("big", json!({"bytes": 2_000_000}));
    assert_eq!(r["error"]["code"], -32603, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("1048576"),
        "{r}"
    );
    let r = p.call("big", json!({"bytes": 500_000}));
    assert_eq!(text(&r).len(), 500_000);
    assert_eq!(p.finish().code(), Some(0));
}

/// Issue 22 point 21: an HTTP upstream that becomes unreachable mid-session (its load
/// balancer answers 503) fails the call and ends the gateway with exit 1, as a stdio upstream
/// that exits does.
#[test]
fn an_http_upstream_unreachable_mid_session_ends_the_gateway() {
    let s = Setup::new();
    let down = s.path("down");
    let server = Server::start_env(&[("FIXTURE_DOWN_FILE", down.to_str().unwrap())]);
    let mut p = proxy(&s, &server.url);
    p.initialize("2025-11-25", false);
    let r = p.call("echo", json!({"text": "before"}));
    assert_eq!(text(&r), "before");
    std::fs::write(&down, "").unwrap();
    let r = p.call("echo", json!({"text": "after"}));
    assert_eq!(r["error"]["code"], -32603, "{r}");
    // The gateway ended on its own: exit 1, whatever the client does next.
    assert_eq!(p.finish().code(), Some(1));
    let events = s.audit_events();
    let ended = events.iter().find(|e| e["kind"] == "run.ended").unwrap();
    assert_eq!(ended["status"], "upstream_exited");
}
