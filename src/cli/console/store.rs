//! What the console reads and writes: the review store (a file or Redis), decisions with their
//! `review.decided` audit event and notification, and the expiry sweep.

use chrono::{DateTime, Utc};

use super::audit_out::AuditOut;
use crate::engine::{
    FileReviewStore, Notifier, NotifyKind, Review, ReviewError, ReviewStatus, ReviewStore,
    ReviewVerdict,
};

/// Pending reviews shown at most (the oldest first).
pub const PENDING_SHOWN: usize = 200;
/// Decided reviews shown at most (the newest first).
pub const DECIDED_SHOWN: usize = 50;

/// The reviews a page shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Pending reviews, oldest first.
    pub pending: Vec<Review>,
    /// More pending reviews than shown.
    pub more_pending: bool,
    /// Decided reviews, newest decision first.
    pub decided: Vec<Review>,
}

/// A review store the console can list cheaply.
pub trait ConsoleReviews: ReviewStore {
    /// Pending reviews (oldest first, at most `limit`, and whether there are more) and the
    /// newest decided ones (at most `decided`).
    fn snapshot(&self, limit: usize, decided: usize) -> Result<Snapshot, ReviewError>;
    /// A cheap token that changes when the store may have changed (`None`: always read).
    fn change_token(&self) -> Option<String> {
        None
    }
    /// Where the reviews are, for messages.
    fn place(&self) -> String;
}

impl ConsoleReviews for FileReviewStore {
    fn snapshot(&self, limit: usize, decided: usize) -> Result<Snapshot, ReviewError> {
        let all = self.try_list()?;
        Ok(split(all, limit, decided))
    }

    fn change_token(&self) -> Option<String> {
        // The file is replaced by a rename on every change: its inode, size and mtime change.
        let meta = std::fs::metadata(self.path()).ok()?;
        let mtime = meta
            .modified()
            .ok()?
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?;
        #[cfg(unix)]
        let ino = std::os::unix::fs::MetadataExt::ino(&meta);
        #[cfg(not(unix))]
        let ino = 0u64;
        Some(format!("{ino}:{}:{}", meta.len(), mtime.as_nanos()))
    }

    fn place(&self) -> String {
        self.path().display().to_string()
    }
}

#[cfg(feature = "redis")]
impl ConsoleReviews for crate::state::redis::RedisReviewStore {
    fn snapshot(&self, limit: usize, decided: usize) -> Result<Snapshot, ReviewError> {
        let page = self.page(true, None, limit)?;
        let recent = self.recent(decided + limit.min(PENDING_SHOWN))?;
        let mut snap = split(recent, 0, decided);
        snap.more_pending = page.next.is_some();
        snap.pending = page.reviews;
        Ok(snap)
    }

    fn place(&self) -> String {
        format!("{self:?}")
    }
}

/// Splits reviews into pending (oldest first, at most `limit`) and decided (newest decision
/// first, at most `decided`).
fn split(all: Vec<Review>, limit: usize, decided: usize) -> Snapshot {
    let (mut pending, mut done): (Vec<Review>, Vec<Review>) = all
        .into_iter()
        .partition(|r| r.status == ReviewStatus::Pending);
    pending.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    let more_pending = pending.len() > limit;
    pending.truncate(limit);
    done.sort_by(|a, b| {
        b.decided_at
            .cmp(&a.decided_at)
            .then(b.created_at.cmp(&a.created_at))
    });
    done.truncate(decided);
    Snapshot {
        pending,
        more_pending,
        decided: done,
    }
}

/// The console's side effects of a decision: the audit event and the notification.
pub struct Effects {
    /// Where `review.decided` events go.
    pub audit: Option<AuditOut>,
    /// Webhooks.
    pub notifier: Option<Notifier>,
}

impl Effects {
    /// Records a decided review: the audit event (a failure is logged: the decision stands),
    /// then the notification (queued, never waited for).
    pub async fn decided(&self, review: &Review) {
        if let Some(a) = &self.audit {
            let at = review.decided_at.unwrap_or_else(Utc::now);
            if let Err(e) = a.decided(review, at).await {
                tracing::warn!(
                    "review {}: review.decided event not written: {e}",
                    review.id
                );
                eprintln!("toolgate console: review {}: {e}", review.id);
            }
        }
        if let Some(n) = &self.notifier {
            n.send(NotifyKind::Decided, review);
        }
    }
}

/// Decides the reviews of `snap` whose `onExpire` is due at `now` (as a reviewer would, by
/// `toolgate:expiry`); returns the reviews so decided.
pub fn sweep_expired(
    store: &dyn ConsoleReviews,
    snap: &Snapshot,
    now: DateTime<Utc>,
) -> Vec<Review> {
    let mut out = Vec::new();
    for r in &snap.pending {
        if let Some(v) = r.expiry_verdict(now) {
            match store.decide_with(&r.id, &v) {
                Ok(d) => out.push(d),
                Err(ReviewError::AlreadyDecided { .. }) => {}
                Err(e) => tracing::warn!("review {}: expiry not recorded: {e}", r.id),
            }
        }
    }
    out
}

/// A verdict from the console.
pub fn verdict(approve: bool, by: &str, comment: Option<String>) -> ReviewVerdict {
    let status = if approve {
        ReviewStatus::Approved
    } else {
        ReviewStatus::Denied
    };
    ReviewVerdict::new(status, Utc::now())
        .by(by)
        .comment(comment.map(|c| c.chars().take(2000).collect()))
}
