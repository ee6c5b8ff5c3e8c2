//! Issue 8, finding 6: `toolgate verify DIR` reads every real file once, never hangs on
//! symlink loops, FIFOs or devices, and keeps memory bounded on endless lines.
#![cfg(unix)]

use std::time::Duration;

use assert_cmd::Command;
use predicates::prelude::*;

fn toolgate() -> Command {
    let mut c = Command::cargo_bin("toolgate").unwrap();
    c.timeout(Duration::from_secs(60));
    c
}

/// A folder with one audit file of 23 events in 3 runs.
fn audit_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    toolgate()
        .args([
            "replay",
            "-p",
            "policies/customer-support.json",
            "-t",
            "examples/traces/support.jsonl",
            "--audit",
        ])
        .arg(dir.path())
        .assert()
        .success();
    dir
}

#[test]
fn symlink_loops_end_and_each_file_is_read_once() {
    let dir = audit_dir();
    std::os::unix::fs::symlink(".", dir.path().join("a")).unwrap();
    let out = toolgate()
        .arg("verify")
        .arg(dir.path())
        .assert()
        .success()
        .stdout(predicate::str::contains("ok: 23 events, 3 runs"))
        .get_output()
        .stdout
        .clone();
    assert_eq!(String::from_utf8(out).unwrap().lines().count(), 1);
    std::os::unix::fs::symlink(".", dir.path().join("b")).unwrap();
    toolgate()
        .arg("verify")
        .arg(dir.path())
        .arg(dir.path())
        .assert()
        .success()
        .stdout(predicate::str::contains("ok: 23 events, 3 runs"))
        .stderr(predicate::str::contains("skipped: symlink loop"));
}

#[test]
fn a_fifo_named_jsonl_in_a_folder_is_skipped_with_a_note() {
    let dir = audit_dir();
    let fifo = dir.path().join("zz.jsonl");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    toolgate()
        .arg("verify")
        .arg(dir.path())
        .assert()
        .success()
        .stdout(predicate::str::contains("ok: 23 events, 3 runs"))
        .stderr(predicate::str::contains(
            "zz.jsonl: skipped: not a regular file",
        ));
}

#[test]
fn an_endless_line_is_a_break_not_unbounded_memory() {
    toolgate()
        .args(["verify", "/dev/zero"])
        .assert()
        .code(1)
        .stdout(predicate::str::contains(
            "/dev/zero:1: line longer than 128 MiB; the rest of the file is not read",
        ));
}
