//! The shared connection: connecting, the prefix's epoch, one timed round trip per script or
//! command, and how a script's error reply is read.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::url::{self, redact_url};
use super::{Keys, RedisConfig, RedisStateError, scripts};

/// Counters, windows, run history and flags on Redis. Cheap to clone (one shared connection).
#[derive(Clone)]
pub struct RedisStateStore {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) conn: ConnectionManager,
    pub(super) config: RedisConfig,
    pub(super) keys: Keys,
    pub(super) scripts: scripts::Scripts,
    pub(super) round_trips: AtomicU64,
    pub(super) nonce: AtomicU64,
    /// The prefix's epoch as this process knows it (see [`RedisStateStore::epoch_key`]).
    pub(super) epoch: parking_lot::Mutex<Arc<str>>,
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
    pub(super) fn epoch_args(&self) -> (Arc<str>, String) {
        let mine = self.inner.epoch.lock().clone();
        (mine, uuid::Uuid::now_v7().simple().to_string())
    }

    /// Adopts the epoch Redis holds now (after a loss was found).
    pub(super) fn adopt_epoch(&self, e: &str) {
        if !e.is_empty() {
            *self.inner.epoch.lock() = Arc::from(e);
        }
    }

    pub(super) fn lease_ms(&self) -> u64 {
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

    pub(super) fn ttl_ms(&self) -> u64 {
        u64::try_from(self.inner.config.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    pub(super) fn next_member(&self, now_ms: i64) -> String {
        let n = self.inner.nonce.fetch_add(1, Ordering::Relaxed);
        format!("{now_ms}:{n:016x}")
    }

    pub(super) async fn run<T>(
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
    pub(super) fn classify(&self, message: String) -> RedisStateError {
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

    pub(super) fn reply_err(
        &self,
        op: &'static str,
        message: impl Into<String>,
    ) -> RedisStateError {
        RedisStateError::Reply {
            url: redact_url(&self.inner.config.url),
            op,
            message: message.into(),
        }
    }

    pub(super) async fn command<T: redis::FromRedisValue>(
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
}
