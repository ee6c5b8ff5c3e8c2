//! Engine state on Redis, shared by every process that points at the same server.
//!
//! [`RedisStateStore`] keeps `maxCalls` counters, metric windows, each run's tool history and
//! its pause/abort flags under `<prefix>:{<agentId>}:…` (one agent's keys share a Redis Cluster
//! hash slot). Everything one decision reads or reserves goes through **one** Lua script call
//! ([`RedisStateStore::reserve`]); the outcome of a call goes back in one more
//! ([`RedisStateStore::commit`]). Time is the caller's clock (milliseconds), never the
//! server's, and windows are exact: an event at `t` counts at `now` iff `now − w < t ≤ now`.
//!
//! Every call has a timeout (default 50 ms); the connection is re-established in the
//! background after a failure. Passwords in the URL never appear in errors or `Debug` output.

mod current_run;
mod keys;
mod scripts;
mod shared;
mod url;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

pub use crate::engine::redis_reviews::{
    DECIDED_RETENTION_SECS, PAGE as REVIEW_PAGE, PENDING_TTL_SECS, RedisReviewStore, ReviewPage,
};
pub use keys::{Keys, RunKeys};
pub use shared::LazyRedisStore;
pub use url::redact_url;
pub(crate) use url::scrub as scrub_url;

use super::WindowStats;

/// How to reach and use a Redis server.
#[derive(Clone)]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port/db`.
    pub url: String,
    /// Key prefix (default `toolgate`).
    pub prefix: String,
    /// Limit on every store call (default 50 ms).
    pub timeout: Duration,
    /// How long run-scoped keys and window entries live after their last use (default 24 h).
    pub ttl: Duration,
    /// How long a run's lease lasts without renewal (default 10 s): a holder that dies is
    /// replaced this long after its last renewal; a live one renews it with each decision and
    /// on a timer (a third of it).
    pub lease: Duration,
}

impl RedisConfig {
    /// Defaults for `url`: prefix `toolgate`, 50 ms timeout, 24 h TTL.
    pub fn new(url: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            prefix: "toolgate".to_string(),
            timeout: Duration::from_millis(50),
            ttl: Duration::from_secs(24 * 3600),
            lease: Duration::from_secs(10),
        }
    }
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redact_url(&self.url))
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("ttl", &self.ttl)
            .field("lease", &self.lease)
            .finish()
    }
}

/// A failure of the Redis store (the URL's password is redacted).
#[derive(Debug, thiserror::Error)]
pub enum RedisStateError {
    /// The URL could not be parsed or the server could not be reached.
    #[error("redis state store {url}: {message}")]
    Connect {
        /// The URL, password redacted.
        url: String,
        /// What failed.
        message: String,
    },
    /// A call took longer than the configured timeout.
    #[error("redis state store {url}: {op} timed out after {timeout_ms} ms")]
    Timeout {
        /// The URL, password redacted.
        url: String,
        /// The operation.
        op: &'static str,
        /// The limit.
        timeout_ms: u128,
    },
    /// The server answered with an error or the connection broke.
    #[error("redis state store {url}: {op}: {message}")]
    Command {
        /// The URL, password redacted.
        url: String,
        /// The operation.
        op: &'static str,
        /// What failed.
        message: String,
    },
    /// Redis lost toolgate's state (see [`RedisStateStore::epoch_key`]).
    #[error(
        "redis state store {url}: Redis lost toolgate's state ({key} is gone or changed: \
         eviction under maxmemory, FLUSHALL, or a restart without persistence); counters and \
         windows restarted from what Redis holds now{}. Run Redis with \
         maxmemory-policy noeviction and persistence (docs/operations-redis.md)",
        if *adopted { "" } else { " (the new epoch could not be read yet)" }
    )]
    StateLost {
        /// The URL, password redacted.
        url: String,
        /// The epoch key.
        key: String,
        /// Whether the process adopted the new epoch (its next decisions go on).
        adopted: bool,
    },
    /// Redis lost toolgate's state earlier and no operator has re-armed the prefix since: a
    /// decision reading a count that may have been lost (a counter without window, or one
    /// whose window has not passed since the loss) is refused.
    #[error(
        "redis state store {url}: Redis lost toolgate's state at {lost_at_ms} ms (server \
         time); counts that may have been lost are not trusted until an operator runs \
         `toolgate state rearm` (or, for a windowed count, until its window has passed since \
         the loss)"
    )]
    StateLostUnarmed {
        /// The URL, password redacted.
        url: String,
        /// When the loss was found (the server's clock, ms since the Unix epoch).
        lost_at_ms: i64,
    },
    /// The server's answer did not have the expected shape.
    #[error("redis state store {url}: {op}: unexpected reply: {message}")]
    Reply {
        /// The URL, password redacted.
        url: String,
        /// The operation.
        op: &'static str,
        /// What was wrong.
        message: String,
    },
}

/// One `maxCalls` counter in a [`RedisStateStore::reserve`] call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterSpec {
    /// Key suffix from [`Keys`] (e.g. [`Keys::counter`]).
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

/// One metric window read in a [`RedisStateStore::reserve`] call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowSpec {
    /// Key from [`Keys::window`].
    pub key: String,
    /// Window length in milliseconds.
    pub window_ms: i64,
}

/// Everything one decision needs from the past, read (and counters reserved) atomically.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReserveRequest {
    /// The run's history and flags keys ([`Keys::run`]).
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

/// A slot taken in a counter; give it back with [`RedisStateStore::release`].
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

/// The outcome of a call, written in one round trip by [`RedisStateStore::commit`].
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
    /// Slots to give back (as [`RedisStateStore::release`] does).
    pub releases: Vec<RedisPermit>,
    /// Set (`Some(true)`) or clear the run's abort flag.
    pub aborted: Option<bool>,
}

/// Counters, windows, run history and flags on Redis. Cheap to clone (one shared connection).
#[derive(Clone)]
pub struct RedisStateStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: ConnectionManager,
    config: RedisConfig,
    keys: Keys,
    scripts: scripts::Scripts,
    round_trips: AtomicU64,
    nonce: AtomicU64,
    /// The prefix's epoch as this process knows it (see [`RedisStateStore::epoch_key`]).
    epoch: parking_lot::Mutex<Arc<str>>,
}

impl std::fmt::Debug for RedisStateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStateStore")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl RedisStateStore {
    /// Connects (within the timeout, at least 1 s for the first connection).
    pub async fn connect(config: RedisConfig) -> Result<Self, RedisStateError> {
        let shown = redact_url(&config.url);
        let err = |message: String| RedisStateError::Connect {
            url: shown.clone(),
            message: url::scrub(&config.url, &message),
        };
        let client = redis::Client::open(config.url.as_str()).map_err(|e| err(e.to_string()))?;
        let first = config.timeout.max(Duration::from_secs(1));
        let cm_config = ConnectionManagerConfig::new()
            .set_connection_timeout(first)
            .set_response_timeout(config.timeout)
            .set_number_of_retries(2)
            .set_max_delay(500);
        let conn =
            tokio::time::timeout(first, ConnectionManager::new_with_config(client, cm_config))
                .await
                .map_err(|_| err(format!("no connection within {} ms", first.as_millis())))?
                .map_err(|e| err(e.to_string()))?;
        let keys = Keys::new(&config.prefix);
        let seed = rand::random::<u64>();
        let store = RedisStateStore {
            inner: Arc::new(Inner {
                conn,
                keys,
                scripts: scripts::Scripts::new(),
                round_trips: AtomicU64::new(0),
                nonce: AtomicU64::new(seed),
                epoch: parking_lot::Mutex::new(Arc::from("")),
                config,
            }),
        };
        store.read_epoch().await?;
        Ok(store)
    }

    /// The key whose value, the *epoch*, every process reads at start and every reservation
    /// checks: `<prefix>:epoch`. Redis losing toolgate's state (eviction under `maxmemory`,
    /// FLUSHALL, a restart without persistence) takes it too, so a lost state is a store
    /// failure (the decision follows the failure mode and writes an `error` event) instead of
    /// counters silently starting from zero. The process then adopts the new epoch (its next
    /// decisions go on, with the counters as Redis has them now). Not under an agent's hash
    /// tag: every reservation reads it (toolgate talks to one Redis server, not a Cluster).
    pub fn epoch_key(&self) -> String {
        self.inner.keys.epoch()
    }

    /// The epoch this process knows, and a fresh one (written when the prefix has none).
    fn epoch_args(&self) -> (Arc<str>, String) {
        let mine = self.inner.epoch.lock().clone();
        (mine, uuid::Uuid::now_v7().simple().to_string())
    }

    /// Adopts the epoch Redis holds now (after a loss was found).
    fn adopt_epoch(&self, e: &str) {
        if !e.is_empty() {
            *self.inner.epoch.lock() = Arc::from(e);
        }
    }

    fn lease_ms(&self) -> u64 {
        u64::try_from(self.inner.config.lease.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// Reads the prefix's epoch (writing a new one when there is none) and adopts it.
    async fn read_epoch(&self) -> Result<Arc<str>, RedisStateError> {
        let mut inv = self.inner.scripts.epoch.prepare_invoke();
        inv.key(self.epoch_key())
            .arg(uuid::Uuid::now_v7().simple().to_string());
        let e: String = self.run("epoch", inv).await?;
        let e: Arc<str> = Arc::from(e);
        *self.inner.epoch.lock() = e.clone();
        Ok(e)
    }

    /// Key builder for this store's prefix.
    pub fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// The configuration (print with `{:?}`: the password is redacted).
    pub fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    /// How many requests this store has sent to Redis (each is one round trip).
    pub fn round_trips(&self) -> u64 {
        self.inner.round_trips.load(Ordering::Relaxed)
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.inner.config.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    fn next_member(&self, now_ms: i64) -> String {
        let n = self.inner.nonce.fetch_add(1, Ordering::Relaxed);
        format!("{now_ms}:{n:016x}")
    }

    async fn run<T>(
        &self,
        op: &'static str,
        inv: redis::ScriptInvocation<'_>,
    ) -> Result<T, RedisStateError>
    where
        T: redis::FromRedisValue,
    {
        let cfg = &self.inner.config;
        let mut conn = self.inner.conn.clone();
        self.inner.round_trips.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(cfg.timeout, inv.invoke_async::<T>(&mut conn)).await {
            Err(_) => Err(RedisStateError::Timeout {
                url: redact_url(&cfg.url),
                op,
                timeout_ms: cfg.timeout.as_millis(),
            }),
            Ok(Err(e)) => Err(RedisStateError::Command {
                url: redact_url(&cfg.url),
                op,
                message: url::scrub(&cfg.url, &e.to_string()),
            }),
            Ok(Ok(v)) => Ok(v),
        }
    }

    /// A script's error reply: a loss just found (the epoch Redis holds now is adopted), a loss
    /// not re-armed yet, or any other command error.
    fn classify(&self, message: String) -> RedisStateError {
        let url = redact_url(&self.inner.config.url);
        if let Some(rest) = after_marker(&message, "TOOLGATE_STATE_LOST_UNARMED") {
            let lost_at_ms = rest
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|d| d.parse().ok())
                .unwrap_or(0);
            return RedisStateError::StateLostUnarmed { url, lost_at_ms };
        }
        if let Some(rest) = after_marker(&message, "TOOLGATE_STATE_LOST") {
            let e: String = rest
                .chars()
                .take_while(char::is_ascii_alphanumeric)
                .collect();
            self.adopt_epoch(&e);
            return RedisStateError::StateLost {
                url,
                key: self.epoch_key(),
                adopted: !e.is_empty(),
            };
        }
        RedisStateError::Command {
            url,
            op: "reserve",
            message,
        }
    }

    fn reply_err(&self, op: &'static str, message: impl Into<String>) -> RedisStateError {
        RedisStateError::Reply {
            url: redact_url(&self.inner.config.url),
            op,
            message: message.into(),
        }
    }

    /// Reads the run's history and flags, every window, and every counter's count, and — only
    /// if every counter with `reserve` has room — takes a slot in each: one round trip, atomic.
    pub async fn reserve(
        &self,
        req: &ReserveRequest,
        now_ms: i64,
    ) -> Result<Reservation, RedisStateError> {
        let script = &self.inner.scripts.reserve;
        let mut inv = script.prepare_invoke();
        let (hist, flags) = match &req.run {
            Some(r) => (r.history.as_str(), r.flags.as_str()),
            None => ("", ""),
        };
        inv.key(flags).key(hist);
        inv.arg(now_ms)
            .arg(self.ttl_ms())
            .arg(req.counters.len())
            .arg(req.windows.len())
            .arg(u8::from(req.run.is_some()))
            .arg(u8::from(req.resume));
        let mut members = Vec::with_capacity(req.counters.len());
        for c in &req.counters {
            inv.key(&c.key);
            let member = c.window_ms.map(|_| self.next_member(now_ms));
            inv.arg(c.max)
                .arg(c.window_ms.unwrap_or(-1))
                .arg(u8::from(c.reserve))
                .arg(u8::from(c.expires))
                .arg(member.as_deref().unwrap_or(""));
            members.push(member);
        }
        for w in &req.windows {
            inv.key(&w.key);
            inv.arg(w.window_ms);
        }
        let (epoch, fresh) = self.epoch_args();
        let empty = keys::RunKeys {
            history: String::new(),
            flags: String::new(),
            chain: String::new(),
            lease: String::new(),
        };
        let run = req.run.as_ref().unwrap_or(&empty);
        let lease = req.lease.as_ref().filter(|_| req.run.is_some());
        inv.key(self.epoch_key())
            .key(self.keys().lost())
            .key(&run.lease)
            .key(&run.chain);
        let (hseq, hhash) = match lease.and_then(|l| l.head.as_ref()) {
            Some((s, h)) => (s.to_string(), h.as_str()),
            None => (String::new(), ""),
        };
        inv.arg(&*epoch)
            .arg(fresh)
            .arg(lease.map_or("", |l| l.owner.as_str()))
            .arg(self.lease_ms())
            .arg(hseq)
            .arg(hhash);
        let raw: redis::Value = match self.run("reserve", inv).await {
            Err(RedisStateError::Command { message, .. }) => {
                return Err(self.classify(message));
            }
            r => r?,
        };
        scripts::parse_reserve(raw, req, members).map_err(|m| self.reply_err("reserve", m))
    }

    /// Gives back slots taken by [`reserve`](Self::reserve) (the call did not proceed).
    pub async fn release(&self, permits: &[RedisPermit]) -> Result<(), RedisStateError> {
        if permits.is_empty() {
            return Ok(());
        }
        let mut inv = self.inner.scripts.release.prepare_invoke();
        for p in permits {
            inv.key(&p.key);
            inv.arg(p.member.as_deref().unwrap_or(""));
        }
        let _: i64 = self.run("release", inv).await?;
        Ok(())
    }

    /// Writes a call's outcome (history, flag, metric events, unconditional counts, slots
    /// given back) in one round trip.
    pub async fn commit(&self, c: &Commit, now_ms: i64) -> Result<(), RedisStateError> {
        let mut inv = self.inner.scripts.commit.prepare_invoke();
        let (hist, flags) = match &c.run {
            Some(r) => (r.history.as_str(), r.flags.as_str()),
            None => ("", ""),
        };
        inv.key(hist).key(flags);
        let flag = match (c.aborted, c.run.is_some()) {
            (Some(true), true) => "1",
            (Some(false), true) => "0",
            _ => "",
        };
        inv.arg(now_ms)
            .arg(self.ttl_ms())
            .arg(c.tool.as_deref().unwrap_or(""))
            .arg(u8::from(c.tool.is_some() && c.run.is_some()))
            .arg(c.metrics.len() + c.metrics_at.len())
            .arg(c.adds.len())
            .arg(flag);
        let timed = c.metrics.iter().map(|(k, w, v)| (k, w, v, &now_ms));
        for (key, window_ms, value, at) in
            timed.chain(c.metrics_at.iter().map(|(k, w, v, t)| (k, w, v, t)))
        {
            inv.key(key);
            let member = format!("{}:{}", self.next_member(*at), value);
            inv.arg(*window_ms).arg(*at).arg(member);
        }
        for (key, window_ms, expires) in &c.adds {
            inv.key(key);
            inv.arg(window_ms.unwrap_or(-1))
                .arg(u8::from(*expires))
                .arg(self.next_member(now_ms));
        }
        for p in &c.releases {
            inv.key(&p.key);
            inv.arg(p.member.as_deref().unwrap_or(""));
        }
        let _: i64 = self.run("commit", inv).await?;
        Ok(())
    }

    /// Sets or clears a run's pause or abort flag (refreshes the flags' TTL).
    pub async fn set_flag(
        &self,
        run: &keys::RunKeys,
        flag: RunFlag,
        on: bool,
    ) -> Result<(), RedisStateError> {
        let mut inv = self.inner.scripts.flag.prepare_invoke();
        inv.key(&run.flags)
            .arg(flag.field())
            .arg(u8::from(on))
            .arg(self.ttl_ms());
        let _: i64 = self.run("set_flag", inv).await?;
        Ok(())
    }

    /// Forgets a run's history, flags and the given run-scoped counters and windows.
    pub async fn end_run(
        &self,
        run: &keys::RunKeys,
        scoped: &[String],
    ) -> Result<(), RedisStateError> {
        let mut inv = self.inner.scripts.forget.prepare_invoke();
        inv.key(&run.history).key(&run.flags);
        for k in scoped {
            inv.key(k);
        }
        let _: i64 = self.run("end_run", inv).await?;
        Ok(())
    }
}

impl RedisStateStore {
    /// Claims a run's audit chain and lease for `owner` (one round trip); see
    /// [`SharedStateStore::claim_chain`](crate::state::SharedStateStore::claim_chain).
    pub async fn claim_chain(
        &self,
        run: &keys::RunKeys,
        owner: &str,
    ) -> Result<crate::state::ChainClaim, RedisStateError> {
        let (epoch, fresh) = self.epoch_args();
        let mut inv = self.inner.scripts.claim_chain.prepare_invoke();
        inv.key(&run.chain)
            .key(&run.lease)
            .key(self.epoch_key())
            .key(self.keys().lost());
        inv.arg(owner)
            .arg(self.ttl_ms())
            .arg(self.lease_ms())
            .arg(&*epoch)
            .arg(fresh);
        type Raw = (String, String, String, String, String, String);
        let (state, seq, hash, prev, ep, lost): Raw = self.run("claim_chain", inv).await?;
        self.adopt_epoch(&ep);
        let mut claim = crate::state::ChainClaim::default();
        match state.as_str() {
            "ended" => claim.ended = true,
            "held" => {
                claim.held_elsewhere = true;
                claim.holder = Some(prev);
            }
            _ => {
                claim.leased = true;
                if !seq.is_empty() && !hash.is_empty() {
                    claim.head = Some(crate::state::ChainHead {
                        next_seq: seq
                            .parse()
                            .map_err(|_| self.reply_err("claim_chain", format!("seq {seq:?}")))?,
                        last_hash: hash,
                    });
                }
                if !prev.is_empty() && prev != owner {
                    claim.replaced = Some(prev);
                }
                claim.head_lost = claim.head.is_none() && !lost.is_empty();
            }
        }
        Ok(claim)
    }

    /// Leaves a run's audit chain at `head` and gives its lease up, or (`ended`) leaves the
    /// run's tombstone; `false` when `owner` no longer holds it.
    pub async fn leave_chain(
        &self,
        run: &keys::RunKeys,
        owner: &str,
        head: Option<&crate::state::ChainHead>,
        ended: bool,
    ) -> Result<bool, RedisStateError> {
        let mut inv = self.inner.scripts.leave_chain.prepare_invoke();
        inv.key(&run.chain)
            .key(&run.lease)
            .arg(owner)
            .arg(self.ttl_ms())
            .arg(head.map_or(0, |h| h.next_seq))
            .arg(head.map_or("", |h| h.last_hash.as_str()))
            .arg(u8::from(ended));
        let ok: i64 = self.run("leave_chain", inv).await?;
        Ok(ok == 1)
    }

    /// Renews the leases of the runs this process holds and writes their chain heads, in one
    /// round trip (the lease timer). Answers, per run, whether it is still held; a loss of
    /// state found meanwhile is adopted (and marked, as a reservation would).
    pub async fn renew_leases(
        &self,
        runs: &[(keys::RunKeys, String, Option<crate::state::ChainHead>)],
    ) -> Result<Vec<bool>, RedisStateError> {
        let (epoch, fresh) = self.epoch_args();
        let mut inv = self.inner.scripts.renew.prepare_invoke();
        inv.key(self.epoch_key()).key(self.keys().lost());
        inv.arg(&*epoch)
            .arg(fresh)
            .arg(self.lease_ms())
            .arg(self.ttl_ms());
        for (keys, owner, head) in runs {
            inv.key(&keys.lease).key(&keys.chain);
            match head {
                Some(h) => inv.arg(owner).arg(h.next_seq).arg(&h.last_hash),
                None => inv.arg(owner).arg("").arg(""),
            };
        }
        let raw: Vec<redis::Value> = self.run("renew_leases", inv).await?;
        let mut it = raw.into_iter();
        let ep: String = it
            .next()
            .map(|v| redis::FromRedisValue::from_redis_value(&v))
            .transpose()
            .map_err(|e| self.reply_err("renew_leases", e.to_string()))?
            .unwrap_or_default();
        self.adopt_epoch(&ep);
        let _lost_now = it.next();
        Ok(it.map(|v| matches!(v, redis::Value::Int(1))).collect())
    }

    /// Re-arms the prefix after a loss of state (`toolgate state rearm`): removes the loss
    /// marker, so counts are trusted again from what Redis holds now, and logs `entry` (a JSON
    /// object) in the prefix's re-arm log. Answers when the loss was found (server ms), if one was.
    pub async fn rearm(&self, entry: &serde_json::Value) -> Result<Option<i64>, RedisStateError> {
        let mut inv = self.inner.scripts.rearm.prepare_invoke();
        inv.key(self.keys().lost())
            .key(self.keys().rearms())
            .arg(entry.to_string());
        let lost: String = self.run("rearm", inv).await?;
        Ok(lost.parse().ok())
    }

    /// When Redis lost toolgate's state, if the prefix is not re-armed since (server ms).
    pub async fn lost_at(&self) -> Result<Option<i64>, RedisStateError> {
        let got: Option<String> = self
            .command("lost_at", redis::cmd("GET").arg(self.keys().lost()))
            .await?;
        Ok(got.and_then(|s| s.parse().ok()))
    }

    /// The prefix's re-arm log, newest first (JSON objects as written by `state rearm`).
    pub async fn rearm_log(&self) -> Result<Vec<String>, RedisStateError> {
        self.command(
            "rearm_log",
            redis::cmd("LRANGE")
                .arg(self.keys().rearms())
                .arg(0)
                .arg(99),
        )
        .await
    }

    async fn command<T: redis::FromRedisValue>(
        &self,
        op: &'static str,
        cmd: &mut redis::Cmd,
    ) -> Result<T, RedisStateError> {
        let mut conn = self.inner.conn.clone();
        self.inner.round_trips.fetch_add(1, Ordering::Relaxed);
        let cfg = &self.inner.config;
        match tokio::time::timeout(cfg.timeout, cmd.query_async(&mut conn)).await {
            Err(_) => Err(RedisStateError::Timeout {
                url: redact_url(&cfg.url),
                op,
                timeout_ms: cfg.timeout.as_millis(),
            }),
            Ok(r) => r.map_err(|e| RedisStateError::Command {
                url: redact_url(&cfg.url),
                op,
                message: url::scrub(&cfg.url, &e.to_string()),
            }),
        }
    }
}

/// The text after `marker` in `message` (and the `: ` or ` ` the client puts between an
/// error reply's code and its text), if it is there.
fn after_marker<'a>(message: &'a str, marker: &str) -> Option<&'a str> {
    message
        .find(marker)
        .map(|i| message[i + marker.len()..].trim_start_matches([':', ' ']))
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
    fn field(self) -> &'static str {
        match self {
            RunFlag::Paused => "paused",
            RunFlag::Aborted => "aborted",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_errors_are_classified_whatever_the_client_puts_after_the_code() {
        for m in ["TOOLGATE_STATE_LOST: 01ab", "x TOOLGATE_STATE_LOST 01ab"] {
            assert_eq!(after_marker(m, "TOOLGATE_STATE_LOST"), Some("01ab"));
        }
        assert_eq!(
            after_marker(
                "TOOLGATE_STATE_LOST_UNARMED: 17",
                "TOOLGATE_STATE_LOST_UNARMED"
            ),
            Some("17")
        );
    }

    #[test]
    fn debug_hides_password() {
        let c = RedisConfig::new("redis://user:s3cret@localhost:6379/0");
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("localhost:6379"), "{shown}");
    }
}
