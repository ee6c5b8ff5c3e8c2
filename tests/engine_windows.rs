//! timeGate (DST, midnight spans, edges, 24:00, org fallback, missing timezone) and
//! metricWindow (exact edges, scopes, filters, empty windows, inbuilt metrics).

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use toolgate::engine::{Decision, ManualClock, Run, RunContext, ToolOutcome};
use toolgate::policy::EffectType;

/// A policy of rules each in play only for the tool named like the rule.
fn probes(meta: &str, rules: &[(&str, &str)]) -> String {
    let rules: Vec<String> = rules
        .iter()
        .map(|(id, cond)| {
            format!(
                r#"{{"id": "{id}", "name": "{id}", "priority": 1, "enabled": true,
                    "selector": {{"phase": "tool.before", "tool": {{"name": "{id}"}}}},
                    "condition": {cond}, "effect": {{"type": "block"}}}}"#
            )
        })
        .collect();
    format!(
        r#"{{"policy": {{"name": "p"{meta}}}, "rules": [{}]}}"#,
        rules.join(",")
    )
}

async fn probe(run: &Run, id: &str) -> Decision {
    run.before_tool(call("probe", id, json!({}))).await
}

async fn triggered(run: &Run, id: &str) -> bool {
    let d = probe(run, id).await;
    assert_eq!(d.evaluated.len(), 1, "{d:?}");
    d.evaluated[0].triggered
}

// ---------------------------------------------------------------------------------------------
// timeGate

fn gate(tz: &str, windows: &str) -> String {
    format!(r#"{{"kind": "timeGate", "timezone": {tz}, "windows": {windows}}}"#)
}

const EVERY_DAY: &str = r#"["mon","tue","wed","thu","fri","sat","sun"]"#;

#[tokio::test]
async fn time_gate_follows_dst() {
    let london = gate(
        r#"{"source": "static", "tz": "Europe/London"}"#,
        &format!(r#"[{{"days": {EVERY_DAY}, "start": "09:00", "end": "10:00"}}]"#),
    );
    let by_tag = gate(
        r#"{"source": "enduserTag", "tag": "tz"}"#,
        &format!(r#"[{{"days": {EVERY_DAY}, "start": "09:00", "end": "10:00"}}]"#),
    );
    let clock = clock();
    let engine = engine(
        &probes("", &[("london", &london), ("bytag", &by_tag)]),
        &clock,
    );
    let run = engine.start_run(ctx_user("r", "a", "u", &[("tz", "Europe/London")]));
    for (utc, inside) in [
        ("2026-01-05T09:30:00Z", true),  // GMT: 09:30 local
        ("2026-07-06T09:30:00Z", false), // BST: 10:30 local
        ("2026-07-06T08:30:00Z", true),  // BST: 09:30 local
        ("2026-01-05T08:30:00Z", false),
    ] {
        clock.set(at(utc));
        assert_eq!(triggered(&run, "london").await, inside, "static at {utc}");
        assert_eq!(triggered(&run, "bytag").await, inside, "tag at {utc}");
    }
}

#[tokio::test]
async fn time_gate_windows_spanning_midnight_belong_to_their_start_day() {
    let g = gate(
        r#"{"source": "static", "tz": "UTC"}"#,
        r#"[{"days": ["fri"], "start": "23:00", "end": "01:00"}]"#,
    );
    let clock = clock();
    let engine = engine(&probes("", &[("night", &g)]), &clock);
    let run = engine.start_run(RunContext::new("r", "a"));
    // 2026-01-09 is a Friday.
    for (utc, inside) in [
        ("2026-01-09T22:59:00Z", false),
        ("2026-01-09T23:00:00Z", true), // start inclusive
        ("2026-01-09T23:59:59Z", true),
        ("2026-01-10T00:00:00Z", true), // Saturday, still Friday's window
        ("2026-01-10T00:59:59Z", true),
        ("2026-01-10T01:00:00Z", false), // end exclusive
        ("2026-01-09T00:30:00Z", false), // Friday after midnight: Thursday's window, not listed
        ("2026-01-10T23:30:00Z", false), // Saturday night: not listed
    ] {
        clock.set(at(utc));
        assert_eq!(triggered(&run, "night").await, inside, "at {utc}");
    }
}

#[tokio::test]
async fn time_gate_start_inclusive_end_exclusive_and_24_00() {
    let day = gate(
        r#"{"source": "static", "tz": "UTC"}"#,
        r#"[{"days": ["mon"], "start": "09:00", "end": "17:00"}]"#,
    );
    let late = gate(
        r#"{"source": "static", "tz": "UTC"}"#,
        r#"[{"days": ["mon"], "start": "22:00", "end": "24:00"}]"#,
    );
    let clock = clock();
    let engine = engine(&probes("", &[("day", &day), ("late", &late)]), &clock);
    let run = engine.start_run(RunContext::new("r", "a"));
    for (utc, d, l) in [
        ("2026-01-05T08:59:59Z", false, false),
        ("2026-01-05T09:00:00Z", true, false),
        ("2026-01-05T16:59:59Z", true, false),
        ("2026-01-05T17:00:00Z", false, false),
        ("2026-01-05T21:59:59Z", false, false),
        ("2026-01-05T22:00:00Z", false, true),
        ("2026-01-05T23:59:59Z", false, true),
        ("2026-01-06T00:00:00Z", false, false), // Tuesday
        ("2026-01-12T09:00:00Z", true, false),  // next Monday
    ] {
        clock.set(at(utc));
        assert_eq!(triggered(&run, "day").await, d, "day at {utc}");
        assert_eq!(triggered(&run, "late").await, l, "late at {utc}");
    }
}

fn tag_gate(fallback: bool, on_missing: &str) -> String {
    let fb = if fallback {
        r#", "fallback": "org""#
    } else {
        ""
    };
    let om = if on_missing.is_empty() {
        String::new()
    } else {
        format!(r#", "onMissing": "{on_missing}""#)
    };
    format!(
        r#"{{"kind": "timeGate", "timezone": {{"source": "enduserTag", "tag": "tz"{fb}}},
            "windows": [{{"days": {EVERY_DAY}, "start": "09:00", "end": "10:00"}}]{om}}}"#
    )
}

#[tokio::test]
async fn time_gate_org_fallback_from_policy_and_builder() {
    // 14:30Z on a January Monday is 09:30 in New York and 14:30 in London/UTC.
    let clock = ManualClock::new(at("2026-01-05T14:30:00Z"));
    let json = probes(
        r#", "timezone": "America/New_York""#,
        &[("fb", &tag_gate(true, ""))],
    );
    let engine = engine(&json, &clock);
    for tags in [vec![], vec![("tz", "Mars/Olympus_Mons")], vec![("tz", "")]] {
        let run = engine.start_run(ctx_user("r", "a", "u", &tags));
        let d = probe(&run, "fb").await;
        assert!(
            d.evaluated[0].triggered && d.evaluated[0].missing.is_empty(),
            "tags {tags:?}: {d:?}"
        );
    }
    // No end user at all: the org timezone too.
    let run = engine.start_run(RunContext::new("r", "a"));
    assert!(triggered(&run, "fb").await);
    // A valid tag wins over the fallback.
    let run = engine.start_run(ctx_user("r", "a", "u", &[("tz", "Europe/London")]));
    assert!(!triggered(&run, "fb").await);

    // The builder's org timezone overrides the policy's.
    let engine = builder(&json, &clock)
        .org_timezone(chrono_tz::Europe::London)
        .build()
        .unwrap();
    let run = engine.start_run(ctx_user("r", "a", "u", &[]));
    assert!(!triggered(&run, "fb").await);
    clock.set(at("2026-01-05T09:30:00Z"));
    assert!(triggered(&run, "fb").await);
    // ...and serves when the policy has none.
    let json = probes("", &[("fb", &tag_gate(true, ""))]);
    let engine = builder(&json, &clock)
        .org_timezone(chrono_tz::Europe::London)
        .build()
        .unwrap();
    let run = engine.start_run(ctx_user("r", "a", "u", &[("tz", "nope")]));
    assert!(triggered(&run, "fb").await);
}

#[tokio::test]
async fn time_gate_missing_timezone_is_missing_data() {
    let clock = ManualClock::new(at("2026-01-05T09:30:00Z"));
    // No fallback: missing even though the policy has an org timezone.
    let json = probes(
        r#", "timezone": "UTC", "onMissingDefault": "hitl""#,
        &[
            ("nofb", &tag_gate(false, "")),
            ("own", &tag_gate(false, "block")),
            ("own-allow", &tag_gate(false, "allow")),
        ],
    );
    let engine = engine(&json, &clock);
    for tags in [vec![], vec![("tz", "Not/AZone")]] {
        let run = engine.start_run(ctx_user("r", "a", "u", &tags));
        // Policy onMissingDefault (hitl) decides.
        let d = probe(&run, "nofb").await;
        assert!(d.evaluated[0].triggered, "{d:?}");
        assert_eq!(d.evaluated[0].effect, EffectType::Hitl);
        assert!(!d.evaluated[0].missing.is_empty());
        assert_eq!(d.effect, EffectType::Hitl);
        // The condition's own onMissing first.
        let run = engine.start_run(ctx_user("r2", "a", "u", &tags));
        let d = probe(&run, "own").await;
        assert_eq!(
            (d.effect, d.evaluated[0].triggered),
            (EffectType::Block, true)
        );
        let d = probe(&run, "own-allow").await;
        assert_eq!(
            (d.effect, d.evaluated[0].triggered),
            (EffectType::Allow, false)
        );
    }
    // Fallback asked for but no org timezone anywhere: missing; rule onMissing decides.
    let json = format!(
        r#"[{{"id": "fb", "name": "fb", "priority": 1, "enabled": true,
             "selector": {{"phase": "tool.before", "tool": {{"name": "fb"}}}},
             "condition": {}, "effect": {{"type": "hitl"}}, "onMissing": "block"}}]"#,
        tag_gate(true, "")
    );
    let engine = common::engine(&json, &clock);
    let run = engine.start_run(ctx_user("r", "a", "u", &[]));
    let d = probe(&run, "fb").await;
    assert_eq!(
        (d.effect, d.evaluated[0].triggered),
        (EffectType::Block, true)
    );
    assert!(!d.evaluated[0].missing.is_empty());
}

// ---------------------------------------------------------------------------------------------
// metricWindow

fn mw(
    scope: &str,
    metric: &str,
    agg: &str,
    window: u64,
    op: &str,
    value: f64,
    extra: &str,
) -> String {
    format!(
        r#"{{"kind": "metricWindow", "scope": "{scope}", "metric": {metric}, "aggregate": "{agg}",
            "windowSeconds": {window}, "op": "{op}", "value": {value}{extra}}}"#
    )
}

fn custom(key: &str) -> String {
    format!(r#"{{"kind": "custom", "key": "{key}"}}"#)
}

fn inbuilt(key: &str) -> String {
    format!(r#"{{"kind": "inbuilt", "key": "{key}"}}"#)
}

#[tokio::test]
async fn metric_window_edges_are_exact() {
    let clock = clock();
    let json = probes(
        "",
        &[
            ("sum", &mw("run", &custom("usd"), "sum", 60, "gt", 5.0, "")),
            (
                "count",
                &mw("run", &custom("usd"), "count", 60, "eq", 2.0, ""),
            ),
        ],
    );
    let engine = engine(&json, &clock);
    let run = engine.start_run(RunContext::new("r", "a"));
    run.record_metric("usd", 5.0); // t = 0
    assert!(!triggered(&run, "sum").await);
    clock.advance(chrono::Duration::seconds(30));
    run.record_metric("usd", 1.0); // t = 30
    assert!(triggered(&run, "sum").await);
    assert!(triggered(&run, "count").await);
    clock.advance(chrono::Duration::milliseconds(29_999)); // t = 59.999
    assert!(triggered(&run, "sum").await);
    clock.advance(chrono::Duration::milliseconds(1)); // t = 60: the first event is exactly 60 s old
    assert!(!triggered(&run, "sum").await);
    assert!(!triggered(&run, "count").await);
    clock.advance(chrono::Duration::seconds(30)); // t = 90: empty
    let d = probe(&run, "count").await;
    assert!(!d.evaluated[0].triggered && d.evaluated[0].missing.is_empty());
}

#[tokio::test]
async fn metric_window_scopes() {
    let clock = clock();
    let json = probes(
        "",
        &[
            (
                "run",
                &mw("run", &custom("m"), "sum", 3600, "gte", 10.0, ""),
            ),
            (
                "agent",
                &mw("agent", &custom("m"), "sum", 3600, "gte", 10.0, ""),
            ),
            (
                "user",
                &mw("agent_user", &custom("m"), "sum", 3600, "gte", 10.0, ""),
            ),
        ],
    );
    let engine = engine(&json, &clock);
    let r1 = engine.start_run(ctx_user("r1", "a", "u1", &[]));
    r1.record_metric("m", 10.0);
    let r2 = engine.start_run(ctx_user("r2", "a", "u1", &[]));
    let r3 = engine.start_run(ctx_user("r3", "a", "u2", &[]));
    let r4 = engine.start_run(ctx_user("r4", "b", "u1", &[]));
    let expect = [
        (&r1, [true, true, true]),
        (&r2, [false, true, true]),
        (&r3, [false, true, false]),
        (&r4, [false, false, false]),
    ];
    for (run, [r, a, u]) in expect {
        let id = &run.context().run_id;
        assert_eq!(triggered(run, "run").await, r, "run scope in {id}");
        assert_eq!(triggered(run, "agent").await, a, "agent scope in {id}");
        assert_eq!(triggered(run, "user").await, u, "agent_user scope in {id}");
    }
}

#[tokio::test]
async fn metric_window_empty_window_and_missing_aggregates() {
    let clock = clock();
    let meta = r#", "onMissingDefault": "block""#;
    let json = probes(
        meta,
        &[
            ("sum", &mw("run", &custom("m"), "sum", 60, "eq", 0.0, "")),
            (
                "count",
                &mw("run", &custom("m"), "count", 60, "lte", 0.0, ""),
            ),
            ("avg", &mw("run", &custom("m"), "avg", 60, "gt", 1e9, "")),
            ("min", &mw("run", &custom("m"), "min", 60, "gt", 1e9, "")),
            (
                "max",
                &mw(
                    "run",
                    &custom("m"),
                    "max",
                    60,
                    "gt",
                    1e9,
                    r#", "onMissing": "allow""#,
                ),
            ),
        ],
    );
    let engine = engine(&json, &clock);
    let run = engine.start_run(RunContext::new("r", "a"));
    for id in ["sum", "count"] {
        let d = probe(&run, id).await;
        assert!(
            d.evaluated[0].triggered && d.evaluated[0].missing.is_empty(),
            "{id}: {d:?}"
        );
    }
    for id in ["avg", "min"] {
        // Missing: the policy's onMissingDefault (block) triggers the rule.
        let d = probe(&run, id).await;
        assert!(
            d.evaluated[0].triggered && !d.evaluated[0].missing.is_empty(),
            "{id}: {d:?}"
        );
    }
    let d = probe(&run, "max").await;
    assert!(
        !d.evaluated[0].triggered,
        "condition onMissing allow: {d:?}"
    );
    run.record_metric("m", 3.0);
    run.record_metric("m", 1.0);
    for id in ["sum", "count", "avg", "min", "max"] {
        let d = probe(&run, id).await;
        assert!(
            !d.evaluated[0].triggered && d.evaluated[0].missing.is_empty(),
            "{id}: {d:?}"
        );
    }
}

#[tokio::test]
async fn metric_window_inbuilt_metrics_and_filters() {
    let clock = clock();
    let w = 3600;
    let json = probes(
        "",
        &[
            // {"a":1} is 7 bytes, [1,2,3] 7, {} 2; {"body":"hi"} 13.
            (
                "bytes_in",
                &mw(
                    "run",
                    &inbuilt("bytes_in"),
                    "sum",
                    w,
                    "eq",
                    7.0 + 7.0 + 2.0,
                    "",
                ),
            ),
            (
                "bytes_out",
                &mw("run", &inbuilt("bytes_out"), "sum", w, "eq", 7.0 + 13.0, ""),
            ),
            (
                "duration",
                &mw("run", &inbuilt("duration_ms"), "max", w, "eq", 120.0, ""),
            ),
            (
                "records_in",
                &mw("run", &inbuilt("records_in"), "sum", w, "eq", 3.0, ""),
            ),
            (
                "records_out",
                &mw("run", &inbuilt("records_out"), "count", w, "eq", 1.0, ""),
            ),
            (
                "slow_only",
                &mw(
                    "run",
                    &inbuilt("duration_ms"),
                    "sum",
                    w,
                    "eq",
                    120.0,
                    r#", "filter": {"toolName": "SLOW*"}"#,
                ),
            ),
            (
                "tag_only",
                &mw(
                    "run",
                    &inbuilt("duration_ms"),
                    "sum",
                    w,
                    "eq",
                    5.0,
                    r#", "filter": {"toolTag": ["Net"]}"#,
                ),
            ),
            (
                "tok_in",
                &mw("run", &inbuilt("llm_tokens_in"), "sum", w, "eq", 150.0, ""),
            ),
            (
                "tok_out",
                &mw("run", &inbuilt("llm_tokens_out"), "max", w, "eq", 20.0, ""),
            ),
            (
                "cost",
                &mw("run", &inbuilt("llm_cost_usd"), "sum", w, "gte", 0.75, ""),
            ),
            (
                "custom_filtered",
                &mw(
                    "run",
                    &custom("c"),
                    "count",
                    w,
                    "eq",
                    0.0,
                    r#", "filter": {"toolName": "*"}"#,
                ),
            ),
        ],
    );
    let engine = engine(&json, &clock);
    let run = engine.start_run(RunContext::new("r", "a"));
    let go = |id: &str, name: &str, args: Value, tags: &[&str]| {
        let run = run.clone();
        let c = call(id, name, args).with_tags(tags.iter().copied());
        async move {
            assert!(run.before_tool(c).await.is_allowed());
        }
    };
    go("c1", "slow_query", json!({"a": 1}), &[]).await;
    run.after_tool(
        "c1",
        ToolOutcome::ok(json!([1, 2, 3]), Duration::from_millis(120)),
    )
    .await;
    go("c2", "fetch", json!([1, 2, 3]), &["net"]).await;
    run.after_tool(
        "c2",
        ToolOutcome::ok(json!({"body": "hi"}), Duration::from_millis(5)),
    )
    .await;
    // A failed call: no output, so no bytes_out / records_out; its duration counts.
    go("c3", "fetch2", json!({}), &[]).await;
    run.after_tool("c3", ToolOutcome::err("boom", Duration::from_millis(1)))
        .await;
    run.record_llm(100, 20, 0.5);
    run.record_llm(50, 10, 0.25);
    run.record_metric("c", 1.0); // a custom metric has no tool: a tool filter excludes it
    let ids = [
        "bytes_in",
        "bytes_out",
        "duration",
        "records_in",
        "records_out",
        "slow_only",
        "tag_only",
        "tok_in",
        "tok_out",
        "cost",
        "custom_filtered",
    ];
    for id in ids {
        assert!(triggered(&run, id).await, "{id}");
    }
}

#[tokio::test]
async fn metric_window_many_events() {
    let clock = clock();
    let json = probes(
        "",
        &[
            (
                "sum",
                &mw("run", &custom("m"), "sum", 100, "eq", 100_000.0, ""),
            ),
            ("max", &mw("run", &custom("m"), "max", 100, "eq", 1.0, "")),
        ],
    );
    let engine = engine(&json, &clock);
    let run = engine.start_run(RunContext::new("r", "a"));
    for i in 0..100_000 {
        if i % 1000 == 0 {
            clock.advance(chrono::Duration::milliseconds(1));
        }
        run.record_metric("m", 1.0);
    }
    assert!(triggered(&run, "sum").await);
    assert!(triggered(&run, "max").await);
    clock.advance(chrono::Duration::seconds(100));
    assert!(!triggered(&run, "sum").await);
}
