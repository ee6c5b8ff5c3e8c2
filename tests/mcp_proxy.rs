//! `toolgate mcp-proxy` driven by a raw JSON-RPC client over real pipes, in front of the fixture
//! server (tests/mcp_fixture/server.rs).
#![cfg(feature = "mcp")]

mod mcp_client;

use mcp_client::{Setup, code, text};
use serde_json::{Value, json};

fn tool_names(list: &Value) -> Vec<String> {
    list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn allows_blocks_and_passes_everything_else_through() {
    let s = Setup::new();
    let mut p = s.start();
    let init = p.initialize("2025-06-18", false);
    assert_eq!(init["protocolVersion"], "2025-06-18");
    assert_eq!(init["serverInfo"]["name"], "fixture");

    // tools/list: the hidden tool is gone, the others' `_meta` is kept.
    let list = p.request("tools/list", json!({}));
    let names = tool_names(&list);
    assert!(names.contains(&"echo".to_string()), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("secret")), "{names:?}");
    assert_eq!(
        list["result"]["tools"][0]["_meta"]["x-fixture"],
        json!({"kept": true})
    );

    // allow: the server's result as it came.
    let r = p.call("echo", json!({"text": "hi"}));
    assert_eq!(r["result"]["structuredContent"], json!({"echo": "hi"}));
    assert!(r["result"].get("isError").is_none());

    // block by an annotation tag (destructiveHint): an isError result with the code.
    let r = p.call("delete_note", json!({"id": "n1"}));
    assert_eq!(r["result"]["isError"], true);
    assert_eq!(code(&r), "BLOCKED_RULE");
    assert_eq!(r["result"]["_meta"]["toolgate"]["ruleId"], "no-destructive");
    assert_eq!(
        text(&r),
        "toolgate blocked this call: destructive tools are not allowed [BLOCKED_RULE, rule no-destructive]"
    );

    // block by a tools-file tag plus an argument; the same tool with another argument passes.
    let r = p.call("read_note", json!({"id": "forbidden"}));
    assert_eq!(code(&r), "BLOCKED_RULE");
    let r = p.call("read_note", json!({"id": "n2"}));
    assert_eq!(text(&r), "note \"n2\"");

    // an after-phase block replaces the server's result.
    let r = p.call("read_note", json!({"id": "classified"}));
    assert_eq!(code(&r), "BLOCKED_RULE", "{r}");
    assert_eq!(
        r["result"]["_meta"]["toolgate"]["ruleId"],
        "withhold-classified"
    );
    assert!(!text(&r).contains("note \"classified\""), "{r}");

    // hidden tool: the answer to an unknown tool.
    let r = p.call("secret_tool", json!({}));
    assert_eq!(r["error"]["code"], -32602);

    // an erroring tool's result passes as it came.
    let r = p.call("fail", json!({}));
    assert_eq!(r["result"]["isError"], true);
    assert_eq!(text(&r), "fixture failure");

    // resources, prompts, ping, and a method toolgate does not know, with unknown fields.
    let r = p.request("resources/list", json!({}));
    assert_eq!(r["result"]["resources"][0]["uri"], "fixture://note");
    let r = p.request("resources/read", json!({"uri": "fixture://note"}));
    assert_eq!(r["result"]["contents"][0]["text"], "a fixture note");
    let r = p.request(
        "prompts/get",
        json!({"name": "greet", "arguments": {"who": "Ann"}}),
    );
    assert_eq!(r["result"]["messages"][0]["content"]["text"], "Hello Ann");
    let r = p.request("ping", json!({}));
    assert_eq!(r["result"], json!({}));
    let params = json!({"odd": [1, 2.5, {"deep": null}], "_meta": {"x-trace": "t1"}});
    let r = p.request("fixture/echo", params.clone());
    assert_eq!(r["result"]["echo"], params);

    // a server→client request (roots/list) reaches the client; its answer reaches the server.
    let id = p.send_request("tools/call", json!({"name": "ask_roots", "arguments": {}}));
    let ask = p.wait_for(|v| v["method"] == "roots/list");
    p.send(
        json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"roots": [{"uri": "file:///data"}]}}),
    );
    let r = p.response(&id);
    assert!(text(&r).contains("file:///data"), "{r}");

    // progress notifications pass through before the result.
    let id = p.send_request(
        "tools/call",
        json!({"name": "slow", "arguments": {"ms": 40}, "_meta": {"progressToken": "tok"}}),
    );
    let r = p.response(&id);
    assert_eq!(text(&r), "slept 40");
    let progress: Vec<&Value> = p
        .seen
        .iter()
        .filter(|v| v["method"] == "notifications/progress")
        .collect();
    assert_eq!(progress.len(), 2, "{:?}", p.seen);
    assert_eq!(progress[0]["params"]["progressToken"], "tok");

    // client EOF: exit 0, the trail verifies and holds every decision and result.
    let status = p.finish();
    assert_eq!(status.code(), Some(0));
    let (ok, out) = s.toolgate(&["verify", s.path("audit").to_str().unwrap()]);
    assert!(ok, "{out}");
    let events = s.audit_events();
    let decisions: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "tool.decision")
        .collect();
    assert!(
        decisions
            .iter()
            .any(|e| e["decision"]["code"] == "BLOCKED_RULE")
    );
    assert_eq!(
        events.iter().filter(|e| e["kind"] == "run.ended").count(),
        1
    );
    let started = events.iter().find(|e| e["kind"] == "run.started").unwrap();
    assert_eq!(started["agentId"], "mcp:fixture");
    let failed = events
        .iter()
        .find(|e| e["kind"] == "tool.result" && e["tool"]["name"] == "fail")
        .unwrap();
    assert_eq!(failed["error"], "fixture failure");
}

#[test]
fn negotiates_2025_11_25() {
    let s = Setup::new();
    let mut p = s.start();
    let init = p.initialize("2025-11-25", true);
    assert_eq!(init["protocolVersion"], "2025-11-25");
    let r = p.call("echo", json!({"text": "x"}));
    assert_eq!(text(&r), "x");
    assert_eq!(p.finish().code(), Some(0));
}

/// Answers the next elicitation with `approve` and returns the call's response.
fn elicit(p: &mut mcp_client::Proxy, id: &Value, answer: Value) -> Value {
    let ask = p.wait_for(|v| v["method"] == "elicitation/create");
    let message = ask["params"]["message"].as_str().unwrap();
    assert!(
        message.contains("publish") && message.contains("publish-needs-approval"),
        "{message}"
    );
    assert_eq!(
        ask["params"]["requestedSchema"]["properties"]["approve"]["type"],
        "boolean"
    );
    p.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": answer}));
    p.response(id)
}

#[test]
fn hitl_asks_an_elicitation_capable_client() {
    let s = Setup::new();
    let mut p = s.start();
    p.initialize("2025-11-25", true);

    let id = p.send_request(
        "tools/call",
        json!({"name": "publish", "arguments": {"id": "a"}}),
    );
    let r = elicit(
        &mut p,
        &id,
        json!({"action": "accept", "content": {"approve": true}}),
    );
    assert_eq!(text(&r), "published \"a\"");

    let id = p.send_request(
        "tools/call",
        json!({"name": "publish", "arguments": {"id": "b"}}),
    );
    let r = elicit(
        &mut p,
        &id,
        json!({"action": "accept", "content": {"approve": false}}),
    );
    assert_eq!(code(&r), "BLOCKED_HITL_DENIED");

    let id = p.send_request(
        "tools/call",
        json!({"name": "publish", "arguments": {"id": "c"}}),
    );
    let r = elicit(&mut p, &id, json!({"action": "decline"}));
    assert_eq!(code(&r), "BLOCKED_HITL_DENIED");

    // The run went on after each answer.
    let r = p.call("echo", json!({"text": "still here"}));
    assert_eq!(text(&r), "still here");
    assert_eq!(p.finish().code(), Some(0));

    let events = s.audit_events();
    let codes: Vec<&str> = events
        .iter()
        .filter(|e| e["kind"] == "tool.decision")
        .filter_map(|e| e["decision"]["code"].as_str())
        .collect();
    assert!(codes.contains(&"ALLOWED_HITL_APPROVED"), "{codes:?}");
    assert!(codes.contains(&"BLOCKED_HITL_REQUESTED"), "{codes:?}");
}

#[test]
fn hitl_without_elicitation_pauses_until_the_review_is_approved() {
    let s = Setup::new();
    let mut p = s.start();
    p.initialize("2025-06-18", false);

    let r = p.call("publish", json!({"id": "a"}));
    assert_eq!(code(&r), "BLOCKED_HITL_REQUESTED");
    let review = r["result"]["_meta"]["toolgate"]["reviewId"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text(&r).contains(&format!("approve {review}")),
        "{}",
        text(&r)
    );

    // Paused: other calls are blocked and name the review.
    let r = p.call("echo", json!({"text": "x"}));
    assert_eq!(code(&r), "BLOCKED_RUN_ABORTED");
    assert!(text(&r).contains(&review), "{}", text(&r));

    let store = s.path("reviews.json");
    let (ok, out) = s.toolgate(&[
        "review",
        "--store",
        store.to_str().unwrap(),
        "approve",
        &review,
    ]);
    assert!(ok, "{out}");

    // Resumed: the retry of the same call is allowed.
    let r = p.call("publish", json!({"id": "a"}));
    assert_eq!(text(&r), "published \"a\"");
    let r = p.call("echo", json!({"text": "x"}));
    assert_eq!(text(&r), "x");
    assert_eq!(p.finish().code(), Some(0));
}

#[test]
fn a_changed_tool_definition_is_blocked_until_accepted() {
    let s = Setup::new();
    let mut p = s.start();
    p.initialize("2025-11-25", false);
    p.request("tools/list", json!({}));
    let r = p.call("mutable", json!({}));
    assert_eq!(text(&r), "mutated");
    p.wait_for(|v| v["method"] == "notifications/tools/list_changed");

    // The next listing shows a new definition: calls to it are blocked.
    p.request("tools/list", json!({}));
    let r = p.call("mutable", json!({}));
    assert_eq!(code(&r), "BLOCKED_TOOL_CHANGED");
    assert!(
        text(&r).contains("toolgate mcp pins accept mutable"),
        "{}",
        text(&r)
    );
    let r = p.call("echo", json!({"text": "other tools still work"}));
    assert_eq!(text(&r), "other tools still work");

    let pins = s.path("pins.json");
    let (ok, out) = s.toolgate(&["mcp", "pins", "list", "--pin", pins.to_str().unwrap()]);
    assert!(ok && out.contains("mutable  CHANGED"), "{out}");
    let (ok, out) = s.toolgate(&[
        "mcp",
        "pins",
        "accept",
        "mutable",
        "--pin",
        pins.to_str().unwrap(),
    ]);
    assert!(ok, "{out}");

    let r = p.call("mutable", json!({}));
    assert_eq!(text(&r), "mutated");
    assert_eq!(p.finish().code(), Some(0));

    let events = s.audit_events();
    let changed: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "tool.changed")
        .collect();
    assert_eq!(changed.len(), 2, "one on listing, one for the blocked call");
    assert_eq!(changed[0]["tool"]["name"], "mutable");
    let (ok, out) = s.toolgate(&["verify", s.path("audit").to_str().unwrap()]);
    assert!(ok, "{out}");
}

#[test]
fn a_cancelled_call_is_recorded_as_cancelled() {
    let s = Setup::new();
    let mut p = s.start();
    p.initialize("2025-11-25", false);
    let id = p.send_request(
        "tools/call",
        json!({"name": "slow", "arguments": {"ms": 60000}}),
    );
    p.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": id, "reason": "user gave up"}}),
    );
    let r = p.call("echo", json!({"text": "next"}));
    assert_eq!(text(&r), "next");
    assert_eq!(p.finish().code(), Some(0));
    let events = s.audit_events();
    let slow = events
        .iter()
        .find(|e| e["kind"] == "tool.result" && e["tool"]["name"] == "slow")
        .expect("the cancelled call's result");
    assert_eq!(slow["error"], "cancelled");
}

/// Calls cancelled and then left at once (stdin closed right after the cancellations): each
/// still has its outcome in the trail. A call still being decided when the client left used to
/// be stopped mid-way, its "cancelled" outcome lost.
#[test]
fn calls_cancelled_just_before_the_client_leaves_are_all_recorded() {
    const CALLS: usize = 40;
    let s = Setup::new();
    let mut p = s.start();
    p.initialize("2025-11-25", false);
    for _ in 0..CALLS {
        let id = p.send_request(
            "tools/call",
            json!({"name": "slow", "arguments": {"ms": 60000}}),
        );
        p.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": id, "reason": "user gave up"}}),
        );
    }
    p.finish();
    let events = s.audit_events();
    let results: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "tool.result" && e["tool"]["name"] == "slow")
        .collect();
    let kinds: Vec<&Value> = events.iter().map(|e| &e["kind"]).collect();
    assert_eq!(results.len(), CALLS, "{kinds:?}");
    assert!(
        results.iter().all(|e| e["error"] == "cancelled"),
        "{results:?}"
    );
    let (ok, out) = s.toolgate(&["verify", s.path("audit").to_str().unwrap()]);
    assert!(ok, "{out}");
}

#[test]
fn an_upstream_crash_fails_pending_calls_and_exits_1() {
    let s = Setup::new();
    let mut p = s.start();
    p.initialize("2025-11-25", false);
    let slow = p.send_request(
        "tools/call",
        json!({"name": "slow", "arguments": {"ms": 60000}}),
    );
    let crash = p.send_request("tools/call", json!({"name": "crash", "arguments": {}}));
    for id in [&slow, &crash] {
        let r = p.response(id);
        assert_eq!(r["error"]["code"], -32603, "{r}");
        assert_eq!(r["error"]["message"], "upstream server exited");
    }
    assert_eq!(p.wait().code(), Some(1));
    let (ok, out) = s.toolgate(&["verify", s.path("audit").to_str().unwrap()]);
    assert!(ok, "{out}");
    let events = s.audit_events();
    let ended = events.iter().find(|e| e["kind"] == "run.ended").unwrap();
    assert_eq!(ended["status"], "upstream_exited");
}

#[test]
fn a_denied_review_resumes_the_run_and_the_call_stays_blocked() {
    let s = Setup::new();
    let mut p = s.start();
    p.initialize("2025-06-18", false);
    let r = p.call("publish", json!({"id": "a"}));
    let review = r["result"]["_meta"]["toolgate"]["reviewId"]
        .as_str()
        .unwrap()
        .to_string();
    let store = s.path("reviews.json");
    let (ok, out) = s.toolgate(&[
        "review",
        "--store",
        store.to_str().unwrap(),
        "deny",
        &review,
    ]);
    assert!(ok, "{out}");
    let r = p.call("publish", json!({"id": "a"}));
    assert_eq!(code(&r), "BLOCKED_HITL_DENIED");
    let r = p.call("echo", json!({"text": "resumed"}));
    assert_eq!(text(&r), "resumed");
    assert_eq!(p.finish().code(), Some(0));
}

#[test]
fn a_call_cancelled_while_the_user_is_asked_is_never_forwarded() {
    let s = Setup::new();
    let mut p = s.start();
    p.initialize("2025-11-25", true);
    let id = p.send_request(
        "tools/call",
        json!({"name": "publish", "arguments": {"id": "z"}}),
    );
    let ask = p.wait_for(|v| v["method"] == "elicitation/create");
    p.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}}),
    );
    // A late answer to the question is ignored; the call got no response and did not run.
    p.send(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": {"approve": true}}}));
    let r = p.call("echo", json!({"text": "x"}));
    assert_eq!(
        code(&r),
        "BLOCKED_RUN_ABORTED",
        "the review is still pending: {r}"
    );
    assert!(
        !p.seen.iter().any(|v| v.get("id") == Some(&id)),
        "{:?}",
        p.seen
    );
    assert_eq!(p.finish().code(), Some(0));
    let events = s.audit_events();
    assert!(
        !events
            .iter()
            .any(|e| e["kind"] == "tool.result" && e["tool"]["name"] == "publish")
    );
}

/// Many calls allowed and forwarded (a slow tool) as the client leaves: each allowed decision
/// has exactly one outcome in the trail. A call whose decision task forwarded it after the
/// session drained its calls in flight (but before it was cancelled) was executed upstream and
/// never recorded (old code: 23 and 60 of 500 calls without an outcome in 2 of 3 runs).
#[test]
fn every_call_allowed_as_the_client_leaves_has_one_outcome() {
    const CALLS: usize = 500;
    let s = Setup::new();
    let mut p = s.start();
    p.initialize("2025-11-25", false);
    for _ in 0..CALLS {
        p.send_request(
            "tools/call",
            json!({"name": "slow", "arguments": {"ms": 60000}}),
        );
    }
    p.finish();
    let events = s.audit_events();
    let allowed: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "tool.decision" && e["decision"]["effect"] == "allow")
        .collect();
    let mut outcomes = std::collections::HashMap::<String, usize>::new();
    for e in events.iter().filter(|e| e["kind"] == "tool.result") {
        *outcomes.entry(e["callId"].to_string()).or_default() += 1;
    }
    let wrong: Vec<(String, usize)> = allowed
        .iter()
        .map(|d| d["callId"].to_string())
        .map(|id| {
            let n = outcomes.get(&id).copied().unwrap_or(0);
            (id, n)
        })
        .filter(|(_, n)| *n != 1)
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} allowed calls without exactly one outcome: {wrong:?}",
        wrong.len(),
        allowed.len()
    );
    let (ok, out) = s.toolgate(&["verify", s.path("audit").to_str().unwrap()]);
    assert!(ok, "{out}");
}
