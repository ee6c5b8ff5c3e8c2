//! Decision cost of a `sensitiveData` rule by argument size: `Run::before_tool` on a call whose
//! one string argument is 100 B, 10 KB or 1 MB of support-ticket text with no sensitive data
//! in it (every scanner runs over every byte; the decision is an allow).
//!
//! - `sensitive/shipped/<size>`: the customer-support policy's rule (credit_card, secret_key,
//!   private_key, jwt).
//! - `sensitive/all11/<size>`: one rule with all 11 detectors.
//! - `sensitive/none/<size>`: the same call under a policy whose rule in play is a `toolName`
//!   test: the decision without scanning, to subtract.
//!
//! The call is built outside the measurement (`iter_batched`).
//!
//! ```sh
//! cargo bench --bench sensitive_data
//! ```

use std::hint::black_box;

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group, criterion_main};
use serde_json::json;
use toolgate::engine::{GovernanceEngine, RunContext, ToolCall};
use toolgate::policy::parse_policy;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const DETECTORS: [&str; 11] = [
    "email",
    "email_domain",
    "phone",
    "credit_card",
    "iban",
    "uk_nino",
    "ip_address",
    "url",
    "jwt",
    "private_key",
    "secret_key",
];

fn policy(condition: &str) -> String {
    format!(
        r#"[{{"id": "r", "name": "r", "priority": 1, "enabled": true,
             "selector": {{"phase": "tool.before", "tool": {{"name": "send_*"}}}},
             "condition": {condition}, "effect": {{"type": "block"}}}}]"#
    )
}

fn sensitive(detectors: &[&str]) -> String {
    let d: Vec<String> = detectors
        .iter()
        .map(|d| format!(r#"{{"detector": "{d}"}}"#))
        .collect();
    policy(&format!(
        r#"{{"kind": "sensitiveData", "target": "toolArg", "detectors": [{}]}}"#,
        d.join(",")
    ))
}

/// Ticket-like text of `len` bytes: words, order numbers, amounts, dates, no sensitive data.
fn text(len: usize) -> String {
    const WORDS: &[&str] = &[
        "Hello",
        "the",
        "customer",
        "reports",
        "that",
        "order",
        "A-10293",
        "arrived",
        "late,",
        "and",
        "asks",
        "for",
        "a",
        "refund",
        "of",
        "$45.90",
        "on",
        "2026-03-02.",
        "Please",
        "check",
        "shipment",
        "77120",
        "and",
        "reply",
        "within",
        "2",
        "days;",
        "thanks!",
        "Ticket",
        "#4412",
        "escalated",
        "to",
        "tier",
        "2.",
        "See",
        "KB-118",
        "for",
        "steps.",
    ];
    let mut s = String::with_capacity(len + 16);
    let mut i = 0usize;
    while s.len() < len {
        s.push_str(WORDS[i % WORDS.len()]);
        s.push(if i % 17 == 16 { '\n' } else { ' ' });
        i = i.wrapping_mul(7).wrapping_add(3) % 9973;
    }
    s.truncate(len);
    s
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let shipped = ["credit_card", "secret_key", "private_key", "jwt"];
    let cases = [
        ("shipped", sensitive(&shipped)),
        ("all11", sensitive(&DETECTORS)),
        (
            "none",
            policy(r#"{"kind": "toolName", "op": "eq", "value": "send_nothing"}"#),
        ),
    ];
    let mut g = c.benchmark_group("sensitive");
    for (name, p) in &cases {
        let engine = GovernanceEngine::builder()
            .policy(parse_policy(p, None).expect("policy"))
            .build()
            .expect("engine");
        let run = engine.start_run(RunContext::new("r", "a"));
        for (label, len) in [("100B", 100), ("10KB", 10_000), ("1MB", 1_000_000)] {
            let call = ToolCall::new("c", "send_email", json!({"to": "x", "body": text(len)}));
            let d = rt.block_on(run.before_tool(call.clone()));
            assert!(d.is_allowed(), "{name}/{label}: {d:?}");
            if len >= 1_000_000 {
                g.sample_size(20);
            } else {
                g.sample_size(100);
            }
            g.bench_function(BenchmarkId::new(*name, label), |b| {
                b.iter_batched(
                    || call.clone(),
                    |call| black_box(rt.block_on(run.before_tool(call))),
                    BatchSize::LargeInput,
                )
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
