//! The seam to a state store shared by several processes (Redis): everything one decision
//! reads from the past, and every slot it takes, in **one** asynchronous call
//! ([`SharedStateStore::reserve`]); what the call's outcome changes in one more
//! ([`SharedStateStore::settle`]).
//!
//! The engine works out, once per tool and policy set, which counters, metric windows and run
//! data the rules in play touch, and asks for exactly those. The in-memory
//! [`StateStore`](super::StateStore) keeps its synchronous per-key fast path; an engine uses a
//! shared store instead of it when one is configured (`EngineBuilder::shared_state_store`, or
//! `EngineBuilder::redis_state`).

use async_trait::async_trait;

use super::{CurrentRun, StateKey, WindowStats};

fn no_current_runs() -> SharedStateError {
    SharedStateError("this state store keeps no current runs".into())
}

/// A failure of a shared store (timeout, connection, unexpected reply). The message names the
/// store (passwords redacted) and the operation.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct SharedStateError(pub String);

/// One `maxCalls` counter a decision reads (and may take a slot in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterOp {
    /// The counter.
    pub key: StateKey,
    /// The limit.
    pub max: u64,
    /// Sliding window in seconds; `None` counts for ever.
    pub window_secs: Option<u64>,
    /// Take a slot (only if every counter with `reserve` has room); `false`: only read.
    pub reserve: bool,
    /// The counter belongs to the run (forgotten when it ends; expires after the TTL).
    pub run_scoped: bool,
}

/// One metric window a decision reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowOp {
    /// The window.
    pub key: StateKey,
    /// Its length in seconds.
    pub window_secs: u64,
}

/// Everything one decision needs from the past.
#[derive(Debug, Clone, Copy)]
pub struct StateRequest<'a> {
    /// The agent (the Redis Cluster hash tag of every key).
    pub agent: &'a str,
    /// The run.
    pub run_id: &'a str,
    /// The counters, in the caller's order (answers come in the same order).
    pub counters: &'a [CounterOp],
    /// The metric windows, in the caller's order.
    pub windows: &'a [WindowOp],
    /// Whether the run's history (for `sequence`) is wanted.
    pub history: bool,
    /// Clear the run's abort flag before reading it (the run was resumed).
    pub resume: bool,
    /// Engine time, ms since the Unix epoch.
    pub now_ms: i64,
    /// The run's lease, when this process holds the run: renewed by this request (its chain
    /// head written with it), no round trip of its own.
    pub lease: Option<&'a LeaseHold>,
}

/// A run this process holds under a lease: its token and where its chain stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHold {
    /// The holder's token (unique per run handle).
    pub owner: String,
    /// The chain head to write (when ahead of the stored one).
    pub head: Option<ChainHead>,
}

/// One held run for [`SharedStateStore::renew_leases`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRenewal {
    /// The agent.
    pub agent: String,
    /// The run.
    pub run_id: String,
    /// The lease and head.
    pub hold: LeaseHold,
}

/// A slot taken in a counter by [`SharedStateStore::reserve`]; the store's own token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedPermit {
    /// The store's key of the counter.
    pub key: String,
    /// The entry in a windowed counter (`None` for a counter without window).
    pub member: Option<String>,
}

/// The answer to a [`StateRequest`], read atomically.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StateSnapshot {
    /// Whether every counter with `reserve` had room (a slot was then taken in each); when
    /// `false`, or when the run was aborted, no slot was taken.
    pub granted: bool,
    /// Each counter's count before this call's slot, in request order.
    pub counts: Vec<u64>,
    /// The slots taken.
    pub permits: Vec<SharedPermit>,
    /// Each window's aggregates at `now_ms`, in request order.
    pub windows: Vec<WindowStats>,
    /// The run's distinct history entries (see [`history_entry`]), in no particular order.
    pub history: Vec<String>,
    /// The run is aborted (paused by a human-review request).
    pub aborted: bool,
    /// The request's lease was lost: another holder (named) took the run over; nothing was
    /// read or reserved.
    pub lease_lost: Option<String>,
}

/// A counter counted unconditionally (an allowed call the decision took no slot for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterAdd {
    /// The counter.
    pub key: StateKey,
    /// Sliding window in seconds, as in [`CounterOp`].
    pub window_secs: Option<u64>,
    /// As in [`CounterOp`].
    pub run_scoped: bool,
}

/// A metric event.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricEvent {
    /// When it happened (engine time, ms since the Unix epoch).
    pub at_ms: i64,
    /// The window.
    pub key: StateKey,
    /// Its length in seconds.
    pub window_secs: u64,
    /// The value (finite).
    pub value: f64,
}

/// What a call's outcome changes, written in one round trip.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settlement {
    /// Slots to give back (the call did not proceed).
    pub release: Vec<SharedPermit>,
    /// Counters to count unconditionally.
    pub adds: Vec<CounterAdd>,
    /// A history entry to add to the run (see [`history_entry`]).
    pub history: Option<String>,
    /// Metric events.
    pub metrics: Vec<MetricEvent>,
    /// Set (`Some(true)`) or clear the run's abort flag.
    pub aborted: Option<bool>,
}

impl Settlement {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.release.is_empty()
            && self.adds.is_empty()
            && self.history.is_none()
            && self.metrics.is_empty()
            && self.aborted.is_none()
    }
}

/// The history entry of a call: its lowercased name and tags, `\u{1f}`-separated.
pub fn history_entry(name_lc: &str, tags_lc: &[String]) -> String {
    let mut s = String::with_capacity(name_lc.len() + tags_lc.len() * 8);
    s.push_str(name_lc);
    for t in tags_lc {
        s.push('\u{1f}');
        s.push_str(t);
    }
    s
}

/// Splits a [`history_entry`] into the name and the tags.
pub fn parse_history_entry(entry: &str) -> (&str, Vec<String>) {
    let mut parts = entry.split('\u{1f}');
    let name = parts.next().unwrap_or("");
    (name, parts.map(str::to_string).collect())
}

/// Where a run's audit chain stands in the store: the `seq` its next event gets and the hash
/// of its last event (design §8: a run continued in another process continues its chain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainHead {
    /// The `seq` of the run's next event.
    pub next_seq: u64,
    /// The hash of the run's last event.
    pub last_hash: String,
}

/// The answer to [`SharedStateStore::claim_chain`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChainClaim {
    /// The last head stored for the run (written by a holder that left it, or by a holder's
    /// lease renewals); `None`: a new run, or one whose head was lost.
    pub head: Option<ChainHead>,
    /// Another holder has the run and has not left it (its lease is live): the claim took
    /// nothing.
    pub held_elsewhere: bool,
    /// That holder's token, when known.
    pub holder: Option<String>,
    /// The claim took over from a holder whose lease lapsed (died, or frozen): its token.
    pub replaced: Option<String>,
    /// The run has ended (its id is not started again: design §16).
    pub ended: bool,
    /// No head is stored and the store lost its state (not re-armed since): the run may have
    /// had a chain that is gone.
    pub head_lost: bool,
    /// The claim took a lease that its holder must renew.
    pub leased: bool,
}

/// A state store shared by processes. Every call is bounded by the store's own timeout and
/// returns an error rather than waiting longer.
#[async_trait]
pub trait SharedStateStore: Send + Sync + std::fmt::Debug + 'static {
    /// Reads (and reserves) everything of `req` atomically, in one round trip.
    async fn reserve(&self, req: StateRequest<'_>) -> Result<StateSnapshot, SharedStateError>;

    /// Writes a call's outcome for run `run_id` of `agent` at `now_ms`, in one round trip.
    async fn settle(
        &self,
        agent: &str,
        run_id: &str,
        settlement: &Settlement,
        now_ms: i64,
    ) -> Result<(), SharedStateError>;

    /// Forgets a run: its history, flags and the run-scoped counters and windows `scoped`.
    async fn end_run(
        &self,
        agent: &str,
        run_id: &str,
        scoped: &[StateKey],
    ) -> Result<(), SharedStateError>;

    /// Claims run `run_id`'s audit chain for `owner` (a token unique to this run handle) and
    /// answers where it stands. The default (a store without chains) answers a fresh chain.
    async fn claim_chain(
        &self,
        _agent: &str,
        _run_id: &str,
        _owner: &str,
    ) -> Result<ChainClaim, SharedStateError> {
        Ok(ChainClaim::default())
    }

    /// Leaves run `run_id`'s chain at `head` and gives up its lease (`ended`: the run ended;
    /// its id is kept as ended for the TTL). Answers `false` when `owner` no longer holds it
    /// (another process took it over meanwhile); nothing is then written.
    async fn leave_chain(
        &self,
        _agent: &str,
        _run_id: &str,
        _owner: &str,
        _head: Option<&ChainHead>,
        _ended: bool,
    ) -> Result<bool, SharedStateError> {
        Ok(true)
    }

    /// Renews the leases of `runs` (and writes their heads) in one round trip; answers, per
    /// run, whether its holder still holds it. The default: a store without leases.
    async fn renew_leases(&self, runs: &[LeaseRenewal]) -> Result<Vec<bool>, SharedStateError> {
        Ok(vec![true; runs.len()])
    }

    /// How long a lease lasts without renewal (`None`: a store without leases).
    fn lease_duration(&self) -> Option<std::time::Duration> {
        None
    }

    /// The current run of `key` for `agent` (see [`current_run`](super::current_run)): the
    /// recorded run when it was used less than `idle_ms` before `now_ms` (its last use becomes
    /// `now_ms`), else `fresh`, created atomically (one process creates, the others continue),
    /// naming the idle run it replaced. The default: a store without such records (an error).
    async fn acquire_current_run(
        &self,
        _agent: &str,
        _key: &str,
        _fresh: &str,
        _now_ms: i64,
        _idle_ms: i64,
    ) -> Result<CurrentRun, SharedStateError> {
        Err(no_current_runs())
    }

    /// Records a use of `run_id` as `key`'s current run at `now_ms` (nothing when the current
    /// run is another).
    async fn touch_current_run(
        &self,
        _agent: &str,
        _key: &str,
        _run_id: &str,
        _now_ms: i64,
    ) -> Result<(), SharedStateError> {
        Err(no_current_runs())
    }

    /// Forgets `key`'s record when its run is `run_id` and was last used `idle_ms` or more
    /// before `now_ms`; `true` to exactly one caller, who ends the run.
    async fn end_idle_current_run(
        &self,
        _agent: &str,
        _key: &str,
        _run_id: &str,
        _now_ms: i64,
        _idle_ms: i64,
    ) -> Result<bool, SharedStateError> {
        Err(no_current_runs())
    }

    /// How many requests the store has sent (each one round trip), for tests and benchmarks.
    fn round_trips(&self) -> u64 {
        0
    }
}
