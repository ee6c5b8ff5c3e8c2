//! The task that hands one sink its events, in batches, and runs its flushes.
//!
//! **Group commit.** Flushes are coalesced: every flush request queued behind the one being
//! served (and the events queued with them) is taken at once, the events written, and one
//! `flush` of the sink answers them all. A sink whose flush is slow (the file sink's fsync)
//! therefore serves callers that flush at the same time with one flush instead of one each.
//! Callers that each wait for their flush and then flush again (every `Run::end`) would still
//! fall into step with alternate flushes (one arrives while the other's is being served), so
//! when the last flush answered several callers, the next one waits for as many requests, for
//! at most as long as that flush took (and [`MAX_GROUP_WAIT`]): the callers it answered come
//! back within that time when they do little between flushes, and one flush answers them all
//! again. A lone caller (the last flush answered one request) never waits.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::mpsc;

use super::{AuditError, AuditEvent, AuditSink, Msg, Reply, Room};

/// The longest a flush waits for the callers the last flush answered to ask again.
const MAX_GROUP_WAIT: Duration = Duration::from_millis(2);

/// Runs a sink's flush/shutdown until `deadline`; past it the future is dropped (sinks must be
/// cancel-safe there: the HTTP sink has spooled its memory by then) and the worker moves on.
async fn bounded(
    fut: impl std::future::Future<Output = Result<(), AuditError>>,
    deadline: tokio::time::Instant,
    what: &str,
) -> Result<(), AuditError> {
    let started = tokio::time::Instant::now();
    match tokio::time::timeout_at(deadline, AssertUnwindSafe(fut).catch_unwind()).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => Err(AuditError::Sink(format!("sink panicked in {what}"))),
        Err(_) => Err(AuditError::Timeout(
            deadline.saturating_duration_since(started),
        )),
    }
}

/// The same error, for another caller of a grouped flush.
fn duplicate(e: &AuditError) -> AuditError {
    match e {
        AuditError::Timeout(d) => AuditError::Timeout(*d),
        AuditError::Closed => AuditError::Closed,
        other => AuditError::Sink(other.to_string()),
    }
}

/// What one turn of the worker took from the queue.
struct Turn {
    /// Events, in order (when more than one hand-off came).
    batch: Vec<Arc<AuditEvent>>,
    /// A hand-off found alone in the queue is written as it came (its events are not shared
    /// once more into `batch`).
    alone: Option<Arc<[Arc<AuditEvent>]>>,
    /// Flush requests to answer once the events are written.
    flushes: Vec<(Reply, tokio::time::Instant)>,
    /// A shutdown request (the last message served).
    shutdown: Option<(Reply, tokio::time::Instant)>,
    /// Events the sink failed to write since the last flush answered, and the last failure:
    /// that flush then fails too (its callers were told their events are stored).
    lost: Option<(usize, String)>,
    /// Events the sink failed to write since it started, and the last failure: shutdown
    /// fails when any were (a trail with a hole is not a stored trail, even if a flush
    /// already said so).
    lost_in_all: Option<(usize, String)>,
}

impl Turn {
    /// Counts `n` events the sink failed to write (`why`), for the next flush to report.
    fn lose(&mut self, n: usize, why: String) {
        let total = self.lost.as_ref().map_or(0, |(k, _)| *k) + n;
        self.lost = Some((total, why.clone()));
        let all = self.lost_in_all.as_ref().map_or(0, |(k, _)| *k) + n;
        self.lost_in_all = Some((all, why));
    }

    /// The answer to a shutdown whose sink call returned `result`: as [`Turn::settle`], and an
    /// error when any event was lost since the sink started.
    fn settle_shutdown(&mut self, result: Result<(), AuditError>) -> Result<(), AuditError> {
        let settled = self.settle(result);
        match (&settled, self.lost_in_all.take()) {
            (Ok(()), Some((n, why))) => Err(AuditError::Sink(format!(
                "{n} events could not be written since the sink started (last: {why}): the \
                 trail is incomplete"
            ))),
            _ => settled,
        }
    }

    /// The answer to a flush or shutdown whose sink call returned `result`: an error when
    /// events were lost since the last one answered (then no longer counted).
    fn settle(&mut self, result: Result<(), AuditError>) -> Result<(), AuditError> {
        match self.lost.take() {
            Some((n, why)) => Err(AuditError::Sink(format!(
                "{n} events could not be written since the last flush ({why})"
            ))),
            None => result,
        }
    }
}

struct Worker {
    sink: Arc<dyn AuditSink>,
    max_batch: usize,
    in_batches: Arc<AtomicUsize>,
    room: Arc<Room>,
}

impl Worker {
    /// A hand-off's events leave the sink's queue (counted out, room signalled).
    fn taken(&self, es: &[Arc<AuditEvent>]) {
        self.in_batches.fetch_sub(es.len(), Ordering::AcqRel);
        self.room.signal();
    }

    /// Adds `msg` to the turn, in order.
    fn absorb(&self, turn: &mut Turn, msg: Msg) {
        match msg {
            Msg::Event(e) => {
                // Not alone after all: it joins the batch first, in order.
                if let Some(es) = turn.alone.take() {
                    self.taken(&es);
                    turn.batch.extend(es.iter().cloned());
                }
                turn.batch.push(e);
            }
            Msg::Events(es) => {
                if turn.batch.is_empty() && turn.alone.is_none() {
                    turn.alone = Some(es);
                } else {
                    if let Some(first) = turn.alone.take() {
                        self.taken(&first);
                        turn.batch.extend(first.iter().cloned());
                    }
                    self.taken(&es);
                    turn.batch.extend(es.iter().cloned());
                }
            }
            Msg::Flush(reply, deadline) => turn.flushes.push((reply, deadline)),
            Msg::Shutdown(reply, deadline) => turn.shutdown = Some((reply, deadline)),
        }
    }

    /// Whether the turn may take more messages.
    fn open(&self, turn: &Turn) -> bool {
        turn.shutdown.is_none() && turn.batch.len() < self.max_batch
    }

    /// Writes the turn's events (a hand-off of many events in chunks of `max_batch`).
    async fn write(&self, turn: &mut Turn) {
        let events: &[Arc<AuditEvent>] = match &turn.alone {
            Some(es) => {
                self.taken(es);
                es
            }
            None => &turn.batch,
        };
        let mut failed = Vec::new();
        for chunk in events.chunks(self.max_batch) {
            let n = chunk.len();
            match AssertUnwindSafe(self.sink.write_batch(chunk))
                .catch_unwind()
                .await
            {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::error!("audit sink failed to write {n} events: {e}");
                    failed.push((n, e.to_string()));
                }
                Err(_) => {
                    tracing::error!("audit sink panicked writing {n} events");
                    failed.push((n, "the sink panicked".into()));
                }
            }
        }
        for (n, why) in failed {
            turn.lose(n, why);
        }
        turn.alone = None;
        turn.batch.clear();
        self.room.signal();
    }
}

pub(super) async fn worker(
    sink: Arc<dyn AuditSink>,
    mut rx: mpsc::Receiver<Msg>,
    max_batch: usize,
    in_batches: Arc<AtomicUsize>,
    room: Arc<Room>,
) {
    let w = Worker {
        sink,
        max_batch,
        in_batches,
        room,
    };
    let mut turn = Turn {
        batch: Vec::with_capacity(64),
        alone: None,
        flushes: Vec::new(),
        shutdown: None,
        lost: None,
        lost_in_all: None,
    };
    // The requests the last flush answered, and how long it took (group commit).
    let mut last_group = 0usize;
    let mut last_took = Duration::ZERO;
    while let Some(first) = rx.recv().await {
        w.absorb(&mut turn, first);
        while w.open(&turn) {
            let Ok(next) = rx.try_recv() else { break };
            w.absorb(&mut turn, next);
        }
        if !turn.flushes.is_empty() && turn.flushes.len() < last_group {
            // The callers the last flush answered may be about to ask again: one flush for
            // them all (see the module's doc).
            let until = tokio::time::Instant::now() + last_took.min(MAX_GROUP_WAIT);
            while w.open(&turn) && turn.flushes.len() < last_group {
                match tokio::time::timeout_at(until, rx.recv()).await {
                    Ok(Some(next)) => w.absorb(&mut turn, next),
                    Ok(None) | Err(_) => break,
                }
            }
        }
        w.write(&mut turn).await;
        if !turn.flushes.is_empty() {
            let deadline = turn
                .flushes
                .iter()
                .map(|(_, d)| *d)
                .min()
                .unwrap_or_else(tokio::time::Instant::now);
            let started = tokio::time::Instant::now();
            let result = bounded(w.sink.flush(), deadline, "flush").await;
            last_took = started.elapsed();
            let result = turn.settle(result);
            last_group = turn.flushes.len();
            let mut flushes = std::mem::take(&mut turn.flushes).into_iter();
            if let Some((reply, _)) = flushes.next() {
                for (other, _) in flushes {
                    let _ = other.send(result.as_ref().map_err(duplicate).copied());
                }
                let _ = reply.send(result);
            }
        }
        if let Some((reply, deadline)) = turn.shutdown.take() {
            let result = bounded(w.sink.shutdown(), deadline, "shutdown").await;
            let _ = reply.send(turn.settle_shutdown(result));
            break;
        }
    }
}
