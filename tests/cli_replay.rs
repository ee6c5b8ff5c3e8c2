//! `toolgate replay`, `toolgate test` and `toolgate review` as a user runs them.

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::Value;

fn toolgate() -> Command {
    Command::cargo_bin("toolgate").unwrap()
}

const POLICY: &str = "policies/customer-support.json";
const TRACE: &str = "examples/traces/support.jsonl";

#[test]
fn replay_quick_start_prints_a_table_and_a_summary() {
    toolgate()
        .args(["replay", "--policy", POLICY, "--trace", TRACE])
        .assert()
        .success()
        .stdout(predicate::str::contains("LINE  RUN"))
        .stdout(predicate::str::contains(
            "BLOCKED_HITL_REQUESTED  refund-needs-approval",
        ))
        .stdout(predicate::str::contains(
            "10 calls: 6 allowed, 3 blocked, 1 hitl",
        ));
}

#[test]
fn replay_jsonl_has_one_object_per_decision() {
    let out = toolgate()
        .args(["replay", "-p", POLICY, "-t", TRACE, "--format", "jsonl"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let rows: Vec<Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 10);
    let c3 = rows.iter().find(|r| r["callId"] == "c3").unwrap();
    assert_eq!(c3["line"], 8);
    assert_eq!(c3["effect"], "block");
    assert_eq!(c3["code"], "BLOCKED_RULE");
    assert_eq!(c3["ruleId"], "pii-requires-customer-subject");
    assert_eq!(c3["phase"], "tool.before");
    assert_eq!(c3["abortRun"], false);
    let c1 = rows.iter().find(|r| r["callId"] == "c1").unwrap();
    assert_eq!(c1["ruleId"], Value::Null);
}

#[test]
fn bad_trace_lines_are_reported_with_their_number_and_the_rest_runs() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.jsonl");
    std::fs::write(
        &trace,
        [
            r#"{"type":"run.start","runId":"r1","agentId":"a","at":"2026-01-05T10:00:00Z"}"#,
            "this is not json",
            r#"{"type":"tool.call","runId":"nope","id":"c0","tool":{"name":"kb_search"}}"#,
            r#"{"type":"tool.cal","runId":"r1"}"#,
            r#"{"type":"tool.call","runId":"r1","id":"c1","tool":{"name":"kb_search"},"args":{}}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    toolgate()
        .args(["replay", "-p", POLICY, "-t"])
        .arg(&trace)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("line 2: not valid JSON"))
        .stderr(predicate::str::contains("line 3: no run \"nope\""))
        .stderr(predicate::str::contains("line 4: not a trace line"))
        .stdout(predicate::str::contains("1 calls: 1 allowed"))
        .stdout(predicate::str::contains("3 bad trace lines skipped"));
}

#[test]
fn replay_with_audit_writes_a_trail_that_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit");
    toolgate()
        .args(["replay", "-p", POLICY, "-t", TRACE, "--audit"])
        .arg(&audit)
        .assert()
        .success();
    let files: Vec<_> = std::fs::read_dir(&audit).unwrap().collect();
    assert_eq!(files.len(), 1, "one file per day");
    toolgate()
        .arg("verify")
        .arg(&audit)
        .assert()
        .success()
        .stdout(predicate::str::contains("ok: 23 events, 3 runs"));
    // tamper with one event: verify must fail
    let file = files[0].as_ref().unwrap().path();
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replacen("kb_search", "kb_searcH", 1)).unwrap();
    toolgate().arg("verify").arg(&audit).assert().code(1);
}

#[test]
fn reviews_persist_between_replays_through_the_review_command() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("reviews.json");
    toolgate()
        .args(["replay", "-p", POLICY, "-t", TRACE, "--reviews"])
        .arg(&store)
        .assert()
        .success()
        .stdout(predicate::str::contains("BLOCKED_HITL_REQUESTED"));
    let list = toolgate()
        .args(["review", "list", "--json", "--store"])
        .arg(&store)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let reviews: Vec<Value> = serde_json::from_slice(&list).unwrap();
    assert_eq!(reviews.len(), 1);
    assert_eq!(reviews[0]["status"], "pending");
    let id = reviews[0]["id"].as_str().unwrap().to_string();
    toolgate()
        .args(["review", "approve", &id, "--store"])
        .arg(&store)
        .assert()
        .success()
        .stdout(predicate::str::contains("approved"));
    toolgate()
        .args(["review", "deny", &id, "--store"])
        .arg(&store)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("already"));
    toolgate()
        .args(["replay", "-p", POLICY, "-t", TRACE, "--reviews"])
        .arg(&store)
        .assert()
        .success()
        .stdout(predicate::str::contains("ALLOWED_HITL_APPROVED"))
        .stdout(predicate::str::contains(
            "10 calls: 8 allowed, 2 blocked, 0 hitl",
        ));
}

/// A pending review of the shipped support trace, in a review file under `dir`: its id.
fn pending_review(dir: &std::path::Path) -> String {
    let store = dir.join("reviews.json");
    toolgate()
        .args(["replay", "-p", POLICY, "-t", TRACE, "--reviews"])
        .arg(&store)
        .assert()
        .success();
    let list = toolgate()
        .args(["review", "list", "--json", "--store"])
        .arg(&store)
        .output()
        .unwrap()
        .stdout;
    let reviews: Vec<Value> = serde_json::from_slice(&list).unwrap();
    reviews[0]["id"].as_str().unwrap().to_string()
}

/// `toolgate review approve|deny --audit` records the human decision in the audit trail as
/// the console does: a `review.decided` event, in a run of its own that `verify` checks. A
/// wrong `--audit` decides nothing.
#[test]
fn a_decision_on_the_command_line_is_audited() {
    let dir = tempfile::tempdir().unwrap();
    let id = pending_review(dir.path());
    let store = dir.path().join("reviews.json");
    // An audit folder that cannot be one (a file): refused before deciding.
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, "x").unwrap();
    toolgate()
        .args(["review", "approve", &id, "--store"])
        .arg(&store)
        .arg("--audit")
        .arg(&not_a_dir)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--audit"));
    let audit = dir.path().join("audit");
    toolgate()
        .args([
            "review",
            "approve",
            &id,
            "--by",
            "lead",
            "--comment",
            "gold customer",
        ])
        .arg("--store")
        .arg(&store)
        .arg("--audit")
        .arg(&audit)
        .assert()
        .success()
        .stdout(predicate::str::contains("approved"));
    let day = std::fs::read_dir(audit.join("toolgate-console"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let lines: Vec<Value> = std::fs::read_to_string(day)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let e = &lines[0];
    assert_eq!(e["kind"], "review.decided");
    assert_eq!(e["runId"], format!("review-{id}"));
    let text = e.to_string();
    assert!(
        text.contains(&id) && text.contains("\"lead\"") && text.contains("approved"),
        "{text}"
    );
    toolgate()
        .arg("verify")
        .arg(&audit)
        .assert()
        .success()
        .stdout(predicate::str::contains("ok: 1 events, 1 runs"));
}

#[test]
fn policy_tests_pass_and_a_wrong_expectation_shows_a_diff() {
    toolgate()
        .args(["test", "policies/"])
        .assert()
        .success()
        .stdout(predicate::str::contains(" 0 failed"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(POLICY, dir.path().join("p.json")).unwrap();
    std::fs::write(
        dir.path().join("p.tests.json"),
        r#"{"policy": "p.json", "cases": [{"name": "wrong on purpose", "trace": [
            {"type":"run.start","runId":"r1","agentId":"a","at":"2026-01-05T10:00:00Z"},
            {"type":"tool.call","runId":"r1","id":"c1","tool":{"name":"kb_search"},"args":{}}
          ], "expect": [{"callId": "c1", "effect": "block", "ruleId": "x"}]}]}"#,
    )
    .unwrap();
    toolgate()
        .arg("test")
        .arg(dir.path())
        .assert()
        .code(1)
        .stdout(predicate::str::contains("FAIL  wrong on purpose"))
        .stdout(predicate::str::contains("- effect: \"block\""))
        .stdout(predicate::str::contains("+ effect: \"allow\""))
        .stdout(predicate::str::contains("- ruleId: \"x\""))
        .stdout(predicate::str::contains("+ ruleId: null"));
}

#[test]
fn help_is_written_for_a_new_user() {
    toolgate()
        .arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains("Quick start"))
        .stdout(predicate::str::contains("replay"))
        .stdout(predicate::str::contains("collect"));
    for cmd in [
        "check", "replay", "test", "review", "collect", "verify", "eval",
    ] {
        toolgate().args([cmd, "--help"]).assert().success();
    }
}
