//! The bus's tests: hand-offs, bounds, flushes (grouped, after a failed write) and shutdown.
use super::*;
use crate::audit::{EventKind, MemorySink, RunChain};

fn events(chain: &mut RunChain, n: usize) -> Vec<AuditEvent> {
    let ts = chrono::DateTime::from_timestamp(1_767_600_000, 0).unwrap_or_default();
    (0..n)
        .map(|_| chain.seal(EventKind::ToolResult, ts, serde_json::Map::new()))
        .collect()
}

#[tokio::test]
async fn batches_and_single_events_arrive_in_order_and_none_is_lost() {
    let sink = Arc::new(MemorySink::new());
    let bus = AuditBus::new(
        vec![sink.clone()],
        BusConfig {
            queue_capacity: 4,
            max_batch: 3,
            ..BusConfig::default()
        },
    );
    let mut chain = RunChain::new("r", "a", None);
    // A hand-off larger than the queue's capacity is taken when the queue is empty, and
    // written in chunks of `max_batch`.
    bus.emit_all(events(&mut chain, 10));
    bus.flush(Duration::from_secs(5)).await.unwrap();
    for e in events(&mut chain, 2) {
        bus.emit(e);
    }
    bus.emit_all(events(&mut chain, 2));
    bus.emit_all(Vec::new());
    bus.shutdown(Duration::from_secs(5)).await.unwrap();
    let seqs: Vec<u64> = sink.events().iter().map(|e| e.seq()).collect();
    assert_eq!(seqs, (0..14).collect::<Vec<u64>>());
    assert_eq!(
        bus.stats(),
        BusStats {
            emitted: 14,
            dropped: 0
        }
    );
    // After shutdown, nothing is delivered and the loss is counted.
    bus.emit_all(events(&mut chain, 3));
    assert_eq!(bus.stats().dropped, 3);
    assert_eq!(sink.len(), 14);
}

/// Fails the writes it is told to fail; flushes always succeed.
struct FailingWrites {
    inner: MemorySink,
    fail: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl AuditSink for FailingWrites {
    async fn write_batch(&self, events: &[Arc<AuditEvent>]) -> Result<(), AuditError> {
        if self.fail.load(Ordering::Acquire) {
            return Err(AuditError::Sink("No space left on device".into()));
        }
        self.inner.write_batch(events).await
    }
    async fn flush(&self) -> Result<(), AuditError> {
        Ok(())
    }
}

/// A bus over a sink whose writes fail until the test says otherwise.
fn failing_bus() -> (Arc<FailingWrites>, AuditBus) {
    let sink = Arc::new(FailingWrites {
        inner: MemorySink::new(),
        fail: std::sync::atomic::AtomicBool::new(true),
    });
    let bus = AuditBus::new(vec![sink.clone()], BusConfig::default());
    (sink, bus)
}

/// Regression (red team, round 4): a write that failed (a full disk) was only logged, so
/// the next flush (the one `Run::end` waits on) reported success although its events were
/// never stored. The flush after a failed write now fails; later ones succeed again.
#[tokio::test]
async fn a_flush_after_a_failed_write_fails() {
    let (sink, bus) = failing_bus();
    let mut chain = RunChain::new("r", "a", None);
    bus.emit_all(events(&mut chain, 3));
    let e = bus
        .flush(Duration::from_secs(5))
        .await
        .expect_err("the events were not stored");
    assert!(e.to_string().contains("3 events"), "{e}");
    assert!(e.to_string().contains("No space left"), "{e}");
    sink.fail.store(false, Ordering::Release);
    bus.emit_all(events(&mut chain, 2));
    bus.flush(Duration::from_secs(5)).await.unwrap();
    assert_eq!(sink.inner.len(), 2);
    sink.fail.store(true, Ordering::Release);
    bus.emit_all(events(&mut chain, 1));
    assert!(bus.shutdown(Duration::from_secs(5)).await.is_err());
}

/// A loss a flush already reported still fails the shutdown: the trail has a hole, and a
/// process that ends (e.g. `toolgate replay --audit`) must not report success.
#[tokio::test]
async fn a_shutdown_fails_after_any_loss_even_one_a_flush_reported() {
    let (sink, bus) = failing_bus();
    let mut chain = RunChain::new("r", "a", None);
    bus.emit_all(events(&mut chain, 3));
    assert!(bus.flush(Duration::from_secs(5)).await.is_err());
    sink.fail.store(false, Ordering::Release);
    bus.emit_all(events(&mut chain, 2));
    bus.flush(Duration::from_secs(5)).await.unwrap();
    let e = bus
        .shutdown(Duration::from_secs(5))
        .await
        .expect_err("3 events were lost");
    assert!(
        e.to_string().contains("3 events") && e.to_string().contains("incomplete"),
        "{e}"
    );
}

/// Counts its flushes; the first one waits until the test opens the gate.
struct SlowFlush {
    inner: MemorySink,
    flushes: AtomicUsize,
    started: tokio::sync::Notify,
    gate: tokio::sync::Semaphore,
}

#[async_trait]
impl AuditSink for SlowFlush {
    async fn write_batch(&self, events: &[Arc<AuditEvent>]) -> Result<(), AuditError> {
        self.inner.write_batch(events).await
    }
    async fn flush(&self) -> Result<(), AuditError> {
        if self.flushes.fetch_add(1, Ordering::AcqRel) == 0 {
            self.started.notify_one();
            let _permit = self.gate.acquire().await;
        }
        Ok(())
    }
}

#[tokio::test]
async fn flushes_asked_for_during_a_flush_are_answered_by_one_flush() {
    let sink = Arc::new(SlowFlush {
        inner: MemorySink::new(),
        flushes: AtomicUsize::new(0),
        started: tokio::sync::Notify::new(),
        gate: tokio::sync::Semaphore::new(0),
    });
    let bus = AuditBus::new(vec![sink.clone()], BusConfig::default());
    let mut chain = RunChain::new("r", "a", None);
    bus.emit_all(events(&mut chain, 2));
    let first = tokio::spawn({
        let bus = bus.clone();
        async move { bus.flush(Duration::from_secs(5)).await }
    });
    sink.started.notified().await;
    // Two callers flush (their events first) while the first flush is in progress: both
    // requests are queued before it ends.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut replies = Vec::new();
    for _ in 0..2 {
        bus.emit_all(events(&mut chain, 3));
        let (tx, rx) = oneshot::channel();
        bus.inner.senders[0]
            .send(Msg::Flush(tx, deadline))
            .await
            .unwrap();
        replies.push(rx);
    }
    sink.gate.add_permits(1);
    first.await.unwrap().unwrap();
    for rx in replies {
        rx.await.unwrap().unwrap();
    }
    assert_eq!(
        sink.flushes.load(Ordering::Acquire),
        2,
        "one flush answers both callers that asked during the first"
    );
    let seqs: Vec<u64> = sink.inner.events().iter().map(|e| e.seq()).collect();
    assert_eq!(seqs, (0..8).collect::<Vec<u64>>());
}
