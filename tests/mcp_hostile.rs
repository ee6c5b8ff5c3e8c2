//! `toolgate mcp-proxy` tried as a hostile client and in front of a hostile upstream
//! (`mcp_fixture --hostile`, tests/mcp_fixture/hostile.rs): no call reaches a tool, and no
//! result reaches the model, without a decision (issue 21).
#![cfg(all(feature = "mcp", unix))]

mod mcp_client;

use mcp_client::{Proxy, code, fixture, read_events, text};
use serde_json::{Value, json};

/// Destructive tools blocked, `publish` needs approval, a classified note and every `held`
/// result are withheld in the after phase.
const POLICY: &str = r#"{"policy": {"name": "hostile-test"}, "rules": [
 {"id": "no-destructive", "name": "No destructive tools", "priority": 10, "enabled": true,
  "selector": {"phase": "tool.before", "tool": {"tagsAny": ["mcp:destructive"]}},
  "condition": {"kind": "toolName", "op": "glob", "value": "*"},
  "effect": {"type": "block", "reason": "destructive tools are not allowed"}},
 {"id": "publish-needs-approval", "name": "Publishing needs approval", "priority": 5, "enabled": true,
  "selector": {"phase": "tool.before", "tool": {"name": "publish"}},
  "condition": {"kind": "toolName", "op": "glob", "value": "*"},
  "effect": {"type": "hitl", "reason": "publishing needs approval"}},
 {"id": "withhold-classified", "name": "Withhold classified notes", "priority": 1, "enabled": true,
  "selector": {"phase": "tool.after", "tool": {"name": "read_note"}},
  "condition": {"kind": "toolArg", "type": "string", "op": "eq", "path": "id", "value": "classified"},
  "effect": {"type": "block", "reason": "classified output withheld"}},
 {"id": "withhold-held", "name": "Withhold held results", "priority": 1, "enabled": true,
  "selector": {"phase": "tool.after", "tool": {"name": "held"}},
  "condition": {"kind": "toolName", "op": "glob", "value": "*"},
  "effect": {"type": "block", "reason": "held output withheld"}}
]}"#;

struct Hostile {
    dir: tempfile::TempDir,
}

impl Hostile {
    fn new() -> Hostile {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("policy.json"), POLICY).unwrap();
        Hostile { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn args(&self, extra: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = [
            "--policy",
            &self.path("policy.json"),
            "--pin",
            &self.path("pins.json"),
            "--reviews",
            &self.path("reviews.json"),
            "--audit",
            &self.path("audit"),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    }

    fn start_with(&self, extra: &[&str], env: &[(&str, &str)]) -> Proxy {
        let record = self.path("record.jsonl");
        let mut env = env.to_vec();
        env.push(("HOSTILE_RECORD", &record));
        Proxy::start_env(&self.args(extra), &[fixture(), "--hostile".into()], &env)
    }

    fn start(&self) -> Proxy {
        self.start_with(&[], &[])
    }

    /// Every line the hostile server read.
    fn recorded(&self) -> String {
        std::fs::read_to_string(self.path("record.jsonl")).unwrap_or_default()
    }

    fn events(&self) -> Vec<Value> {
        read_events(self.dir.path().join("audit").as_path())
    }

    fn verify(&self) {
        let out = std::process::Command::new(mcp_client::TOOLGATE)
            .args(["verify", &self.path("audit")])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// A response to `id`, ids compared as numbers when both are numbers.
fn answers(v: &Value, id: &Value) -> bool {
    v.get("method").is_none()
        && match (v.get("id"), id) {
            (Some(a), b) if a.is_number() && b.is_number() => a.as_f64() == b.as_f64(),
            (Some(a), b) => a == b,
            (None, _) => false,
        }
}

fn call_line(id: &str, name: &str, args: Value) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":{args}}}}}"#
    )
}

/// Point 1: a call whose id the server re-spells is still decided after the tool ran.
#[test]
fn a_respelled_id_cannot_skip_the_after_phase() {
    let h = Hostile::new();
    let mut p = h.start();
    p.initialize("2025-06-18", false);
    for spelling in ["1.0", "6.0", "7e0", "80e-1", "-0"] {
        p.send_line(&call_line(
            spelling,
            "read_note",
            json!({"id": "classified"}),
        ));
        let id: Value = serde_json::from_str(spelling).unwrap();
        let r = p.wait_for(|v| answers(v, &id));
        assert_eq!(code(&r), "BLOCKED_RULE", "id {spelling}: {r}");
        assert!(!text(&r).contains("note classified"), "id {spelling}: {r}");
    }
    assert_eq!(p.finish().code(), Some(0));
    h.verify();
    let results = h
        .events()
        .iter()
        .filter(|e| e["kind"] == "tool.result")
        .count();
    assert_eq!(results, 5, "every call's result is recorded");
}

/// Point 1: the upstream never sees the client's ids, and the client gets its own spelling
/// back.
#[test]
fn the_upstream_sees_only_the_gateways_ids() {
    let h = Hostile::new();
    let mut p = h.start();
    p.initialize("2025-06-18", false);
    p.send_line(&call_line(r#""client-id-x""#, "echo", json!({"text": "a"})));
    let r = p.wait_for(|v| answers(v, &json!("client-id-x")));
    assert_eq!(text(&r), "a");
    assert_eq!(p.finish().code(), Some(0));
    assert!(!h.recorded().contains("client-id-x"), "{}", h.recorded());
}

/// Point 2: a second request with an id in flight is refused, its result never relayed.
#[test]
fn a_second_call_with_an_id_in_flight_is_refused() {
    let h = Hostile::new();
    let mut p = h.start();
    p.initialize("2025-06-18", false);
    p.send_line(&call_line("9", "held", json!({})));
    p.send_line(&call_line("9", "held", json!({})));
    p.send_line(&call_line("10", "release", json!({})));
    let r = p.wait_for(|v| answers(v, &json!(10)));
    assert_eq!(text(&r), "released");
    let nines: Vec<Value> = std::iter::from_fn(|| {
        let i = p.seen.iter().position(|v| answers(v, &json!(9)))?;
        Some(p.seen.remove(i))
    })
    .collect();
    for r in &nines {
        assert!(!text(r).contains("launch codes"), "{r}");
    }
    assert!(
        nines.iter().any(|r| r["error"]["code"] == -32600),
        "{nines:?}"
    );
    assert_eq!(p.finish().code(), Some(0));
}

/// Point 3: a server that ignores the cancellation and answers anyway is not relayed.
#[test]
fn a_result_after_a_cancel_is_not_relayed() {
    let h = Hostile::new();
    let mut p = h.start();
    p.initialize("2025-06-18", false);
    p.send_line(&call_line("20", "stubborn", json!({})));
    p.wait_for(|v| v["params"]["data"] == "stubborn waiting");
    p.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 20}}),
    );
    let r = p.call("echo", json!({"text": "after"}));
    assert_eq!(text(&r), "after");
    assert!(
        !p.seen.iter().any(|v| answers(v, &json!(20))),
        "{:?}",
        p.seen
    );
    assert!(h.recorded().contains("notifications/cancelled"));
    assert_eq!(p.finish().code(), Some(0));
    let events = h.events();
    let stubborn = events
        .iter()
        .find(|e| e["kind"] == "tool.result" && e["tool"]["name"] == "stubborn")
        .unwrap();
    assert_eq!(stubborn["error"], "cancelled");
}

/// Point 4: the upstream's own `elicitation/create`, even with the id toolgate would use next,
/// cannot answer the gateway's approval question.
#[test]
fn an_upstream_cannot_answer_the_gateways_approval_question() {
    let h = Hostile::new();
    let mut p = h.start();
    p.initialize("2025-11-25", true);
    let echo = p.send_request(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "elicit"}}),
    );
    let theirs = p.wait_for(|v| v["method"] == "elicitation/create");
    assert!(
        theirs["params"]["message"]
            .as_str()
            .unwrap()
            .contains("weather")
    );
    let publish = p.send_request(
        "tools/call",
        json!({"name": "publish", "arguments": {"id": "p"}}),
    );
    let ours = p.wait_for(|v| {
        v["method"] == "elicitation/create"
            && v["params"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("publish")
    });
    assert_ne!(theirs["id"], ours["id"]);
    // The user says yes to the weather, no to publishing.
    p.send(json!({"jsonrpc": "2.0", "id": theirs["id"], "result": {"action": "accept", "content": {"approve": true}}}));
    p.send(json!({"jsonrpc": "2.0", "id": ours["id"], "result": {"action": "decline"}}));
    let r = p.response(&publish);
    assert_eq!(code(&r), "BLOCKED_HITL_DENIED", "{r}");
    let r = p.response(&echo);
    assert!(
        text(&r).contains("elicited"),
        "the server got its answer: {r}"
    );
    assert!(!h.recorded().contains("\"publish\""), "{}", h.recorded());
    assert_eq!(p.finish().code(), Some(0));
}

/// Point 4: an answer to an id the gateway never asked is not taken for an approval, and an
/// answer to the gateway's question never reaches the upstream.
#[test]
fn the_gateways_question_ids_are_not_predictable() {
    let h = Hostile::new();
    let mut p = h.start();
    p.initialize("2025-11-25", true);
    let publish = p.send_request(
        "tools/call",
        json!({"name": "publish", "arguments": {"id": "q"}}),
    );
    let ours = p.wait_for(|v| v["method"] == "elicitation/create");
    // A guessed id: ignored.
    p.send(json!({"jsonrpc": "2.0", "id": "toolgate-elicit-1", "result": {"action": "accept", "content": {"approve": true}}}));
    p.send(json!({"jsonrpc": "2.0", "id": "toolgate-elicit-2", "result": {"action": "accept", "content": {"approve": true}}}));
    let r = p.call("echo", json!({"text": "sync"}));
    assert_eq!(code(&r), "BLOCKED_RUN_ABORTED", "{r}");
    p.send(json!({"jsonrpc": "2.0", "id": ours["id"], "result": {"action": "decline"}}));
    let r = p.response(&publish);
    assert_eq!(code(&r), "BLOCKED_HITL_DENIED", "{r}");
    assert_eq!(p.finish().code(), Some(0));
}

/// Point 5: batches, `tools/call` notifications and non-string names never reach the tool.
#[test]
fn undecidable_shapes_are_refused() {
    let h = Hostile::new();
    let mut p = h.start();
    p.initialize("2025-06-18", false);
    p.send_line(&format!("[{}]", call_line("30", "delete_note", json!({}))));
    p.send_line(
        r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"delete_note","arguments":{}}}"#,
    );
    p.send_line(r#"{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{"name":["delete_note"],"arguments":{}}}"#);
    let r = p.wait_for(|v| answers(v, &json!(31)));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = p.request("ping", json!({}));
    assert_eq!(r["result"], json!({}));
    assert!(!h.recorded().contains("delete_note"), "{}", h.recorded());
    let r = p.wait_for(|v| v.get("id") == Some(&Value::Null));
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert!(
        !p.seen.iter().any(|v| answers(v, &json!(30))),
        "{:?}",
        p.seen
    );
    assert_eq!(p.finish().code(), Some(0));
}

/// Point 6: a call made before the client lists tools is decided with the tool's annotations
/// and pin.
#[test]
fn calls_before_tools_list_are_decided_with_the_listed_definition() {
    let h = Hostile::new();
    let mut p = h.start();
    p.initialize("2025-06-18", false);
    p.request("tools/list", json!({}));
    assert_eq!(p.finish().code(), Some(0));

    let mut p = h.start_with(&[], &[("HOSTILE_CHANGED", "1")]);
    p.initialize("2025-06-18", false);
    let r = p.call("delete_note", json!({"id": "n"}));
    assert_eq!(code(&r), "BLOCKED_RULE", "{r}");
    let r = p.call("publish", json!({"id": "n"}));
    assert_eq!(code(&r), "BLOCKED_TOOL_CHANGED", "{r}");
    assert_eq!(p.finish().code(), Some(0));
    assert!(!h.recorded().contains("delete_note"), "{}", h.recorded());
}

/// An upstream whose `tools/list` fails: a call of a tool the gateway could not look up is
/// refused with the reason (not "Unknown tool", which sends a model looking for another
/// tool), is never forwarded, and the gateway lists again on the next call (the failed
/// listing does not leave an empty catalog behind).
#[test]
fn a_failed_tools_list_is_named_and_listed_again() {
    let h = Hostile::new();
    let mut p = h.start_with(&[], &[("HOSTILE_LIST_ERRORS", "1")]);
    p.initialize("2025-06-18", false);
    let r = p.call("echo", json!({"text": "one"}));
    let message = r
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("an error answer: {r}"));
    assert!(!message.contains("Unknown tool"), "{message}");
    assert!(
        message.contains("did not list its tools")
            && message.contains("tool registry downfor maintenance"),
        "{message}"
    );
    assert!(!h.recorded().contains("\"one\""), "{}", h.recorded());
    let r = p.call("echo", json!({"text": "two"}));
    assert_eq!(text(&r), "two", "{r}");
    assert_eq!(p.finish().code(), Some(0));
}

/// Point 6: an unreadable pin file is a start-up error.
#[test]
fn an_unreadable_pin_file_is_a_start_up_error() {
    let h = Hostile::new();
    std::fs::write(h.path("pins.json"), "not json").unwrap();
    let p = h.start();
    assert_eq!(p.finish().code(), Some(2));
}

/// Point 7: names are looked up as policies match them; a name no tool has is refused.
#[test]
fn names_are_looked_up_as_policies_match_them() {
    let h = Hostile::new();
    let mut p = h.start();
    p.initialize("2025-06-18", false);
    p.request("tools/list", json!({}));
    let r = p.call("Delete_Note", json!({"id": "n"}));
    assert_eq!(code(&r), "BLOCKED_RULE", "{r}");
    let r = p.call("no_such_tool", json!({}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(p.finish().code(), Some(0));
    let rec = h.recorded().to_lowercase();
    assert!(
        !rec.contains("delete_note") && !rec.contains("no_such_tool"),
        "{rec}"
    );
}

/// Point 8: a response the upstream makes up for a call the gateway blocked is dropped.
#[test]
fn a_response_the_gateway_did_not_forward_is_dropped() {
    let h = Hostile::new();
    let mut p = h.start();
    p.initialize("2025-06-18", false);
    p.request("tools/list", json!({}));
    p.send_line(&call_line("40", "delete_note", json!({})));
    let r = p.wait_for(|v| answers(v, &json!(40)));
    assert_eq!(code(&r), "BLOCKED_RULE");
    p.send_line(&call_line("41", "echo", json!({"text": "inject:40"})));
    let r = p.wait_for(|v| answers(v, &json!(41)));
    assert_eq!(text(&r), "inject:40");
    assert!(
        !p.seen.iter().any(|v| answers(v, &json!(40))),
        "{:?}",
        p.seen
    );
    assert_eq!(p.finish().code(), Some(0));
}

/// Point 2 with a real server (server-everything over stdio): pairs of calls sharing an id
/// never get an undecided result.
#[test]
fn duplicate_ids_never_pass_undecided_with_server_everything() {
    let Some(js) = mcp_client::npm_server("TOOLGATE_TEST_MCP_EVERYTHING", "server-everything")
    else {
        return;
    };
    let h = Hostile::new();
    std::fs::write(
        h.path("everything.json"),
        r#"[{"id": "withhold-echo", "name": "Withhold echoes", "priority": 1, "enabled": true,
  "selector": {"phase": "tool.after", "tool": {"name": "echo"}},
  "condition": {"kind": "toolName", "op": "glob", "value": "*"},
  "effect": {"type": "block", "reason": "echo output withheld"}}]"#,
    )
    .unwrap();
    let args: Vec<String> = [
        "--policy",
        &h.path("everything.json"),
        "--audit",
        &h.path("audit"),
    ]
    .map(String::from)
    .to_vec();
    let mut p = Proxy::start(
        &args,
        &["node".into(), js.display().to_string(), "stdio".into()],
    );
    p.initialize("2025-06-18", false);
    for i in 0..20 {
        let line = call_line(
            &format!("{}", 100 + i),
            "echo",
            json!({"message": format!("m{i}")}),
        );
        p.send_line(&line);
        p.send_line(&line);
    }
    for i in 0..20 {
        let id = json!(100 + i);
        for _ in 0..2 {
            let r = p.wait_for(|v| answers(v, &id));
            assert!(
                code(&r) == "BLOCKED_RULE" || r["error"]["code"] == -32600,
                "an undecided result: {r}"
            );
        }
    }
    assert_eq!(p.finish().code(), Some(0));
}

/// A member named twice anywhere in a client's message is refused: toolgate's parser keeps the
/// last value, and an upstream parser that keeps the first would run a call other than the one
/// decided (`"name":"delete_note","name":"read_note"` decided as `read_note`, run as
/// `delete_note`). Before, only a repeat at the top level was refused.
#[test]
fn a_member_named_twice_at_any_depth_is_refused() {
    let h = Hostile::new();
    let mut p = h.start();
    p.initialize("2025-06-18", false);
    p.send_line(r#"{"jsonrpc":"2.0","id":40,"method":"tools/call","params":{"name":"delete_note","name":"read_note","arguments":{"id":"a"}}}"#);
    let r = p.wait_for(|v| v.get("id") == Some(&Value::Null));
    assert_eq!(r["error"]["code"], -32600, "{r}");
    p.send_line(r#"{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"read_note","arguments":{"id":"classified","id":"public"}}}"#);
    let r = p.wait_for(|v| v.get("id") == Some(&Value::Null));
    assert_eq!(r["error"]["code"], -32600, "{r}");
    // The same key in two different objects is fine.
    let r = p.request(
        "tools/call",
        json!({"name": "read_note", "arguments": {"id": "public", "meta": {"id": 1}}}),
    );
    assert!(r.get("result").is_some(), "{r}");
    let recorded = h.recorded();
    assert!(!recorded.contains("delete_note"), "{recorded}");
    assert!(!recorded.contains("classified"), "{recorded}");
    assert_eq!(p.finish().code(), Some(0));
}
