//! Issue 8, findings 20 and 21: Handlebar platform fields on rules; `check` warns about
//! block/hitl rules that fail open on missing data.

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::{Value, json};
use tempfile::TempDir;
use toolgate::policy::parse_policy;

fn toolgate() -> Command {
    Command::cargo_bin("toolgate").unwrap()
}

fn handlebar_rule(extra: Value) -> Value {
    let mut r = json!({
        "id": "rule-1", "policyId": "pol-42", "name": "no deletes", "priority": 1,
        "enabled": true,
        "createdAt": "2026-01-01T00:00:00Z", "updatedAt": "2026-01-02T00:00:00Z",
        "selector": {"phase": "tool.before", "tool": {"name": "delete_*"}},
        "condition": {"kind": "toolName", "op": "glob", "value": "*"},
        "effect": {"type": "block", "reason": "no"}
    });
    for (k, v) in extra.as_object().unwrap() {
        r[k] = v.clone();
    }
    r
}

#[test]
fn handlebar_platform_fields_are_accepted_and_policy_id_is_kept() {
    let text = json!([handlebar_rule(json!({}))]).to_string();
    let p = parse_policy(&text, None).unwrap();
    assert_eq!(p.rules[0].policy_id.as_deref(), Some("pol-42"));
    let back = p.to_json();
    assert_eq!(back["rules"][0]["policyId"], "pol-42");
    assert!(back["rules"][0].get("createdAt").is_none());
    // Round trip.
    let again = parse_policy(&back.to_string(), None).unwrap();
    assert_eq!(again, p);
}

#[test]
fn typos_of_platform_fields_are_still_rejected() {
    let mut r = handlebar_rule(json!({}));
    r["policyID"] = json!("x");
    let e = parse_policy(&json!([r]).to_string(), None).unwrap_err();
    assert!(e.to_string().contains("unknown key \"policyID\""), "{e}");
}

#[test]
fn policy_id_is_carried_in_decision_audit_events() {
    let t = TempDir::new().unwrap();
    let policy = t.path().join("hb.json");
    std::fs::write(&policy, json!([handlebar_rule(json!({}))]).to_string()).unwrap();
    let trace = t.path().join("t.jsonl");
    std::fs::write(
        &trace,
        [
            r#"{"type":"run.start","runId":"r1","agentId":"a","at":"2026-01-05T10:00:00Z"}"#,
            r#"{"type":"tool.call","runId":"r1","id":"c1","tool":{"name":"delete_user"},"args":{}}"#,
            r#"{"type":"tool.call","runId":"r1","id":"c2","tool":{"name":"read_user"},"args":{}}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    let audit = t.path().join("audit");
    toolgate()
        .args(["replay", "-p"])
        .arg(&policy)
        .arg("-t")
        .arg(&trace)
        .arg("--audit")
        .arg(&audit)
        .assert()
        .success();
    let mut decisions = Vec::new();
    for f in std::fs::read_dir(&audit).unwrap() {
        let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
        for l in text.lines() {
            let v: Value = serde_json::from_str(l).unwrap();
            if v["kind"] == "tool.decision" {
                decisions.push(v);
            }
        }
    }
    assert_eq!(decisions.len(), 2, "{decisions:#?}");
    let find =
        |call: &str| decisions.iter().find(|d| d["callId"] == call).unwrap()["decision"].clone();
    assert_eq!(find("c1")["ruleId"], "rule-1");
    assert_eq!(find("c1")["policyId"], "pol-42");
    assert!(find("c2").get("policyId").is_none(), "{}", find("c2"));
    toolgate().arg("verify").arg(&audit).assert().success();
}

fn rule(id: &str, condition: Value, extra: Value) -> Value {
    let mut r = json!({
        "id": id, "name": id, "priority": 1, "enabled": true,
        "selector": {"phase": "tool.before", "tool": {}},
        "condition": condition,
        "effect": {"type": "block"}
    });
    for (k, v) in extra.as_object().unwrap() {
        r[k] = v.clone();
    }
    r
}

#[test]
fn check_warns_about_rules_that_fail_open_on_missing_data() {
    let t = TempDir::new().unwrap();
    let gate = json!({"kind": "timeGate", "timezone": {"source": "enduserTag", "tag": "tz"},
        "windows": [{"days": ["mon"], "start": "09:00", "end": "17:00"}]});
    let arg =
        json!({"kind": "toolArg", "type": "number", "op": "gt", "path": "amount", "value": 5});
    let rules = vec![
        rule(
            "outside-hours",
            json!({"kind": "not", "not": gate}),
            json!({}),
        ),
        rule(
            "closed",
            json!({"kind": "not", "not": gate}),
            json!({"onMissing": "block"}),
        ),
        rule("intended", arg.clone(), json!({"onMissing": "allow"})),
        rule(
            "signal-in-or",
            json!({"kind": "or", "any": [
                {"kind": "toolName", "op": "eq", "value": "x"},
                {"kind": "signal", "key": "risk", "args": {}, "op": "eq", "value": true}
            ]}),
            json!({"effect": {"type": "hitl"}}),
        ),
        rule(
            "known",
            json!({"kind": "toolName", "op": "eq", "value": "x"}),
            json!({}),
        ),
        rule(
            "allow-rule",
            arg.clone(),
            json!({"effect": {"type": "allow"}}),
        ),
    ];
    let f = t.path().join("p.json");
    std::fs::write(&f, json!({"rules": rules}).to_string()).unwrap();
    let out = toolgate()
        .arg("check")
        .arg(&f)
        .assert()
        .success()
        .stdout(predicate::str::contains(
            r#"warning: rules[0] "outside-hours": the block rule fails open on missing data: timeGate (end-user tag "tz" absent or invalid, no fallback) can make the condition unknown"#,
        ))
        .stdout(predicate::str::contains(
            r#"add "onMissing": "block" to the rule to fail closed"#,
        ))
        .stdout(predicate::str::contains(
            r#"warning: rules[3] "signal-in-or": the hitl rule fails open on missing data: signal "risk""#,
        ))
        .stdout(predicate::str::contains(r#"add "onMissing": "hitl""#))
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    assert_eq!(out.matches("warning").count(), 2, "{out}");
    // A policy that fails closed by default has nothing to warn about.
    let f2 = t.path().join("closed.json");
    std::fs::write(
        &f2,
        json!({"policy": {"name": "c", "onMissingDefault": "block"},
               "rules": [rule("outside-hours", json!({"kind": "not", "not": gate}), json!({}))]})
        .to_string(),
    )
    .unwrap();
    toolgate()
        .arg("check")
        .arg(&f2)
        .assert()
        .success()
        .stdout(predicate::str::contains("warning").not());
}
