//! hitl (fingerprints, approve/deny/pending, abortRun, carry-over, expiry), shadow mode,
//! combining (most_severe_wins, priority_first, ties, deciding rule) and the guard.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use toolgate::engine::{
    Decision, DecisionCode, GovernanceEngine, Guarded, ReviewError, ReviewStatus, Run, RunContext,
    ToolOutcome, fingerprint,
};
use toolgate::policy::EffectType;

const REFUND: &str = r#"[{"id": "big-refund", "name": "big refund", "priority": 1, "enabled": true,
    "selector": {"phase": "tool.before", "tool": {"name": "refund"}},
    "condition": {"kind": "toolArg", "type": "number", "op": "gt", "path": "amount", "value": 100},
    "effect": {"type": "hitl", "reason": "a lead must approve"}}]"#;

async fn refund(run: &Run, id: &str, amount: f64) -> Decision {
    run.before_tool(call(
        id,
        "refund",
        json!({"amount": amount, "order": {"id": 7, "lines": [1, 2]}}),
    ))
    .await
}

fn user_run(engine: &GovernanceEngine, run: &str, user: &str) -> Run {
    engine.start_run(ctx_user(run, "support", user, &[]))
}

#[tokio::test]
async fn hitl_request_pending_approve_and_carry_over() {
    let clock = clock();
    let engine = engine(REFUND, &clock);
    let r1 = user_run(&engine, "r1", "u1");
    let d = refund(&r1, "c1", 200.0).await;
    assert_eq!(
        (d.effect, d.code),
        (EffectType::Hitl, DecisionCode::BlockedHitlRequested)
    );
    assert!(d.abort_run && r1.is_aborted());
    assert_eq!(
        (d.rule_id.as_deref(), d.reason.as_deref()),
        (Some("big-refund"), Some("a lead must approve"))
    );
    let hitl = d.hitl.clone().expect("hitl info");
    assert_eq!(hitl.status, ReviewStatus::Pending);
    let args = json!({"order": {"lines": [1, 2], "id": 7}, "amount": 200.0});
    assert_eq!(
        hitl.fingerprint,
        fingerprint("support", "big-refund", "refund", &args, Some("u1"))
    );
    let pending = engine.reviews().pending();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0].id.as_str(), pending[0].call_id.as_str()),
        (hitl.review_id.as_str(), "c1")
    );

    // Later calls of the aborted run are blocked without evaluating rules.
    for (id, tool) in [("c2", "refund"), ("c3", "anything")] {
        let d = r1.before_tool(call(id, tool, json!({"amount": 1}))).await;
        assert_eq!(
            (d.effect, d.code),
            (EffectType::Block, DecisionCode::BlockedRunAborted)
        );
        assert!(d.evaluated.is_empty());
    }

    // The same call in another run while pending: pending, same review, that run aborts too.
    let r2 = user_run(&engine, "r2", "u1");
    let d = refund(&r2, "c1", 200.0).await;
    assert_eq!(
        (d.effect, d.code, d.abort_run),
        (EffectType::Hitl, DecisionCode::BlockedHitlPending, true)
    );
    assert_eq!(d.hitl.as_ref().unwrap().review_id, hitl.review_id);
    assert!(r2.is_aborted());
    assert_eq!(engine.reviews().pending().len(), 1);

    // Approved: identical calls in later runs are allowed.
    let approved = engine.reviews().approve(&hitl.review_id).unwrap();
    assert_eq!(approved.status, ReviewStatus::Approved);
    assert!(matches!(
        engine.reviews().approve(&hitl.review_id),
        Err(ReviewError::AlreadyDecided { .. })
    ));
    assert!(matches!(
        engine.reviews().deny("nope"),
        Err(ReviewError::NotFound(_))
    ));
    for (run_id, again) in [
        ("r3", DecisionCode::BlockedHitlRequested),
        ("r4", DecisionCode::BlockedHitlPending),
    ] {
        let r = user_run(&engine, run_id, "u1");
        let d = refund(&r, "c1", 200.0).await;
        assert_eq!(
            (d.effect, d.code, d.abort_run),
            (EffectType::Allow, DecisionCode::AllowedHitlApproved, false)
        );
        assert_eq!(d.hitl.as_ref().unwrap().status, ReviewStatus::Approved);
        assert!(!r.is_aborted());
        // ...but not a call with other args, nor the same call for another end user.
        // (r3 raises those reviews, r4 finds them pending)
        let d = refund(&r, "c2", 201.0).await;
        assert_eq!(d.code, again, "other args");
        let other_user = user_run(&engine, &format!("{run_id}-u2"), "u2");
        assert_eq!(
            refund(&other_user, "c1", 200.0).await.code,
            again,
            "other user"
        );
    }
    // Another agent, same args: its own fingerprint.
    let other_agent = engine.start_run(ctx_user("ra", "billing", "u1", &[]));
    assert_eq!(
        refund(&other_agent, "c1", 200.0).await.code,
        DecisionCode::BlockedHitlRequested
    );
}

#[tokio::test]
async fn hitl_deny_blocks_identical_calls_without_aborting() {
    let clock = clock();
    let engine = engine(REFUND, &clock);
    let r1 = user_run(&engine, "r1", "u1");
    let id = refund(&r1, "c1", 500.0).await.hitl.unwrap().review_id;
    engine.reviews().deny(&id).unwrap();
    let r2 = user_run(&engine, "r2", "u1");
    let d = refund(&r2, "c1", 500.0).await;
    assert_eq!(
        (d.effect, d.code, d.abort_run),
        (EffectType::Block, DecisionCode::BlockedHitlDenied, false)
    );
    assert!(!r2.is_aborted());
    // The agent may go on.
    assert!(refund(&r2, "c2", 5.0).await.is_allowed());
}

#[tokio::test]
async fn hitl_fingerprint_is_canonical_json() {
    let clock = clock();
    let engine = engine(REFUND, &clock);
    let a = user_run(&engine, "r1", "u1")
        .before_tool(call(
            "c",
            "refund",
            json!({"amount": 300, "z": {"b": 1, "a": [2]}, "m": null}),
        ))
        .await;
    let b = user_run(&engine, "r2", "u1")
        .before_tool(call(
            "c",
            "refund",
            json!({"m": null, "z": {"a": [2], "b": 1}, "amount": 300}),
        ))
        .await;
    assert_eq!(b.code, DecisionCode::BlockedHitlPending);
    assert_eq!(a.hitl.unwrap().fingerprint, b.hitl.unwrap().fingerprint);
}

#[tokio::test]
async fn hitl_reviews_expire() {
    let clock = clock();
    let engine = builder(REFUND, &clock)
        .review_ttl(Duration::from_secs(60))
        .build()
        .unwrap();
    let first = refund(&user_run(&engine, "r1", "u1"), "c1", 200.0)
        .await
        .hitl
        .unwrap();
    clock.advance(chrono::Duration::seconds(59));
    let d = refund(&user_run(&engine, "r2", "u1"), "c1", 200.0).await;
    assert_eq!(
        (d.code, d.hitl.unwrap().review_id),
        (DecisionCode::BlockedHitlPending, first.review_id.clone())
    );
    clock.advance(chrono::Duration::seconds(1));
    // 60 s after the request: expired, so a new review is requested.
    let d = refund(&user_run(&engine, "r3", "u1"), "c1", 200.0).await;
    assert_eq!(d.code, DecisionCode::BlockedHitlRequested);
    let second = d.hitl.unwrap();
    assert_ne!(second.review_id, first.review_id);
    assert_eq!(second.fingerprint, first.fingerprint);
    let statuses: Vec<(String, ReviewStatus)> = engine
        .reviews()
        .list()
        .into_iter()
        .map(|r| (r.id, r.status))
        .collect();
    assert!(
        statuses.contains(&(second.review_id.clone(), ReviewStatus::Pending)),
        "{statuses:?}"
    );
    assert!(
        !statuses.contains(&(first.review_id.clone(), ReviewStatus::Pending)),
        "{statuses:?}"
    );
    // Approving the expired one does not approve the call.
    assert!(engine.reviews().approve(&first.review_id).is_err());
    // Expiring by hand: the next identical call asks again.
    engine.reviews().expire(&second.review_id).unwrap();
    let d = refund(&user_run(&engine, "r4", "u1"), "c1", 200.0).await;
    assert_eq!(d.code, DecisionCode::BlockedHitlRequested);
    let third = d.hitl.unwrap().review_id;
    engine.reviews().approve(&third).unwrap();
    // An approval does not expire with the ttl.
    clock.advance(chrono::Duration::days(1));
    assert_eq!(
        refund(&user_run(&engine, "r5", "u1"), "c1", 200.0)
            .await
            .code,
        DecisionCode::AllowedHitlApproved
    );
}

// ---------------------------------------------------------------------------------------------
// Shadow mode

fn r(id: &str, prio: i64, tool: &str, effect: &str, extra: &str) -> String {
    format!(
        r#"{{"id": "{id}", "name": "{id}", "priority": {prio}, "enabled": true,
            "selector": {{"phase": "tool.before", "tool": {{"name": "{tool}"}}}},
            "condition": {{"kind": "toolArg", "type": "boolean", "op": "eq", "path": "{id}", "value": true, "onMissing": "allow"}},
            "effect": {{"type": "{effect}", "reason": "{id} says {effect}"}}{extra}}}"#
    )
}

fn pol(meta: &str, rules: &[String]) -> String {
    format!(
        r#"{{"policy": {{"name": "p"{meta}}}, "rules": [{}]}}"#,
        rules.join(",")
    )
}

/// Decides `tool` in a fresh run with the rules named in `on` triggered.
async fn decide(engine: &GovernanceEngine, tool: &str, on: &[&str]) -> Decision {
    let args: serde_json::Map<String, Value> = on
        .iter()
        .map(|k| (k.to_string(), Value::Bool(true)))
        .collect();
    let run = engine.start_run(RunContext::new(format!("run-{tool}-{}", on.join("-")), "a"));
    run.before_tool(call("c", tool, Value::Object(args))).await
}

#[tokio::test]
async fn shadow_mode_policy_level_and_per_rule() {
    let clock = clock();
    // Whole policy in shadow; one rule enforced by its own mode, one off.
    let json = pol(
        r#", "mode": "shadow""#,
        &[
            r("s-block", 10, "t", "block", ""),
            r("s-hitl", 5, "t", "hitl", ""),
            r("e-block", 1, "t", "block", r#", "mode": "enforce""#),
            r("off", 100, "t", "block", r#", "mode": "off""#),
        ],
    );
    let engine = engine(&json, &clock);
    let d = decide(&engine, "t", &["s-block"]).await;
    assert_eq!(
        (d.effect, d.code, d.shadow, d.shadow_effect),
        (
            EffectType::Allow,
            DecisionCode::Allowed,
            true,
            Some(EffectType::Block)
        )
    );
    assert!(!d.abort_run);
    // A shadow hitl raises no review and does not abort.
    let d = decide(&engine, "t", &["s-hitl"]).await;
    assert_eq!(
        (d.effect, d.code, d.shadow_effect),
        (
            EffectType::Allow,
            DecisionCode::Allowed,
            Some(EffectType::Hitl)
        )
    );
    assert!(!d.abort_run && d.hitl.is_none());
    assert!(engine.reviews().list().is_empty());
    // Nothing triggered: no shadow effect.
    let d = decide(&engine, "t", &[]).await;
    assert_eq!(
        (d.effect, d.shadow, d.shadow_effect),
        (EffectType::Allow, false, None)
    );
    // The rule in enforce mode applies.
    let d = decide(&engine, "t", &["e-block"]).await;
    assert_eq!(
        (d.effect, d.code, d.rule_id.as_deref()),
        (
            EffectType::Block,
            DecisionCode::BlockedRule,
            Some("e-block")
        )
    );
    assert_eq!(d.shadow_effect, None);
    // `off` rules are skipped.
    let d = decide(&engine, "t", &["off"]).await;
    assert!(d.is_allowed() && d.evaluated.iter().all(|e| &*e.rule_id != "off"));
    // Shadow rules are evaluated and reported.
    let d = decide(&engine, "t", &["s-block", "s-hitl"]).await;
    assert!(d.evaluated.iter().filter(|e| e.shadow).all(|e| e.triggered));
    assert_eq!(d.shadow_effect, Some(EffectType::Block));

    // A shadow rule in an enforced policy.
    let json = pol(
        "",
        &[
            r("enf", 10, "t", "hitl", ""),
            r("trial", 1, "t", "block", r#", "mode": "shadow""#),
        ],
    );
    let engine = common::engine(&json, &clock);
    let d = decide(&engine, "t", &["trial"]).await;
    assert_eq!(
        (d.effect, d.code, d.shadow_effect),
        (
            EffectType::Allow,
            DecisionCode::Allowed,
            Some(EffectType::Block)
        )
    );
    assert_eq!(d.rule_id, None);
    // With an enforced rule triggered too, the enforced one applies; the shadow rule would
    // have made it a block (most_severe_wins).
    let d = decide(&engine, "t", &["enf", "trial"]).await;
    assert_eq!(
        (d.effect, d.rule_id.as_deref(), d.shadow_effect),
        (EffectType::Hitl, Some("enf"), Some(EffectType::Block))
    );
}

#[tokio::test]
async fn shadow_rule_behind_a_deciding_enforced_rule_under_priority_first() {
    // The trial rule is the lowest priority: under priority_first it does not decide when an
    // enforced rule triggered. shadowEffect is the effect of the real decision (shadow rules
    // applied), here the enforced rule's own hitl.
    let clock = clock();
    let json = pol(
        r#", "combine": "priority_first""#,
        &[
            r("enf", 10, "t", "hitl", ""),
            r("trial", 1, "t", "block", r#", "mode": "shadow""#),
        ],
    );
    let engine = engine(&json, &clock);
    let d = decide(&engine, "t", &["trial"]).await;
    assert_eq!(
        (d.effect, d.shadow_effect),
        (EffectType::Allow, Some(EffectType::Block))
    );
    let d = decide(&engine, "t", &["enf", "trial"]).await;
    assert_eq!(
        (d.effect, d.rule_id.as_deref()),
        (EffectType::Hitl, Some("enf"))
    );
    assert_eq!(
        (d.shadow, d.shadow_effect),
        (true, Some(EffectType::Hitl)),
        "{d:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Combining

#[tokio::test]
async fn most_severe_wins_and_deciding_rule() {
    let clock = clock();
    let json = pol(
        "",
        &[
            r("allow-hi", 100, "t", "allow", ""),
            r("hitl-mid", 50, "t", "hitl", ""),
            r("block-a", 10, "t", "block", ""),
            r("block-b", 10, "t", "block", ""),
            r("block-top", 60, "u", "block", ""),
            r("block-low", 1, "u", "block", ""),
        ],
    );
    let engine = engine(&json, &clock);
    let d = decide(
        &engine,
        "t",
        &["allow-hi", "hitl-mid", "block-a", "block-b"],
    )
    .await;
    assert_eq!(
        (d.effect, d.code, d.rule_id.as_deref()),
        (
            EffectType::Block,
            DecisionCode::BlockedRule,
            Some("block-a")
        )
    );
    assert_eq!(d.reason.as_deref(), Some("block-a says block"));
    // Every rule in play is evaluated, in priority order, ties in file order.
    let order: Vec<&str> = d.evaluated.iter().map(|e| &*e.rule_id).collect();
    assert_eq!(order, ["allow-hi", "hitl-mid", "block-a", "block-b"]);
    assert!(d.evaluated.iter().all(|e| e.triggered));
    // Ties: file order decides.
    let d = decide(&engine, "t", &["block-b", "block-a"]).await;
    assert_eq!(d.rule_id.as_deref(), Some("block-a"));
    let d = decide(&engine, "t", &["block-b"]).await;
    assert_eq!(d.rule_id.as_deref(), Some("block-b"));
    // allow cannot override.
    let d = decide(&engine, "t", &["allow-hi", "hitl-mid"]).await;
    assert_eq!(
        (d.effect, d.rule_id.as_deref()),
        (EffectType::Hitl, Some("hitl-mid"))
    );
    // A triggered allow rule alone: allowed, decided by it.
    let d = decide(&engine, "t", &["allow-hi"]).await;
    assert_eq!(
        (d.effect, d.code, d.rule_id.as_deref()),
        (EffectType::Allow, DecisionCode::Allowed, Some("allow-hi"))
    );
    // The first triggered rule with the final effect, in priority order.
    let d = decide(&engine, "u", &["block-low", "block-top"]).await;
    assert_eq!(d.rule_id.as_deref(), Some("block-top"));
    // Nothing triggered.
    let d = decide(&engine, "t", &[]).await;
    assert_eq!(
        (d.effect, d.code, d.rule_id, d.reason),
        (EffectType::Allow, DecisionCode::Allowed, None, None)
    );
}

#[tokio::test]
async fn priority_first_exceptions_and_ties() {
    let clock = clock();
    let json = pol(
        r#", "combine": "priority_first""#,
        &[
            r("exception", 1000, "t", "allow", ""),
            r("hitl-800", 800, "t", "hitl", ""),
            r("block-700", 700, "t", "block", ""),
            r("tie-hitl", 5, "t", "hitl", ""),
            r("tie-block", 5, "t", "block", ""),
        ],
    );
    let engine = engine(&json, &clock);
    let d = decide(&engine, "t", &["exception", "hitl-800", "block-700"]).await;
    assert_eq!(
        (d.effect, d.code, d.rule_id.as_deref()),
        (EffectType::Allow, DecisionCode::Allowed, Some("exception"))
    );
    assert_eq!(d.reason.as_deref(), Some("exception says allow"));
    let d = decide(&engine, "t", &["hitl-800", "block-700"]).await;
    assert_eq!(
        (d.effect, d.rule_id.as_deref()),
        (EffectType::Hitl, Some("hitl-800"))
    );
    let d = decide(&engine, "t", &["tie-block", "tie-hitl"]).await;
    assert_eq!(
        (d.effect, d.rule_id.as_deref()),
        (EffectType::Hitl, Some("tie-hitl"))
    );
}

#[tokio::test]
async fn across_policies_the_most_severe_wins() {
    let clock = clock();
    let a = pol(
        r#", "combine": "priority_first""#,
        &[
            r("a-allow", 100, "t", "allow", ""),
            r("a-block", 1, "t", "block", ""),
        ],
    );
    let b = r#"{"policy": {"name": "b"}, "rules": [{"id": "b-hitl", "name": "b", "priority": 1, "enabled": true,
        "selector": {"phase": "tool.before", "tool": {"name": "t"}},
        "condition": {"kind": "toolArg", "type": "boolean", "op": "eq", "path": "b-hitl", "value": true, "onMissing": "allow"},
        "effect": {"type": "hitl"}}]}"#;
    let engine = GovernanceEngine::builder()
        .policy(policy(&a))
        .policy(policy(b))
        .clock(Arc::new(clock.clone()))
        .build()
        .unwrap();
    let d = decide(&engine, "t", &["a-allow", "a-block", "b-hitl"]).await;
    assert_eq!(
        (d.effect, d.rule_id.as_deref()),
        (EffectType::Hitl, Some("b-hitl"))
    );
    let d = decide(&engine, "t", &["a-block", "b-hitl"]).await;
    assert_eq!(
        (d.effect, d.rule_id.as_deref()),
        (EffectType::Block, Some("a-block"))
    );
}

// ---------------------------------------------------------------------------------------------
// The guard

#[tokio::test]
async fn guard_runs_the_tool_only_when_allowed() {
    let clock = clock();
    let json = format!(
        "[{}, {}, {}]",
        &REFUND[1..REFUND.len() - 1],
        r#"{"id": "no-rm", "name": "no rm", "priority": 1, "enabled": true,
            "selector": {"phase": "tool.before", "tool": {"name": "shell"}},
            "condition": {"kind": "toolArg", "type": "string", "op": "contains", "path": "cmd", "value": "rm -rf"},
            "effect": {"type": "block", "reason": "no rm -rf"}}"#,
        r#"{"id": "no-secrets-out", "name": "no secrets out", "priority": 1, "enabled": true,
            "selector": {"phase": "tool.after", "tool": {"name": "read_file"}},
            "condition": {"kind": "toolArg", "type": "string", "op": "endsWith", "path": "path", "value": ".env"},
            "effect": {"type": "block", "reason": "secrets stay in"}}"#
    );
    let engine = engine(&json, &clock);
    let ran = Arc::new(AtomicUsize::new(0));
    let tool = |out: Result<Value, String>| {
        let ran = ran.clone();
        move |_args: Value| async move {
            ran.fetch_add(1, Ordering::SeqCst);
            out
        }
    };
    let run = engine.start_run(ctx_user("r", "a", "u", &[]));

    // Allowed: runs, output handed back.
    let g = run
        .guard(
            call("c1", "shell", json!({"cmd": "ls"})),
            tool(Ok(json!("a b"))),
        )
        .await;
    let Guarded::Ran { outcome, decision } = g else {
        panic!("{g:?}")
    };
    assert_eq!(
        (outcome.output, decision.effect),
        (Some(json!("a b")), EffectType::Allow)
    );
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    // A tool error is an outcome, not a refusal.
    let g = run
        .guard(
            call("c1b", "shell", json!({"cmd": "false"})),
            tool(Err("exit 1".into())),
        )
        .await;
    assert!(
        matches!(&g, Guarded::Ran { outcome: ToolOutcome { error: Some(e), .. }, .. } if e == "exit 1"),
        "{g:?}"
    );

    // Blocked: not run, the agent may go on.
    let g = run
        .guard(
            call("c2", "shell", json!({"cmd": "rm -rf /"})),
            tool(Ok(json!(null))),
        )
        .await;
    let Guarded::Refused(refusal) = g else {
        panic!("{g:?}")
    };
    assert!(!refusal.stop_run);
    assert_eq!(refusal.decision.code, DecisionCode::BlockedRule);
    assert!(refusal.message.contains("no rm -rf"), "{}", refusal.message);
    assert_eq!(refusal.to_tool_result()["code"], json!("BLOCKED_RULE"));
    assert_eq!(ran.load(Ordering::SeqCst), 2);

    // After-phase block: the tool ran, its output is refused.
    let g = run
        .guard(
            call("c3", "read_file", json!({"path": "app/.env"})),
            tool(Ok(json!("SECRET=1"))),
        )
        .await;
    let Guarded::Refused(refusal) = g else {
        panic!("{g:?}")
    };
    assert_eq!(ran.load(Ordering::SeqCst), 3);
    assert_eq!(
        (refusal.decision.effect, refusal.stop_run),
        (EffectType::Block, false)
    );
    assert_eq!(refusal.decision.rule_id.as_deref(), Some("no-secrets-out"));
    assert!(!refusal.to_tool_result().to_string().contains("SECRET"));

    // hitl: not run, stop the run; later calls too.
    let g = run
        .guard(
            call("c4", "refund", json!({"amount": 500})),
            tool(Ok(json!("refunded"))),
        )
        .await;
    let Guarded::Refused(refusal) = g else {
        panic!("{g:?}")
    };
    assert!(refusal.stop_run);
    assert_eq!(refusal.decision.code, DecisionCode::BlockedHitlRequested);
    let g = run
        .guard(
            call("c5", "shell", json!({"cmd": "ls"})),
            tool(Ok(json!("a b"))),
        )
        .await;
    let Guarded::Refused(refusal) = g else {
        panic!("{g:?}")
    };
    assert!(refusal.stop_run);
    assert_eq!(refusal.decision.code, DecisionCode::BlockedRunAborted);
    assert_eq!(ran.load(Ordering::SeqCst), 3);
}

#[test]
fn fingerprints_use_the_canonical_form_of_the_args() {
    use toolgate::engine::fingerprint;
    let a = fingerprint(
        "agent",
        "rule",
        "refund",
        &serde_json::json!({"amount": 1.0, "id": "x"}),
        Some("u"),
    );
    let b = fingerprint(
        "agent",
        "rule",
        "refund",
        &serde_json::json!({"id": "x", "amount": 1}),
        Some("u"),
    );
    assert_eq!(a, b);
    let c = fingerprint(
        "agent",
        "rule",
        "refund",
        &serde_json::json!({"id": "x", "amount": 2}),
        Some("u"),
    );
    assert_ne!(a, c);
}
