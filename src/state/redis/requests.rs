//! What one decision asks of Redis ([`ReserveRequest`]) and gets back ([`Reservation`]), and
//! what a call's outcome writes ([`Commit`]).

use super::keys;
use crate::state::WindowStats;

/// One `maxCalls` counter in a [`RedisStateStore::reserve`](super::RedisStateStore::reserve) call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterSpec {
    /// Key suffix from [`Keys`](super::Keys) (e.g. [`Keys::counter`](super::Keys::counter)).
    pub key: String,
    /// The limit.
    pub max: u64,
    /// Sliding window in milliseconds; `None` counts for ever.
    pub window_ms: Option<i64>,
    /// Whether to take a slot (`false`: only read the count).
    pub reserve: bool,
    /// Whether the key is run-scoped (expires `ttl` after its last use).
    pub expires: bool,
}

/// One metric window read in a [`RedisStateStore::reserve`](super::RedisStateStore::reserve) call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowSpec {
    /// Key from [`Keys::window`](super::Keys::window).
    pub key: String,
    /// Window length in milliseconds.
    pub window_ms: i64,
}

/// Everything one decision needs from the past, read (and counters reserved) atomically.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReserveRequest {
    /// The run's history and flags keys ([`Keys::run`](super::Keys::run)).
    pub run: Option<keys::RunKeys>,
    /// Counters, in the caller's order.
    pub counters: Vec<CounterSpec>,
    /// Metric windows, in the caller's order.
    pub windows: Vec<WindowSpec>,
    /// Clear the run's pause and abort flags before reading them.
    pub resume: bool,
    /// The run's lease, renewed by this reservation (and its chain head written), when the
    /// caller holds the run.
    pub lease: Option<LeaseSpec>,
}

/// A run's lease, renewed (piggy-backed on a reservation or on the timer's round trip).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseSpec {
    /// The holder's token.
    pub owner: String,
    /// The holder's chain head `(next seq, last hash)`, written when it is ahead of the stored one.
    pub head: Option<(u64, String)>,
}

/// A slot taken in a counter; give it back with
/// [`RedisStateStore::release`](super::RedisStateStore::release).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisPermit {
    /// The counter key.
    pub key: String,
    /// The window entry (`None` for a counter without window).
    pub member: Option<String>,
}

/// The answer to a [`ReserveRequest`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reservation {
    /// Whether every counter with `reserve` had room; when `false` no slot was taken.
    pub granted: bool,
    /// Each counter's count before this call's reservation, in request order.
    pub counts: Vec<u64>,
    /// The slots taken (empty unless `granted`).
    pub permits: Vec<RedisPermit>,
    /// Each window's aggregates, in request order.
    pub windows: Vec<WindowStats>,
    /// The run's distinct history entries (a set: no order, no repeats).
    pub history: Vec<String>,
    /// The run was paused.
    pub paused: bool,
    /// The run was aborted.
    pub aborted: bool,
    /// The caller's lease was lost: another holder (named) took the run over. Nothing was
    /// read or reserved.
    pub lease_lost: Option<String>,
}

/// The outcome of a call, written in one round trip by
/// [`RedisStateStore::commit`](super::RedisStateStore::commit).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Commit {
    /// The run whose history gets `tool`.
    pub run: Option<keys::RunKeys>,
    /// The entry to add to the run's history (a set).
    pub tool: Option<String>,
    /// Metric events `(window key, window_ms, value)` recorded at `now_ms`.
    pub metrics: Vec<(String, i64, f64)>,
    /// Metric events `(window key, window_ms, value, at_ms)` recorded at their own time.
    pub metrics_at: Vec<(String, i64, f64, i64)>,
    /// Counters counted unconditionally `(key, window_ms, expires)`.
    pub adds: Vec<(String, Option<i64>, bool)>,
    /// Slots to give back (as [`RedisStateStore::release`](super::RedisStateStore::release) does).
    pub releases: Vec<RedisPermit>,
    /// Set (`Some(true)`) or clear the run's abort flag.
    pub aborted: Option<bool>,
}

/// A run flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunFlag {
    /// Calls wait for a resume.
    Paused,
    /// Calls are blocked.
    Aborted,
}

impl RunFlag {
    pub(super) fn field(self) -> &'static str {
        match self {
            RunFlag::Paused => "paused",
            RunFlag::Aborted => "aborted",
        }
    }
}
