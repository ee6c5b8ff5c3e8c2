//! Human reviews on Redis: a review approved or denied by any process (`toolgate review ...
//! --state redis://…`, or another replica's engine) is seen by every engine at its next
//! decision.
//!
//! Two hashes under one hash tag, so both live in one Redis Cluster slot:
//! `<prefix>:{reviews}:by-fp` (fingerprint → the review as JSON) and
//! `<prefix>:{reviews}:by-id` (review id → fingerprint). Inserting is one Lua script (a pending,
//! approved or denied review for the same fingerprint wins, as in the memory store); deciding
//! is a compare-and-set of the stored JSON (another script), retried when another process
//! changed the review in between, so no decision is lost and none is applied twice.
//!
//! [`ReviewStore`] is synchronous, so this store uses a blocking connection with the configured
//! timeout on connect, read and write (default 50 ms): an engine asks it only on hitl
//! decisions. A failure never allows a call: `get` answers "no review" (the call stays
//! held for review) and an insert that cannot be stored returns the new review unsaved
//! (logged).

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;

use super::RedisConfig;
use super::url::{redact_url, scrub};
use crate::engine::{Review, ReviewError, ReviewStatus, ReviewStore};

/// How long the review hashes live after their last change.
const REVIEW_TTL_SECS: u64 = 30 * 24 * 3600;
/// How many times a decision is retried when another process changes the review meanwhile.
const DECIDE_ATTEMPTS: usize = 16;

const INSERT: &str = r#"
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local ok, r = pcall(cjson.decode, cur)
  if ok and type(r) == 'table' and r.status ~= 'expired' then return cur end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return ARGV[3]
"#;

const COMPARE_AND_SET: &str = r#"
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
"#;

/// A [`ReviewStore`] on Redis, shared by every process that points at the same server and
/// prefix.
pub struct RedisReviewStore {
    client: redis::Client,
    url: String,
    timeout: Duration,
    by_fp: String,
    by_id: String,
    insert: redis::Script,
    cas: redis::Script,
    con: Mutex<Option<redis::Connection>>,
    /// A connection attempt still under way (see [`connect`](Self::connect)).
    connecting: Mutex<Option<std::sync::mpsc::Receiver<redis::RedisResult<redis::Connection>>>>,
}

impl std::fmt::Debug for RedisReviewStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisReviewStore")
            .field("url", &redact_url(&self.url))
            .field("by_fp", &self.by_fp)
            .finish()
    }
}

impl RedisReviewStore {
    /// A store for `config` (its URL, prefix and timeout). Fails only on a malformed URL; the
    /// server is reached on first use (see [`ping`](Self::ping) to check it at start).
    pub fn new(config: &RedisConfig) -> Result<Self, ReviewError> {
        let client = redis::Client::open(config.url.as_str()).map_err(|e| ReviewError::Io {
            path: PathBuf::from(redact_url(&config.url)),
            message: scrub(&config.url, &e.to_string()),
        })?;
        Ok(RedisReviewStore {
            client,
            url: config.url.clone(),
            timeout: config.timeout,
            by_fp: format!("{}:{{reviews}}:by-fp", config.prefix),
            by_id: format!("{}:{{reviews}}:by-id", config.prefix),
            insert: redis::Script::new(INSERT),
            cas: redis::Script::new(COMPARE_AND_SET),
            con: Mutex::new(None),
            connecting: Mutex::new(None),
        })
    }

    /// Checks that the server answers (PING within the timeout).
    pub fn ping(&self) -> Result<(), ReviewError> {
        self.with(|con| redis::cmd("PING").query::<String>(con).map(|_| ()))
    }

    fn error(&self, message: impl std::fmt::Display) -> ReviewError {
        ReviewError::Io {
            path: PathBuf::from(redact_url(&self.url)),
            message: scrub(&self.url, &message.to_string()),
        }
    }

    /// Runs `f` on the connection, connecting first when there is none; a failed call drops
    /// the connection so the next call reconnects.
    fn with<T>(
        &self,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, ReviewError> {
        let mut guard = self.con.lock();
        if guard.is_none() {
            let con = self.connect()?;
            con.set_read_timeout(Some(self.timeout))
                .and_then(|_| con.set_write_timeout(Some(self.timeout)))
                .map_err(|e| self.error(e))?;
            *guard = Some(con);
        }
        let Some(con) = guard.as_mut() else {
            return Err(self.error("no connection"));
        };
        match f(con) {
            Ok(v) => Ok(v),
            Err(e) => {
                *guard = None;
                Err(self.error(e))
            }
        }
    }

    /// A new connection within the timeout. The client's own connect bounds only the TCP
    /// connect: its set-up commands wait for ever on a server that accepts and never answers.
    /// So the connect runs on a thread of its own, awaited for the timeout; an attempt that
    /// has not finished is taken up again by the next call (never more than one at a time).
    fn connect(&self) -> Result<redis::Connection, ReviewError> {
        use std::sync::mpsc::{RecvTimeoutError, sync_channel};
        let mut connecting = self.connecting.lock();
        let rx = match connecting.take() {
            Some(rx) => rx,
            None => {
                let (tx, rx) = sync_channel(1);
                let (client, timeout) = (self.client.clone(), self.timeout);
                std::thread::Builder::new()
                    .name("toolgate-redis-connect".into())
                    .spawn(move || {
                        let _ = tx.send(client.get_connection_with_timeout(timeout));
                    })
                    .map_err(|e| self.error(e))?;
                rx
            }
        };
        match rx.recv_timeout(self.timeout) {
            Ok(r) => r.map_err(|e| self.error(e)),
            Err(RecvTimeoutError::Timeout) => {
                *connecting = Some(rx);
                Err(self.error(format!("no answer within {} ms", self.timeout.as_millis())))
            }
            Err(RecvTimeoutError::Disconnected) => Err(self.error("connecting failed")),
        }
    }

    /// Every stored review with its stored JSON text (for compare-and-set).
    fn all_raw(&self) -> Result<Vec<(String, Review)>, ReviewError> {
        let raw: Vec<(String, String)> = self.with(|con| {
            redis::cmd("HGETALL")
                .arg(&self.by_fp)
                .query::<Vec<(String, String)>>(con)
        })?;
        let mut out = Vec::with_capacity(raw.len());
        for (fp, text) in raw {
            match serde_json::from_str::<Review>(&text) {
                Ok(r) => out.push((text, r)),
                Err(e) => tracing::warn!(
                    "{}: review {fp} is not readable and is skipped: {e}",
                    redact_url(&self.url)
                ),
            }
        }
        out.sort_by(|a, b| {
            a.1.created_at
                .cmp(&b.1.created_at)
                .then(a.1.id.cmp(&b.1.id))
        });
        Ok(out)
    }

    /// All reviews, or the error that kept them from being read.
    pub fn try_list(&self) -> Result<Vec<Review>, ReviewError> {
        Ok(self.all_raw()?.into_iter().map(|(_, r)| r).collect())
    }
}

fn to_json(review: &Review) -> Result<String, ReviewError> {
    serde_json::to_string(review).map_err(|e| ReviewError::Io {
        path: PathBuf::from("review"),
        message: e.to_string(),
    })
}

impl ReviewStore for RedisReviewStore {
    fn get(&self, fingerprint: &str) -> Option<Review> {
        let text = match self.with(|con| {
            redis::cmd("HGET")
                .arg(&self.by_fp)
                .arg(fingerprint)
                .query::<Option<String>>(con)
        }) {
            Ok(t) => t?,
            Err(e) => {
                tracing::warn!("{e}");
                return None;
            }
        };
        serde_json::from_str(&text).ok()
    }

    fn insert_if_absent(&self, review: Review) -> Review {
        let json = match to_json(&review) {
            Ok(j) => j,
            Err(e) => {
                tracing::warn!("{e}");
                return review;
            }
        };
        let stored = self.with(|con| {
            self.insert
                .key(&self.by_fp)
                .key(&self.by_id)
                .arg(&review.fingerprint)
                .arg(&review.id)
                .arg(&json)
                .arg(REVIEW_TTL_SECS)
                .invoke::<String>(con)
        });
        match stored {
            Ok(text) => serde_json::from_str(&text).unwrap_or(review),
            Err(e) => {
                tracing::warn!("review {} not stored: {e}", review.id);
                review
            }
        }
    }

    fn list(&self) -> Vec<Review> {
        self.try_list().unwrap_or_else(|e| {
            tracing::warn!("{e}");
            Vec::new()
        })
    }

    fn decide(
        &self,
        id: &str,
        status: ReviewStatus,
        at: DateTime<Utc>,
    ) -> Result<Review, ReviewError> {
        for _ in 0..DECIDE_ATTEMPTS {
            let all = self.all_raw()?;
            let reviews: Vec<Review> = all.iter().map(|(_, r)| r.clone()).collect();
            let i = crate::engine::resolve_review(&reviews, id)?;
            let (old, current) = &all[i];
            let mut next = current.clone();
            next.set_decision(status, at)?;
            let new = to_json(&next)?;
            let swapped: i64 = self.with(|con| {
                self.cas
                    .key(&self.by_fp)
                    .arg(&next.fingerprint)
                    .arg(old)
                    .arg(&new)
                    .arg(REVIEW_TTL_SECS)
                    .invoke::<i64>(con)
            })?;
            if swapped == 1 {
                return Ok(next);
            }
        }
        Err(self.error(format!(
            "review {id} kept changing; gave up after {DECIDE_ATTEMPTS} attempts"
        )))
    }
}
