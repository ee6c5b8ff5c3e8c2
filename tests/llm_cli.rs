//! Issue 36 through the CLI: `toolgate replay` decides `llm.call` lines (phase `llm.before`)
//! and records `llm` usage; `toolgate test` tests budget policies; what-if (`--from-audit`)
//! shows which recorded runs a tighter budget would have stopped, from a trail recorded with
//! or without `llm.before` rules in play; `toolgate check` warns that Handlebar has no
//! `llm.before` phase.

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::{Value, json};

fn toolgate() -> Command {
    Command::cargo_bin("toolgate").unwrap()
}

const BUDGET: &str = "policies/model-budget.json";
const TRACE: &str = "examples/traces/model-calls.jsonl";

fn jsonl(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

/// A copy of the shipped budget policy with a tighter run token budget.
fn tighter(dir: &std::path::Path, tokens: u64) -> std::path::PathBuf {
    let mut p: Value = serde_json::from_str(&std::fs::read_to_string(BUDGET).unwrap()).unwrap();
    p["rules"][0]["condition"]["value"] = json!(tokens);
    let path = dir.join("tighter.json");
    std::fs::write(&path, p.to_string()).unwrap();
    path
}

#[test]
fn replay_decides_llm_call_lines_in_phase_llm_before() {
    let out = toolgate()
        .args(["replay", "-p", BUDGET, "-t", TRACE, "--format", "jsonl"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let rows = jsonl(&out);
    let llm: Vec<&Value> = rows.iter().filter(|r| r["phase"] == "llm.before").collect();
    assert_eq!(llm.len(), 6);
    assert_eq!(llm[0]["tool"], "gpt-4o-mini");
    assert_eq!(llm[0]["callId"], "m1");
    let m4 = llm.iter().find(|r| r["callId"] == "m4").unwrap();
    assert_eq!(m4["effect"], "block");
    assert_eq!(m4["ruleId"], "run-token-budget");
    let n1 = llm.iter().find(|r| r["callId"] == "n1").unwrap();
    assert_eq!(n1["ruleId"], "no-secrets-to-models");
    toolgate()
        .args(["replay", "-p", BUDGET, "-t", TRACE])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "6 model calls (llm.before): 4 allowed, 2 blocked, 0 hitl",
        ));
}

#[test]
fn toolgate_test_runs_budget_policies_and_reports_a_wrong_expectation() {
    toolgate()
        .args(["test", "policies/model-budget.tests.json"])
        .assert()
        .success()
        .stdout(predicate::str::contains("5 passed, 0 failed"));
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("model-budget.json");
    std::fs::copy(BUDGET, &policy).unwrap();
    let trace: Vec<Value> = std::fs::read_to_string(TRACE)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let tests = json!({"policy": "model-budget.json", "cases": [{"name": "m4 is not blocked (wrong)",
        "trace": trace, "expect": [{"callId": "m4", "effect": "allow"}]}]});
    let file = dir.path().join("model-budget.tests.json");
    std::fs::write(&file, tests.to_string()).unwrap();
    toolgate()
        .args(["test", file.to_str().unwrap()])
        .assert()
        .failure()
        .stdout(predicate::str::contains("call m4 (llm.before)"))
        .stdout(predicate::str::contains("run-token-budget"));
}

#[test]
fn what_if_shows_the_runs_a_tighter_budget_would_have_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit");
    toolgate()
        .args(["replay", "-p", BUDGET, "-t", TRACE, "--audit"])
        .arg(&audit)
        .assert()
        .success();
    let new = tighter(dir.path(), 100_000);
    let out = toolgate()
        .args(["replay", "--policy"])
        .arg(&new)
        .arg("--from-audit")
        .arg(&audit)
        .args(["--format", "jsonl"])
        .assert()
        .success()
        .stderr(predicate::str::contains(
            "1 run(s) would be stopped before a model call (llm.before): r1",
        ))
        .get_output()
        .stdout
        .clone();
    let changed = jsonl(&out);
    // m1 (0 tokens before) and m2 (90,000) pass; m3 (185,000 ≥ 100,000) would be stopped.
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(changed[0]["callId"], "m3");
    assert_eq!(changed[0]["phase"], "llm.before");
    assert_eq!(changed[0]["tool"], "gpt-4o-mini");
    assert_eq!(changed[0]["recordedEffect"], "allow");
    assert_eq!(changed[0]["newEffect"], "block");
    assert_eq!(changed[0]["newRuleId"], "run-token-budget");
    // The same policy decides as recorded: nothing changes.
    toolgate()
        .args(["replay", "--policy", BUDGET, "--from-audit"])
        .arg(&audit)
        .assert()
        .success()
        .stdout(predicate::str::contains("none would change"));
}

#[test]
fn what_if_over_a_trail_recorded_without_llm_rules_decides_before_each_recorded_usage() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit");
    // Recorded under a policy with no llm.before rule: the trail has llm.result events only.
    toolgate()
        .args(["replay", "-p", "policies/customer-support.json", "-t", TRACE, "--audit"])
        .arg(&audit)
        .assert()
        .success();
    let new = tighter(dir.path(), 100_000);
    let out = toolgate()
        .args(["replay", "--policy"])
        .arg(&new)
        .arg("--from-audit")
        .arg(&audit)
        .args(["--format", "jsonl", "--all"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let calls = jsonl(&out);
    let llm: Vec<&Value> = calls
        .iter()
        .filter(|c| c["phase"] == "llm.before")
        .collect();
    // One model call before each recorded usage: r1's three, r2's one.
    assert_eq!(llm.len(), 4, "{calls:?}");
    let effects: Vec<&str> = llm
        .iter()
        .map(|c| c["newEffect"].as_str().unwrap())
        .collect();
    assert_eq!(effects, ["allow", "allow", "block", "allow"]);
    assert!(llm.iter().all(|c| c["recordedEffect"] == "allow"));
}

#[test]
fn check_warns_that_handlebar_has_no_llm_before_phase() {
    toolgate()
        .args(["check", BUDGET])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "selector.phase \"llm.before\" is a toolgate extension: Handlebar has no such phase",
        ));
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        json!({"rules": [{"id": "r", "name": "r", "selector": {"phase": "llm.before"},
            "condition": {"kind": "toolName", "op": "eq", "value": "x"},
            "effect": {"type": "block"}}]})
        .to_string(),
    )
    .unwrap();
    toolgate()
        .args(["check"])
        .arg(&bad)
        .assert()
        .failure()
        .stdout(predicate::str::contains("rules[0].condition.kind"))
        .stdout(predicate::str::contains(
            "rule \"r\" (phase llm.before): \"toolName\" does not apply to a model call",
        ));
}
