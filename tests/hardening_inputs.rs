//! Issue 8, findings 5, 19 and 22: hostile or careless input files are errors with a line or
//! a JSON path, never a panic, never silently last-wins.

use assert_cmd::Command;
use predicates::prelude::*;
use tempfile::TempDir;

fn toolgate() -> Command {
    Command::cargo_bin("toolgate").unwrap()
}

const POLICY: &str = "policies/customer-support.json";

fn rule(extra: &str) -> String {
    format!(
        r#"{{"id": "r1", "name": "r1", "priority": 1, "enabled": true,
        "selector": {{"phase": "tool.before", "tool": {{}}}},
        "condition": {{"kind": "toolName", "op": "eq", "value": "x"}},
        "effect": {{"type": "block"}}{extra}}}"#
    )
}

#[test]
fn duplicate_keys_in_a_policy_are_errors_with_their_path() {
    let t = TempDir::new().unwrap();
    let f = t.path().join("p.json");
    std::fs::write(&f, format!(r#"{{"rules": [{}], "rules": []}}"#, rule(""))).unwrap();
    toolgate()
        .arg("check")
        .arg(&f)
        .assert()
        .code(1)
        .stdout(predicate::str::contains(
            "p.json: error: rules: duplicate key (line 4, column 46)",
        ));
    std::fs::write(
        &f,
        format!(r#"{{"rules": [{}]}}"#, rule(r#", "enabled": false"#)),
    )
    .unwrap();
    toolgate()
        .arg("check")
        .arg(&f)
        .assert()
        .code(1)
        .stdout(predicate::str::contains("rules[0].enabled: duplicate key"));
}

#[test]
fn duplicate_keys_in_a_trace_line_are_a_bad_line() {
    let t = TempDir::new().unwrap();
    let trace = t.path().join("t.jsonl");
    std::fs::write(
        &trace,
        [
            r#"{"type":"run.start","runId":"r1","agentId":"a","at":"2026-01-05T10:00:00Z"}"#,
            r#"{"type":"tool.call","runId":"r1","id":"c1","tool":{"name":"issue_refund"},"args":{"amount":5000,"amount":1}}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    toolgate()
        .args(["replay", "-p", POLICY, "-t"])
        .arg(&trace)
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "line 2: duplicate key at args.amount",
        ));
}

#[test]
fn duplicate_keys_in_a_policy_test_file_are_errors() {
    let t = TempDir::new().unwrap();
    std::fs::copy(POLICY, t.path().join("customer-support.json")).unwrap();
    let f = t.path().join("x.tests.json");
    std::fs::write(
        &f,
        r#"{"policy": "customer-support.json", "cases": [{"name": "n", "trace": [
            {"type":"run.start","runId":"r1","agentId":"a","at":"2026-01-05T10:00:00Z"},
            {"type":"tool.call","runId":"r1","id":"c1","tool":{"name":"issue_refund"},
             "args":{"amount":5000,"amount":1}}], "expect": []}]}"#,
    )
    .unwrap();
    toolgate()
        .arg("test")
        .arg(&f)
        .assert()
        .code(2)
        .stdout(predicate::str::contains(
            "not a policy test file: duplicate key at cases[0].trace[1].args.amount (line 4",
        ));
}

#[test]
fn duplicate_keys_in_an_eval_config_are_errors() {
    let err = toolgate::eval::EvaluationRunConfig::from_json(
        r#"{"evaluatorConfigs": [], "evaluatorConfigs": []}"#,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("duplicate key at evaluatorConfigs"),
        "{err}"
    );
}

#[test]
fn a_bom_is_accepted_in_policies_traces_and_test_files() {
    let t = TempDir::new().unwrap();
    let text = std::fs::read_to_string(POLICY).unwrap();
    let f = t.path().join("customer-support.json");
    std::fs::write(&f, format!("\u{feff}{text}")).unwrap();
    toolgate().arg("check").arg(&f).assert().success();
    let tests = std::fs::read_to_string("policies/customer-support.tests.json").unwrap();
    let tf = t.path().join("customer-support.tests.json");
    std::fs::write(&tf, format!("\u{feff}{tests}")).unwrap();
    toolgate().arg("test").arg(&tf).assert().success();
    let trace = std::fs::read_to_string("examples/traces/support.jsonl").unwrap();
    let tr = t.path().join("t.jsonl");
    std::fs::write(&tr, format!("\u{feff}{trace}")).unwrap();
    toolgate()
        .args(["replay", "-p", POLICY, "-t"])
        .arg(&tr)
        .assert()
        .success();
}

fn nested_ands(n: usize) -> String {
    let mut c = String::new();
    for _ in 0..n {
        c.push_str(r#"{"kind": "and", "all": ["#);
    }
    c.push_str(r#"{"kind": "toolName", "op": "eq", "value": "x"}"#);
    c.push_str(&"]}".repeat(n));
    format!(
        r#"{{"rules": [{{"name": "deep", "priority": 1, "enabled": true,
        "selector": {{"phase": "tool.before", "tool": {{}}}},
        "effect": {{"type": "block"}}, "condition": {c}}}]}}"#
    )
}

#[test]
fn the_nesting_limit_message_and_trigger_agree() {
    let t = TempDir::new().unwrap();
    let f = t.path().join("deep.json");
    std::fs::write(&f, nested_ands(64)).unwrap();
    toolgate().arg("check").arg(&f).assert().success();
    std::fs::write(&f, nested_ands(65)).unwrap();
    toolgate()
        .arg("check")
        .arg(&f)
        .assert()
        .code(1)
        .stdout(predicate::str::contains(
            "conditions nest deeper than 64 levels",
        ));
}

fn trace_with_result(result: &str) -> String {
    [
        r#"{"type":"run.start","runId":"r1","agentId":"a","at":"2026-01-05T10:00:00Z"}"#,
        r#"{"type":"tool.call","runId":"r1","id":"c1","tool":{"name":"kb_search"},"args":{}}"#,
        result,
        r#"{"type":"tool.call","runId":"r1","id":"c2","tool":{"name":"kb_search"},"args":{}}"#,
    ]
    .join("\n")
}

#[test]
fn out_of_range_durations_are_bad_lines_not_panics() {
    let t = TempDir::new().unwrap();
    let trace = t.path().join("t.jsonl");
    for (ms, msg) in [
        ("1e300", "line 3: durationMs is out of range"),
        ("1.9e22", "line 3: durationMs is out of range"),
        ("-5", "line 3: durationMs must not be negative"),
        ("1e999", "line 3: not valid JSON"),
    ] {
        std::fs::write(
            &trace,
            trace_with_result(&format!(
                r#"{{"type":"tool.result","runId":"r1","id":"c1","output":{{}},"durationMs":{ms}}}"#
            )),
        )
        .unwrap();
        toolgate()
            .args(["replay", "-p", POLICY, "-t"])
            .arg(&trace)
            .assert()
            .code(1)
            .stderr(predicate::str::contains(msg))
            .stdout(predicate::str::contains("2 calls: 2 allowed"));
    }
}

#[test]
fn out_of_range_costs_are_bad_lines() {
    let t = TempDir::new().unwrap();
    let trace = t.path().join("t.jsonl");
    std::fs::write(
        &trace,
        trace_with_result(r#"{"type":"llm","runId":"r1","tokensIn":1,"costUsd":1e300}"#),
    )
    .unwrap();
    toolgate()
        .args(["replay", "-p", POLICY, "-t"])
        .arg(&trace)
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "line 3: costUsd must be between 0",
        ));
}

#[test]
fn out_of_range_durations_in_a_policy_test_are_reported_not_panics() {
    let t = TempDir::new().unwrap();
    std::fs::copy(POLICY, t.path().join("customer-support.json")).unwrap();
    let f = t.path().join("d.tests.json");
    std::fs::write(
        &f,
        r#"{"policy": "customer-support.json", "cases": [{"name": "huge duration", "trace": [
            {"type":"run.start","runId":"r1","agentId":"a","at":"2026-01-05T10:00:00Z"},
            {"type":"tool.call","runId":"r1","id":"c1","tool":{"name":"kb_search"},"args":{}},
            {"type":"tool.result","runId":"r1","id":"c1","output":{},"durationMs":1e300}
          ], "expect": [{"callId": "c1", "effect": "allow"}]}]}"#,
    )
    .unwrap();
    let out = toolgate().arg("test").arg(&f).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("panicked"), "{text}");
    assert!(text.contains("durationMs is out of range"), "{text}");
    assert_ne!(out.status.code(), Some(0), "{text}");
}
