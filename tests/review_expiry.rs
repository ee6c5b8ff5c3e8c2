//! Issue 27: review expiry (`reviewTtlSeconds`, `onExpire`) in the policy language and on
//! every review store (memory, file, Redis), decided like a human decision; reviewer and
//! comment on decided reviews; the `review.decided` audit event; and a review decided twice at
//! once (one decision, one clear conflict) on the file store and on Redis.

mod common;
mod redis_support;

use std::sync::{Arc, Barrier};
#[cfg(feature = "redis")]
use std::time::Duration;

use common::*;
use serde_json::json;
use toolgate::audit::{EventKind, MemorySink};
use toolgate::engine::{
    DecisionCode, EXPIRY_REVIEWER, FileReviewStore, GovernanceEngine, ManualClock,
    MemoryReviewStore, Review, ReviewError, ReviewStatus, ReviewStore, ReviewVerdict,
};
use toolgate::policy::{OnExpire, parse_policy};

/// A hitl rule on `refund` with the policy metadata `meta` and the rule fields `extra`.
fn refund_policy(meta: &str, extra: &str) -> String {
    format!(
        r#"{{"policy": {{"name": "p"{meta}}}, "rules": [{{"id": "big-refund", "name": "big refund",
            "selector": {{"phase": "tool.before", "tool": {{"name": "refund"}}}},
            "condition": {{"kind": "toolArg", "type": "number", "op": "gt", "path": "amount", "value": 100}},
            "effect": {{"type": "hitl", "reason": "a lead must approve"}}{extra}}}]}}"#
    )
}

#[test]
fn policy_language_parses_and_round_trips_expiry() {
    let p = parse_policy(
        &refund_policy(
            r#", "reviewTtlSeconds": 3600, "onExpire": "allow""#,
            r#", "reviewTtlSeconds": 60, "onExpire": "deny""#,
        ),
        None,
    )
    .expect("parses");
    assert_eq!(
        (p.meta.review_ttl_seconds, p.meta.on_expire),
        (Some(3600), Some(OnExpire::Allow))
    );
    assert_eq!(
        (p.rules[0].review_ttl_seconds, p.rules[0].on_expire),
        (Some(60), Some(OnExpire::Deny))
    );
    let again = parse_policy(&p.to_json().to_string(), None).expect("round trip");
    assert_eq!(again, p);
    // Defaults: none.
    let p = parse_policy(&refund_policy("", ""), None).unwrap();
    assert_eq!((p.meta.review_ttl_seconds, p.meta.on_expire), (None, None));
}

#[test]
fn policy_language_rejects_bad_expiry_with_json_paths() {
    let cases = [
        (
            refund_policy(r#", "reviewTtlSeconds": 0"#, ""),
            "policy.reviewTtlSeconds: must be at least 1, found 0",
        ),
        (
            refund_policy(r#", "reviewTtlSeconds": "1h""#, ""),
            "policy.reviewTtlSeconds: expected a whole number, found a string",
        ),
        (
            refund_policy("", r#", "reviewTtlSeconds": -5"#),
            "rules[0].reviewTtlSeconds: must not be negative, found -5",
        ),
        (
            refund_policy("", r#", "onExpire": "block""#),
            "rules[0].onExpire: \"block\" is not one of",
        ),
        (
            refund_policy(r#", "onExpire": "approve""#, ""),
            "policy.onExpire: \"approve\" is not one of",
        ),
    ];
    for (text, want) in cases {
        let err = parse_policy(&text, None).expect_err(want).to_string();
        assert!(err.contains(want), "{want:?} not in {err:?}");
    }
}

#[test]
fn toolgate_check_reports_expiry_errors_with_file_and_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.json");
    std::fs::write(
        &file,
        refund_policy("", r#", "reviewTtlSeconds": 0, "onExpire": "later""#),
    )
    .unwrap();
    let out = assert_cmd::Command::cargo_bin("toolgate")
        .unwrap()
        .arg("check")
        .arg(&file)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("rules[0].reviewTtlSeconds: must be at least 1, found 0"),
        "{text}"
    );
    assert!(text.contains("rules[0].onExpire: \"later\""), "{text}");
}

async fn refund(engine: &GovernanceEngine, run: &str) -> toolgate::engine::Decision {
    engine
        .start_run(ctx_user(run, "support", "u1", &[]))
        .before_tool(call("c1", "refund", json!({"amount": 500})))
        .await
}

/// On `store`: a review raised under `policy` is decided by its `onExpire` once its ttl has
/// passed (by `toolgate:expiry`, with a `review.decided` event); returns the decision after
/// expiry and the review.
async fn expire_on(
    store: Arc<dyn ReviewStore>,
    policy: &str,
) -> (DecisionCode, Review, Vec<serde_json::Value>) {
    let clock = clock();
    let sink = Arc::new(MemorySink::new());
    let engine = builder(policy, &clock)
        .review_store(store.clone())
        .audit_sink(sink.clone())
        .build()
        .unwrap();
    let d = refund(&engine, "r1").await;
    assert_eq!(d.code, DecisionCode::BlockedHitlRequested);
    let id = d.hitl.unwrap().review_id;
    clock.advance(chrono::Duration::seconds(59));
    assert_eq!(
        refund(&engine, "r2").await.code,
        DecisionCode::BlockedHitlPending
    );
    clock.advance(chrono::Duration::seconds(1));
    let after = refund(&engine, "r3").await;
    assert_eq!(after.hitl.as_ref().unwrap().review_id, id, "no new review");
    let review = store
        .list()
        .into_iter()
        .find(|r| r.id == id)
        .expect("stored");
    // A human decision after the expiry conflicts with it.
    let late = store.decide_with(
        &id,
        &ReviewVerdict::new(ReviewStatus::Approved, clock.now_utc()).by("alice"),
    );
    assert!(
        matches!(late, Err(ReviewError::AlreadyDecided { ref by, .. }) if by.as_deref() == Some(EXPIRY_REVIEWER)),
        "{late:?}"
    );
    engine.flush().await.unwrap();
    let events = sink
        .events()
        .iter()
        .filter(|e| e.kind() == EventKind::ReviewDecided)
        .map(|e| e.to_json())
        .collect();
    (after.code, review, events)
}

trait NowUtc {
    fn now_utc(&self) -> chrono::DateTime<chrono::Utc>;
}
impl NowUtc for ManualClock {
    fn now_utc(&self) -> chrono::DateTime<chrono::Utc> {
        toolgate::engine::Clock::now(self)
    }
}

fn check_expired(code: DecisionCode, review: &Review, events: &[serde_json::Value], deny: bool) {
    let (want_code, want_status) = if deny {
        (DecisionCode::BlockedHitlDenied, ReviewStatus::Denied)
    } else {
        (DecisionCode::AllowedHitlApproved, ReviewStatus::Approved)
    };
    assert_eq!(code, want_code);
    assert_eq!(review.status, want_status);
    assert_eq!(review.decided_by.as_deref(), Some(EXPIRY_REVIEWER));
    assert_eq!(review.decided_at, review.expires_at);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["reviewId"], json!(review.id));
    assert_eq!(events[0]["decidedBy"], json!(EXPIRY_REVIEWER));
    assert_eq!(
        events[0]["status"],
        json!(if deny { "denied" } else { "approved" })
    );
}

#[tokio::test]
async fn expiry_denies_by_default_on_the_memory_store() {
    let (code, review, events) = expire_on(
        Arc::new(MemoryReviewStore::new()),
        &refund_policy("", r#", "reviewTtlSeconds": 60"#),
    )
    .await;
    check_expired(code, &review, &events, true);
}

#[tokio::test]
async fn expiry_decides_on_the_file_store_policy_level_allow() {
    let dir = tempfile::tempdir().unwrap();
    let (code, review, events) = expire_on(
        Arc::new(FileReviewStore::new(dir.path().join("reviews.json"))),
        &refund_policy(r#", "reviewTtlSeconds": 60, "onExpire": "allow""#, ""),
    )
    .await;
    check_expired(code, &review, &events, false);
    // The rule's own settings win over the policy's.
    let dir = tempfile::tempdir().unwrap();
    let (code, review, events) = expire_on(
        Arc::new(FileReviewStore::new(dir.path().join("reviews.json"))),
        &refund_policy(
            r#", "reviewTtlSeconds": 3600, "onExpire": "allow""#,
            r#", "reviewTtlSeconds": 60, "onExpire": "deny""#,
        ),
    )
    .await;
    check_expired(code, &review, &events, true);
}

#[cfg(feature = "redis")]
fn redis_store(url: &str) -> toolgate::state::redis::RedisReviewStore {
    let mut cfg = toolgate::state::redis::RedisConfig::new(url);
    cfg.prefix = format!("tgtest:console:{}", uuid::Uuid::now_v7().simple());
    cfg.timeout = Duration::from_secs(2);
    toolgate::state::redis::RedisReviewStore::new(&cfg).expect("store")
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn expiry_decides_on_the_redis_store() {
    let Some(url) = redis_support::url() else {
        return;
    };
    let (code, review, events) = expire_on(
        Arc::new(redis_store(&url)),
        &refund_policy("", r#", "reviewTtlSeconds": 60, "onExpire": "allow""#),
    )
    .await;
    check_expired(code, &review, &events, false);
    let (code, review, events) = expire_on(
        Arc::new(redis_store(&url)),
        &refund_policy("", r#", "reviewTtlSeconds": 60"#),
    )
    .await;
    check_expired(code, &review, &events, true);
}

fn pending(i: usize) -> Review {
    Review {
        id: uuid::Uuid::now_v7().to_string(),
        fingerprint: format!("fp-{i}-{}", uuid::Uuid::now_v7().simple()),
        status: ReviewStatus::Pending,
        agent_id: "a".into(),
        rule_id: "r".into(),
        tool_name: "t".into(),
        args: json!({"i": i}),
        redacted: Vec::new(),
        enduser_id: None,
        run_id: "run".into(),
        call_id: "c".into(),
        reason: None,
        created_at: chrono::Utc::now(),
        decided_at: None,
        expires_at: None,
        on_expire: None,
        decided_by: None,
        comment: None,
    }
}

/// Two stores on the same place (as two processes would have) decide each of `n` reviews at
/// the same moment, from two threads released together: exactly one verdict per review is
/// applied, and the other gets a conflict naming the winner.
fn race(a: Arc<dyn ReviewStore>, b: Arc<dyn ReviewStore>, n: usize) {
    let ids: Vec<String> = (0..n).map(|i| a.insert_if_absent(pending(i)).id).collect();
    let barrier = Arc::new(Barrier::new(2));
    let run = |store: Arc<dyn ReviewStore>, who: &'static str, status: ReviewStatus| {
        let (ids, barrier) = (ids.clone(), barrier.clone());
        std::thread::spawn(move || {
            ids.iter()
                .map(|id| {
                    barrier.wait();
                    let v = ReviewVerdict::new(status, chrono::Utc::now())
                        .by(who)
                        .comment(Some(format!("{who} says so")));
                    store.decide_with(id, &v)
                })
                .collect::<Vec<_>>()
        })
    };
    let ta = run(a.clone(), "alice", ReviewStatus::Approved);
    let tb = run(b, "bob", ReviewStatus::Denied);
    let (ra, rb) = (ta.join().unwrap(), tb.join().unwrap());
    let stored = a.list();
    let mut wins = [0usize; 2];
    for (i, id) in ids.iter().enumerate() {
        let r = stored.iter().find(|r| &r.id == id).expect("stored");
        match (&ra[i], &rb[i]) {
            (Ok(won), Err(ReviewError::AlreadyDecided { by, status, .. })) => {
                wins[0] += 1;
                assert_eq!(
                    (won.decided_by.as_deref(), by.as_deref(), *status),
                    (Some("alice"), Some("alice"), ReviewStatus::Approved)
                );
                assert_eq!(
                    (r.status, r.comment.as_deref()),
                    (ReviewStatus::Approved, Some("alice says so"))
                );
            }
            (Err(ReviewError::AlreadyDecided { by, status, .. }), Ok(won)) => {
                wins[1] += 1;
                assert_eq!(
                    (won.decided_by.as_deref(), by.as_deref(), *status),
                    (Some("bob"), Some("bob"), ReviewStatus::Denied)
                );
                assert_eq!(r.status, ReviewStatus::Denied);
                let msg = ReviewError::AlreadyDecided {
                    id: id.clone(),
                    status: *status,
                    by: by.clone(),
                    at: None,
                    expired_now: None,
                }
                .to_string();
                assert!(
                    msg.contains("conflict") && msg.contains("denied by bob"),
                    "{msg}"
                );
            }
            other => panic!("review {id}: not one decision and one conflict: {other:?}"),
        }
    }
    assert_eq!(wins[0] + wins[1], n);
}

#[test]
fn a_review_decided_twice_at_once_gets_one_decision_on_the_file_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reviews.json");
    race(
        Arc::new(FileReviewStore::new(&path)),
        Arc::new(FileReviewStore::new(&path)),
        24,
    );
}

#[cfg(feature = "redis")]
#[test]
fn a_review_decided_twice_at_once_gets_one_decision_on_redis() {
    let Some(url) = redis_support::url() else {
        return;
    };
    let mut cfg = toolgate::state::redis::RedisConfig::new(&url);
    cfg.prefix = format!("tgtest:console-race:{}", uuid::Uuid::now_v7().simple());
    cfg.timeout = Duration::from_secs(2);
    let a = toolgate::state::redis::RedisReviewStore::new(&cfg).unwrap();
    let b = toolgate::state::redis::RedisReviewStore::new(&cfg).unwrap();
    race(Arc::new(a), Arc::new(b), 40);
}

/// The arguments a review holds (and the console shows) are redacted as the call's
/// `tool.decision` audit event redacts them; the fingerprint is still of the real arguments.
#[tokio::test]
async fn review_arguments_are_redacted_as_the_audit_trail_redacts_them() {
    let sink = Arc::new(MemorySink::new());
    let redaction: toolgate::audit::RedactionConfig =
        serde_json::from_value(json!({"rules": [{"path": "args.card", "action": "drop"}]}))
            .unwrap();
    let clock = clock();
    let engine = builder(&refund_policy("", ""), &clock)
        .audit_sink(sink.clone())
        .redaction(redaction)
        .build()
        .unwrap();
    let args = json!({"amount": 500, "card": "4111 1111 1111 1111"});
    let d = engine
        .start_run(ctx_user("r1", "support", "u1", &[]))
        .before_tool(call("c1", "refund", args.clone()))
        .await;
    let hitl = d.hitl.unwrap();
    assert_eq!(
        hitl.fingerprint,
        toolgate::engine::fingerprint("support", "big-refund", "refund", &args, Some("u1"))
    );
    let review = engine.reviews().list().remove(0);
    assert_eq!(review.args, json!({"amount": 500}));
    engine.flush().await.unwrap();
    let decision = sink
        .events()
        .iter()
        .find(|e| e.kind() == EventKind::ToolDecision)
        .map(|e| e.to_json())
        .unwrap();
    assert_eq!(decision["args"], review.args);
}

/// `toolgate review approve --by NAME --comment TEXT` records both; a second decision is a
/// conflict naming the first.
#[test]
fn review_cli_records_reviewer_and_comment_and_reports_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reviews.json");
    let id = FileReviewStore::new(&path).insert_if_absent(pending(1)).id;
    let run = |args: &[&str]| {
        assert_cmd::Command::cargo_bin("toolgate")
            .unwrap()
            .arg("review")
            .arg("--store")
            .arg(&path)
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["approve", &id, "--by", "carol", "--comment", "looks right"]);
    assert!(out.status.success(), "{out:?}");
    let r = FileReviewStore::new(&path).try_list().unwrap().remove(0);
    assert_eq!(
        (r.status, r.decided_by.as_deref(), r.comment.as_deref()),
        (ReviewStatus::Approved, Some("carol"), Some("looks right"))
    );
    let out = run(&["deny", &id, "--by", "dave"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("conflict") && err.contains("approved by carol"),
        "{err}"
    );
}
