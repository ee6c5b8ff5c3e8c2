//! Human review (hitl): call fingerprints and the review store.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use dashmap::DashMap;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::engine::decide::decision::ReviewStatus;
use crate::policy::OnExpire;

/// The reviewer recorded on a review decided by its `onExpire` (see [`Review::expiry_verdict`]).
pub const EXPIRY_REVIEWER: &str = "toolgate:expiry";

/// A review request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Review {
    /// Review id.
    pub id: String,
    /// Fingerprint of the call (agent, rule, tool, args, end user).
    pub fingerprint: String,
    /// Status.
    pub status: ReviewStatus,
    /// The agent.
    pub agent_id: String,
    /// The rule that asked for review.
    pub rule_id: String,
    /// The tool.
    pub tool_name: String,
    /// The arguments, as the call's audit event holds them: the spans `sensitiveData`
    /// detected replaced by `[redacted:<detector>]` (see [`redacted`](Self::redacted)), then
    /// the audit trail's redaction rules. Never the real arguments (the fingerprint is of them).
    pub args: Value,
    /// Where the engine redacted [`args`](Self::args), and by which detector (at most
    /// [`MAX_REDACTED`] entries, each path and detector once). A `[redacted:…]` text not listed
    /// here was written so by the agent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redacted: Vec<Redacted>,
    /// The end user, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enduser_id: Option<String>,
    /// The run that raised it.
    pub run_id: String,
    /// The call that raised it.
    pub call_id: String,
    /// The rule's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it was raised.
    pub created_at: DateTime<Utc>,
    /// When it was decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<DateTime<Utc>>,
    /// When a pending review expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    /// How the review is decided at [`expires_at`](Self::expires_at) (a policy's `onExpire`).
    /// `None`: the review is marked `expired` and the next identical call asks again (the
    /// library's [`EngineBuilder::review_ttl`](crate::engine::EngineBuilder::review_ttl)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_expire: Option<OnExpire>,
    /// Who decided it: the reviewer's name (a console login, `toolgate review --by`), or
    /// [`EXPIRY_REVIEWER`] for a review decided by its `onExpire`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// The reviewer's comment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// One redaction of a review's arguments: the dot path of the string (as in the audit
/// event's `detected`) and the detector whose match in it was replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redacted {
    /// Dot path of the string in the arguments (`cmd`, `items.0.body`; empty for the
    /// arguments themselves).
    pub path: String,
    /// The detector (`email`, `credit_card`, …).
    pub detector: String,
}

/// Redactions a review lists at most.
pub const MAX_REDACTED: usize = 64;

/// A decision on a review: its new status, when, by whom and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewVerdict {
    /// Approved, denied or expired.
    pub status: ReviewStatus,
    /// When it was decided.
    pub at: DateTime<Utc>,
    /// The reviewer, if known.
    pub by: Option<String>,
    /// The reviewer's comment.
    pub comment: Option<String>,
}

impl ReviewVerdict {
    /// A verdict without reviewer or comment.
    pub fn new(status: ReviewStatus, at: DateTime<Utc>) -> Self {
        ReviewVerdict {
            status,
            at,
            by: None,
            comment: None,
        }
    }

    /// The verdict with a reviewer.
    pub fn by(mut self, reviewer: impl Into<String>) -> Self {
        self.by = Some(reviewer.into());
        self
    }

    /// The verdict with a comment (an empty one is none).
    pub fn comment(mut self, comment: Option<String>) -> Self {
        self.comment = comment.filter(|c| !c.trim().is_empty());
        self
    }
}

/// The verdict of a pending review's `onExpire` once `now` reaches its expiry (decided at the
/// expiry, by [`EXPIRY_REVIEWER`]); `None` while it is not due, or when it has no `onExpire`.
pub fn expiry_verdict(
    status: ReviewStatus,
    expires_at: Option<DateTime<Utc>>,
    on_expire: Option<OnExpire>,
    now: DateTime<Utc>,
) -> Option<ReviewVerdict> {
    if status != ReviewStatus::Pending {
        return None;
    }
    let at = expires_at.filter(|e| *e <= now)?;
    let status = match on_expire? {
        OnExpire::Deny => ReviewStatus::Denied,
        OnExpire::Allow => ReviewStatus::Approved,
    };
    Some(ReviewVerdict {
        status,
        at,
        by: Some(EXPIRY_REVIEWER.to_string()),
        comment: Some("nobody decided before the review expired (onExpire)".to_string()),
    })
}

impl Review {
    /// The verdict of this review's `onExpire`, if it is due at `now` (see [`expiry_verdict`]).
    pub fn expiry_verdict(&self, now: DateTime<Utc>) -> Option<ReviewVerdict> {
        expiry_verdict(self.status, self.expires_at, self.on_expire, now)
    }

    /// Records a decision on this review: only a pending review can be approved or denied;
    /// any review can be expired (the next identical call asks again). A pending review whose
    /// `onExpire` is due at the verdict's time is decided by it first, and the verdict then
    /// conflicts with that decision, carrying the review so expired in
    /// [`ReviewError::AlreadyDecided::expired_now`] (the caller writes the review back when it
    /// changed, even on `Err`, and writes the expiry's event and notification).
    pub(crate) fn set_decision(&mut self, v: &ReviewVerdict) -> Result<(), ReviewError> {
        let mut expired_now = false;
        if v.status != ReviewStatus::Expired
            && v.by.as_deref() != Some(EXPIRY_REVIEWER)
            && let Some(exp) = self.expiry_verdict(v.at)
        {
            self.apply(&exp);
            expired_now = true;
        }
        if self.status != ReviewStatus::Pending && v.status != ReviewStatus::Expired {
            return Err(ReviewError::AlreadyDecided {
                id: self.id.clone(),
                status: self.status,
                by: self.decided_by.clone(),
                at: self.decided_at,
                expired_now: expired_now.then(|| Box::new(self.clone())),
            });
        }
        self.apply(v);
        Ok(())
    }

    fn apply(&mut self, v: &ReviewVerdict) {
        self.status = v.status;
        self.decided_at = Some(v.at);
        self.decided_by = v.by.clone();
        self.comment = v.comment.clone();
    }
}

/// The body of the `review.decided` audit event of a decided review: its id, status, reviewer,
/// comment and the call it is about (not its arguments: the `tool.decision` event of the call
/// has them, redacted).
pub fn decided_event_body(review: &Review) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    put("reviewId", review.id.clone().into());
    put("status", status_word(review.status).into());
    if let Some(by) = &review.decided_by {
        put("decidedBy", by.clone().into());
    }
    if let Some(c) = &review.comment {
        put("comment", c.clone().into());
    }
    if let Some(at) = review.decided_at {
        put(
            "decidedAt",
            at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                .into(),
        );
    }
    put("fingerprint", review.fingerprint.clone().into());
    put("ruleId", review.rule_id.clone().into());
    put("tool", serde_json::json!({"name": review.tool_name}));
    put("reviewRunId", review.run_id.clone().into());
    put("callId", review.call_id.clone().into());
    m
}

/// The fingerprint of a call: SHA-256 hex of agent id, rule id, tool name, canonical JSON of
/// the args and end-user id, separated by U+001F.
pub fn fingerprint(
    agent_id: &str,
    rule_id: &str,
    tool_name: &str,
    args: &Value,
    enduser_id: Option<&str>,
) -> String {
    let mut h = Sha256::new();
    for part in [agent_id, rule_id, tool_name] {
        h.update(part.as_bytes());
        h.update([0x1f]);
    }
    // The audit trail's canonical form: sorted keys, and `1.0` and `1` are the same number.
    h.update(crate::audit::canonical_json(args).as_bytes());
    h.update([0x1f]);
    h.update(enduser_id.unwrap_or("").as_bytes());
    hex::encode(h.finalize())
}

/// The fingerprint of a call whose arguments the trail holds redacted: `redacted_fp` (the
/// [`fingerprint`] of the redacted arguments) extended by an HMAC-SHA256, under the engine's
/// fingerprint key, of the real arguments' canonical JSON. Two calls that differ only inside
/// a redacted span get different fingerprints (an approval of one does not approve the other),
/// while the fingerprint written in the trail cannot be checked against a guess of the
/// redacted value without the key (held in memory, never written).
pub(crate) fn keyed_fingerprint(redacted_fp: &str, key: &[u8], real_args: &Value) -> String {
    let mac = super::notify::sign(key, crate::audit::canonical_json(real_args).as_bytes());
    let mut h = Sha256::new();
    h.update(redacted_fp.as_bytes());
    h.update([0x1f]);
    h.update(mac.as_bytes());
    hex::encode(h.finalize())
}

/// The part of a [`Review`] a decision reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewHead {
    /// Review id.
    pub id: String,
    /// Status.
    pub status: ReviewStatus,
    /// When a pending review expires.
    pub expires_at: Option<DateTime<Utc>>,
    /// How it is decided when it expires.
    pub on_expire: Option<OnExpire>,
}

impl ReviewHead {
    /// The head of `review`.
    pub fn of(review: &Review) -> ReviewHead {
        ReviewHead {
            id: review.id.clone(),
            status: review.status,
            expires_at: review.expires_at,
            on_expire: review.on_expire,
        }
    }
}

/// Errors of a review store.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// No review has this id.
    #[error("no review with id {0}")]
    NotFound(String),
    /// The review was already decided (by someone else, or by its expiry): the verdict was
    /// not applied.
    #[error("{}", already_decided(id, *status, by.as_deref(), *at))]
    AlreadyDecided {
        /// Review id.
        id: String,
        /// Its status.
        status: ReviewStatus,
        /// Who decided it, if recorded.
        by: Option<String>,
        /// When, if recorded.
        at: Option<DateTime<Utc>>,
        /// The review as its `onExpire` decided it when this very verdict found the expiry
        /// due and recorded it (the verdict lost to it): the caller writes the expiry's
        /// `review.decided` event and notification, which nobody else will (the expiry is
        /// recorded exactly once, so exactly one caller gets it). `None` when someone else
        /// decided the review before.
        expired_now: Option<Box<Review>>,
    },
    /// An id prefix matches more than one review.
    #[error("review id prefix {prefix} is ambiguous; it matches {}", candidates.join(", "))]
    Ambiguous {
        /// The prefix given.
        prefix: String,
        /// The ids it matches.
        candidates: Vec<String>,
    },
    /// An id prefix is too short to name a review.
    #[error(
        "no review with id {0} (a prefix of an id must have at least {MIN_ID_PREFIX} characters)"
    )]
    PrefixTooShort(String),
    /// The store could not be read or written.
    #[error("review store {path}: {message}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        message: String,
    },
}

fn already_decided(
    id: &str,
    status: ReviewStatus,
    by: Option<&str>,
    at: Option<DateTime<Utc>>,
) -> String {
    let mut s = format!("conflict: review {id} was already {}", status_word(status));
    if let Some(by) = by {
        s.push_str(&format!(" by {by}"));
    }
    if let Some(at) = at {
        s.push_str(&format!(
            " at {}",
            at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ));
    }
    s
}

/// `pending`, `approved`, `denied` or `expired`.
pub fn status_word(status: ReviewStatus) -> &'static str {
    match status {
        ReviewStatus::Pending => "pending",
        ReviewStatus::Approved => "approved",
        ReviewStatus::Denied => "denied",
        ReviewStatus::Expired => "expired",
    }
}

/// The shortest id prefix [`FileReviewStore::decide`] accepts in place of a whole id.
pub const MIN_ID_PREFIX: usize = 8;

/// Where reviews live.
pub trait ReviewStore: Send + Sync + 'static {
    /// The review for a fingerprint, if any (the newest).
    fn get(&self, fingerprint: &str) -> Option<Review>;
    /// What a decision reads of [`get`](ReviewStore::get)'s review: its id, status and expiry
    /// (a store can answer without copying the rest; the default calls `get`).
    fn head(&self, fingerprint: &str) -> Option<ReviewHead> {
        self.get(fingerprint).map(|r| ReviewHead::of(&r))
    }
    /// Stores a new review, unless one is already there for the fingerprint; returns the one
    /// stored (so parallel identical calls share a review).
    fn insert_if_absent(&self, review: Review) -> Review;
    /// All reviews.
    fn list(&self) -> Vec<Review>;
    /// Records a verdict on a review (by id, or a unique prefix of at least
    /// 8 characters where the store supports it) atomically: of two verdicts on
    /// one pending review, one is applied and the other gets [`ReviewError::AlreadyDecided`].
    fn decide_with(&self, id: &str, verdict: &ReviewVerdict) -> Result<Review, ReviewError>;
    /// Sets a pending review's status (no reviewer, no comment).
    fn decide(
        &self,
        id: &str,
        status: ReviewStatus,
        at: DateTime<Utc>,
    ) -> Result<Review, ReviewError> {
        self.decide_with(id, &ReviewVerdict::new(status, at))
    }
}

/// Reviews in memory.
#[derive(Debug, Default)]
pub struct MemoryReviewStore {
    /// Boxed: a small table entry (the table grows in small allocations).
    by_fp: DashMap<String, Box<Review>>,
}

impl MemoryReviewStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl ReviewStore for MemoryReviewStore {
    fn get(&self, fingerprint: &str) -> Option<Review> {
        self.by_fp
            .get(fingerprint)
            .map(|r| Review::clone(r.value()))
    }

    fn head(&self, fingerprint: &str) -> Option<ReviewHead> {
        self.by_fp
            .get(fingerprint)
            .map(|r| ReviewHead::of(r.value()))
    }

    fn insert_if_absent(&self, review: Review) -> Review {
        let mut e = self
            .by_fp
            .entry(review.fingerprint.clone())
            .or_insert_with(|| Box::new(review.clone()));
        if e.status == ReviewStatus::Expired {
            **e = review;
        }
        Review::clone(e.value())
    }

    fn list(&self) -> Vec<Review> {
        let mut v: Vec<Review> = self
            .by_fp
            .iter()
            .map(|r| Review::clone(r.value()))
            .collect();
        v.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        v
    }

    fn decide_with(&self, id: &str, verdict: &ReviewVerdict) -> Result<Review, ReviewError> {
        for mut r in self.by_fp.iter_mut() {
            if r.id == id {
                r.set_decision(verdict)?;
                return Ok(Review::clone(r.value()));
            }
        }
        Err(ReviewError::NotFound(id.to_string()))
    }
}

/// Reviews in a JSON file, shared between processes (e.g. `toolgate review` and a running
/// agent). Every change is a read-modify-write under an advisory lock on a sidecar file
/// (`FILE.lock`), written to a temp file unique to the writer and renamed over the store, so
/// parallel processes never lose each other's changes and readers always see a whole file.
#[derive(Debug)]
pub struct FileReviewStore {
    path: PathBuf,
    lock: Mutex<()>,
}

impl FileReviewStore {
    /// A store in `path` (created on first write).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FileReviewStore {
            path: path.into(),
            lock: Mutex::new(()),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// All reviews, or the error that makes the file unreadable (unlike
    /// [`ReviewStore::list`], which logs the error and returns nothing).
    pub fn try_list(&self) -> Result<Vec<Review>, ReviewError> {
        self.read()
    }

    fn read(&self) -> Result<Vec<Review>, ReviewError> {
        match std::fs::read_to_string(&self.path) {
            Ok(s) if s.trim().is_empty() => Ok(Vec::new()),
            Ok(s) => crate::json::from_str_strict(&s)
                .map_err(|e| self.io(format!("not a review file: {e}"))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(self.io(e.to_string())),
        }
    }

    /// Runs `change` on the reviews while holding the store's lock across processes, and
    /// writes the result back when `change` says so.
    fn modify<T>(
        &self,
        change: impl FnOnce(&mut Vec<Review>) -> Result<(T, bool), ReviewError>,
    ) -> Result<T, ReviewError> {
        let _g = self.lock.lock();
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| self.io(e.to_string()))?;
        }
        let lock_path = sidecar(&self.path, ".lock");
        let lock_file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| {
                self.io(format!(
                    "cannot open lock file {}: {e}",
                    lock_path.display()
                ))
            })?;
        fs4::fs_std::FileExt::lock_exclusive(&lock_file)
            .map_err(|e| self.io(format!("cannot lock {}: {e}", lock_path.display())))?;
        let mut all = self.read()?;
        let (out, changed) = change(&mut all)?;
        if changed {
            self.write(&all)?;
        }
        // Dropping the file releases the lock.
        drop(lock_file);
        Ok(out)
    }

    fn write(&self, reviews: &[Review]) -> Result<(), ReviewError> {
        let tmp = sidecar(
            &self.path,
            &format!(
                ".{}.{}.tmp",
                std::process::id(),
                uuid::Uuid::now_v7().simple()
            ),
        );
        let text = serde_json::to_string_pretty(reviews).map_err(|e| self.io(e.to_string()))?;
        let written = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &self.path));
        written.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            self.io(e.to_string())
        })
    }

    fn io(&self, message: String) -> ReviewError {
        ReviewError::Io {
            path: self.path.clone(),
            message,
        }
    }
}

/// `path` with `suffix` appended to its file name.
fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// The index of the review `id` names: the whole id, or a unique prefix of at least
/// [`MIN_ID_PREFIX`] characters.
pub(crate) fn resolve(all: &[Review], id: &str) -> Result<usize, ReviewError> {
    if let Some(i) = all.iter().position(|r| r.id == id) {
        return Ok(i);
    }
    let matches: Vec<usize> = (0..all.len())
        .filter(|&i| !id.is_empty() && all[i].id.starts_with(id))
        .collect();
    match matches.as_slice() {
        [] => Err(ReviewError::NotFound(id.to_string())),
        _ if id.chars().count() < MIN_ID_PREFIX => Err(ReviewError::PrefixTooShort(id.to_string())),
        [i] => Ok(*i),
        many => Err(ReviewError::Ambiguous {
            prefix: id.to_string(),
            candidates: many.iter().map(|&i| all[i].id.clone()).collect(),
        }),
    }
}

impl ReviewStore for FileReviewStore {
    fn get(&self, fingerprint: &str) -> Option<Review> {
        match self.read() {
            Ok(v) => v.into_iter().rev().find(|r| r.fingerprint == fingerprint),
            Err(e) => {
                tracing::warn!("{e}");
                None
            }
        }
    }

    fn insert_if_absent(&self, review: Review) -> Review {
        let result =
            self.modify(|all| {
                if let Some(r) = all.iter().rev().find(|r| {
                    r.fingerprint == review.fingerprint && r.status != ReviewStatus::Expired
                }) {
                    return Ok((r.clone(), false));
                }
                all.push(review.clone());
                Ok((review.clone(), true))
            });
        match result {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("{e}");
                review
            }
        }
    }

    fn list(&self) -> Vec<Review> {
        match self.read() {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!("{e}");
                Vec::new()
            }
        }
    }

    fn decide_with(&self, id: &str, verdict: &ReviewVerdict) -> Result<Review, ReviewError> {
        // A verdict that loses to a due expiry still writes the expiry's decision.
        self.modify(|all| {
            let i = resolve(all, id)?;
            let before = all[i].clone();
            let outcome = all[i].set_decision(verdict).map(|()| all[i].clone());
            let changed = all[i] != before;
            Ok((outcome, changed))
        })?
    }
}
