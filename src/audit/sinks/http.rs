//! [`HttpSink`]: ships batches to a collector (`toolgate collect`), spooling to disk whenever
//! the collector cannot take them.
//!
//! Delivery is at least once and in order; the collector deduplicates by event id, so every
//! event is stored exactly once. Life of an event:
//!
//! 1. `write_batch` appends it to an in-memory queue (bounded by `queueCapacity`). It never
//!    waits for the network.
//! 2. A background task posts `{"events": [...]}` batches of up to `batchSize` events when a
//!    batch is full, when the oldest queued event is `batchIntervalMs` old, or on flush.
//! 3. If a post fails with a network error, a 5xx, 408 or 429, the batch and everything queued
//!    behind it is written to the spool directory (one file per batch, named by an increasing
//!    sequence number, fsynced) and retried with exponential backoff and jitter. The spool is
//!    always sent before the memory queue, and memory only ever holds events newer than the
//!    spool, so order is kept. While the collector stays unreachable, queued events are moved
//!    to the spool at every failed retry once a batch is full or `batchIntervalMs` old.
//!    Spooled files left by an earlier process are sent first when the sink starts.
//! 4. If the in-memory queue is full, its contents are spilled to the spool: nothing is dropped.
//! 5. A 409 whose answer lists `rejected` events (an id reused, a fork, an id too long; see
//!    design §9) means the other events of the batch are stored: only the rejected events are
//!    written to `spool/rejected/` with the collector's reasons, and delivery goes on.
//! 6. A 413 (a batch over the collector's `--max-body-bytes`) splits the batch in halves, each
//!    posted the same way, down to single events: only an event too large by itself is
//!    rejected (as in 5), the rest are delivered.
//! 7. Any other 4xx is not retried: the batch is logged and written to `spool/rejected/` with
//!    the collector's answer, for inspection.
//!
//! A flush or shutdown after rejections errs with [`AuditError::Rejected`].

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, Notify, watch};
use tokio::time::Instant;

use crate::audit::{AuditError, AuditEvent, AuditSink};

mod rejected;
mod send;
mod spool;
use send::sender;
use spool::{scan_spool, spill};

/// The first `n` characters of `s` (for error texts quoting a collector's answer).
fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Configuration of an [`HttpSink`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpSinkConfig {
    /// The collector: its base URL (`http://host:port`, `/v1/events` is appended) or the full
    /// events endpoint.
    pub url: String,
    /// Sent as `Authorization: Bearer <token>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Most events per request. Default 500.
    #[serde(default = "d_batch_size")]
    pub batch_size: usize,
    /// Longest time an event waits in memory for its batch to fill, in ms. Default 1000.
    #[serde(default = "d_batch_interval_ms")]
    pub batch_interval_ms: u64,
    /// Events held in memory before spilling to the spool. Default 10 000.
    #[serde(default = "d_queue_capacity")]
    pub queue_capacity: usize,
    /// Spool directory. Default `./toolgate-audit/spool`. One sink (process) per directory.
    #[serde(default = "d_spool_dir")]
    pub spool_dir: PathBuf,
    /// First retry delay in ms; doubles per attempt up to `backoffMaxMs`. Default 200.
    #[serde(default = "d_backoff_initial_ms")]
    pub backoff_initial_ms: u64,
    /// Longest retry delay in ms. Default 30 000.
    #[serde(default = "d_backoff_max_ms")]
    pub backoff_max_ms: u64,
    /// Timeout of one request in ms. Default 10 000.
    #[serde(default = "d_request_timeout_ms")]
    pub request_timeout_ms: u64,
}

fn d_batch_size() -> usize {
    500
}
fn d_batch_interval_ms() -> u64 {
    1_000
}
fn d_queue_capacity() -> usize {
    10_000
}
fn d_spool_dir() -> PathBuf {
    PathBuf::from(super::file::DEFAULT_AUDIT_DIR).join("spool")
}
fn d_backoff_initial_ms() -> u64 {
    200
}
fn d_backoff_max_ms() -> u64 {
    30_000
}
fn d_request_timeout_ms() -> u64 {
    10_000
}

impl HttpSinkConfig {
    /// Defaults for everything but the collector URL.
    pub fn new(url: impl Into<String>) -> HttpSinkConfig {
        HttpSinkConfig {
            url: url.into(),
            token: None,
            batch_size: d_batch_size(),
            batch_interval_ms: d_batch_interval_ms(),
            queue_capacity: d_queue_capacity(),
            spool_dir: d_spool_dir(),
            backoff_initial_ms: d_backoff_initial_ms(),
            backoff_max_ms: d_backoff_max_ms(),
            request_timeout_ms: d_request_timeout_ms(),
        }
    }
}

/// Counters of an [`HttpSink`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HttpSinkStats {
    /// POST requests made.
    pub requests: u64,
    /// Events in batches the collector acknowledged.
    pub delivered_events: u64,
    /// Batches written to the spool.
    pub spooled_batches: u64,
    /// Batches rejected with a 4xx and moved to `rejected/`.
    pub rejected_batches: u64,
    /// Events rejected (in whole rejected batches, or one by one in a 409) and moved to
    /// `rejected/`.
    pub rejected_events: u64,
    /// Failed attempts that were retried.
    pub retries: u64,
    /// Batches the collector found too large (413) and that were split in halves.
    pub split_batches: u64,
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    delivered_events: AtomicU64,
    spooled_batches: AtomicU64,
    rejected_batches: AtomicU64,
    rejected_events: AtomicU64,
    retries: AtomicU64,
    split_batches: AtomicU64,
}

struct Inflight {
    events: Vec<Arc<AuditEvent>>,
    spooled: bool,
}

struct State {
    mem: VecDeque<Arc<AuditEvent>>,
    oldest_at: Option<Instant>,
    inflight: Option<Inflight>,
    spool: VecDeque<u64>,
    next_seq: u64,
    urgent: bool,
    rejected_since_flush: Vec<String>,
    /// Every rejection of the sink's life (the first 20 summaries and a count), for shutdown.
    rejected_ever: (Vec<String>, usize),
    last_error: Option<String>,
}

impl State {
    fn is_idle(&self) -> bool {
        self.mem.is_empty() && self.inflight.is_none() && self.spool.is_empty()
    }
}

struct Shared {
    config: HttpSinkConfig,
    endpoint: String,
    client: reqwest::Client,
    state: Mutex<State>,
    wake: Notify,
    progress: watch::Sender<u64>,
    stop: watch::Sender<bool>,
    counters: Counters,
}

/// Ships events to a collector. See the [module docs](self) for the delivery guarantees.
pub struct HttpSink {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for HttpSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSink")
            .field("endpoint", &self.shared.endpoint)
            .field("stats", &self.stats())
            .finish()
    }
}

enum Outcome {
    Delivered,
    Retry {
        error: String,
        after: Option<Duration>,
    },
    Rejected {
        status: u16,
        body: String,
    },
    /// Some events were stored, these (id, reason) were rejected (a 409 listing them, or
    /// a 413 batch split down to the events still too large).
    Partial {
        status: u16,
        rejected: Vec<(String, String)>,
        body: String,
    },
}

impl HttpSink {
    /// Creates the spool directory, picks up batches spooled by an earlier process (they are
    /// sent first) and starts the sending task on the current tokio runtime (required).
    pub fn new(config: HttpSinkConfig) -> Result<HttpSink, AuditError> {
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|_| AuditError::Sink("HttpSink::new needs a tokio runtime".into()))?;
        let endpoint = if config.url.trim_end_matches('/').ends_with("/v1/events") {
            config.url.clone()
        } else {
            format!("{}/v1/events", config.url.trim_end_matches('/'))
        };
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(config.request_timeout_ms.max(1)))
            .connect_timeout(Duration::from_millis(
                config.request_timeout_ms.clamp(1, 5_000),
            ))
            .build()
            .map_err(|e| AuditError::Http(format!("cannot build HTTP client: {e}")))?;
        let spool = scan_spool(&config.spool_dir)?;
        let next_seq = spool.back().map_or(1, |s| s + 1);
        if !spool.is_empty() {
            tracing::info!(
                "audit http sink: {} spooled batches in {} will be resent",
                spool.len(),
                config.spool_dir.display()
            );
        }
        let shared = Arc::new(Shared {
            config,
            endpoint,
            client,
            state: Mutex::new(State {
                mem: VecDeque::new(),
                oldest_at: None,
                inflight: None,
                spool,
                next_seq,
                urgent: false,
                rejected_since_flush: Vec::new(),
                rejected_ever: (Vec::new(), 0),
                last_error: None,
            }),
            wake: Notify::new(),
            progress: watch::channel(0).0,
            stop: watch::channel(false).0,
            counters: Counters::default(),
        });
        handle.spawn(sender(shared.clone()));
        Ok(HttpSink { shared })
    }

    /// The URL batches are posted to.
    pub fn endpoint(&self) -> &str {
        &self.shared.endpoint
    }

    /// Counters.
    pub fn stats(&self) -> HttpSinkStats {
        let c = &self.shared.counters;
        HttpSinkStats {
            requests: c.requests.load(Ordering::Relaxed),
            delivered_events: c.delivered_events.load(Ordering::Relaxed),
            spooled_batches: c.spooled_batches.load(Ordering::Relaxed),
            rejected_batches: c.rejected_batches.load(Ordering::Relaxed),
            rejected_events: c.rejected_events.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            split_batches: c.split_batches.load(Ordering::Relaxed),
        }
    }

    /// A receiver whose value changes whenever the sink's state does (a batch delivered,
    /// rejected or spooled, a failed attempt counted): await `changed()` on it to wait for a
    /// condition on [`HttpSink::stats`] or [`HttpSink::spooled`] without polling. Take it
    /// before checking the condition so no change is missed.
    pub fn progress(&self) -> watch::Receiver<u64> {
        self.shared.progress.subscribe()
    }

    /// Batches currently waiting in the spool.
    pub async fn spooled(&self) -> usize {
        self.shared.state.lock().await.spool.len()
    }

    /// Moves everything held in memory to the spool, so it survives the process.
    async fn spool_memory(&self) -> Result<(), AuditError> {
        let shared = &self.shared;
        let mut st = shared.state.lock().await;
        spill(shared, &mut st, &[]).await
    }

    /// Waits until everything is delivered (or rejected); errs with the rejections since the
    /// last flush, or (`lifetime`) of the sink's whole life.
    async fn wait_delivered(&self, lifetime: bool) -> Result<(), AuditError> {
        let mut progress = self.shared.progress.subscribe();
        loop {
            {
                let mut st = self.shared.state.lock().await;
                if st.is_idle() {
                    let mut rejected = std::mem::take(&mut st.rejected_since_flush);
                    if lifetime {
                        let (list, count) = &st.rejected_ever;
                        rejected = list.clone();
                        if *count > list.len() {
                            rejected.push(format!("and {} more", count - list.len()));
                        }
                    }
                    return if rejected.is_empty() {
                        Ok(())
                    } else {
                        Err(AuditError::Rejected(rejected.join("; ")))
                    };
                }
                st.urgent = true;
            }
            self.shared.wake.notify_one();
            if progress.changed().await.is_err() {
                return Err(AuditError::Closed);
            }
        }
    }
}

impl Drop for HttpSink {
    fn drop(&mut self) {
        self.shared.stop.send_replace(true);
    }
}

/// Sets the stop flag when dropped (also when a shutdown future is cancelled by a timeout).
struct StopOnDrop<'a>(&'a Shared);
impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.stop.send_replace(true);
    }
}

#[async_trait]
impl AuditSink for HttpSink {
    async fn write_batch(&self, events: &[Arc<AuditEvent>]) -> Result<(), AuditError> {
        if events.is_empty() {
            return Ok(());
        }
        let shared = &self.shared;
        let mut st = shared.state.lock().await;
        if st.mem.len() + events.len() > shared.config.queue_capacity {
            spill(shared, &mut st, events).await?;
        } else {
            if st.mem.is_empty() {
                st.oldest_at = Some(Instant::now());
            }
            st.mem.extend(events.iter().cloned());
        }
        drop(st);
        shared.wake.notify_one();
        Ok(())
    }

    /// Waits until every event is delivered to the collector; errs if some batch was rejected
    /// since the last flush. Cancel it (e.g. with a timeout) to stop waiting: undelivered
    /// events stay queued or spooled.
    async fn flush(&self) -> Result<(), AuditError> {
        self.wait_delivered(false).await
    }

    /// Spools whatever is in memory (so nothing is lost if the wait below is cut short), then
    /// waits for delivery and stops the sending task — also when cancelled. Errs with
    /// [`AuditError::Rejected`] if the collector rejected events at any time in the sink's life.
    async fn shutdown(&self) -> Result<(), AuditError> {
        let _stop = StopOnDrop(&self.shared);
        let has_memory = {
            let st = self.shared.state.lock().await;
            !st.mem.is_empty() || st.inflight.as_ref().is_some_and(|i| !i.spooled)
        };
        if has_memory {
            self.spool_memory().await?;
        }
        self.wait_delivered(true).await
    }
}
