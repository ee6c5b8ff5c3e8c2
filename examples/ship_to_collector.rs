//! Ships an agent's audit trail to a collector and verifies what the collector stored.
//!
//! Starts `toolgate collect`'s server in-process on a loopback port, runs a (simulated) agent
//! whose audit events go through the HTTP sink — with `args.email` redacted to a hash before
//! sealing — then checks every stored chain with `verify`.
//!
//! ```text
//! cargo run --example ship_to_collector
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::{Map, Value, json};
use toolgate::audit::collector::{Collector, CollectorConfig, serve_collector};
use toolgate::audit::{
    AuditBus, BusConfig, EventKind, HttpSink, HttpSinkConfig, RedactionConfig, Redactor, RunChain,
    verify_paths,
};

fn body(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// A stand-in for an agent run governed by toolgate: every step becomes a sealed audit event.
fn run_agent(bus: &AuditBus, redactor: &Redactor, run_id: &str, customer: u64) {
    let mut chain = RunChain::new(run_id, "support-bot", Some(format!("user-{customer}")));
    let mut emit = |kind: EventKind, b: Value| {
        let mut b = body(b);
        redactor.redact(kind, &mut b); // before sealing: the hash covers the redacted body
        bus.emit(chain.seal(kind, Utc::now(), b));
    };
    emit(
        EventKind::RunStarted,
        json!({"runContext": {"agentId": "support-bot", "enduser": {"id": format!("user-{customer}")}}}),
    );
    let tools = [
        (
            "getCustomer",
            json!({"id": customer, "email": "ann@example.com"}),
        ),
        ("searchOrders", json!({"customer": customer, "limit": 5})),
        ("refund", json!({"order": 991, "amount": 120.5})),
    ];
    for (i, (tool, args)) in tools.into_iter().enumerate() {
        let call = format!("c{i}");
        let blocked = tool == "refund";
        emit(
            EventKind::ToolDecision,
            json!({
                "phase": "tool.before", "callId": call, "tool": {"name": tool, "tags": []}, "args": args,
                "decision": {
                    "effect": if blocked { "block" } else { "allow" },
                    "code": if blocked { "BLOCKED_RULE" } else { "ALLOWED" },
                    "ruleId": if blocked { Value::from("no-refunds-over-100") } else { Value::Null },
                    "reason": if blocked { Value::from("refunds over 100 need a person") } else { Value::Null },
                    "evaluated": [{"ruleId": "no-refunds-over-100", "triggered": blocked, "effect": "block"}],
                    "signals": [], "shadow": false, "abortRun": false, "latencyNs": 4_100
                }
            }),
        );
        if !blocked {
            emit(
                EventKind::ToolResult,
                json!({"callId": call, "tool": {"name": tool}, "output": {"ok": true}, "durationMs": 42,
                       "metrics": {"bytes_in": 31, "bytes_out": 11, "duration_ms": 42}}),
            );
        }
    }
    emit(
        EventKind::LlmResult,
        json!({"tokensIn": 812, "tokensOut": 96, "costUsd": 0.0021}),
    );
    emit(
        EventKind::RunEnded,
        json!({"status": "success", "totals": {"calls": 3, "blocked": 1, "tokensIn": 812, "tokensOut": 96}}),
    );
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let work = tempfile::tempdir()?;
    let out_dir = work.path().join("collected");

    // The collector, in-process on a free loopback port.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let collector = Collector::open(CollectorConfig::new(&out_dir))?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve_collector(collector.clone(), listener, async move {
        let _ = stop_rx.await;
    }));
    println!(
        "collector listening on http://{addr}, storing to {}",
        out_dir.display()
    );

    // The agent side: an HTTP sink behind the audit bus, plus redaction.
    let mut sink_config = HttpSinkConfig::new(format!("http://{addr}"));
    sink_config.spool_dir = work.path().join("spool");
    sink_config.batch_interval_ms = 50;
    let sink = Arc::new(HttpSink::new(sink_config)?);
    let bus = AuditBus::new(vec![sink.clone()], BusConfig::default());
    let redaction: RedactionConfig = serde_json::from_value(json!({
        "rules": [{"path": "args.email", "action": "hash"}]
    }))?;
    let redactor = redaction.compile()?;

    let started = Instant::now();
    for (i, customer) in [7u64, 8, 9].into_iter().enumerate() {
        run_agent(&bus, &redactor, &format!("run-{i}"), customer);
    }
    bus.shutdown(Duration::from_secs(10)).await?;
    println!(
        "shipped {} events in {:?} ({:?})",
        sink.stats().delivered_events,
        started.elapsed(),
        sink.stats()
    );

    // What the collector has for one run.
    let run: Value = reqwest::get(format!("http://{addr}/v1/runs/run-0"))
        .await?
        .json()
        .await?;
    for e in run["events"].as_array().into_iter().flatten() {
        println!(
            "  run-0 #{} {:<14} {}",
            e["seq"],
            e["kind"].as_str().unwrap_or(""),
            e.get("args").map(Value::to_string).unwrap_or_default()
        );
    }

    let _ = stop_tx.send(());
    server.await??;

    // Verify the stored trail, as `toolgate verify DIR` would.
    let report = verify_paths(&[&out_dir]);
    for f in &report.files {
        println!(
            "{}: ok: {} events, {} runs",
            f.path.display(),
            f.events,
            f.runs
        );
    }
    for b in &report.breaks {
        println!("{b}");
    }
    if !report.is_ok() {
        return Err("the stored trail does not verify".into());
    }
    println!(
        "verified: {} events in {} runs, every chain intact",
        report.events, report.runs
    );
    Ok(())
}
