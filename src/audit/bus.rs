//! The [`AuditSink`] trait and the [`AuditBus`] that fans events out to sinks without ever
//! blocking the caller.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot};

use super::{AuditError, AuditEvent};

mod worker;
use worker::worker;

thread_local! {
    /// Set on the threads the bus starts for its sinks ([`BusConfig::own_thread`]).
    static SINK_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the current thread is one the bus started for one sink alone: a sink's blocking
/// I/O may run right there (it holds up that sink only, as awaiting it elsewhere would), with
/// no hop to tokio's blocking pool.
pub(crate) fn on_sink_thread() -> bool {
    SINK_THREAD.with(std::cell::Cell::get)
}

/// A destination for audit events.
///
/// The bus calls `write_batch` from one task per sink, so calls to one sink never overlap and
/// arrive in emission order. `write_batch` should return quickly (the HTTP sink only queues or
/// spools); a slow sink delays only its own queue, never a decision.
#[async_trait]
pub trait AuditSink: Send + Sync + 'static {
    /// Takes a batch of events, in emission order.
    async fn write_batch(&self, events: &[Arc<AuditEvent>]) -> Result<(), AuditError>;
    /// Makes everything written so far durable / delivered.
    async fn flush(&self) -> Result<(), AuditError>;
    /// Flushes and releases resources; the sink receives nothing afterwards.
    async fn shutdown(&self) -> Result<(), AuditError> {
        self.flush().await
    }
}

/// Configuration of an [`AuditBus`].
#[derive(Debug, Clone)]
pub struct BusConfig {
    /// Events queued per sink before [`AuditBus::emit`] starts dropping (and counting) events
    /// for that sink. Only a sink that cannot keep up with the disk fills it: the HTTP sink
    /// spools to disk instead of waiting for the network.
    pub queue_capacity: usize,
    /// Most events handed to one `write_batch` call.
    pub max_batch: usize,
    /// Run each sink's task on a thread of the bus's own, one per sink (instead of the tokio
    /// runtime current at [`AuditBus::new`]), so that a thread waiting for room in a sink's
    /// queue ([`AuditBus::emit_all_within`]) can never be the one that would make that room,
    /// and a sink's blocking I/O holds up that sink alone. The engine's bus does.
    pub own_thread: bool,
}

impl Default for BusConfig {
    fn default() -> Self {
        BusConfig {
            queue_capacity: 65_536,
            max_batch: 1_024,
            own_thread: false,
        }
    }
}

/// Why a sink's queue did not take a hand-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    Full,
    Stopped,
}

impl Refused {
    fn as_str(self) -> &'static str {
        match self {
            Refused::Full => "queue full",
            Refused::Stopped => "sink stopped",
        }
    }
}

/// Where a producer waits for room in a sink's queue; sink tasks signal it as they take events.
#[derive(Default)]
struct Room {
    lock: parking_lot::Mutex<()>,
    freed: parking_lot::Condvar,
    /// Producers waiting (the tasks signal only when there are some).
    waiting: AtomicUsize,
}

impl Room {
    fn signal(&self) {
        if self.waiting.load(Ordering::Acquire) > 0 {
            // Taking the lock orders this signal after the waiter's check of the queue.
            drop(self.lock.lock());
            self.freed.notify_all();
        }
    }
}

type Reply = oneshot::Sender<Result<(), AuditError>>;

enum Msg {
    Event(Arc<AuditEvent>),
    /// Several events in order, handed over at once (one wake-up of the sink's task).
    Events(Arc<[Arc<AuditEvent>]>),
    /// Flush, giving up (dropping the sink's flush future) at the deadline.
    Flush(Reply, tokio::time::Instant),
    /// Shut down, giving up at the deadline.
    Shutdown(Reply, tokio::time::Instant),
}

struct Inner {
    senders: Vec<mpsc::Sender<Msg>>,
    /// Per sink: events inside `Events` hand-offs not yet taken by its task (bounded by the
    /// queue capacity, as single events are by the channel).
    in_batches: Vec<Arc<AtomicUsize>>,
    room: Arc<Room>,
    capacity: usize,
    closed: AtomicBool,
    dropped: AtomicU64,
    emitted: AtomicU64,
}

/// Counters of an [`AuditBus`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BusStats {
    /// Events passed to [`AuditBus::emit`].
    pub emitted: u64,
    /// Sink deliveries dropped because a sink's queue was full or the bus was shut down.
    pub dropped: u64,
}

/// Fans events out to sinks: a cheap, clonable handle.
///
/// Each sink gets a bounded queue and a task that hands it batches. [`AuditBus::emit`] is
/// synchronous and never blocks or fails. The worker tasks run on the tokio runtime current at
/// [`AuditBus::new`]; without one, the bus starts its own runtime on a background thread.
#[derive(Clone)]
pub struct AuditBus {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for AuditBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditBus")
            .field("sinks", &self.inner.senders.len())
            .field("stats", &self.stats())
            .finish()
    }
}

impl AuditBus {
    /// Starts one worker per sink.
    pub fn new(sinks: Vec<Arc<dyn AuditSink>>, config: BusConfig) -> AuditBus {
        let capacity = config.queue_capacity.max(1);
        let max_batch = config.max_batch.max(1);
        let mut senders = Vec::with_capacity(sinks.len());
        let mut in_batches = Vec::with_capacity(sinks.len());
        let mut workers = Vec::with_capacity(sinks.len());
        let room = Arc::new(Room::default());
        for sink in sinks {
            let (tx, rx) = mpsc::channel(capacity);
            senders.push(tx);
            let counter = Arc::new(AtomicUsize::new(0));
            in_batches.push(counter.clone());
            workers.push(worker(sink, rx, max_batch, counter, room.clone()));
        }
        let current = if config.own_thread {
            Err(())
        } else {
            tokio::runtime::Handle::try_current().map_err(|_| ())
        };
        match current {
            Ok(handle) => {
                for w in workers {
                    handle.spawn(w);
                }
            }
            Err(_) => {
                // A thread (and runtime) per sink: each sink's task is alone on its thread, so
                // a sink may do its blocking I/O right there (see `on_sink_thread`).
                for w in workers {
                    let spawned = std::thread::Builder::new()
                        .name("toolgate-audit".into())
                        .spawn(move || {
                            SINK_THREAD.with(|t| t.set(true));
                            match tokio::runtime::Builder::new_current_thread()
                                .enable_all()
                                .build()
                            {
                                Ok(rt) => rt.block_on(w),
                                Err(e) => tracing::error!("audit bus: cannot start a runtime: {e}"),
                            }
                        });
                    if let Err(e) = spawned {
                        tracing::error!("audit bus: cannot start a sink's thread: {e}");
                    }
                }
            }
        }
        AuditBus {
            inner: Arc::new(Inner {
                senders,
                in_batches,
                room,
                capacity,
                closed: AtomicBool::new(false),
                dropped: AtomicU64::new(0),
                emitted: AtomicU64::new(0),
            }),
        }
    }

    /// Queues `event` for every sink. Never blocks; problems are logged and counted.
    pub fn emit(&self, event: AuditEvent) {
        self.emit_arc(Arc::new(event));
    }

    /// Like [`AuditBus::emit`] for an event that is already shared.
    pub fn emit_arc(&self, event: Arc<AuditEvent>) {
        self.inner.emitted.fetch_add(1, Ordering::Relaxed);
        if self.inner.closed.load(Ordering::Acquire) {
            self.inner
                .dropped
                .fetch_add(self.inner.senders.len() as u64, Ordering::Relaxed);
            tracing::error!(
                run_id = event.run_id(),
                seq = event.seq(),
                "audit event emitted after shutdown; not delivered"
            );
            return;
        }
        for (i, tx) in self.inner.senders.iter().enumerate() {
            if let Err(e) = tx.try_send(Msg::Event(event.clone())) {
                let dropped = self.inner.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                let why = match e {
                    mpsc::error::TrySendError::Full(_) => "queue full",
                    mpsc::error::TrySendError::Closed(_) => "sink stopped",
                };
                // Logged at 1, 2, 4, 8, ... drops: a stuck sink must not flood the log.
                if dropped.is_power_of_two() {
                    tracing::error!(
                        sink = i,
                        run_id = event.run_id(),
                        seq = event.seq(),
                        dropped,
                        "audit event not delivered to sink: {why}"
                    );
                }
            }
        }
    }

    /// Queues `events`, in order, for every sink as one hand-off (one wake-up of each sink's
    /// task, not one per event). Never blocks; problems are logged and counted, as for
    /// [`AuditBus::emit`].
    pub fn emit_all(&self, events: Vec<AuditEvent>) {
        self.hand_off(events.into_iter().map(Arc::new).collect(), None);
    }

    /// [`emit_all`](AuditBus::emit_all) that waits, up to `wait`, for room in a full sink
    /// queue instead of dropping the events at once: the producer is slowed down to the pace
    /// of the slowest sink (backpressure). Past `wait` the events are dropped for that sink,
    /// logged and counted. It blocks the calling thread: call it from a thread that does not
    /// run the sinks' tasks (see [`BusConfig::own_thread`]).
    pub fn emit_all_within(&self, events: Vec<AuditEvent>, wait: Duration) {
        self.emit_shared_within(events.into_iter().map(Arc::new).collect(), wait);
    }

    /// [`emit_all_within`](AuditBus::emit_all_within) for events already shared (the sealer
    /// seals each straight into its `Arc`, so it is not moved again here).
    pub(crate) fn emit_shared_within(&self, events: Vec<Arc<AuditEvent>>, wait: Duration) {
        self.hand_off(events, Some(std::time::Instant::now() + wait));
    }

    fn hand_off(&self, events: Vec<Arc<AuditEvent>>, deadline: Option<std::time::Instant>) {
        if events.is_empty() {
            return;
        }
        let n = events.len() as u64;
        self.inner.emitted.fetch_add(n, Ordering::Relaxed);
        if self.inner.closed.load(Ordering::Acquire) {
            self.inner
                .dropped
                .fetch_add(n * self.inner.senders.len() as u64, Ordering::Relaxed);
            tracing::error!("{n} audit events emitted after shutdown; not delivered");
            return;
        }
        let events: Arc<[Arc<AuditEvent>]> = Arc::from(events);
        for (i, (tx, queued)) in self
            .inner
            .senders
            .iter()
            .zip(&self.inner.in_batches)
            .enumerate()
        {
            let mut refused = self.try_hand_off(tx, queued, &events);
            if let (Some(Refused::Full), Some(deadline)) = (refused, deadline) {
                refused = self.wait_and_hand_off(tx, queued, &events, deadline);
            }
            if let Some(why) = refused.map(Refused::as_str) {
                let before = self.inner.dropped.fetch_add(n, Ordering::Relaxed);
                tracing::error!(
                    sink = i,
                    dropped = before + n,
                    "{n} audit events not delivered to sink: {why}"
                );
            }
        }
    }

    /// Hands `events` to one sink's queue if it has room; else why not.
    fn try_hand_off(
        &self,
        tx: &mpsc::Sender<Msg>,
        queued: &AtomicUsize,
        events: &Arc<[Arc<AuditEvent>]>,
    ) -> Option<Refused> {
        // An empty queue takes any hand-off: memory stays within capacity plus one batch.
        let waiting = queued.load(Ordering::Acquire);
        if waiting > 0 && waiting + events.len() > self.inner.capacity {
            return Some(Refused::Full);
        }
        queued.fetch_add(events.len(), Ordering::AcqRel);
        match tx.try_send(Msg::Events(events.clone())) {
            Ok(()) => None,
            Err(e) => {
                queued.fetch_sub(events.len(), Ordering::AcqRel);
                Some(match e {
                    mpsc::error::TrySendError::Full(_) => Refused::Full,
                    mpsc::error::TrySendError::Closed(_) => Refused::Stopped,
                })
            }
        }
    }

    /// Waits (until `deadline`) for the sink's task to take events, then hands `events` off.
    fn wait_and_hand_off(
        &self,
        tx: &mpsc::Sender<Msg>,
        queued: &AtomicUsize,
        events: &Arc<[Arc<AuditEvent>]>,
        deadline: std::time::Instant,
    ) -> Option<Refused> {
        let room = &self.inner.room;
        room.waiting.fetch_add(1, Ordering::AcqRel);
        let mut guard = room.lock.lock();
        let why = loop {
            match self.try_hand_off(tx, queued, events) {
                Some(Refused::Full) => {}
                other => break other,
            }
            if room.freed.wait_until(&mut guard, deadline).timed_out() {
                break self.try_hand_off(tx, queued, events);
            }
        };
        drop(guard);
        room.waiting.fetch_sub(1, Ordering::AcqRel);
        why
    }

    /// Counters.
    pub fn stats(&self) -> BusStats {
        BusStats {
            emitted: self.inner.emitted.load(Ordering::Relaxed),
            dropped: self.inner.dropped.load(Ordering::Relaxed),
        }
    }

    /// Hands every event emitted so far to its sinks and flushes them, waiting at most `timeout`.
    pub async fn flush(&self, timeout: Duration) -> Result<(), AuditError> {
        self.control(timeout, Msg::Flush).await
    }

    /// Flushes, then shuts every sink down, waiting at most `timeout`. Events emitted afterwards
    /// are dropped (and logged).
    pub async fn shutdown(&self, timeout: Duration) -> Result<(), AuditError> {
        self.inner.closed.store(true, Ordering::Release);
        self.control(timeout, Msg::Shutdown).await
    }

    async fn control(
        &self,
        timeout: Duration,
        make: fn(Reply, tokio::time::Instant) -> Msg,
    ) -> Result<(), AuditError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let all = futures::future::join_all(self.inner.senders.iter().map(|tx| async move {
            let (reply_tx, reply_rx) = oneshot::channel();
            if tx.send(make(reply_tx, deadline)).await.is_err() {
                return Err(AuditError::Closed);
            }
            reply_rx.await.unwrap_or(Err(AuditError::Closed))
        }));
        match tokio::time::timeout(timeout, all).await {
            Err(_) => Err(AuditError::Timeout(timeout)),
            Ok(results) => {
                let mut errors: Vec<AuditError> =
                    results.into_iter().filter_map(Result::err).collect();
                if errors.iter().any(|e| matches!(e, AuditError::Timeout(_))) {
                    for e in errors
                        .iter()
                        .filter(|e| !matches!(e, AuditError::Timeout(_)))
                    {
                        tracing::error!("audit sink: {e}");
                    }
                    return Err(AuditError::Timeout(timeout));
                }
                match errors.len() {
                    0 => Ok(()),
                    1 => Err(errors.remove(0)),
                    _ => Err(AuditError::Sink(
                        errors
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("; "),
                    )),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
