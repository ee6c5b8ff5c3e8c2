//! The allow path of a stateless rule set (no counter, window, sequence or signal) allocates
//! nothing: neither the decision (its list of evaluated rules included) nor the run's record
//! of the call waiting for its result. Counted with a counting allocator, not timed.

#[path = "common/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::allocations_by;
use serde_json::json;
use std::time::Duration;
use toolgate::engine::{GovernanceEngine, Run, RunContext, ToolCall, ToolOutcome};
use toolgate::policy::{EffectType, parse_policy};

/// Rules of the shapes of Cedar's stateless benchmark: a rule allowing everything, name and
/// tag selectors, end-user tags, number and boolean arguments, and/or/not.
const STATELESS: &str = r#"{"policy": {"name": "stateless"}, "rules": [
 {"id": "allow_all", "name": "allow_all", "priority": 0, "enabled": true,
  "selector": {"phase": "tool.before", "tool": {}},
  "condition": {"kind": "toolName", "op": "glob", "value": "*"},
  "effect": {"type": "allow", "reason": "allow_all"}},
 {"id": "pii_write", "name": "pii_write", "priority": 10, "enabled": true,
  "selector": {"phase": "tool.before", "tool": {"tagsAll": ["pii", "write"]}},
  "condition": {"kind": "not", "not": {"kind": "enduserTag", "op": "hasValue", "tag": "role", "value": "superadmin"}},
  "effect": {"type": "block", "reason": "pii_write"}},
 {"id": "delete_star", "name": "delete_star", "priority": 10, "enabled": true,
  "selector": {"phase": "tool.before", "tool": {"name": "delete*"}},
  "condition": {"kind": "not", "not": {"kind": "enduserTag", "op": "hasValue", "tag": "role", "value": "admin"}},
  "effect": {"type": "block", "reason": "delete_star"}},
 {"id": "refund_cap", "name": "refund_cap", "priority": 10, "enabled": true,
  "selector": {"phase": "tool.before", "tool": {"name": "issueRefund"}},
  "condition": {"kind": "toolArg", "type": "number", "op": "gte", "path": "amount", "value": 200},
  "effect": {"type": "block", "reason": "refund_cap"}},
 {"id": "shell_dryrun", "name": "shell_dryrun", "priority": 10, "enabled": true,
  "selector": {"phase": "tool.before", "tool": {"name": "shellExec"}},
  "condition": {"kind": "and", "all": [
    {"kind": "toolArg", "type": "boolean", "op": "eq", "path": "dryRun", "value": false},
    {"kind": "not", "not": {"kind": "enduserTag", "op": "hasValueAny", "tag": "role", "values": ["admin", "superadmin"]}}]},
  "effect": {"type": "block", "reason": "shell_dryrun"}},
 {"id": "transfer", "name": "transfer", "priority": 10, "enabled": true,
  "selector": {"phase": "tool.before", "tool": {"name": "transferFunds"}},
  "condition": {"kind": "or", "any": [
    {"kind": "toolArg", "type": "number", "op": "gt", "path": "amount", "value": 10000},
    {"kind": "enduserTag", "op": "hasValue", "tag": "plan", "value": "free"}]},
  "effect": {"type": "hitl", "reason": "transfer"}},
 {"id": "restricted", "name": "restricted", "priority": 10, "enabled": true,
  "selector": {"phase": "tool.before", "tool": {"tagsAny": ["external", "email"]}},
  "condition": {"kind": "enduserTag", "op": "has", "tag": "restricted"},
  "effect": {"type": "block", "reason": "restricted"}}
]}"#;

fn engine() -> GovernanceEngine {
    GovernanceEngine::builder()
        .policy(parse_policy(STATELESS, None).expect("parses"))
        .build()
        .expect("compiles")
}

fn context(run_id: &str, role: &str) -> RunContext {
    RunContext::new(run_id, "agent").with_enduser(
        "u1",
        [
            ("role".to_string(), role.to_string()),
            ("plan".to_string(), "pro".to_string()),
        ],
    )
}

/// Allowed calls: one with no rule but `allow_all` in play, others with rules in play that do
/// not trigger, on every kind of condition above.
fn allowed_calls() -> Vec<ToolCall> {
    vec![
        ToolCall::new("c1", "readFile", json!({"path": "/tmp/x"})).with_tags(["read", "fs"]),
        ToolCall::new("c2", "issueRefund", json!({"amount": 150})).with_tags(["payments"]),
        ToolCall::new("c3", "shellExec", json!({"dryRun": true})).with_tags(["exec"]),
        ToolCall::new("c4", "transferFunds", json!({"amount": 5000})).with_tags(["payments"]),
        ToolCall::new("c5", "updateCustomer", json!({})).with_tags(["pii", "write"]),
        ToolCall::new("c6", "sendEmail", json!({"to": "a@b.c"})).with_tags(["email", "write"]),
    ]
}

/// Decides `call` in `run`, counting the allocations of `before_tool_blocking` alone (the
/// call is built before, the decision dropped after).
fn decide_counted(run: &Run, call: &ToolCall) -> (toolgate::engine::Decision, usize) {
    let c = call.clone();
    allocations_by(|| run.before_tool_blocking(c))
}

fn done(run: &Run, call: &ToolCall) {
    let outcome = ToolOutcome::ok(json!({"ok": true}), Duration::from_millis(1));
    assert!(run.awaits_result(&call.id));
    run.after_tool_blocking(&call.id, outcome);
    assert!(!run.awaits_result(&call.id));
}

#[test]
fn an_allowed_call_allocates_nothing_once_warm() {
    let engine = engine();
    let run = engine.start_run(context("r1", "superadmin"));
    let calls = allowed_calls();
    // Warm-up: the tools' profiles and the run's tables.
    for call in &calls {
        let (d, _) = decide_counted(&run, call);
        assert!(d.is_allowed(), "{}: {d:?}", call.name);
        done(&run, call);
    }
    for _ in 0..3 {
        for call in &calls {
            let (d, allocations) = decide_counted(&run, call);
            assert!(d.is_allowed(), "{}: {d:?}", call.name);
            assert!(!d.evaluated.is_empty());
            assert_eq!(allocations, 0, "{}: {allocations} allocations", call.name);
            drop(d);
            done(&run, call);
        }
    }
}

#[test]
fn an_allowed_call_in_a_fresh_run_allocates_nothing() {
    // Cedar's workload: each call its own run (started and ended outside the count).
    let engine = engine();
    let calls = allowed_calls();
    for round in 0..3 {
        for (i, call) in calls.iter().enumerate() {
            let run = engine.start_run(context(&format!("r{round}-{i}"), "superadmin"));
            let (d, allocations) = decide_counted(&run, call);
            assert!(d.is_allowed(), "{}: {d:?}", call.name);
            if round > 0 {
                assert_eq!(allocations, 0, "{}: {allocations} allocations", call.name);
            }
        }
    }
}

#[test]
fn blocked_and_reviewed_calls_still_report_every_rule() {
    // The allocation-free representation is the same decision: ids, effects, reasons.
    let engine = engine();
    let run = engine.start_run(context("r1", "user"));
    let d = run.before_tool_blocking(
        ToolCall::new("b1", "updateCustomer", json!({})).with_tags(["pii", "write"]),
    );
    assert_eq!(d.effect, EffectType::Block);
    assert_eq!(d.rule_id.as_deref(), Some("pii_write"));
    assert_eq!(d.reason.as_deref(), Some("pii_write"));
    let ids: Vec<(&str, bool)> = d
        .evaluated
        .iter()
        .map(|e| (&*e.rule_id, e.triggered))
        .collect();
    assert_eq!(ids, [("pii_write", true), ("allow_all", true)]);
    let d = run.before_tool_blocking(
        ToolCall::new("b2", "transferFunds", json!({"amount": 20000})).with_tags(["payments"]),
    );
    assert_eq!(d.effect, EffectType::Hitl);
    assert_eq!(d.rule_id.as_deref(), Some("transfer"));
}
