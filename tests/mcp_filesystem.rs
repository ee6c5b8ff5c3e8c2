//! A real third-party MCP server behind the gateway: `@modelcontextprotocol/server-filesystem`
//! (Node), under the example policy `examples/mcp/filesystem.json`.
//!
//! The server is found through `TOOLGATE_TEST_MCP_FS` (the path of its `dist/index.js`), else
//! in `target/mcp-npm`, where
//! `npm install --prefix target/mcp-npm @modelcontextprotocol/server-filesystem` puts it. When
//! it is missing the test is skipped, except under CI (`CI` set), where it fails.
#![cfg(feature = "mcp")]

mod mcp_client;

use std::path::PathBuf;

use mcp_client::{Proxy, code, text};
use serde_json::json;

fn server_js() -> Option<PathBuf> {
    mcp_client::npm_server("TOOLGATE_TEST_MCP_FS", "server-filesystem")
}

#[test]
fn the_filesystem_server_is_listed_read_and_written_under_the_example_policy() {
    let Some(js) = server_js() else { return };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().canonicalize().unwrap().join("data");
    let workspace = data.join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(data.join("readme.txt"), "read me").unwrap();
    // The example policy, with its folder moved to this test's folder.
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/mcp");
    let policy = std::fs::read_to_string(examples.join("filesystem.json"))
        .unwrap()
        .replace("/data/workspace/", &format!("{}/", workspace.display()));
    let policy_file = dir.path().join("filesystem.json");
    std::fs::write(&policy_file, policy).unwrap();
    let p = |x: &std::path::Path| x.display().to_string();
    let args = vec![
        "--policy".to_string(),
        p(&policy_file),
        "--tools".into(),
        p(&examples.join("filesystem.tools.json")),
        "--reviews".into(),
        p(&dir.path().join("reviews.json")),
        "--audit".into(),
        p(&dir.path().join("audit")),
    ];
    let mut proxy = Proxy::start(&args, &["node".into(), p(&js), p(&data)]);
    let init = proxy.initialize_with("2025-06-18", json!({}));
    assert_eq!(init["serverInfo"]["name"], "secure-filesystem-server");

    let list = proxy.request("tools/list", json!({}));
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for n in [
        "read_text_file",
        "write_file",
        "move_file",
        "list_directory",
    ] {
        assert!(names.contains(&n), "{names:?}");
    }

    // Read: allowed.
    let r = proxy.call(
        "read_text_file",
        json!({"path": p(&data.join("readme.txt"))}),
    );
    assert!(text(&r).contains("read me"), "{r}");

    // Write inside the workspace: allowed, and the file is there.
    let inside = workspace.join("note.txt");
    let r = proxy.call(
        "write_file",
        json!({"path": p(&inside), "content": "hello"}),
    );
    assert!(r["result"].get("isError").is_none(), "{r}");
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "hello");
    let r = proxy.call("list_directory", json!({"path": p(&workspace)}));
    assert!(text(&r).contains("note.txt"), "{r}");

    // Write outside the workspace: blocked before the server sees it.
    let outside = data.join("outside.txt");
    let r = proxy.call("write_file", json!({"path": p(&outside), "content": "no"}));
    assert_eq!(code(&r), "BLOCKED_RULE", "{r}");
    assert_eq!(
        r["result"]["_meta"]["toolgate"]["ruleId"],
        "writes-stay-in-workspace"
    );
    assert!(!outside.exists());

    // A move needs approval (this client cannot be asked): the run pauses.
    let r = proxy.call(
        "move_file",
        json!({"source": p(&inside), "destination": p(&workspace.join("moved.txt"))}),
    );
    assert_eq!(code(&r), "BLOCKED_HITL_REQUESTED", "{r}");
    assert!(inside.exists());

    assert_eq!(proxy.finish().code(), Some(0));
    let out = std::process::Command::new(mcp_client::TOOLGATE)
        .args(["verify", &p(&dir.path().join("audit"))])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn the_example_policy_tests_pass() {
    let out = std::process::Command::new(mcp_client::TOOLGATE)
        .args(["test", concat!(env!("CARGO_MANIFEST_DIR"), "/examples/mcp")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
