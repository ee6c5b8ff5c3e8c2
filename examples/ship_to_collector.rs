//! Ships an agent's audit trail to a collector and verifies what the collector stored.
//!
//! Starts `toolgate collect`'s server in-process on a loopback port, runs a scripted support
//! agent governed by `policies/customer-support.json` whose audit events go through the HTTP
//! sink — with `args.email` redacted to a hash before sealing — then checks every stored chain
//! with `verify`.
//!
//! ```text
//! cargo run --example ship_to_collector
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate::audit::collector::{Collector, CollectorConfig, serve_collector};
use toolgate::audit::{HttpSink, HttpSinkConfig, RedactionConfig, verify_paths};
use toolgate::engine::{GovernanceEngine, Guarded, ManualClock, RunContext, SubjectRef, ToolCall};

/// A scripted support agent governed by the customer-support policy: every tool call goes
/// through the engine's guard, and every step becomes a sealed audit event on the HTTP sink.
async fn run_agent(engine: &GovernanceEngine, run_id: &str, customer: u64) {
    let user = format!("cust-{customer}");
    let tags = [
        ("tier".to_string(), "standard".to_string()),
        ("tz".to_string(), "Europe/London".to_string()),
    ];
    let run = engine.start_run(RunContext::new(run_id, "support-bot").with_enduser(user, tags));
    let mut lookup = ToolCall::new(
        "c0",
        "crm_get_customer",
        json!({"customerId": customer, "email": "ann@example.com"}),
    )
    .with_tags(["crm", "pii", "read"]);
    lookup.subjects = vec![SubjectRef {
        subject_type: "customer".into(),
        value: customer.to_string(),
        role: Some("primary".into()),
        id_system: Some("crm_contact_id".into()),
    }];
    let calls = [
        ToolCall::new("c1", "kb_search", json!({"query": "late delivery refund"}))
            .with_tags(["kb", "read"]),
        lookup,
        ToolCall::new(
            "c2",
            "issue_refund",
            json!({"orderId": "A-991", "amount": 1500}),
        )
        .with_tags(["payments"]),
        ToolCall::new(
            "c3",
            "issue_refund",
            json!({"orderId": "A-992", "amount": 40}),
        )
        .with_tags(["payments"]),
    ];
    for call in calls {
        let name = call.name.clone();
        let outcome = run
            .guard(
                call,
                |args| async move { Ok(json!({"ok": true, "echo": args})) },
            )
            .await;
        match outcome {
            Guarded::Ran { .. } => println!("  {run_id} {name:<18} ran"),
            Guarded::Refused(r) => {
                println!(
                    "  {run_id} {name:<18} refused: {} ({})",
                    r.decision.code, r.message
                );
                if r.stop_run {
                    break;
                }
            }
        }
    }
    run.record_llm(812, 96, 0.0021);
    run.end("success", Some("Refund issued for order A-992."))
        .await;
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
    let redaction: RedactionConfig = serde_json::from_value(json!({
        "rules": [{"path": "args.email", "action": "hash"}, {"path": "output.echo.email", "action": "hash"}]
    }))?;
    let engine = GovernanceEngine::builder()
        .policy_path(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/policies/customer-support.json"
        ))
        .clock(Arc::new(ManualClock::new("2026-03-02T11:00:00Z".parse()?)))
        .audit_sink(sink.clone())
        .redaction(redaction)
        .audit_flush_timeout(Duration::from_secs(10))
        .build()?;

    let started = Instant::now();
    for (i, customer) in [7u64, 8, 9].into_iter().enumerate() {
        run_agent(&engine, &format!("run-{i}"), customer).await;
    }
    engine.shutdown().await?;
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
