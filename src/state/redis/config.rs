//! How to reach a Redis server ([`RedisConfig`]) and how a call to it fails
//! ([`RedisStateError`]); the URL's password never shows in either.

use std::time::Duration;

use super::url::redact_url;

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
    /// Redis lost toolgate's state (see
    /// [`RedisStateStore::epoch_key`](super::RedisStateStore::epoch_key)).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_password() {
        let c = RedisConfig::new("redis://user:s3cret@localhost:6379/0");
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("localhost:6379"), "{shown}");
    }
}
