//! Decision cost of a `sensitiveData` rule by argument size: `Run::before_tool` on a call whose
//! one string argument is 100 B, 10 KB or 1 MB of support-ticket text with no sensitive data
//! in it (every scanner runs over every byte; the decision is an allow).
//!
//! - `sensitive/shipped/<size>`: the customer-support policy's rule (credit_card, secret_key,
//!   private_key, jwt).
//! - `sensitive/all11/<size>`: one rule with all 11 detectors.
//! - `sensitive/none/<size>`: the same call under a policy whose rule in play is a `toolName`
//!   test: the decision without scanning, to subtract.
//! - `sensitive/one/<detector>/10KB`: one detector at a time.
//!
//! The call is built outside the measurement (`iter_batched`).
//!
//! ```sh
//! cargo bench --bench sensitive_data
//! ```
//!
//! Instruction counts (deterministic, unlike the timings on a shared machine): the driver's
//! `count` mode runs `N` decisions of one case through `decide`, which callgrind counts:
//!
//! ```sh
//! cargo bench --no-default-features --bench sensitive_data --no-run   # prints the binary
//! valgrind --tool=callgrind --toggle-collect='*sensitive_data::decide*' \
//!     <binary> count <shipped|all11|none|DETECTOR[,DETECTOR…]> <bytes> <N>
//! ```
//!
//! (instructions per decision = the `totals` line of the callgrind output / N).

use std::hint::black_box;

use criterion::{BatchSize, BenchmarkId, Criterion, criterion_group};
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
    // One detector at a time over 10 KB: where the time goes.
    let call = ToolCall::new("c", "send_email", json!({"to": "x", "body": text(10_000)}));
    g.sample_size(50);
    for d in DETECTORS {
        let engine = GovernanceEngine::builder()
            .policy(parse_policy(&sensitive(&[d]), None).expect("policy"))
            .build()
            .expect("engine");
        let run = engine.start_run(RunContext::new("r", "a"));
        g.bench_function(BenchmarkId::new("one", format!("{d}/10KB")), |b| {
            b.iter_batched(
                || call.clone(),
                |call| black_box(rt.block_on(run.before_tool(call))),
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

/// The measured call of `count` mode: one decision, nothing else.
#[inline(never)]
fn decide(rt: &tokio::runtime::Runtime, run: &toolgate::engine::Run, call: ToolCall) -> bool {
    rt.block_on(run.before_tool(call)).is_allowed()
}

/// `count <case> <bytes> <n>`: `n` decisions of one case, for callgrind (see the module docs).
fn count(args: &[String]) {
    let case = args.first().map_or("shipped", String::as_str);
    let len: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let n: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(100);
    let p = match case {
        "shipped" => sensitive(&["credit_card", "secret_key", "private_key", "jwt"]),
        "all11" => sensitive(&DETECTORS),
        "none" => policy(r#"{"kind": "toolName", "op": "eq", "value": "send_nothing"}"#),
        list => sensitive(&list.split(',').collect::<Vec<_>>()),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let engine = GovernanceEngine::builder()
        .policy(parse_policy(&p, None).expect("policy"))
        .build()
        .expect("engine");
    let run = engine.start_run(RunContext::new("r", "a"));
    let call = ToolCall::new("c", "send_email", json!({"to": "x", "body": text(len)}));
    // Warm-up (not counted: `decide` is not called).
    assert!(rt.block_on(run.before_tool(call.clone())).is_allowed());
    let mut allowed = 0usize;
    for _ in 0..n {
        allowed += usize::from(decide(&rt, &run, black_box(call.clone())));
    }
    assert_eq!(allowed, n, "{case}: every decision is an allow");
    println!("{n}");
}

criterion_group!(benches, bench);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("count") {
        count(&args[1..]);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
