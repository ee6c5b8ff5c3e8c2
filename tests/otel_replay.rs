//! `toolgate replay --otel` exports spans and metrics to a real OTLP/HTTP receiver.
mod otel_support;

use std::collections::{BTreeMap, HashMap};

use assert_cmd::Command;
use otel_support::{Receiver, attr_map, attr_str, dead_endpoint};
use serde_json::Value;

const STATUS_ERROR: i32 = 2;

fn replay(endpoint: &str, otel: bool) -> std::process::Output {
    let mut cmd = Command::cargo_bin("toolgate").unwrap();
    cmd.args([
        "replay",
        "--policy",
        "policies/customer-support.json",
        "--trace",
        "examples/traces/support.jsonl",
        "--format",
        "jsonl",
    ]);
    if otel {
        cmd.arg("--otel");
    }
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_RESOURCE_ATTRIBUTES",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_SERVICE_NAME", "toolgate-otel-test")
        .output()
        .unwrap()
}

fn rows(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

#[test]
fn replay_exports_a_span_per_call_with_attributes_parents_and_status() {
    let rx = Receiver::start();
    let out = replay(&rx.endpoint, true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = rows(&out);
    assert_eq!(rows.len(), 10);
    let spans = rx.spans();
    assert!(rx.services().iter().all(|s| s == "toolgate-otel-test"));

    // One run span per run: the parent of that run's tool spans.
    let mut run_spans = HashMap::new();
    for sp in spans
        .iter()
        .filter(|sp| sp.name == "invoke_agent support-bot")
    {
        let a = attr_map(&sp.attributes);
        assert_eq!(a["gen_ai.operation.name"], "invoke_agent");
        assert!(sp.parent_span_id.is_empty());
        run_spans.insert(a["toolgate.run_id"].clone(), sp);
    }
    assert_eq!(run_spans.len(), 3, "one span per run");

    let tool_spans: Vec<_> = spans
        .iter()
        .filter(|sp| sp.name.starts_with("execute_tool "))
        .collect();
    assert_eq!(tool_spans.len(), rows.len(), "one span per tool call");
    for row in &rows {
        let call = s(&row["callId"]);
        let sp = tool_spans
            .iter()
            .find(|sp| attr_str(&sp.attributes, "gen_ai.tool.call.id").as_deref() == Some(&call))
            .unwrap_or_else(|| panic!("no span for call {call}"));
        let a = attr_map(&sp.attributes);
        assert_eq!(sp.name, format!("execute_tool {}", s(&row["tool"])));
        assert_eq!(a["gen_ai.operation.name"], "execute_tool");
        assert_eq!(a["gen_ai.tool.name"], s(&row["tool"]));
        assert_eq!(a["toolgate.effect"], s(&row["effect"]));
        assert_eq!(a["toolgate.code"], s(&row["code"]));
        assert_eq!(a["toolgate.run_id"], s(&row["runId"]));
        assert_eq!(a["toolgate.agent_id"], "support-bot");
        assert_eq!(
            a.get("toolgate.rule_id").cloned(),
            row["ruleId"].as_str().map(String::from)
        );
        let parent = run_spans[&s(&row["runId"])];
        assert_eq!(sp.trace_id, parent.trace_id, "call {call}");
        assert_eq!(sp.parent_span_id, parent.span_id, "call {call}");
        let code = sp.status.as_ref().map_or(0, |st| st.code);
        if s(&row["effect"]) == "allow" {
            assert_ne!(code, STATUS_ERROR, "allowed call {call} is not an error");
        } else {
            assert_eq!(code, STATUS_ERROR, "refused call {call} has error status");
            let msg = &sp.status.as_ref().unwrap().message;
            assert!(msg.starts_with(&s(&row["code"])), "{msg}");
        }
    }
    // An allowed call with a result: the span lasts until the result.
    let c1 = tool_spans
        .iter()
        .find(|sp| attr_str(&sp.attributes, "gen_ai.tool.call.id").as_deref() == Some("c1"))
        .unwrap();
    assert_eq!(
        attr_str(&c1.attributes, "toolgate.tool.duration_ms").as_deref(),
        Some("140")
    );
}

#[test]
fn replay_exports_decision_counts_per_effect_and_code() {
    let rx = Receiver::start();
    let out = replay(&rx.endpoint, true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = rows(&out);

    let mut want: BTreeMap<BTreeMap<String, String>, i64> = BTreeMap::new();
    for row in &rows {
        let mut k = BTreeMap::new();
        k.insert("toolgate.phase".to_string(), s(&row["phase"]));
        k.insert("toolgate.effect".to_string(), s(&row["effect"]));
        k.insert("toolgate.code".to_string(), s(&row["code"]));
        if let Some(r) = row["ruleId"].as_str() {
            k.insert("toolgate.rule_id".to_string(), r.to_string());
        }
        *want.entry(k).or_default() += 1;
    }
    assert_eq!(rx.sum("toolgate.decisions"), want);
    let by_effect = |e: &str| -> i64 {
        want.iter()
            .filter(|(k, _)| k["toolgate.effect"] == e)
            .map(|(_, v)| v)
            .sum()
    };
    assert_eq!(
        (by_effect("allow"), by_effect("block"), by_effect("hitl")),
        (6, 3, 1)
    );

    let (hist, unit) = rx.histogram_counts("toolgate.decision.duration");
    assert_eq!(unit, "s");
    assert_eq!(hist.values().sum::<u64>(), rows.len() as u64);
}

#[test]
fn replay_finishes_when_the_receiver_is_down_and_says_so_once() {
    let plain = replay(&dead_endpoint(), false);
    let out = replay(&dead_endpoint(), true);
    assert!(out.status.success());
    assert_eq!(
        out.stdout, plain.stdout,
        "same decisions with export failing"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("OpenTelemetry export").count(),
        1,
        "the failure is reported exactly once: {stderr}"
    );
    assert!(
        stderr.contains("toolgate replay: OpenTelemetry export of"),
        "{stderr}"
    );
}
