//! What-if does not trust its input (issue 22 points 14, 15): a broken chain is refused, a
//! retried callId is matched by position, a non-UTF-8 line is reported and skipped, symlink
//! loops are not followed.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::{Value, json};

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn toolgate(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::cargo_bin("toolgate")
        .unwrap()
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Records `trace` under the customer-support policy into `dir`/audit.
fn record(dir: &Path, trace: &Path) -> PathBuf {
    let audit = dir.join("audit");
    let policy = repo("policies/customer-support.json");
    let (code, _, err) = toolgate(&[
        "replay",
        "--policy",
        policy.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--audit",
        audit.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    audit
}

fn what_if(audit: &Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let policy = repo("policies/customer-support.json");
    let mut args = vec![
        "replay",
        "--policy",
        policy.to_str().unwrap(),
        "--from-audit",
        audit.to_str().unwrap(),
        "--format",
        "jsonl",
        "--all",
    ];
    args.extend_from_slice(extra);
    toolgate(&args)
}

fn trail_file(audit: &Path) -> PathBuf {
    audit.join("2026-01-05.jsonl")
}

#[test]
fn a_run_whose_chain_is_broken_is_refused_and_listed() {
    let dir = tempfile::tempdir().unwrap();
    let audit = record(dir.path(), &repo("examples/traces/support.jsonl"));
    // Edit one event of r-102 without re-hashing it.
    let file = trail_file(&audit);
    let text = std::fs::read_to_string(&file).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let i = lines
        .iter()
        .position(|l| l.contains("\"runId\":\"r-102\"") && l.contains("\"tool.decision\""))
        .unwrap();
    let mut v: Value = serde_json::from_str(&lines[i]).unwrap();
    v["ts"] = json!("2026-01-05T09:59:59.000Z");
    lines[i] = toolgate::audit::canonical_json(&v);
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();

    let (code, out, err) = what_if(&audit, &[]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("r-102"), "{err}");
    assert!(err.contains("chain"), "{err}");
    // The other runs are still decided again.
    assert!(out.contains("\"r-101\""), "{out}");
    assert!(!out.contains("\"r-102\""), "{out}");

    let (code, out, err) = what_if(&audit, &["--no-verify"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("\"r-102\""), "{out}");
}

#[test]
fn a_retried_call_id_is_matched_by_position() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.jsonl");
    let call = |amount: u32, at: &str| {
        json!({"type":"tool.call","runId":"r1","id":"c1",
               "tool":{"name":"issue_refund","tags":["payments"]},
               "args":{"amount": amount, "orderId":"o1"},"at":at})
    };
    std::fs::write(
        &trace,
        format!(
            "{}\n{}\n{}\n{}\n",
            json!({"type":"run.start","runId":"r1","agentId":"support",
                   "enduser":{"id":"u1","tags":{"tier":"gold"}},"at":"2026-01-05T10:00:00Z"}),
            call(10, "2026-01-05T10:00:01Z"),
            call(5000, "2026-01-05T10:00:02Z"),
            json!({"type":"run.end","runId":"r1","status":"success","at":"2026-01-05T10:00:03Z"}),
        ),
    )
    .unwrap();
    let audit = record(dir.path(), &trace);
    let (code, out, err) = what_if(&audit, &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    let rows: Vec<Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    for r in &rows {
        assert_eq!(r["recordedEffect"], r["newEffect"], "{out}");
    }
}

#[test]
fn a_non_utf8_line_is_reported_with_its_place_and_the_rest_runs() {
    let dir = tempfile::tempdir().unwrap();
    let audit = record(dir.path(), &repo("examples/traces/support.jsonl"));
    let file = trail_file(&audit);
    let mut bytes = std::fs::read(&file).unwrap();
    let lines_before = bytes.iter().filter(|b| **b == b'\n').count();
    bytes.extend_from_slice(b"{\"junk\":\"\xff\xfe\"}\n");
    std::fs::write(&file, bytes).unwrap();
    let (code, out, err) = what_if(&audit, &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        err.contains(&format!("2026-01-05.jsonl:{}", lines_before + 1)),
        "{err}"
    );
    assert!(err.contains("UTF-8"), "{err}");
    assert!(out.contains("\"r-101\""), "{out}");
}

#[test]
fn symlink_loops_are_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let audit = record(dir.path(), &repo("examples/traces/support.jsonl"));
    std::os::unix::fs::symlink(&audit, audit.join("loop")).unwrap();
    std::os::unix::fs::symlink(&audit, audit.join("loop2")).unwrap();
    let (code, out, err) = what_if(&audit, &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    // Every call once: the trail is read once, however many paths lead to it.
    let rows = out.lines().filter(|l| l.starts_with('{')).count();
    assert_eq!(rows, 10, "{out}");
}
