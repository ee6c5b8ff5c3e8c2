//! `target: "toolOutput"` at the MCP gateway (issue 32, point 13): a tool result holding a
//! secret never reaches the client (it gets an error result), whether the secret is in the
//! structured content or only in the text content beside it; the trail holds no copy.
#![cfg(feature = "mcp")]

mod mcp_client;

use mcp_client::{Setup, code};
use serde_json::json;

const KEY: &str = "AKIAIOSFODNN7EXAMPLE";

const POLICY: &str = r#"{"policy": {"name": "dlp"}, "rules": [
 {"id": "no-keys-out", "name": "No keys out", "priority": 1, "enabled": true,
  "selector": {"phase": "tool.after", "tool": {"name": "*"}},
  "condition": {"kind": "sensitiveData", "target": "toolOutput",
                "detectors": [{"detector": "secret_key"}, {"detector": "credit_card"}]},
  "effect": {"type": "block", "reason": "the result holds a secret"}}
]}"#;

#[test]
fn a_result_holding_a_secret_reaches_the_client_as_an_error_never_the_secret() {
    let s = Setup::new();
    std::fs::write(s.path("policy.json"), POLICY).unwrap();
    let mut p = s.start();
    p.initialize("2025-06-18", false);
    let r = p.call("echo", json!({"text": "nothing to see"}));
    assert_eq!(
        r["result"]["structuredContent"],
        json!({"echo": "nothing to see"})
    );
    let r = p.call("echo", json!({"text": format!("key {KEY}")}));
    assert_eq!(code(&r), "BLOCKED_RULE", "{r}");
    assert!(!r.to_string().contains(KEY), "{r}");
    // A text-only result (and the secret in the arguments too: redacted in the trail).
    let r = p.call("read_note", json!({"id": KEY}));
    assert_eq!(code(&r), "BLOCKED_RULE", "{r}");
    assert!(!r.to_string().contains(KEY), "{r}");
    p.finish();
    let events = s.audit_events();
    assert!(!events.is_empty());
    let all = serde_json::to_string(&events).unwrap();
    assert!(!all.contains(KEY), "{all}");
}
