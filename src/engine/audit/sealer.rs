//! Audit events off the decision path.
//!
//! The caller's thread only captures an event's data (typed: the call and the decision are
//! moved or cloned, not turned into JSON), picks its id, and appends it to a queue. Sealer
//! threads take the queues in batches: each writes a body to canonical JSON, hashes and chains
//! it (per run, in queue order, so each run's `seq` follows the order its events were emitted)
//! and hands it to the bus. A `tool.before` decision is written straight from its typed parts
//! (no `serde_json::Value`), unless a redaction rule may apply to `tool.decision` events: then,
//! and for bodies built as JSON, the body is a JSON map, redacted, then written. Both give the
//! same bytes.
//!
//! Shards: an engine runs one queue and sealer thread per core (up to [`MAX_SHARDS`], or as
//! many as `EngineBuilder::audit_sealer_threads` says). Each
//! run is given a shard when it starts (round robin) and all its events go there, so a run's
//! events are sealed and handed to the bus in order, while different runs are sealed on
//! different cores. (A run's own events cannot be sealed in parallel: each one's hash covers
//! the previous one's.)
//!
//! Hand-off is by batch: a sealer is woken when its queue goes from empty to non-empty (or
//! fills to [`WAKE_AT`]), then waits [`LINGER`] for more before it drains, so a burst of
//! decisions costs one wake-up, not one per event. Engine flush and shutdown drain every queue
//! on the caller's thread first, so nothing queued is lost, and so does dropping the engine;
//! `Run::end` drains its own run's queue.
//!
//! Callers seal too: once a shard's queue holds its *caller batch* of events, the caller that
//! queues the next one seals the whole queue itself. With cores to spare that is
//! [`HELP_AT`] (32,768), a bound that is reached only when the callers outrun the sealers, so
//! that they are slowed down rather than growing memory or losing events. When the process can
//! run on one core only, it is [`CALLER_BATCH_ONE_CORE`] (512): a sealer thread there cannot
//! run beside the caller, only instead of it, and while it waits for its turn the queue grew to
//! tens of thousands of events, sealed and written from memory long out of cache (and paged in
//! afresh); small batches sealed by the caller stay in cache, and the sealer thread is left
//! with the tail of a burst (it still wakes when a queue becomes non-empty).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use parking_lot::{Condvar, Mutex};
use uuid::Uuid;

pub(crate) use super::body::{Body, seal_body};
use crate::audit::{AuditBus, EventKind, Redactor, RunChain};

/// Queue length at which the sealer is woken at once instead of after [`LINGER`].
const WAKE_AT: usize = 4096;
/// How long the sealer lets a batch fill after the first event arrives.
const LINGER: Duration = Duration::from_millis(1);
/// Queue length past which callers seal the queue themselves: when events arrive faster than
/// the sealer thread keeps up (it shares the cores), the queue stays bounded and nothing is
/// dropped; the callers slow down instead.
const HELP_AT: usize = 32_768;
/// The caller batch when the process can run on one core only (see the module's doc).
pub(crate) const CALLER_BATCH_ONE_CORE: usize = 512;

/// How the sealer runs; `None` fields take their defaults.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SealerConfig {
    /// Sealer threads (shards); default one per core, up to [`MAX_SHARDS`].
    pub(crate) threads: Option<usize>,
    /// Events queued in a shard at which the caller seals it itself; default
    /// [`default_caller_batch`].
    pub(crate) caller_batch: Option<usize>,
}

/// The caller batch by default: [`CALLER_BATCH_ONE_CORE`] when the process can run on one
/// core only (its CPU affinity or quota, as the standard library reads it), else [`HELP_AT`].
pub(crate) fn default_caller_batch() -> usize {
    match std::thread::available_parallelism().map(std::num::NonZeroUsize::get) {
        Ok(1) => CALLER_BATCH_ONE_CORE,
        _ => HELP_AT,
    }
}

struct Pending {
    chain: Arc<Mutex<RunChain>>,
    kind: EventKind,
    at: DateTime<Utc>,
    /// The event's id when its emitter needed it at once; otherwise the sealer picks it (a
    /// UUID v7 of `at`, as the emitter would have), off the caller's thread.
    id: Option<Uuid>,
    body: Body,
}

/// Events a shard's queue (and its batch) has room for from the start, so that the first
/// bursts do not grow (and copy) the queue on the callers' thread.
const QUEUE_START: usize = 256;

struct Shared {
    queue: Mutex<Vec<Pending>>,
    wake: Condvar,
    /// Held while a batch is sealed and handed to the bus, so batches never interleave; with
    /// the scratch text typed bodies are written into.
    processing: Mutex<(Vec<Pending>, String)>,
    bus: AuditBus,
    redactor: Redactor,
    /// How long a hand-off waits for room in a full sink queue before it drops the batch.
    full_wait: Duration,
    stop: AtomicBool,
}

impl Shared {
    /// Seals everything queued so far, in order, and hands it to the bus.
    fn drain(&self) {
        let mut processing = self.processing.lock();
        let (batch, scratch) = &mut *processing;
        std::mem::swap(batch, &mut *self.queue.lock());
        let mut sealed = Vec::with_capacity(batch.len());
        // Each event is sealed where it lies in the batch (not moved out of it first), and its
        // body dropped there while it is still in cache.
        for p in batch.iter_mut() {
            let (event, checkpoint) = {
                let mut chain = p.chain.lock();
                if !chain.accepts(p.kind) {
                    // Nothing is appended to an ended chain (the run refuses decisions once
                    // it has ended; this catches what raced its end).
                    tracing::warn!(
                        run_id = %chain.run_id(),
                        kind = %p.kind,
                        "audit: event after the run's run.ended not written"
                    );
                    p.body = Body::Taken;
                    continue;
                }
                let id = p.id.unwrap_or_else(|| event_id(p.at));
                let event = seal_body(
                    &mut chain,
                    &self.redactor,
                    p.kind,
                    p.at,
                    id,
                    &mut p.body,
                    scratch,
                );
                (event, chain.checkpoint_if_due(p.at))
            };
            p.body = Body::Taken;
            sealed.push(Arc::new(event));
            if let Some(c) = checkpoint {
                sealed.push(Arc::new(c));
            }
        }
        batch.clear();
        // One hand-off per batch: the sinks' tasks are woken once, not per event. A sink
        // whose queue is full makes this wait (up to `full_wait`) rather than lose events:
        // meanwhile the queue grows to `HELP_AT` and the callers, helping, wait here too.
        self.bus.emit_shared_within(sealed, self.full_wait);
    }
}

enum Wake {
    No,
    Sealer,
    Help,
}

/// The engine's sealer: queues and the threads that drain them, one per shard. A run's
/// events all go to the shard it was given at its start ([`Sealer::assign_shard`]), so each
/// run's order is kept while different runs are sealed on different cores.
pub(crate) struct Sealer {
    shards: Vec<Arc<Shared>>,
    /// The shard the next run gets (round robin).
    next: AtomicUsize,
    /// The bus every shard hands its batches to.
    bus: AuditBus,
    /// Queue length at which a caller seals its shard's queue itself.
    caller_batch: usize,
}

/// How many sealer shards an engine runs by default: one per core, up to [`MAX_SHARDS`].
fn default_shards() -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .clamp(1, MAX_SHARDS)
}

/// The most sealer threads an engine runs by default.
const MAX_SHARDS: usize = 4;

impl Sealer {
    /// Starts the sealer threads (if a thread cannot start, its shard's events are sealed at
    /// flush, or by callers past [`HELP_AT`]).
    pub(crate) fn start(
        bus: AuditBus,
        redactor: Redactor,
        full_wait: Duration,
        config: SealerConfig,
    ) -> Sealer {
        let shards = (0..config.threads.unwrap_or_else(default_shards).max(1))
            .map(|n| {
                let shared = Arc::new(Shared {
                    queue: Mutex::new(Vec::with_capacity(QUEUE_START)),
                    wake: Condvar::new(),
                    processing: Mutex::new((Vec::with_capacity(QUEUE_START), String::new())),
                    bus: bus.clone(),
                    redactor: redactor.clone(),
                    full_wait,
                    stop: AtomicBool::new(false),
                });
                let s = shared.clone();
                let started = std::thread::Builder::new()
                    .name(format!("toolgate-sealer-{n}"))
                    .spawn(move || sealer_loop(&s));
                if let Err(e) = started {
                    tracing::error!(
                        "audit: cannot start a sealer thread ({e}); its events are sealed at flush"
                    );
                }
                shared
            })
            .collect();
        Sealer {
            shards,
            next: AtomicUsize::new(0),
            bus,
            caller_batch: config
                .caller_batch
                .unwrap_or_else(default_caller_batch)
                .max(1),
        }
    }

    /// The shard for a new run: every event of the run goes to it.
    pub(crate) fn assign_shard(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed) % self.shards.len().max(1)
    }

    /// Queues an event; returns at once, with the event's id.
    pub(crate) fn push(
        &self,
        shard: usize,
        chain: &Arc<Mutex<RunChain>>,
        kind: EventKind,
        at: DateTime<Utc>,
        body: Body,
    ) -> Uuid {
        let id = event_id(at);
        self.enqueue(shard, chain, kind, at, body, Some(id));
        id
    }

    /// [`push`](Self::push) for an event whose id its emitter does not need: the sealer
    /// picks it (no random number drawn on the caller's thread).
    #[inline]
    pub(crate) fn push_unnamed(
        &self,
        shard: usize,
        chain: &Arc<Mutex<RunChain>>,
        kind: EventKind,
        at: DateTime<Utc>,
        body: Body,
    ) {
        self.enqueue(shard, chain, kind, at, body, None);
    }

    #[inline]
    fn enqueue(
        &self,
        shard: usize,
        chain: &Arc<Mutex<RunChain>>,
        kind: EventKind,
        at: DateTime<Utc>,
        body: Body,
        id: Option<Uuid>,
    ) {
        let Some(shard) = self.shards.get(shard).or(self.shards.first()) else {
            // Never: an engine's sealer has at least one shard.
            return;
        };
        let wake = {
            let mut q = shard.queue.lock();
            q.push(Pending {
                chain: chain.clone(),
                kind,
                at,
                id,
                body,
            });
            match q.len() {
                n if n >= self.caller_batch => Wake::Help,
                1 | WAKE_AT => Wake::Sealer,
                _ => Wake::No,
            }
        };
        match wake {
            Wake::Sealer => {
                shard.wake.notify_one();
            }
            Wake::Help => shard.drain(),
            Wake::No => {}
        }
    }

    /// Seals and hands to the bus everything queued so far, on the caller's thread.
    pub(crate) fn drain(&self) {
        for shard in &self.shards {
            shard.drain();
        }
    }

    /// Seals and hands to the bus what shard `shard` has queued, on the caller's thread.
    pub(crate) fn drain_shard(&self, shard: usize) {
        match self.shards.get(shard) {
            Some(s) => s.drain(),
            None => self.drain(),
        }
    }

    /// Events queued and not yet taken for sealing.
    pub(crate) fn backlog(&self) -> usize {
        self.shards.iter().map(|s| s.queue.lock().len()).sum()
    }

    /// The bus the sealed events go to.
    pub(crate) fn bus(&self) -> &AuditBus {
        &self.bus
    }
}

impl Drop for Sealer {
    fn drop(&mut self) {
        for shard in &self.shards {
            shard.stop.store(true, Ordering::Release);
            shard.wake.notify_one();
            shard.drain();
        }
    }
}

fn sealer_loop(s: &Shared) {
    loop {
        {
            let mut q = s.queue.lock();
            while q.is_empty() {
                if s.stop.load(Ordering::Acquire) {
                    return;
                }
                s.wake.wait(&mut q);
            }
            if q.len() < WAKE_AT {
                // Let the batch fill; an arrival that fills it wakes us early.
                let _ = s.wake.wait_for(&mut q, LINGER);
            }
        }
        s.drain();
    }
}

/// A UUID v7 for an event at `ts` (as [`RunChain::seal`] makes them).
fn event_id(ts: DateTime<Utc>) -> Uuid {
    let secs = u64::try_from(ts.timestamp()).unwrap_or(0);
    Uuid::new_v7(uuid::Timestamp::from_unix(
        uuid::NoContext,
        secs,
        ts.timestamp_subsec_nanos(),
    ))
}

#[cfg(test)]
#[path = "sealer_tests.rs"]
mod tests;
