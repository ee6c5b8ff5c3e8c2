//! (on both stores) metricWindow: exact edges, scopes, filters, empty windows, inbuilt metrics.

use std::time::Duration;

use serde_json::{Value, json};
use toolgate::engine::{RunContext, ToolOutcome};

use crate::Store;
use crate::common::*;

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

store_test! {
    async fn metric_window_edges_are_exact(store) {
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
        let engine = store.engine(&json, &clock);
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
}

store_test! {
    async fn metric_window_scopes(store) {
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
        let engine = store.engine(&json, &clock);
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
}

store_test! {
    async fn metric_window_empty_window_and_missing_aggregates(store) {
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
        let engine = store.engine(&json, &clock);
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
}

store_test! {
    async fn metric_window_inbuilt_metrics_and_filters(store) {
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
        let engine = store.engine(&json, &clock);
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
}

store_test! {
    async fn metric_window_many_events(store) {
        // Redis writes them all in one settlement: fewer there, same shape.
        let n = match store {
            Store::Memory => 100_000,
            Store::Redis(_) => 10_000,
        };
        let clock = clock();
        let json = probes(
            "",
            &[
                (
                    "sum",
                    &mw("run", &custom("m"), "sum", 100, "eq", n as f64, ""),
                ),
                ("max", &mw("run", &custom("m"), "max", 100, "eq", 1.0, "")),
            ],
        );
        let engine = store.engine(&json, &clock);
        let run = engine.start_run(RunContext::new("r", "a"));
        for i in 0..n {
            if i % (n / 100) == 0 {
                clock.advance(chrono::Duration::milliseconds(1));
            }
            run.record_metric("m", 1.0);
        }
        assert!(triggered(&run, "sum").await);
        assert!(triggered(&run, "max").await);
        clock.advance(chrono::Duration::seconds(100));
        assert!(!triggered(&run, "sum").await);
    }
}
