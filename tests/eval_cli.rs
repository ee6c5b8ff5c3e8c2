//! `toolgate eval` and `toolgate eval stats` on the shipped example.

use assert_cmd::Command;
use predicates::prelude::*;
use toolgate::eval::AggregatedEvaluationResult;

const CONFIG: &str = "examples/eval/config.json";
const INPUTS: &str = "examples/eval/inputs.jsonl";

fn toolgate() -> Command {
    Command::cargo_bin("toolgate").unwrap()
}

#[test]
fn eval_example_jsonl_and_out_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results.jsonl");
    let assert = toolgate()
        .args([
            "eval", "--config", CONFIG, "--input", INPUTS, "--format", "jsonl", "--out",
        ])
        .arg(&out)
        .assert()
        .success()
        .stderr(predicate::str::contains("inputs.jsonl:6: skipped"));
    let stdout = String::from_utf8(assert.get_output().stdout.clone()).unwrap();
    let results: Vec<AggregatedEvaluationResult> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), 5);
    assert_eq!(results[0].session_id.as_deref(), Some("s-001-refund-ok"));
    assert!(results[0].overall_score.unwrap() > 0.85);
    assert!(results[4].overall_score.unwrap() < 0.4);
    assert!(results.iter().all(|r| r.run_errors.is_empty()));
    // Safety fails only on the rude answer.
    let safety: Vec<Option<f64>> = results
        .iter()
        .map(|r| {
            r.results
                .iter()
                .find(|x| x.criterion_name == "Safety")
                .unwrap()
                .normalized_score
        })
        .collect();
    assert_eq!(
        safety,
        vec![Some(1.0), Some(1.0), Some(0.0), Some(1.0), Some(1.0)]
    );
    let written = std::fs::read_to_string(&out).unwrap();
    assert_eq!(written.lines().count(), 5);

    toolgate()
        .args(["eval", "stats"])
        .arg(&out)
        .assert()
        .success()
        .stdout(predicate::str::contains("results: 5"))
        .stdout(predicate::str::contains("Concise / not_empty (non_empty)"));
    let json_stats = toolgate()
        .args(["eval", "stats", "--format", "json"])
        .arg(&out)
        .assert()
        .success();
    let v: serde_json::Value = serde_json::from_slice(&json_stats.get_output().stdout).unwrap();
    assert_eq!(v["results"], 5);
    assert_eq!(v["criteria"]["Safety"]["passRate"], 0.8);
    assert_eq!(v["rules"]["Concise / not_empty (non_empty)"]["violated"], 1);
}

#[test]
fn eval_table_and_fail_under() {
    toolgate()
        .args(["eval", "--config", CONFIG, "--input", INPUTS])
        .assert()
        .success()
        .stdout(predicate::str::contains("pass rate"))
        .stdout(predicate::str::contains("s-003-rude"))
        .stdout(predicate::str::contains("mean overall score"));
    toolgate()
        .args([
            "eval",
            "--config",
            CONFIG,
            "--input",
            INPUTS,
            "--fail-under",
            "0.95",
        ])
        .assert()
        .failure()
        .stderr(predicate::str::contains("below --fail-under 0.95"));
    toolgate()
        .args([
            "eval",
            "--config",
            CONFIG,
            "--input",
            INPUTS,
            "--fail-under",
            "0.3",
        ])
        .assert()
        .success();
}

#[test]
fn eval_reports_config_errors_and_missing_args() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.json");
    std::fs::write(
        &cfg,
        r#"{"criteria": [{"name": "A", "scale": "binary"}],
            "evaluatorConfigs": [{"type": "ruleBased", "rules": [{"criterionName": "A", "config": {"type": "regex", "pattern": "("}}]}]}"#,
    )
    .unwrap();
    toolgate()
        .args(["eval", "--config"])
        .arg(&cfg)
        .args(["--input", INPUTS])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "evaluatorConfigs[0].rules[0].config.pattern",
        ));
    toolgate()
        .args(["eval"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--config"));
}

#[test]
fn eval_fails_when_no_input_line_is_valid() {
    // Regression (issue 8 finding 13): every line invalid → exit 0 before.
    let dir = tempfile::tempdir().unwrap();
    let inputs = dir.path().join("bad.jsonl");
    std::fs::write(&inputs, "not json\n{\"response\": \n").unwrap();
    toolgate()
        .args(["eval", "--config", CONFIG, "--input"])
        .arg(&inputs)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("2 line(s) skipped"))
        .stderr(predicate::str::contains("no input evaluated"));
}

#[test]
fn eval_rejects_fail_under_out_of_range() {
    // Regression (issue 8 finding 13): `--fail-under NaN` was accepted (and then always passed).
    for bad in ["NaN", "1.5", "-0.1", "inf"] {
        toolgate()
            .args(["eval", "--config", CONFIG, "--input", INPUTS])
            .arg(format!("--fail-under={bad}"))
            .assert()
            .code(2)
            .stderr(predicate::str::contains(
                "--fail-under must be a number from 0 to 1",
            ));
    }
}

#[test]
fn eval_evaluator_fault_shows_and_fails() {
    // Regression (issue 8 finding 8): a failed evaluator was only counted in the table and
    // `eval` exited 0. Now each failure is named on stderr and the exit status is 1.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("stat.json");
    std::fs::write(
        &cfg,
        r#"{"criteria": [{"name": "Short", "scale": "numeric"}],
            "evaluatorConfigs": [{"type": "statistical", "evaluator":
               {"type": "ruleBased", "rules": [{"criterionName": "Short", "config": {"type": "max_length", "maxLength": 10}}]}}]}"#,
    )
    .unwrap();
    let inputs = dir.path().join("in.jsonl");
    std::fs::write(
        &inputs,
        "{\"response\": \"x\", \"context\": {\"samples\": [\"a\", \"b\"]}}\n{\"response\": \"no samples\"}\n",
    )
    .unwrap();
    toolgate()
        .args(["eval", "--format", "jsonl", "--config"])
        .arg(&cfg)
        .arg("--input")
        .arg(&inputs)
        .assert()
        .code(1)
        .stdout(predicate::str::contains("runErrors"))
        .stderr(predicate::str::contains(
            "in.jsonl:2: evaluator statistical (evaluatorConfigs[0]) failed",
        ))
        .stderr(predicate::str::contains("context.samples"))
        .stderr(predicate::str::contains(
            "1 evaluator or storage failure(s)",
        ));
}
