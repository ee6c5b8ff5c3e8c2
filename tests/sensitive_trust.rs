//! `sensitiveData` you can trust (issue 32): no stand-in bypass on live calls, integers read by
//! `credit_card`, detections capped per condition, one depth limit, every copy of a detected
//! value redacted (and the hitl fingerprint taken over the redacted arguments), the scan limit
//! as missing data, what-if that says what it cannot decide, and `target: "toolOutput"`.

mod common;
#[path = "common/counting_alloc.rs"]
mod counting_alloc;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use toolgate::audit::{AuditEvent, EventKind, MemorySink, verify_events};
use toolgate::engine::{GovernanceEngine, RunContext, ToolOutcome};
use toolgate::policy::EffectType;

const CARD: &str = "4111111111111111";

fn sd(target: &str, detectors: &str, extra: &str) -> String {
    format!(r#"{{"kind": "sensitiveData", "target": "{target}", "detectors": {detectors}{extra}}}"#)
}

fn card_rule(phase: &str, effect: &str) -> String {
    rule(
        "no-cards",
        phase,
        r#"{"name": "*"}"#,
        &sd(
            "toolArg",
            r#"[{"detector": "credit_card"}, {"detector": "secret_key"}, {"detector": "jwt"}, {"detector": "email"}]"#,
            "",
        ),
        effect,
    )
}

fn audited(policy_json: &str) -> (GovernanceEngine, Arc<MemorySink>) {
    let sink = Arc::new(MemorySink::new());
    let engine = builder(policy_json, &clock())
        .audit_sink(sink.clone())
        .build()
        .unwrap();
    (engine, sink)
}

fn trail_text(events: &[Arc<AuditEvent>]) -> String {
    events
        .iter()
        .map(|e| serde_json::to_string(&**e).unwrap() + "\n")
        .collect()
}

/// Every event reads back with serde_json's own limits and the chain verifies.
fn assert_verifies(events: &[Arc<AuditEvent>]) {
    for line in trail_text(events).lines() {
        serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("unreadable event: {e}"));
    }
    let report = verify_events(events.iter().map(|e| &**e));
    assert!(report.breaks.is_empty(), "{:?}", report.breaks);
}

async fn decide(engine: &GovernanceEngine, args: Value) -> toolgate::engine::Decision {
    let run = engine.start_run(RunContext::new("r", "a"));
    run.before_tool(call("c1", "send", args)).await
}

// Point 1.
#[tokio::test]
async fn live_calls_are_scanned_whatever_stand_ins_they_hold() {
    let engine = engine(&card_rule("tool.before", "block"), &clock());
    let text = "[redacted:note] please charge 4111 1111 1111 1111 exp 12/28 [ok]";
    let d = decide(&engine, json!({ "b": text })).await;
    assert_eq!(d.effect, EffectType::Block, "{d:?}");
    let d = decide(
        &engine,
        json!({"b": "[redacted:x] key sk_live_4eC39HqLyjWDarjtT1zdp7dc"}),
    )
    .await;
    assert_eq!(d.effect, EffectType::Block, "{d:?}");
    // A card as an object key reaches the tool too.
    let d = decide(&engine, json!({"b": {CARD: "x"}})).await;
    assert_eq!(d.effect, EffectType::Block, "{d:?}");
    // A bare stand-in is text: no detector finds anything in it live.
    let d = decide(&engine, json!({"b": "[redacted:credit_card]"})).await;
    assert_eq!(d.effect, EffectType::Allow, "{d:?}");
    let url = rule(
        "evil-hosts",
        "tool.before",
        r#"{"name": "*"}"#,
        &sd(
            "toolArg",
            r#"[{"detector": "url", "subCondition": {"check": "domain", "op": "in", "value": ["evil.io"]}}]"#,
            "",
        ),
        "block",
    );
    let engine = common::engine(&url, &clock());
    let d = decide(&engine, json!({"u": "[redacted:url]"})).await;
    assert_eq!(d.effect, EffectType::Allow, "{d:?}");
}

// Point 9.
#[tokio::test]
async fn json_integers_are_read_by_credit_card_and_redacted() {
    let engine = engine(&card_rule("tool.before", "block"), &clock());
    let d = decide(&engine, json!({"b": 4111111111111111u64})).await;
    assert_eq!(d.effect, EffectType::Block, "{d:?}");
    let d = decide(&engine, json!({"b": -4111111111111111i64})).await;
    assert_eq!(d.effect, EffectType::Block, "{d:?}");
    let d = decide(&engine, json!({"b": 4.111111111111111e15})).await;
    assert_eq!(d.effect, EffectType::Block, "{d:?}");
    let d = decide(&engine, json!({"b": 4111111111111112u64, "n": 1234})).await;
    assert_eq!(d.effect, EffectType::Allow, "{d:?}");
    let (engine, sink) = audited(&card_rule("tool.before", "block"));
    let d = decide(&engine, json!({"b": 4111111111111111u64, "n": 3})).await;
    assert_eq!(d.effect, EffectType::Block);
    engine.flush().await.unwrap();
    let events = sink.events();
    let text = trail_text(&events);
    assert!(!text.contains(CARD), "{text}");
    // Other numbers stay numbers.
    let before = events
        .iter()
        .find(|e| e.kind() == EventKind::ToolDecision)
        .unwrap();
    assert_eq!(before.body()["args"]["n"], json!(3));
}

// Point 2.
#[tokio::test]
async fn thousands_of_cards_under_one_long_key_keep_few_detections() {
    let engine = engine(&card_rule("tool.before", "block"), &clock());
    let key = "k".repeat(16 * 1024);
    let cards: Vec<Value> = (0..2000).map(|_| Value::from(CARD)).collect();
    let mut args = serde_json::Map::new();
    args.insert(key, Value::Array(cards));
    let run = engine.start_run(RunContext::new("r", "a"));
    let (d, allocated) = counting_alloc::allocated_by(|| {
        run.before_tool_blocking(call("c1", "send", Value::Object(args)))
    });
    assert_eq!(d.effect, EffectType::Block);
    let e = serde_json::to_value(&d.evaluated[0]).unwrap();
    let kept = e["detected"].as_array().unwrap().len();
    assert!(kept <= 16, "{kept} detections kept");
    assert_eq!(kept as u64 + e["detectedMore"].as_u64().unwrap_or(0), 2000);
    // 2,000 copies of a 16 KiB path (twice each) were 64 MiB.
    assert!(allocated < 4 << 20, "{allocated} bytes allocated");
}

fn nested(depth: usize, leaf: Value) -> Value {
    (0..depth).fold(leaf, |v, _| json!({ "a": v }))
}

// Point 3.
#[tokio::test]
async fn one_depth_limit_refuses_deeper_arguments_and_what_is_accepted_verifies() {
    let (engine, sink) = audited(&card_rule("tool.before", "block"));
    let run = engine.start_run(RunContext::new("r", "a"));
    // 100 levels (the limit) are decided and recorded; the trail reads back and verifies.
    let d = run
        .before_tool(call("c1", "send", nested(100, json!("hello"))))
        .await;
    assert_eq!(d.effect, EffectType::Allow, "{d:?}");
    // 101 (and serde_json's 127) are refused at the edge, with a clear error.
    for (i, depth) in [101usize, 127, 150].into_iter().enumerate() {
        let d = run
            .before_tool(call(&format!("d{i}"), "send", nested(depth, json!(CARD))))
            .await;
        assert_eq!(d.effect, EffectType::Block, "depth {depth}: {d:?}");
        let err = d.error.unwrap_or_default();
        assert!(err.contains("deeper than 100"), "{err}");
    }
    run.end("success", None).await;
    engine.flush().await.unwrap();
    let events = sink.events();
    assert_verifies(&events);
    assert!(!trail_text(&events).contains(CARD));
    // Without a trail nothing deep is written; the scan still cannot vouch for it: blocked.
    let engine = common::engine(&card_rule("tool.before", "block"), &clock());
    let d = decide(&engine, nested(150, json!("nothing here"))).await;
    assert_eq!(d.effect, EffectType::Block, "{d:?}");
    assert!(
        d.evaluated[0].missing[0].contains("deeper than 100"),
        "{d:?}"
    );
}

/// A policy in play with a redacting card rule that sees only part of each event.
fn partial_policy() -> String {
    let or = format!(
        r#"{{"kind": "or", "any": [{{"kind": "toolName", "op": "eq", "value": "send"}}, {}]}}"#,
        sd("toolArg", r#"[{"detector": "credit_card"}]"#, "")
    );
    format!(
        r#"[{{"id": "short", "name": "short", "priority": 2, "enabled": true, "mode": "shadow",
              "selector": {{"phase": "tool.before", "tool": {{"name": "send"}}}},
              "condition": {or}, "effect": {{"type": "block"}}}},
            {{"id": "after-only", "name": "after-only", "priority": 1, "enabled": true,
              "mode": "shadow",
              "selector": {{"phase": "tool.after", "tool": {{"name": "*"}}}},
              "condition": {}, "effect": {{"type": "block"}}}},
            {{"id": "review", "name": "review", "priority": 1, "enabled": true,
              "selector": {{"phase": "tool.before", "tool": {{"name": "pay"}}}},
              "condition": {{"kind": "toolName", "op": "eq", "value": "pay"}},
              "effect": {{"type": "hitl"}}}}]"#,
        sd("toolArg", r#"[{"detector": "credit_card"}]"#, "")
    )
}

// Point 6.
#[tokio::test]
async fn every_copy_of_a_detected_card_is_redacted_wherever_it_lies() {
    let (engine, sink) = audited(&partial_policy());
    let run = engine.start_run(RunContext::new("r", "a"));
    let spaced = "4111 1111 1111 1111";
    let args = json!({
        "b": format!("charge {spaced}"),
        "s": format!("[redacted:x {CARD}"),
        CARD: "key",
        "n": [format!("card {CARD} ok")],
    });
    let d = run.before_tool(call("c1", "send", args)).await;
    assert!(d.is_allowed(), "{d:?}");
    let out = json!({"echo": format!("sent {CARD}"), CARD: 1});
    run.after_tool("c1", ToolOutcome::ok(out, Duration::from_millis(1)))
        .await;
    let d = run.before_tool(call("c2", "send", json!({"x": "y"}))).await;
    assert!(d.is_allowed());
    run.after_tool(
        "c2",
        ToolOutcome::err(format!("card {CARD} declined"), Duration::from_millis(1)),
    )
    .await;
    let pay_args = json!({"card": CARD, "amount": 10});
    let d = run.before_tool(call("c3", "pay", pay_args.clone())).await;
    assert_eq!(d.effect, EffectType::Hitl, "{d:?}");
    let fp = d.hitl.as_ref().unwrap().fingerprint.clone();
    run.end("success", Some(&format!("done, card {CARD}")))
        .await;
    engine.flush().await.unwrap();
    let events = sink.events();
    assert_verifies(&events);
    let text = trail_text(&events);
    assert!(!text.contains(CARD), "{text}");
    assert!(!text.contains(spaced), "{text}");
    // The fingerprint in the trail is not that of the real arguments: a guess of the card
    // cannot be checked against it.
    let real = toolgate::engine::fingerprint("a", "review", "pay", &pay_args, None);
    assert_ne!(fp, real);
}

// Point 10.
#[tokio::test]
async fn past_the_scan_limit_the_rest_is_missing_data_and_blocks() {
    let engine = engine(&card_rule("tool.before", "block"), &clock());
    let text = format!("{}{CARD}", " ".repeat(1 << 20));
    let d = decide(&engine, json!({ "b": text })).await;
    assert_eq!(d.effect, EffectType::Block, "{d:?}");
    let missing = &d.evaluated[0].missing;
    assert!(
        missing.iter().any(|m| m.contains("scan limit")),
        "{missing:?}"
    );
    // The condition's own onMissing says otherwise: allowed, the cut still recorded.
    let lenient = rule(
        "no-cards",
        "tool.before",
        r#"{"name": "*"}"#,
        &sd(
            "toolArg",
            r#"[{"detector": "credit_card"}]"#,
            r#", "onMissing": "allow""#,
        ),
        "block",
    );
    let engine = common::engine(&lenient, &clock());
    let d = decide(&engine, json!({ "b": text })).await;
    assert_eq!(d.effect, EffectType::Allow, "{d:?}");
    // The policy's onMissingDefault does not make unscanned text allowed.
    let meta = format!(
        r#"{{"policy": {{"name": "p", "onMissingDefault": "allow"}}, "rules": {}}}"#,
        card_rule("tool.before", "block")
    );
    let engine = common::engine(&meta, &clock());
    let d = decide(&engine, json!({ "b": text })).await;
    assert_eq!(d.effect, EffectType::Block, "{d:?}");
    // The trail does not keep what was not scanned.
    let (engine, sink) = audited(&card_rule("tool.before", "block"));
    let d = decide(&engine, json!({ "b": text })).await;
    assert_eq!(d.effect, EffectType::Block, "{d:?}");
    engine.flush().await.unwrap();
    let trail = trail_text(&sink.events());
    assert!(!trail.contains(CARD));
    assert!(trail.contains("[unscanned: 16 bytes cut]"));
}

// Point 11.
#[tokio::test]
async fn what_if_over_a_redacted_trail_reports_what_it_cannot_decide() {
    let (engine, sink) = audited(&card_rule("tool.before", "block"));
    let run = engine.start_run(RunContext::new("r", "a"));
    let d = run
        .before_tool(call("c1", "send", json!({"b": CARD})))
        .await;
    assert_eq!(d.effect, EffectType::Block);
    run.end("success", None).await;
    engine.flush().await.unwrap();
    let events: Vec<AuditEvent> = sink.events().iter().map(|e| (**e).clone()).collect();
    // The new rule needs a phone number: the stand-in hides what the card was.
    let new = rule(
        "no-phones",
        "tool.before",
        r#"{"name": "*"}"#,
        &sd("toolArg", r#"[{"detector": "phone"}]"#, ""),
        "block",
    );
    let report = toolgate::whatif::what_if(
        GovernanceEngine::builder().policy(policy(&new)),
        None,
        events,
        &toolgate::whatif::WhatIfFilter::default(),
    )
    .await
    .unwrap();
    assert_eq!(report.calls.len(), 1);
    let summary = report.summary();
    assert!(summary.contains("1 undecidable"), "{summary}");
}

fn output_rule() -> String {
    rule(
        "no-leaked-keys",
        "tool.after",
        r#"{"name": "*"}"#,
        &sd(
            "toolOutput",
            r#"[{"detector": "secret_key"}, {"detector": "credit_card"}]"#,
            "",
        ),
        "block",
    )
}

// Point 13.
#[tokio::test]
async fn a_tool_output_holding_a_secret_is_blocked_and_redacted() {
    let (engine, sink) = audited(&output_rule());
    let run = engine.start_run(RunContext::new("r", "a"));
    let d = run
        .before_tool(call("c1", "read_env", json!({"file": ".env"})))
        .await;
    assert!(d.is_allowed());
    let key = "AKIAIOSFODNN7EXAMPLE";
    let out = json!({"text": format!("AWS_KEY {key}")});
    let d = run
        .after_tool("c1", ToolOutcome::ok(out, Duration::from_millis(1)))
        .await
        .unwrap();
    assert_eq!(d.effect, EffectType::Block, "{d:?}");
    let d = run
        .before_tool(call("c2", "read_env", json!({"file": "a"})))
        .await;
    assert!(d.is_allowed());
    let d = run
        .after_tool(
            "c2",
            ToolOutcome::ok(json!({"text": "fine"}), Duration::from_millis(1)),
        )
        .await
        .unwrap();
    assert!(d.is_allowed(), "{d:?}");
    run.end("success", None).await;
    engine.flush().await.unwrap();
    let events = sink.events();
    assert_verifies(&events);
    let text = trail_text(&events);
    assert!(!text.contains(key), "{text}");
    assert!(
        events
            .iter()
            .any(|e| e.kind() == EventKind::ToolResult && e.body()["callId"] == "c1")
    );
}

// Point 13: `check` knows the target, and where it makes sense.
#[test]
fn tool_output_is_checked_for_its_phase() {
    let before = rule(
        "x",
        "tool.before",
        r#"{"name": "*"}"#,
        &sd("toolOutput", r#"[{"detector": "secret_key"}]"#, ""),
        "block",
    );
    let e = toolgate::policy::parse_policy(&before, None).unwrap_err();
    assert!(e.to_string().contains("tool.after"), "{e}");
    policy(&output_rule());
}

// Point 13: `replay` decides a trace's result line by the toolOutput rule.
#[test]
fn replay_blocks_a_result_line_holding_a_secret_and_the_trail_has_no_copy() {
    let dir = tempfile::TempDir::new().unwrap();
    let policy_file = dir.path().join("p.json");
    std::fs::write(&policy_file, output_rule()).unwrap();
    let key = "AKIAIOSFODNN7EXAMPLE";
    let trace = [
        r#"{"type":"run.start","runId":"r1","agentId":"a","at":"2026-01-05T10:00:00Z"}"#
            .to_string(),
        r#"{"type":"tool.call","runId":"r1","id":"c1","tool":{"name":"read_env"},"args":{}}"#
            .to_string(),
        format!(r#"{{"type":"tool.result","runId":"r1","id":"c1","output":{{"t":"{key}"}}}}"#),
        r#"{"type":"run.end","runId":"r1","status":"success"}"#.to_string(),
    ]
    .join("\n");
    let trace_file = dir.path().join("t.jsonl");
    std::fs::write(&trace_file, trace).unwrap();
    let audit = dir.path().join("audit");
    let out = assert_cmd::Command::cargo_bin("toolgate")
        .unwrap()
        .arg("replay")
        .arg("-p")
        .arg(&policy_file)
        .arg("-t")
        .arg(&trace_file)
        .args(["--format", "jsonl", "--audit"])
        .arg(&audit)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let after = rows
        .iter()
        .find(|r| r["phase"] == "tool.after")
        .unwrap_or_else(|| panic!("no after row: {stdout}"));
    assert_eq!(after["effect"], "block", "{after}");
    assert_eq!(after["line"], 3);
    fn read_all(dir: &std::path::Path, into: &mut String) {
        for f in std::fs::read_dir(dir).unwrap() {
            let p = f.unwrap().path();
            if p.is_dir() {
                read_all(&p, into);
            } else {
                into.push_str(&std::fs::read_to_string(p).unwrap_or_default());
            }
        }
    }
    let mut trail = String::new();
    read_all(&audit, &mut trail);
    assert!(!trail.is_empty());
    assert!(!trail.contains(key), "{trail}");
}
