//! `toolgate collect --otel`: the audit events a collector receives become spans and metrics.
mod common;
mod otel_support;

use std::process::Stdio;
use std::time::Duration;

use common::collect::Collect;
use common::process::toolgate;
use otel_support::{Receiver, attr_map, attr_str};
use serde_json::{Value, json};

#[test]
fn collect_exports_the_events_it_receives() {
    let rx = Receiver::start();
    let out = tempfile::tempdir().unwrap();
    let collector = Collect::spawn(
        toolgate()
            .args(["collect", "--listen", "127.0.0.1:0", "--otel", "--out"])
            .arg(out.path())
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &rx.endpoint)
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
            .stderr(Stdio::piped()),
    );
    let addr = collector.url();

    // Ship the example's audit trail to the collector.
    let replay = assert_cmd::Command::cargo_bin("toolgate")
        .unwrap()
        .args([
            "replay",
            "--policy",
            "policies/customer-support.json",
            "--trace",
            "examples/traces/support.jsonl",
            "--collector",
            &addr,
        ])
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .unwrap();
    assert!(replay.status.success());
    // Sent again, the same events are duplicates: no new spans.
    let mut events = Vec::new();
    // Agent folders (the store's lock file sits beside them).
    for agent in std::fs::read_dir(out.path()).unwrap() {
        let agent = agent.unwrap().path();
        if !agent.is_dir() {
            continue;
        }
        for day in std::fs::read_dir(agent).unwrap() {
            let text = std::fs::read_to_string(day.unwrap().path()).unwrap();
            events.extend(
                text.lines()
                    .map(|l| serde_json::from_str::<Value>(l).unwrap()),
            );
        }
    }
    assert!(!events.is_empty());
    let answer: Value = reqwest::blocking::Client::new()
        .post(format!("{addr}/v1/events"))
        .json(&json!({ "events": events }))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(answer["duplicates"], events.len());

    // SIGTERM: the collector stops cleanly and flushes the export.
    collector.signal("-TERM");
    let mut done = collector.into_proc();
    let status = done.exits_within(Duration::from_secs(60));
    assert!(status.success(), "{}", done.stderr_rest());

    let spans = rx.spans();
    let tools: Vec<_> = spans
        .iter()
        .filter(|s| s.name.starts_with("execute_tool "))
        .collect();
    let runs: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "invoke_agent support-bot")
        .collect();
    assert_eq!(tools.len(), 10, "one span per tool call");
    assert_eq!(runs.len(), 3, "one span per run");
    assert_eq!(rx.sum("toolgate.decisions").values().sum::<i64>(), 10);
    let c3 = tools
        .iter()
        .find(|s| attr_str(&s.attributes, "gen_ai.tool.call.id").as_deref() == Some("c3"))
        .unwrap();
    let a = attr_map(&c3.attributes);
    assert_eq!(a["toolgate.effect"], "block");
    assert_eq!(a["toolgate.code"], "BLOCKED_RULE");
    assert_eq!(a["toolgate.rule_id"], "pii-requires-customer-subject");
    assert_eq!(c3.status.as_ref().map(|s| s.code), Some(2));
    assert!(
        runs.iter()
            .any(|r| r.span_id == c3.parent_span_id && r.trace_id == c3.trace_id),
        "the run span is the tool span's parent"
    );
    let c1 = tools
        .iter()
        .find(|s| attr_str(&s.attributes, "gen_ai.tool.call.id").as_deref() == Some("c1"))
        .unwrap();
    // The span lasts from the decision to the result, in the trace's own time (1 s apart).
    let lasted = c1.end_time_unix_nano - c1.start_time_unix_nano;
    assert!((1_000_000_000..1_100_000_000).contains(&lasted), "{lasted}");
}
