//! Human review (hitl): call fingerprints and the review store.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::decide::decision::ReviewStatus;
use crate::policy::OnExpire;

mod file;
mod fingerprint;
mod memory;
#[cfg(feature = "redis")]
pub(crate) mod redis;
pub use file::FileReviewStore;
pub use fingerprint::fingerprint;
pub(crate) use fingerprint::keyed_fingerprint;
pub use memory::MemoryReviewStore;

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
