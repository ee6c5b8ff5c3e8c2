//! A sink slower than the decisions slows the audit worker down instead of losing events: the
//! trail stays whole (every event delivered, every chain intact) with a tiny sink queue.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::json;
use tokio::sync::{Notify, Semaphore};
use toolgate::audit::{AuditError, AuditEvent, AuditSink, MemorySink, verify_events};
use toolgate::engine::{GovernanceEngine, RunContext, ToolCall, ToolOutcome};
use toolgate::policy::parse_policy;

/// Holds its first batch until the test opens the gate (a sink stalled on a slow disk), then
/// passes everything on to a memory sink.
struct GatedSink {
    inner: MemorySink,
    gate: Semaphore,
    first: Notify,
}

#[async_trait]
impl AuditSink for GatedSink {
    async fn write_batch(&self, events: &[Arc<AuditEvent>]) -> Result<(), AuditError> {
        if self.inner.is_empty() {
            self.first.notify_one();
            let _permit = self.gate.acquire().await;
        }
        self.inner.write_batch(events).await
    }
    async fn flush(&self) -> Result<(), AuditError> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_sink_slows_the_audit_worker_and_loses_nothing() {
    let policy = parse_policy(
        &json!({"rules": [{"name": "big refunds", "selector": {"phase": "tool.before",
            "tool": {"name": "refund"}}, "condition": {"kind": "toolArg", "type": "number", "path": "amount",
            "op": "gt", "value": 100}, "effect": {"type": "block", "reason": "too big"}}]})
        .to_string(),
        None,
    )
    .expect("policy");
    let sink = Arc::new(GatedSink {
        inner: MemorySink::new(),
        gate: Semaphore::new(0),
        first: Notify::new(),
    });
    let engine = GovernanceEngine::builder()
        .policy(policy)
        .audit_sink(sink.clone())
        // Four events fit in the sink's queue: everything past them must wait, not drop.
        .audit_queue_capacity(4)
        // One sealer: the runs below are taken one after the other by the same worker.
        .audit_sealer_threads(1)
        .audit_flush_timeout(Duration::from_secs(60))
        .build()
        .expect("engine");
    // Four runs of 10 events. The sink holds the first run's batch; the second goes to its
    // empty queue and fills it past its 4 events; the third must wait for room, and so the
    // fourth stays in the backlog: the audit worker is waiting, not dropping.
    let runs = 4;
    for r in 0..runs {
        let run = engine.start_run(RunContext::new(format!("run-{r}"), "agent"));
        for c in 0..5 {
            let amount = if c % 2 == 0 { 10 } else { 500 };
            let id = format!("c{c}");
            let call = ToolCall::new(&id, "refund", json!({"amount": amount}));
            if run.before_tool_blocking(call).is_allowed() {
                let outcome = ToolOutcome::ok(json!({"ok": true}), Duration::from_millis(1));
                run.after_tool_blocking(&id, outcome);
            }
        }
        // Dropped, not ended: `run.ended` is queued without waiting for the sink.
        drop(run);
        if r == 0 {
            // The sink now holds the first run's batch.
            sink.first.notified().await;
        }
        // Each run is taken by the audit worker before the next one starts (the backlog is
        // empty once the worker has taken it, even while it then waits for room). The last
        // one stays in the backlog while the worker waits: the bound ends the wait.
        let bound = if r + 1 == runs { 300 } else { 5_000 };
        let deadline = Instant::now() + Duration::from_millis(bound);
        while engine.audit_backlog() > 0 && Instant::now() < deadline {
            tokio::task::yield_now().await;
        }
        if r + 1 == runs {
            assert!(
                engine.audit_backlog() > 0,
                "the audit worker waits for room"
            );
        }
    }
    sink.gate.add_permits(1);
    engine.flush().await.expect("flush");
    let events = sink.inner.events();
    // Per run: run.started, 5 decisions, 3 results, run.ended.
    assert_eq!(events.len(), runs * 10, "every event reached the sink");
    let report = verify_events(events.iter().map(|e| &**e));
    assert!(report.breaks.is_empty(), "{:?}", report.breaks);
    assert_eq!(report.runs, runs);
    engine.shutdown().await.expect("shutdown");
}

/// A sink that records the order events arrive in.
struct Recording(MemorySink);

#[async_trait]
impl AuditSink for Recording {
    async fn write_batch(&self, events: &[Arc<AuditEvent>]) -> Result<(), AuditError> {
        self.0.write_batch(events).await
    }
    async fn flush(&self) -> Result<(), AuditError> {
        Ok(())
    }
}

/// With several sealer threads, runs are sealed on different threads at once, and each run's
/// events still reach the sink whole and in `seq` order (its hash chain is intact).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_sealed_on_several_threads_keep_their_order() {
    let sink = Arc::new(Recording(MemorySink::new()));
    let engine = Arc::new(
        GovernanceEngine::builder()
            .policy(parse_policy(r#"{"rules": []}"#, None).expect("policy"))
            .audit_sink(sink.clone())
            .audit_sealer_threads(3)
            .build()
            .expect("engine"),
    );
    // Four callers, 25 runs each, interleaved: every sealer gets runs of every caller.
    let callers: Vec<_> = (0..4)
        .map(|t| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                for r in 0..25 {
                    let run = engine.start_run(RunContext::new(format!("run-{t}-{r}"), "agent"));
                    for c in 0..20 {
                        let id = format!("c{c}");
                        let call = ToolCall::new(&id, "lookup", json!({"n": c}));
                        assert!(run.before_tool_blocking(call).is_allowed());
                        let out = ToolOutcome::ok(json!({"n": c}), Duration::from_millis(1));
                        run.after_tool_blocking(&id, out);
                    }
                    drop(run);
                }
            })
        })
        .collect();
    for c in callers {
        c.join().expect("a caller");
    }
    engine.flush().await.expect("flush");
    // Per run: run.started, 20 decisions, 20 results, run.ended.
    assert_whole_and_in_order(&sink.0.events(), 100, 42);
}

/// Every run's `events` arrived (`per_run` each), each run in `seq` order, every chain intact.
fn assert_whole_and_in_order(events: &[Arc<AuditEvent>], runs: usize, per_run: usize) {
    assert_eq!(events.len(), runs * per_run, "every event reached the sink");
    let mut next_seq = std::collections::HashMap::new();
    for e in events {
        let seq = next_seq.entry(e.run_id().to_string()).or_insert(0u64);
        assert_eq!(e.seq(), *seq, "run {} arrived out of order", e.run_id());
        *seq += 1;
    }
    let report = verify_events(events.iter().map(|e| &**e));
    assert!(report.breaks.is_empty(), "{:?}", report.breaks);
    assert_eq!(report.runs, runs);
}

/// With a small caller batch (the default when the process can run on one core only), the
/// deciding thread seals its shard's queue itself whenever it fills: the backlog never reaches
/// the batch, and the trail is as whole and ordered as when the sealer threads do the work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_seal_their_own_batches_and_lose_nothing() {
    let sink = Arc::new(Recording(MemorySink::new()));
    let engine = Arc::new(
        GovernanceEngine::builder()
            .policy(parse_policy(r#"{"rules": []}"#, None).expect("policy"))
            .audit_sink(sink.clone())
            .audit_sealer_threads(2)
            .audit_caller_batch(8)
            .build()
            .expect("engine"),
    );
    let callers: Vec<_> = (0..2)
        .map(|t| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                for r in 0..20 {
                    let run = engine.start_run(RunContext::new(format!("run-{t}-{r}"), "agent"));
                    for c in 0..10 {
                        let id = format!("c{c}");
                        let call = ToolCall::new(&id, "lookup", json!({"n": c}));
                        assert!(run.before_tool_blocking(call).is_allowed());
                        let out = ToolOutcome::ok(json!({"n": c}), Duration::from_millis(1));
                        run.after_tool_blocking(&id, out);
                        // Each shard holds fewer than 8: a caller that queues the 8th seals.
                        assert!(engine.audit_backlog() < 2 * 8, "{}", engine.audit_backlog());
                    }
                    drop(run);
                }
            })
        })
        .collect();
    for c in callers {
        c.join().expect("a caller");
    }
    engine.flush().await.expect("flush");
    assert_whole_and_in_order(&sink.0.events(), 40, 22);
}
