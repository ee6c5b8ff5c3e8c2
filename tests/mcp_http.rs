//! The gateway in front of an upstream over streamable HTTP (`--upstream URL`): the official
//! "everything" server (`@modelcontextprotocol/server-everything streamableHttp`, Node) on
//! loopback.
//!
//! Found through `TOOLGATE_TEST_MCP_EVERYTHING` (its `dist/index.js`), else in
//! `target/mcp-npm` (`npm install --prefix target/mcp-npm @modelcontextprotocol/server-everything`).
//! Missing: skipped, except under CI (`CI` set), where the test fails.
#![cfg(all(feature = "mcp", feature = "http"))]

mod common;
mod mcp_client;

use std::path::PathBuf;

use common::process::node_streamable_http;
use mcp_client::{Proxy, code, text};
use serde_json::json;

fn server_js() -> Option<PathBuf> {
    mcp_client::npm_server("TOOLGATE_TEST_MCP_EVERYTHING", "server-everything")
}

#[test]
fn an_upstream_over_streamable_http_is_governed() {
    let Some(js) = server_js() else { return };
    // Wait for the server to say it listens (reading its log, not sleeping).
    let (_server, port) = node_streamable_http(&js);

    let s = mcp_client::Setup::new();
    let policy = s.path("policy.json");
    std::fs::write(
        &policy,
        r#"[{"id": "no-sums", "name": "No sums", "priority": 1, "enabled": true,
            "selector": {"phase": "tool.before", "tool": {"name": "get-sum"}},
            "condition": {"kind": "toolName", "op": "glob", "value": "*"},
            "effect": {"type": "block", "reason": "no sums today"}}]"#,
    )
    .unwrap();
    let args = vec![
        "--policy".to_string(),
        policy.display().to_string(),
        "--audit".into(),
        s.path("audit").display().to_string(),
        "--upstream".into(),
        format!("http://127.0.0.1:{port}/mcp"),
    ];
    let mut p = Proxy::start(&args, &[]);
    let init = p.initialize_with("2025-06-18", json!({}));
    assert_eq!(init["protocolVersion"], "2025-06-18");
    let list = p.request("tools/list", json!({}));
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"echo") && names.contains(&"get-sum"),
        "{names:?}"
    );

    let r = p.call("echo", json!({"message": "over http"}));
    assert_eq!(text(&r), "Echo: over http", "{r}");
    let r = p.call("get-sum", json!({"a": 1, "b": 2}));
    assert_eq!(code(&r), "BLOCKED_RULE", "{r}");
    let r = p.request("ping", json!({}));
    assert_eq!(r["result"], json!({}), "{r}");

    assert_eq!(p.finish().code(), Some(0));
    let (ok, out) = s.toolgate(&["verify", s.path("audit").to_str().unwrap()]);
    assert!(ok, "{out}");
}
