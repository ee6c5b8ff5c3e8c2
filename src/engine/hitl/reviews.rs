//! Human review (hitl): call fingerprints and the review store.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use dashmap::DashMap;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::engine::decide::decision::ReviewStatus;

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
    /// The arguments.
    pub args: Value,
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
}

impl Review {
    /// Records a human's decision (or an expiry) on this review: only a pending review can be
    /// approved or denied; any review can be expired (the next identical call asks again).
    pub(crate) fn set_decision(
        &mut self,
        status: ReviewStatus,
        at: DateTime<Utc>,
    ) -> Result<(), ReviewError> {
        if self.status != ReviewStatus::Pending && status != ReviewStatus::Expired {
            return Err(ReviewError::AlreadyDecided {
                id: self.id.clone(),
                status: self.status,
            });
        }
        self.status = status;
        self.decided_at = Some(at);
        Ok(())
    }
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

/// The part of a [`Review`] a decision reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewHead {
    /// Review id.
    pub id: String,
    /// Status.
    pub status: ReviewStatus,
    /// When a pending review expires.
    pub expires_at: Option<DateTime<Utc>>,
}

impl ReviewHead {
    /// The head of `review`.
    pub fn of(review: &Review) -> ReviewHead {
        ReviewHead {
            id: review.id.clone(),
            status: review.status,
            expires_at: review.expires_at,
        }
    }
}

/// Errors of a review store.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// No review has this id.
    #[error("no review with id {0}")]
    NotFound(String),
    /// The review was already decided.
    #[error("review {id} is already {status:?}")]
    AlreadyDecided {
        /// Review id.
        id: String,
        /// Its status.
        status: ReviewStatus,
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
    /// Sets a pending review's status.
    fn decide(
        &self,
        id: &str,
        status: ReviewStatus,
        at: DateTime<Utc>,
    ) -> Result<Review, ReviewError>;
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

    fn decide(
        &self,
        id: &str,
        status: ReviewStatus,
        at: DateTime<Utc>,
    ) -> Result<Review, ReviewError> {
        for mut r in self.by_fp.iter_mut() {
            if r.id == id {
                r.set_decision(status, at)?;
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

    fn decide(
        &self,
        id: &str,
        status: ReviewStatus,
        at: DateTime<Utc>,
    ) -> Result<Review, ReviewError> {
        self.modify(|all| {
            let i = resolve(all, id)?;
            all[i].set_decision(status, at)?;
            Ok((all[i].clone(), true))
        })
    }
}
