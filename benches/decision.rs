//! Latency of `Run::before_tool`, the call an agent framework makes before every tool call.
//!
//! - `customer_support/*`: `policies/customer-support.json` with two representative calls that
//!   need no signal: `kb_search` (no rule in play) and `issue_refund` of $50 for a gold
//!   customer (two toolArg / enduserTag rules in play, allowed).
//! - `rules/<n>`: generated policies of 10, 1,000 and 100,000 rules where the same 9 rules are
//!   in play for the benchmarked call (4 selecting its tool by name, 3 on every tool, 2 on its
//!   tags); the rest select other tools by distinct literal names. Condition kinds are mixed:
//!   toolArg, toolName, maxCalls (with a max that never trips) and enduserTag. Every decision
//!   is an allow, so the timing covers evaluating every rule in play.
//!
//! One run per benchmark: decisions never block, so the run's counters never trip. Each
//! iteration clones the call (as a framework builds a fresh one per tool call) and drops the
//! decision; `clone_call/*` measures the clone alone, to subtract.
//!
//! ```sh
//! cargo bench --bench decision
//! ```

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use tokio::runtime::Runtime;
use toolgate::audit::{AuditError, AuditEvent, AuditSink};
use toolgate::engine::{GovernanceEngine, Run, RunContext, ToolCall};
use toolgate::policy::parse_policy_value;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn bench_call(c: &mut Criterion, rt: &Runtime, id: &str, run: &Run, call: &ToolCall) {
    // Sanity: the benchmarked decision is the intended one.
    let d = rt.block_on(run.before_tool(call.clone()));
    assert!(d.is_allowed(), "{id}: {d:?}");
    // The call is cloned (and the decision dropped) inside the measurement, as an agent
    // framework builds a fresh call each time; `clone_call/*` measures the clone alone.
    c.bench_function(id, |b| {
        b.to_async(rt)
            .iter(|| run.before_tool(black_box(call).clone()))
    });
}

fn bench_clone(c: &mut Criterion, id: &str, call: &ToolCall) {
    c.bench_function(id, |b| b.iter(|| black_box(call).clone()));
}

fn customer_support(c: &mut Criterion) {
    let rt = runtime();
    let engine = GovernanceEngine::builder()
        .policy_path(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/policies/customer-support.json"
        ))
        .build()
        .expect("the example policy loads");
    let run = engine.start_run(RunContext::new("bench", "support-bot").with_enduser(
        "C-1001",
        [
            ("tier".to_string(), "gold".to_string()),
            ("tz".to_string(), "Europe/Paris".to_string()),
        ],
    ));
    let kb = ToolCall::new(
        "c1",
        "kb_search",
        json!({"query": "how do I reset my password", "limit": 5}),
    )
    .with_tags(["kb"]);
    bench_clone(c, "clone_call/kb_search", &kb);
    bench_call(c, &rt, "customer_support/kb_search", &run, &kb);
    let refund = ToolCall::new(
        "c2",
        "issue_refund",
        json!({"orderId": "A-10023", "amount": 50, "currency": "USD"}),
    )
    .with_tags(["billing"]);
    let d = rt.block_on(run.before_tool(refund.clone()));
    assert_eq!(
        d.evaluated.len(),
        2,
        "two rules in play for issue_refund: {d:?}"
    );
    bench_clone(c, "clone_call/issue_refund", &refund);
    bench_call(c, &rt, "customer_support/issue_refund", &run, &refund);
}

/// A sink that drops what it gets: measures building, redacting and sealing (hashing) the
/// `tool.decision` event on the decision path, not the sink's I/O (which never blocks it).
struct NullSink;

#[async_trait::async_trait]
impl AuditSink for NullSink {
    async fn write_batch(&self, _events: &[Arc<AuditEvent>]) -> Result<(), AuditError> {
        Ok(())
    }
    async fn flush(&self) -> Result<(), AuditError> {
        Ok(())
    }
}

fn audited(c: &mut Criterion) {
    let rt = runtime();
    let engine = rt
        .block_on(async {
            GovernanceEngine::builder()
                .policy_path(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/policies/customer-support.json"
                ))
                .audit_sink(Arc::new(NullSink))
                .build()
        })
        .expect("the example policy loads");
    let run = engine.start_run(
        RunContext::new("bench", "support-bot")
            .with_enduser("C-1001", [("tier".to_string(), "gold".to_string())]),
    );
    let refund = ToolCall::new(
        "c2",
        "issue_refund",
        json!({"orderId": "A-10023", "amount": 50, "currency": "USD"}),
    )
    .with_tags(["billing"]);
    bench_call(c, &rt, "audited/issue_refund", &run, &refund);
}

fn rule(id: String, tool: Value, condition: Value) -> Value {
    json!({
        "id": id,
        "name": "generated",
        "priority": 10,
        "enabled": true,
        "selector": {"phase": "tool.before", "tool": tool},
        "condition": condition,
        "effect": {"type": "block", "reason": "generated rule"}
    })
}

/// A condition of kind `k % 4` that is false for the benchmarked call.
fn condition(k: usize, tool: &str) -> Value {
    match k % 4 {
        0 => {
            json!({"kind": "toolArg", "type": "number", "op": "gt", "path": "amount", "value": 1_000_000})
        }
        1 => json!({"kind": "toolName", "op": "glob", "value": "delete*"}),
        2 => json!({
            "kind": "maxCalls",
            "selector": {"by": "toolName", "patterns": [tool]},
            "max": 1_000_000_000_000u64
        }),
        _ => json!({"kind": "enduserTag", "op": "hasValue", "tag": "role", "value": "intern"}),
    }
}

/// `n` rules (n >= 10): 9 in play for `bench_tool` tagged `finance` + `pii`, one more tag rule
/// that does not match it, and `n - 10` rules selecting other tools by literal name.
fn generated_policy(n: usize) -> Value {
    let mut rules = Vec::with_capacity(n);
    // 4 rules selecting the benchmarked tool by name, one of each kind.
    for k in 0..4 {
        rules.push(rule(
            format!("bench-tool-{k}"),
            json!({"name": "bench_tool"}),
            condition(k, "bench_tool"),
        ));
    }
    // 3 rules on every tool.
    rules.push(rule(
        "all-tools-target".into(),
        json!({}),
        json!({"kind": "toolArg", "type": "string", "op": "startsWith", "path": "target", "value": "/prod"}),
    ));
    rules.push(rule(
        "all-tools-suspended".into(),
        json!({}),
        json!({"kind": "enduserTag", "op": "has", "tag": "suspended"}),
    ));
    rules.push(rule(
        "all-tools-denylist".into(),
        json!({}),
        json!({"kind": "toolName", "op": "in", "value": ["rm", "drop_db"]}),
    ));
    // 3 tag rules, 2 of them matching the call's tags.
    rules.push(rule(
        "tag-finance".into(),
        json!({"tagsAny": ["finance"]}),
        condition(0, "bench_tool"),
    ));
    rules.push(rule(
        "tag-pii".into(),
        json!({"tagsAny": ["pii"]}),
        json!({"kind": "maxCalls", "selector": {"by": "toolTag", "tags": ["pii"]}, "max": 1_000_000_000_000u64}),
    ));
    rules.push(rule(
        "tag-admin".into(),
        json!({"tagsAll": ["admin"]}),
        condition(1, "bench_tool"),
    ));
    for i in 0..n.saturating_sub(rules.len()) {
        let tool = format!("tool_{i:06}");
        rules.push(rule(
            format!("filler-{i}"),
            json!({"name": tool}),
            condition(i, &tool),
        ));
    }
    json!({"policy": {"name": format!("generated-{n}")}, "rules": rules})
}

fn rule_count(c: &mut Criterion) {
    let rt = runtime();
    let call = ToolCall::new(
        "c1",
        "bench_tool",
        json!({"amount": 250, "target": "/staging/db", "note": "quarterly"}),
    )
    .with_tags(["finance", "pii"]);
    bench_clone(c, "clone_call/bench_tool", &call);
    for n in [10usize, 1_000, 100_000] {
        let policy =
            parse_policy_value(&generated_policy(n), None).expect("the generated policy parses");
        assert_eq!(policy.rules.len(), n);
        let engine = GovernanceEngine::builder()
            .policy(policy)
            .build()
            .expect("the generated policy compiles");
        let run = engine.start_run(
            RunContext::new("bench", "agent")
                .with_enduser("u1", [("role".to_string(), "engineer".to_string())]),
        );
        let d = rt.block_on(run.before_tool(call.clone()));
        assert_eq!(d.evaluated.len(), 9, "9 rules in play at {n} rules: {d:?}");
        bench_call(c, &rt, &format!("rules/{n}"), &run, &call);
    }
}

fn config() -> Criterion {
    Criterion::default()
        // ~8 s per benchmark, under 2 minutes in all (the 100,000-rule policy takes a few
        // seconds to generate and compile). Enough samples to ride out a noisy shared machine.
        .sample_size(100)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(6))
}

criterion_group! {
    name = benches;
    config = config();
    targets = customer_support, rule_count, audited
}
criterion_main!(benches);
