//! What-if replay: `toolgate replay --policy NEW --from-audit DIR` and `toolgate::whatif`.

#[cfg(feature = "postgres")]
mod pg_support;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::{Value, json};
use toolgate::engine::GovernanceEngine;
use toolgate::whatif::{
    WhatIfCall, WhatIfFilter, WhatIfReport, index_audit_trail, read_audit_paths, what_if,
    what_if_trail,
};

fn toolgate() -> Command {
    Command::cargo_bin("toolgate").unwrap()
}

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

/// The audit trail of the example support trace under the customer-support policy: 3 runs,
/// 10 calls (c3 and c6 blocked by rules, c9 hitl, c10 blocked because r-103 was aborted).
fn recorded(dir: &Path) -> PathBuf {
    let audit = dir.join("audit");
    let out = toolgate()
        .arg("replay")
        .arg("--policy")
        .arg(repo("policies/customer-support.json"))
        .arg("--trace")
        .arg(repo("examples/traces/support.jsonl"))
        .arg("--audit")
        .arg(&audit)
        .output()
        .unwrap();
    assert!(out.status.success());
    audit
}

fn write_policy(dir: &Path, name: &str, rules: Value) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, rules.to_string()).unwrap();
    p
}

fn rule(id: &str, tool: &str, condition: Value) -> Value {
    json!({"id": id, "name": id, "priority": 10, "enabled": true,
           "selector": {"phase": "tool.before", "tool": {"name": tool}},
           "condition": condition,
           "effect": {"type": "block", "reason": format!("{id} triggered")}})
}

/// Blocks refunds above 40: the only rule of the "new" policy.
fn refunds_over_40(dir: &Path) -> PathBuf {
    write_policy(
        dir,
        "refunds.json",
        json!([rule(
            "refund-over-40",
            "issue_refund",
            json!({"kind": "toolArg", "type": "number", "op": "gt", "path": "amount", "value": 40})
        )]),
    )
}

async fn library_what_if(audit: &Path, policy: &Path, filter: &WhatIfFilter) -> WhatIfReport {
    let (events, bad) = read_audit_paths(&[audit]).unwrap();
    assert_eq!(bad, 0);
    let builder = GovernanceEngine::builder().policy_path(policy);
    let held = what_if(builder, None, events, filter).await.unwrap();
    // Read run by run from the files (as the CLI does), the replay is the same.
    let streamed = trail_what_if(audit, policy, filter).await;
    assert_same(&held, &streamed);
    held
}

async fn trail_what_if(audit: &Path, policy: &Path, filter: &WhatIfFilter) -> WhatIfReport {
    let trail = index_audit_trail(&[audit], filter).unwrap();
    let builder = GovernanceEngine::builder().policy_path(policy);
    what_if_trail(builder, None, trail, filter).await.unwrap()
}

fn assert_same(a: &WhatIfReport, b: &WhatIfReport) {
    assert_eq!(a.calls, b.calls);
    assert_eq!(a.runs, b.runs);
    assert_eq!(a.skipped, b.skipped);
}

fn call<'a>(r: &'a WhatIfReport, id: &str) -> &'a WhatIfCall {
    r.calls
        .iter()
        .find(|c| c.call_id == id)
        .unwrap_or_else(|| panic!("no call {id}: {:#?}", r.calls))
}

#[tokio::test]
async fn the_recorded_policy_reproduces_every_recorded_decision() {
    let dir = tempfile::tempdir().unwrap();
    let audit = recorded(dir.path());
    let policy = repo("policies/customer-support.json");
    let r = library_what_if(&audit, &policy, &WhatIfFilter::default()).await;
    assert_eq!((r.runs, r.calls.len()), (3, 10), "{:#?}", r.skipped);
    // Times (the local-daytime email rule), end-user tags, subjects, counters, the signal
    // and the hitl abort all come back: every decision is the recorded one, code and rule too.
    for c in &r.calls {
        assert!(!c.changed(), "{c:?}");
        assert_eq!(c.recorded_code, c.new_code, "{c:?}");
        assert_eq!(c.recorded_rule_id, c.new_rule_id, "{c:?}");
    }
    assert_eq!(
        call(&r, "c6").new_rule_id.as_deref(),
        Some("email-customer-local-daytime")
    );
    assert_eq!(call(&r, "c10").new_code, "BLOCKED_RUN_ABORTED");
    assert_eq!(r.summary(), "10 calls: none would change");
}

#[tokio::test]
async fn a_new_policy_shows_each_change_with_its_rules() {
    let dir = tempfile::tempdir().unwrap();
    let audit = recorded(dir.path());
    let policy = refunds_over_40(dir.path());
    let r = library_what_if(&audit, &policy, &WhatIfFilter::default()).await;
    let changed: Vec<(&str, &str, &str)> = r
        .changed()
        .map(|c| {
            (
                c.call_id.as_str(),
                c.recorded_effect.as_str(),
                c.new_effect.as_str(),
            )
        })
        .collect();
    assert_eq!(
        changed,
        [
            ("c3", "block", "allow"),
            ("c5", "allow", "block"),
            ("c6", "block", "allow"),
            ("c7", "allow", "block"),
            ("c9", "hitl", "block"),
            // c9 is now blocked, not held for review: the run is not aborted.
            ("c10", "block", "allow"),
        ]
    );
    let c5 = call(&r, "c5");
    assert_eq!(c5.recorded_rule_id, None);
    assert_eq!(c5.new_rule_id.as_deref(), Some("refund-over-40"));
    assert_eq!(c5.new_code, "BLOCKED_RULE");
    assert_eq!(
        call(&r, "c9").recorded_rule_id.as_deref(),
        Some("refund-needs-approval")
    );
    assert_eq!(
        r.summary(),
        "10 calls: 6 would change: 3 block→allow, 2 allow→block, 1 hitl→block"
    );
}

#[tokio::test]
async fn signals_take_the_recorded_values_and_unrecorded_ones_are_missing() {
    let dir = tempfile::tempdir().unwrap();
    let audit = recorded(dir.path());
    // The trail recorded crm.isDifficultCustomer = false for the emails c6 and c8 (c10 was
    // never evaluated: its run was aborted). crm.vip was never called.
    let policy = write_policy(
        dir.path(),
        "signals.json",
        json!([
            rule(
                "not-difficult",
                "send_customer_email",
                json!({"kind": "signal",
                "key": "crm.isDifficultCustomer", "args": {}, "op": "eq", "value": false})
            ),
            rule(
                "vip-only",
                "kb_search",
                json!({"kind": "signal",
                "key": "crm.vip", "args": {}, "op": "eq", "value": false, "onMissing": "block"})
            ),
        ]),
    );
    let r = library_what_if(&audit, &policy, &WhatIfFilter::default()).await;
    for id in ["c6", "c8"] {
        let c = call(&r, id);
        assert_eq!(
            (c.new_effect.as_str(), c.new_rule_id.as_deref()),
            ("block", Some("not-difficult")),
            "{c:?}"
        );
    }
    // No recorded value for c10: missing data, not the value another call saw.
    assert_eq!(call(&r, "c10").new_effect, "allow");
    let c1 = call(&r, "c1");
    assert_eq!(
        (c1.new_effect.as_str(), c1.new_rule_id.as_deref()),
        ("block", Some("vip-only"))
    );
}

#[test]
fn cli_prints_the_changed_calls_and_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let audit = recorded(dir.path());
    let policy = refunds_over_40(dir.path());
    let out = toolgate()
        .arg("replay")
        .arg("--policy")
        .arg(&policy)
        .arg("--from-audit")
        .arg(&audit)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("TIME"), "{stdout}");
    assert_eq!(lines.len(), 1 + 6 + 1, "{stdout}");
    let c5 = lines.iter().find(|l| l.contains(" c5 ")).unwrap();
    assert!(c5.contains("issue_refund"), "{c5}");
    assert!(c5.contains("allow → block"), "{c5}");
    assert!(c5.contains("refund-over-40"), "{c5}");
    assert!(
        !stdout.contains(" c1 "),
        "unchanged calls are not listed: {stdout}"
    );
    assert_eq!(
        lines[7],
        "10 calls: 6 would change: 3 block→allow, 2 allow→block, 1 hitl→block"
    );

    // --all lists every call.
    let out = toolgate()
        .args(["replay", "--all", "--policy"])
        .arg(&policy)
        .arg("--from-audit")
        .arg(&audit)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        1 + 10 + 1
    );
}

#[test]
fn cli_jsonl_lines_have_the_documented_fields() {
    let dir = tempfile::tempdir().unwrap();
    let audit = recorded(dir.path());
    let policy = refunds_over_40(dir.path());
    let out = toolgate()
        .args(["replay", "--format", "jsonl", "--policy"])
        .arg(&policy)
        .arg("--from-audit")
        .arg(&audit)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let rows: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 6);
    assert_eq!(
        rows[1],
        json!({"runId": "r-101", "callId": "c5", "tool": "issue_refund",
               "recordedEffect": "allow", "newEffect": "block",
               "recordedRuleId": null, "newRuleId": "refund-over-40", "newCode": "BLOCKED_RULE"})
    );
    // The summary goes to stderr, so stdout stays JSON Lines.
    assert!(String::from_utf8_lossy(&out.stderr).contains("10 calls: 6 would change"));
}

#[test]
fn cli_filters_by_agent_and_start_time() {
    let dir = tempfile::tempdir().unwrap();
    let audit = recorded(dir.path());
    let policy = refunds_over_40(dir.path());
    let run = |extra: &[&str]| {
        let out = toolgate()
            .arg("replay")
            .arg("--policy")
            .arg(&policy)
            .arg("--from-audit")
            .arg(&audit)
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(
        run(&["--agent", "someone-else"]),
        "0 calls: none would change"
    );
    assert_eq!(
        run(&["--agent", "support-bot"]),
        "10 calls: 6 would change: 3 block→allow, 2 allow→block, 1 hitl→block"
    );
    // Only r-103 started at or after 10:00:30.
    assert_eq!(
        run(&["--since", "2026-01-05T10:00:30Z"]),
        "2 calls: 2 would change: 1 block→allow, 1 hitl→block"
    );
    let out = toolgate()
        .args(["replay", "--since", "yesterday", "--policy"])
        .arg(&policy)
        .arg("--from-audit")
        .arg(&audit)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_run_without_its_start_is_reported_and_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let audit = recorded(dir.path());
    let file = audit.join("2026-01-05.jsonl");
    let text = std::fs::read_to_string(&file).unwrap();
    let kept: String = text
        .lines()
        .filter(|l| !(l.contains("\"kind\":\"run.started\"") && l.contains("\"r-101\"")))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&file, kept).unwrap();
    let out = toolgate()
        .arg("replay")
        .arg("--policy")
        .arg(repo("policies/customer-support.json"))
        .arg("--from-audit")
        .arg(&audit)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("run r-101 (agent support-bot) not replayed"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.trim(), "6 calls: none would change");
}

#[cfg(feature = "postgres")]
mod pg {
    use super::*;
    use crate::pg_support::fresh_schema;
    use toolgate::audit::store::postgres::PgStore;
    use toolgate::audit::store::{EventStore, Incoming};

    /// The example trail recorded and stored at `url`; returns the store and the new policy.
    async fn stored(url: &str, dir: &Path) -> (PgStore, PathBuf) {
        let audit = recorded(dir);
        let policy = refunds_over_40(dir);
        let store = PgStore::connect(url).await.unwrap();
        let text = std::fs::read_to_string(audit.join("2026-01-05.jsonl")).unwrap();
        let batch: Vec<Incoming> = text
            .lines()
            .map(|l| Incoming::from_line(l).unwrap())
            .collect();
        let outcome = store.ingest(batch).await.unwrap();
        assert_eq!(outcome.accepted, 23, "{outcome:?}");
        (store, policy)
    }

    /// `toolgate replay --policy POLICY --from-audit URL`: exit code, stdout, stderr.
    async fn what_if_from(policy: PathBuf, url: String) -> (Option<i32>, String, String) {
        tokio::task::spawn_blocking(move || {
            let out = toolgate()
                .arg("replay")
                .arg("--policy")
                .arg(&policy)
                .arg("--from-audit")
                .arg(&url)
                .output()
                .unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).to_string(),
                String::from_utf8_lossy(&out.stderr).to_string(),
            )
        })
        .await
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_if_reads_a_postgres_store_like_a_folder() {
        let Some(url) = fresh_schema("whatif_store").await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let (_store, policy) = stored(&url, dir.path()).await;
        let (code, stdout, _) = what_if_from(policy, url).await;
        assert_eq!(code, Some(0), "{stdout}");
        assert_eq!(
            stdout.lines().last(),
            Some("10 calls: 6 would change: 3 block→allow, 2 allow→block, 1 hitl→block"),
            "{stdout}"
        );
        assert!(stdout.contains("allow → block"), "{stdout}");
    }

    /// The store lists its runs page by page without events (issue 22 point 14), and a run
    /// whose stored line was changed is verified while indexing and not replayed (point 15).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_postgres_store_lists_runs_in_pages_and_a_tampered_run_is_not_replayed() {
        use toolgate::audit::store::RunHeadQuery;
        let Some(url) = fresh_schema("whatif_heads").await else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let (store, policy) = stored(&url, dir.path()).await;

        let all = store
            .run_heads(&RunHeadQuery {
                limit: 1_000,
                ..RunHeadQuery::default()
            })
            .await
            .unwrap();
        assert!(all.next.is_none());
        assert!(all.runs.len() >= 2, "{all:?}");
        assert!(
            all.runs.iter().all(|h| h
                .first
                .is_some_and(|(k, _)| k == toolgate::audit::EventKind::RunStarted)),
            "{all:?}"
        );
        let mut paged = Vec::new();
        let mut q = RunHeadQuery {
            limit: 1,
            ..RunHeadQuery::default()
        };
        loop {
            let page = store.run_heads(&q).await.unwrap();
            assert!(page.runs.len() <= 1);
            paged.extend(page.runs);
            match page.next {
                Some(n) => q.after = Some(n),
                None => break,
            }
        }
        assert_eq!(paged, all.runs);
        // After the last run started, no run has its start selected.
        let late = store
            .run_heads(&RunHeadQuery {
                since: all.runs.iter().filter_map(|h| h.first.map(|f| f.1)).max(),
                limit: 1_000,
                ..RunHeadQuery::default()
            })
            .await
            .unwrap();
        assert!(
            late.runs.iter().filter(|h| h.first.is_some()).count() <= 1,
            "{late:?}"
        );

        let victim = all.runs[0].run_id.clone();
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let changed = client
            .execute(
                "UPDATE toolgate_events SET line = replace(line, '\"kind\":', '\"kind\" :') \
                 WHERE run_id = $1 AND seq = 1",
                &[&victim],
            )
            .await
            .unwrap();
        assert_eq!(changed, 1);
        let (code, _, stderr) = what_if_from(policy, url).await;
        assert_eq!(code, Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!("run {victim} ")) && stderr.contains("not replayed"),
            "{stderr}"
        );
    }
}

/// Runs spread over files, lines out of seq order and repeated: read run by run from the
/// files, the replay is the same as from the events held (issue 22 point 14).
#[tokio::test]
async fn a_trail_read_run_by_run_replays_as_the_events_held() {
    let dir = tempfile::tempdir().unwrap();
    let audit = recorded(dir.path());
    let policy = refunds_over_40(dir.path());
    let text = std::fs::read_to_string(audit.join("2026-01-05.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mixed = dir.path().join("mixed");
    std::fs::create_dir_all(&mixed).unwrap();
    // a.jsonl: the first half, reversed; b.jsonl: the second half, with every third line twice.
    let (first, second) = lines.split_at(lines.len() / 2);
    let a: Vec<&str> = first.iter().rev().copied().collect();
    let mut b = Vec::new();
    for (i, l) in second.iter().enumerate() {
        b.push(*l);
        if i % 3 == 0 {
            b.push(*l);
        }
    }
    std::fs::write(mixed.join("a.jsonl"), a.join("\n") + "\n").unwrap();
    std::fs::write(mixed.join("b.jsonl"), b.join("\n") + "\n").unwrap();
    for filter in [
        WhatIfFilter::default(),
        WhatIfFilter {
            agent: Some("support-bot".to_string()),
            ..WhatIfFilter::default()
        },
    ] {
        let (events, _) = read_audit_paths(&[&mixed]).unwrap();
        let builder = GovernanceEngine::builder().policy_path(&policy);
        let held = what_if(builder, None, events, &filter).await.unwrap();
        let streamed = trail_what_if(&mixed, &policy, &filter).await;
        assert_same(&held, &streamed);
        assert_eq!(held.calls.len(), 10, "{:#?}", held.calls);
    }
}
