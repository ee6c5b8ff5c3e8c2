//! Issue 8, findings 2–4: the review file store across processes, id prefixes, corrupt files.

use std::process::{Command as StdCommand, Stdio};

use assert_cmd::Command;
use assert_cmd::cargo::cargo_bin;
use chrono::Utc;
use predicates::prelude::*;
use serde_json::json;
use toolgate::engine::{FileReviewStore, Review, ReviewStatus, ReviewStore};

fn toolgate() -> Command {
    Command::cargo_bin("toolgate").unwrap()
}

fn review(id: &str) -> Review {
    Review {
        id: id.to_string(),
        fingerprint: format!("fp-{id}"),
        status: ReviewStatus::Pending,
        agent_id: "a".into(),
        rule_id: "r".into(),
        tool_name: "t".into(),
        args: json!({}),
        redacted: Vec::new(),
        enduser_id: None,
        run_id: "run".into(),
        call_id: "c".into(),
        reason: None,
        created_at: Utc::now(),
        decided_at: None,
        expires_at: None,
        on_expire: None,
        decided_by: None,
        comment: None,
    }
}

#[test]
fn parallel_approvals_and_a_replay_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store_path = dir.path().join("reviews.json");
    let store = FileReviewStore::new(&store_path);
    let ids: Vec<String> = (0..20).map(|i| format!("review-{i:02}-id")).collect();
    for id in &ids {
        store.insert_if_absent(review(id));
    }
    let replay = StdCommand::new(cargo_bin("toolgate"))
        .args([
            "replay",
            "-p",
            "policies/customer-support.json",
            "-t",
            "examples/traces/support.jsonl",
            "--reviews",
        ])
        .arg(&store_path)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let children: Vec<_> = ids
        .iter()
        .map(|id| {
            StdCommand::new(cargo_bin("toolgate"))
                .args(["review", "approve", id, "--store"])
                .arg(&store_path)
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let replayed = replay.wait_with_output().unwrap();
    assert!(replayed.status.success());
    let all = store.try_list().unwrap();
    let approved = all
        .iter()
        .filter(|r| r.status == ReviewStatus::Approved)
        .count();
    assert_eq!(approved, 20, "{all:#?}");
    assert_eq!(all.len(), 21, "the replay's review is kept too");
    // No temp or stray files beyond the store and its lock file.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["reviews.json", "reviews.json.lock"]);
}

#[test]
fn an_ambiguous_or_short_prefix_is_an_error_listing_the_candidates() {
    let dir = tempfile::tempdir().unwrap();
    let store_path = dir.path().join("reviews.json");
    let store = FileReviewStore::new(&store_path);
    store.insert_if_absent(review("0195aabbcc-1111"));
    store.insert_if_absent(review("0195aabbcc-2222"));
    toolgate()
        .args(["review", "approve", "0195aabbcc", "--store"])
        .arg(&store_path)
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "review id prefix 0195aabbcc is ambiguous; it matches 0195aabbcc-1111, 0195aabbcc-2222",
        ));
    toolgate()
        .args(["review", "approve", "0195aab", "--store"])
        .arg(&store_path)
        .assert()
        .code(1)
        .stderr(predicate::str::contains("at least 8 characters"));
    assert!(
        store
            .try_list()
            .unwrap()
            .iter()
            .all(|r| r.status == ReviewStatus::Pending)
    );
    toolgate()
        .args(["review", "approve", "0195aabbcc-2", "--store"])
        .arg(&store_path)
        .assert()
        .success()
        .stdout(predicate::str::contains("0195aabbcc-2222: approved"));
}

#[test]
fn list_on_a_corrupt_store_fails_like_approve() {
    let dir = tempfile::tempdir().unwrap();
    let store_path = dir.path().join("reviews.json");
    std::fs::write(&store_path, "{ this is not a review file").unwrap();
    let approve = toolgate()
        .args(["review", "approve", "whatever-id", "--store"])
        .arg(&store_path)
        .assert()
        .code(1)
        .get_output()
        .stderr
        .clone();
    let approve = String::from_utf8(approve).unwrap();
    assert!(approve.contains("not a review file"), "{approve}");
    toolgate()
        .args(["review", "list", "--store"])
        .arg(&store_path)
        .assert()
        .code(1)
        .stdout("")
        .stderr(approve);
}
