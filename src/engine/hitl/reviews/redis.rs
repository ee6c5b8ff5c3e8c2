//! Human reviews on Redis: a review approved or denied by any process (`toolgate review ...
//! --state redis://…`, or another replica's engine) is seen by every engine at its next
//! decision.
//!
//! Each review is a key of its own, so each expires on its own, and nothing is ever read
//! whole (operations-redis.md, "Reviews on Redis"). Under one hash tag (one Redis Cluster
//! slot):
//!
//! * `<prefix>:{reviews}:r:<id>`: the review as JSON. It lives [`PENDING_TTL_SECS`] from its
//!   creation while pending, and [`DECIDED_RETENTION_SECS`] from its decision once decided or
//!   expired (a decision sets its TTL anew; no other review's write touches it).
//! * `<prefix>:{reviews}:fp:<fingerprint>`: the id of the call's review, with the same TTL.
//! * `<prefix>:{reviews}:ids` and `…:pending`: sorted sets of ids (all, pending), every score 0,
//!   so ordered by id: review ids are UUID v7, so that is creation order. Listing pages through
//!   them ([`RedisReviewStore::page`]); an id whose review expired is dropped from them when a
//!   listing or a lookup meets it, and each insert drops up to two from the oldest end.
//!
//! Inserting is one Lua script (a pending, approved or denied review for the same fingerprint
//! wins, as in the memory store); deciding reads the review by its id (O(1); a unique prefix of
//! at least 8 characters is looked up in `ids` in O(log n)) and is a compare-and-set of its
//! JSON (another script), retried when another process changed it in between, so no decision
//! is lost and none is applied twice.
//!
//! [`ReviewStore`] is synchronous, so this store uses a blocking connection with the configured
//! timeout on connect, read and write (default 50 ms): an engine asks it only on hitl
//! decisions. A failure never allows a call: `get` answers "no review" (the call stays
//! held for review) and an insert that cannot be stored returns the new review unsaved
//! (logged).

use std::path::PathBuf;
use std::time::Duration;

use parking_lot::Mutex;

use super::{Review, ReviewError, ReviewStore, ReviewVerdict};
use crate::engine::decide::decision::ReviewStatus;
use crate::state::redis::RedisConfig;
use crate::state::redis::{redact_url, scrub_url as scrub};

/// How long a pending review is kept after its creation (30 days).
pub const PENDING_TTL_SECS: u64 = 30 * 24 * 3600;
/// How long a decided (approved, denied or expired) review is kept after its decision (7
/// days): identical calls are decided by it meanwhile, then they ask again.
pub const DECIDED_RETENTION_SECS: u64 = 7 * 24 * 3600;
/// How many times a decision is retried when another process changes the review meanwhile.
const DECIDE_ATTEMPTS: usize = 16;
/// Reviews per page when listing them all.
pub const PAGE: usize = 100;
/// How many times a page is asked for before listing fails.
const PAGE_ATTEMPTS: usize = 4;

/// KEYS: fp key, ids, pending; ARGV: review key prefix, id, json, ttl.
const INSERT: &str = r#"
local cur = redis.call('GET', KEYS[1])
if cur then
  local text = redis.call('GET', ARGV[1] .. cur)
  if text then
    local ok, r = pcall(cjson.decode, text)
    if ok and type(r) == 'table' and r.status ~= 'expired' then return text end
  end
end
redis.call('SET', ARGV[1] .. ARGV[2], ARGV[3], 'EX', ARGV[4])
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[4])
redis.call('ZADD', KEYS[2], 0, ARGV[2])
redis.call('ZADD', KEYS[3], 0, ARGV[2])
for _, old in ipairs(redis.call('ZRANGE', KEYS[2], 0, 1)) do
  if redis.call('EXISTS', ARGV[1] .. old) == 0 then
    redis.call('ZREM', KEYS[2], old); redis.call('ZREM', KEYS[3], old)
  end
end
return ARGV[3]
"#;

/// KEYS: fp key; ARGV: review key prefix. The review of a fingerprint, or nil.
const GET_BY_FP: &str = r#"
local id = redis.call('GET', KEYS[1])
if not id then return false end
return redis.call('GET', ARGV[1] .. id)
"#;

/// KEYS: review key, fp key, pending; ARGV: old json, new json, ttl, id.
const COMPARE_AND_SET: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
if redis.call('GET', KEYS[2]) == ARGV[4] then redis.call('EXPIRE', KEYS[2], ARGV[3]) end
redis.call('ZREM', KEYS[3], ARGV[4])
return 1
"#;

/// KEYS: index, ids, pending; ARGV: review key prefix, min (lex), max (lex), limit, range
/// command (`ZRANGEBYLEX` for oldest first, `ZREVRANGEBYLEX` newest first, where min and max
/// swap places). Up to `limit` ids of the index, each with its JSON; ids whose review expired
/// are dropped from the indexes (and answered with an empty text).
const PAGE_SCRIPT: &str = r#"
local range = ARGV[5]
if range ~= 'ZRANGEBYLEX' and range ~= 'ZREVRANGEBYLEX' then
  return redis.error_reply('range must be ZRANGEBYLEX or ZREVRANGEBYLEX')
end
local ids = redis.call(range, KEYS[1], ARGV[2], ARGV[3], 'LIMIT', 0, tonumber(ARGV[4]))
local out = {}
for i, id in ipairs(ids) do
  local text = redis.call('GET', ARGV[1] .. id)
  if not text then
    redis.call('ZREM', KEYS[2], id); redis.call('ZREM', KEYS[3], id)
    text = ''
  end
  out[i] = {id, text}
end
return out
"#;

/// The order a page of an index is read in.
#[derive(Debug, Clone, Copy)]
enum Range {
    OldestFirst,
    NewestFirst,
}

impl Range {
    fn command(self) -> &'static str {
        match self {
            Range::OldestFirst => "ZRANGEBYLEX",
            Range::NewestFirst => "ZREVRANGEBYLEX",
        }
    }
}

/// One page of reviews (see [`RedisReviewStore::page`]).
#[derive(Debug, Clone, Default)]
pub struct ReviewPage {
    /// The reviews, in id (creation) order.
    pub reviews: Vec<Review>,
    /// The id to pass as `after` for the next page; `None` at the end.
    pub next: Option<String>,
}

/// Ids of one page, each with its stored text and review (`None`: expired or unreadable).
type RawPage = Vec<(String, Option<(String, Review)>)>;

/// A [`ReviewStore`] on Redis, shared by every process that points at the same server and
/// prefix.
pub struct RedisReviewStore {
    client: redis::Client,
    url: String,
    timeout: Duration,
    /// `<prefix>:{reviews}:`: every key of this store starts so.
    base: String,
    insert: redis::Script,
    get_by_fp: redis::Script,
    cas: redis::Script,
    page: redis::Script,
    con: Mutex<Option<redis::Connection>>,
    /// Whether a connection was tried: the first may take one connect (the timeout, at least
    /// 1 s), later ones the timeout.
    tried: std::sync::atomic::AtomicBool,
    /// A connection attempt still under way (see [`connect`](Self::connect)).
    connecting: Mutex<Option<std::sync::mpsc::Receiver<redis::RedisResult<redis::Connection>>>>,
}

impl std::fmt::Debug for RedisReviewStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisReviewStore")
            .field("url", &redact_url(&self.url))
            .field("base", &self.base)
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
            base: format!("{}:{{reviews}}:", config.prefix),
            insert: redis::Script::new(INSERT),
            get_by_fp: redis::Script::new(GET_BY_FP),
            cas: redis::Script::new(COMPARE_AND_SET),
            page: redis::Script::new(PAGE_SCRIPT),
            con: Mutex::new(None),
            connecting: Mutex::new(None),
            tried: std::sync::atomic::AtomicBool::new(false),
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
        let first = !self.tried.swap(true, std::sync::atomic::Ordering::Relaxed);
        let wait = if first {
            self.timeout.max(Duration::from_secs(1))
        } else {
            self.timeout
        };
        match rx.recv_timeout(wait) {
            Ok(r) => r.map_err(|e| self.error(e)),
            Err(RecvTimeoutError::Timeout) => {
                *connecting = Some(rx);
                Err(self.error(format!("no answer within {} ms", self.timeout.as_millis())))
            }
            Err(RecvTimeoutError::Disconnected) => Err(self.error("connecting failed")),
        }
    }

    fn key(&self, kind: &str, name: &str) -> String {
        format!("{}{kind}{name}", self.base)
    }

    /// Up to `limit` reviews (pending ones only when `pending`), in id (creation) order,
    /// starting after the id `after`: one round trip, whatever the number of reviews stored.
    pub fn page(
        &self,
        pending: bool,
        after: Option<&str>,
        limit: usize,
    ) -> Result<ReviewPage, ReviewError> {
        let min = after.map_or_else(|| "-".to_string(), |a| format!("({a}"));
        let limit = limit.max(1);
        // A page is only read (and expired ids dropped): asked again, up to
        // `PAGE_ATTEMPTS` times, when it failed (a timeout on a busy server; a connection
        // still being made is taken up by the next attempt).
        let mut attempt = 1;
        let page = loop {
            match self.page_raw(pending, &min, "+", limit, Range::OldestFirst) {
                Ok(p) => break p,
                Err(e) if attempt >= PAGE_ATTEMPTS => return Err(e),
                Err(_) => attempt += 1,
            }
        };
        let next = if page.len() >= limit {
            page.last().map(|(id, _)| id.clone())
        } else {
            None
        };
        Ok(ReviewPage {
            reviews: page
                .into_iter()
                .filter_map(|(_, r)| r.map(|(_, r)| r))
                .collect(),
            next,
        })
    }

    /// The newest `limit` reviews (any status), newest first: one round trip.
    pub fn recent(&self, limit: usize) -> Result<Vec<Review>, ReviewError> {
        let page = self.page_raw(false, "+", "-", limit.max(1), Range::NewestFirst)?;
        Ok(page
            .into_iter()
            .filter_map(|(_, r)| r.map(|(_, r)| r))
            .collect())
    }

    /// The ids of the index from `from` to `to` (lex; `to` ≤ `from` when newest first), at
    /// most `limit`, each with its review.
    fn page_raw(
        &self,
        pending: bool,
        from: &str,
        to: &str,
        limit: usize,
        range: Range,
    ) -> Result<RawPage, ReviewError> {
        let index = self.key(if pending { "pending" } else { "ids" }, "");
        let raw: Vec<(String, String)> = self.with(|con| {
            self.page
                .key(&index)
                .key(self.key("ids", ""))
                .key(self.key("pending", ""))
                .arg(self.key("r:", ""))
                .arg(from)
                .arg(to)
                .arg(limit)
                .arg(range.command())
                .invoke::<Vec<(String, String)>>(con)
        })?;
        Ok(raw
            .into_iter()
            .map(|(id, text)| {
                if text.is_empty() {
                    return (id, None);
                }
                match serde_json::from_str::<Review>(&text) {
                    Ok(r) => (id, Some((text, r))),
                    Err(e) => {
                        tracing::warn!(
                            "{}: review {id} is not readable and is skipped: {e}",
                            redact_url(&self.url)
                        );
                        (id, None)
                    }
                }
            })
            .collect())
    }

    /// Every review (pending ones only when `pending`), page by page.
    pub fn try_list_filtered(&self, pending: bool) -> Result<Vec<Review>, ReviewError> {
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self.page(pending, after.as_deref(), PAGE)?;
            out.extend(page.reviews);
            match page.next {
                Some(n) => after = Some(n),
                None => return Ok(out),
            }
        }
    }

    /// The review with id `id` (the whole id), if stored: one round trip.
    pub fn review(&self, id: &str) -> Result<Option<Review>, ReviewError> {
        let text: Option<String> = self.with(|con| {
            redis::cmd("GET")
                .arg(self.key("r:", id))
                .query::<Option<String>>(con)
        })?;
        Ok(text.and_then(|t| serde_json::from_str::<Review>(&t).ok()))
    }

    /// All reviews, or the error that kept them from being read.
    pub fn try_list(&self) -> Result<Vec<Review>, ReviewError> {
        self.try_list_filtered(false)
    }

    /// The review `id` names (the whole id, or a unique prefix of at least 8 characters) with
    /// its stored text: O(1) for a whole id, O(log n) for a prefix.
    fn find(&self, id: &str) -> Result<(String, Review), ReviewError> {
        let text: Option<String> = self.with(|con| {
            redis::cmd("GET")
                .arg(self.key("r:", id))
                .query::<Option<String>>(con)
        })?;
        if let Some(text) = text
            && let Ok(r) = serde_json::from_str::<Review>(&text)
        {
            return Ok((text, r));
        }
        if id.is_empty() {
            return Err(ReviewError::NotFound(id.to_string()));
        }
        // Ids starting with `id` (ids are ASCII: U+10FFFF sorts after every one of them).
        let found = self.page_raw(
            false,
            &format!("[{id}"),
            &format!("[{id}\u{10ffff}"),
            8,
            Range::OldestFirst,
        )?;
        let mut candidates: Vec<(String, Review)> =
            found.into_iter().filter_map(|(_, r)| r).collect();
        let reviews: Vec<Review> = candidates.iter().map(|(_, r)| r.clone()).collect();
        let i = super::resolve(&reviews, id)?;
        Ok(candidates.swap_remove(i))
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
            self.get_by_fp
                .key(self.key("fp:", fingerprint))
                .arg(self.key("r:", ""))
                .invoke::<Option<String>>(con)
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
                .key(self.key("fp:", &review.fingerprint))
                .key(self.key("ids", ""))
                .key(self.key("pending", ""))
                .arg(self.key("r:", ""))
                .arg(&review.id)
                .arg(&json)
                .arg(PENDING_TTL_SECS)
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

    fn decide_with(&self, id: &str, verdict: &ReviewVerdict) -> Result<Review, ReviewError> {
        for _ in 0..DECIDE_ATTEMPTS {
            let (old, current) = self.find(id)?;
            let mut next = current.clone();
            // A verdict that loses to a due expiry still writes the expiry's decision.
            let outcome = next.set_decision(verdict);
            if next == current {
                return outcome.map(|()| next);
            }
            let new = to_json(&next)?;
            let ttl = if next.status == ReviewStatus::Pending {
                PENDING_TTL_SECS
            } else {
                DECIDED_RETENTION_SECS
            };
            let swapped: i64 = self.with(|con| {
                self.cas
                    .key(self.key("r:", &next.id))
                    .key(self.key("fp:", &next.fingerprint))
                    .key(self.key("pending", ""))
                    .arg(&old)
                    .arg(&new)
                    .arg(ttl)
                    .arg(&next.id)
                    .invoke::<i64>(con)
            })?;
            if swapped == 1 {
                return outcome.map(|()| next);
            }
        }
        Err(self.error(format!(
            "review {id} kept changing; gave up after {DECIDE_ATTEMPTS} attempts"
        )))
    }
}
