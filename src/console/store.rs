//! What the console reads and writes: the review store (a file or Redis), decisions with their
//! `review.decided` audit event and notification, and the expiry sweep.

use chrono::{DateTime, Utc};

use crate::audit_out::AuditOut;
use crate::engine::{
    FileReviewStore, Notifier, NotifyKind, Review, ReviewError, ReviewStatus, ReviewStore,
    ReviewVerdict,
};

/// Pending reviews the console holds in memory at most (the oldest first); every pending
/// review is counted and swept for expiry, held or not.
pub const PENDING_HELD: usize = 10_000;
/// Decided reviews shown at most (the newest first).
pub const DECIDED_SHOWN: usize = 50;

/// What the console knows of the store: the pages are rendered from it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Pending reviews, oldest first, at most [`PENDING_HELD`].
    pub pending: Vec<Review>,
    /// Every pending review in the store (held or not).
    pub pending_total: usize,
    /// The earliest expiry among every pending review with an `onExpire` (the next sweep due).
    pub next_expiry: Option<DateTime<Utc>>,
    /// Decided reviews, newest decision first.
    pub decided: Vec<Review>,
    /// The store could not be read: since when, and why (the lists are the last ones read).
    pub unreadable: Option<(DateTime<Utc>, String)>,
}

/// A review store the console can list cheaply.
pub trait ConsoleReviews: ReviewStore {
    /// Gives `each` every pending review, oldest first (page by page where the store pages),
    /// then returns the newest decided ones (at most `decided`, newest decision first).
    fn scan(
        &self,
        each: &mut dyn FnMut(Review),
        decided: usize,
    ) -> Result<Vec<Review>, ReviewError>;
    /// The review with id `id` (whole id only).
    fn by_id(&self, id: &str) -> Result<Option<Review>, ReviewError>;
    /// A cheap token that changes when the store may have changed (`None`: always read).
    fn change_token(&self) -> Option<String> {
        None
    }
    /// Where the reviews are, for messages.
    fn place(&self) -> String;
    /// How long an approval lets identical calls through (`None`: until someone expires it).
    fn approval_lasts(&self) -> Option<std::time::Duration>;
}

impl ConsoleReviews for FileReviewStore {
    fn scan(
        &self,
        each: &mut dyn FnMut(Review),
        decided: usize,
    ) -> Result<Vec<Review>, ReviewError> {
        let (mut pending, done): (Vec<Review>, Vec<Review>) = self
            .try_list()?
            .into_iter()
            .partition(|r| r.status == ReviewStatus::Pending);
        pending.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        pending.into_iter().for_each(each);
        Ok(newest_decided(done, decided))
    }

    fn by_id(&self, id: &str) -> Result<Option<Review>, ReviewError> {
        Ok(self.try_list()?.into_iter().find(|r| r.id == id))
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

    fn approval_lasts(&self) -> Option<std::time::Duration> {
        None
    }
}

#[cfg(feature = "redis")]
impl ConsoleReviews for crate::state::redis::RedisReviewStore {
    fn scan(
        &self,
        each: &mut dyn FnMut(Review),
        decided: usize,
    ) -> Result<Vec<Review>, ReviewError> {
        let mut after: Option<String> = None;
        loop {
            let page = self.page(true, after.as_deref(), crate::state::redis::REVIEW_PAGE)?;
            page.reviews.into_iter().for_each(&mut *each);
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        let recent = self.recent(decided + 200)?;
        Ok(newest_decided(
            recent
                .into_iter()
                .filter(|r| r.status != ReviewStatus::Pending)
                .collect(),
            decided,
        ))
    }

    fn by_id(&self, id: &str) -> Result<Option<Review>, ReviewError> {
        self.review(id)
    }

    fn place(&self) -> String {
        format!("{self:?}")
    }

    fn approval_lasts(&self) -> Option<std::time::Duration> {
        Some(std::time::Duration::from_secs(
            crate::state::redis::DECIDED_RETENTION_SECS,
        ))
    }
}

/// The newest `n` of decided reviews `done`, newest decision first.
fn newest_decided(mut done: Vec<Review>, n: usize) -> Vec<Review> {
    done.sort_by(|a, b| {
        b.decided_at
            .cmp(&a.decided_at)
            .then(b.created_at.cmp(&a.created_at))
    });
    done.truncate(n);
    done
}

/// Reads the store: every pending review is counted and, when its `onExpire` is due at `now`,
/// decided by it (as a reviewer would, by `toolgate:expiry`); the oldest [`PENDING_HELD`] are
/// held. Returns the snapshot and the reviews this read expired (their events and
/// notifications are the caller's).
pub fn read(
    store: &dyn ConsoleReviews,
    now: DateTime<Utc>,
) -> Result<(Snapshot, Vec<Review>), ReviewError> {
    let mut snap = Snapshot::default();
    let mut expired = Vec::new();
    let mut decided = store.scan(
        &mut |r| {
            if let Some(v) = r.expiry_verdict(now) {
                match store.decide_with(&r.id, &v) {
                    Ok(d) => return expired.push(d),
                    Err(ReviewError::AlreadyDecided { .. }) => return,
                    Err(e) => tracing::warn!("review {}: expiry not recorded: {e}", r.id),
                }
            }
            snap.pending_total += 1;
            if r.on_expire.is_some()
                && let Some(at) = r.expires_at
            {
                snap.next_expiry = Some(snap.next_expiry.map_or(at, |n| n.min(at)));
            }
            if snap.pending.len() < PENDING_HELD {
                snap.pending.push(r);
            }
        },
        DECIDED_SHOWN,
    )?;
    if !expired.is_empty() {
        decided.extend(expired.iter().cloned());
        decided = newest_decided(decided, DECIDED_SHOWN);
    }
    snap.decided = decided;
    Ok((snap, expired))
}

/// The console's side effects of a decision: the audit event and the notification.
pub struct Effects {
    /// Where `review.decided` events go.
    pub audit: Option<AuditOut>,
    /// Webhooks.
    pub notifier: Option<Notifier>,
    /// The key that signs the runs of `review.decided` events (`--signing-key`).
    pub signer: Option<std::sync::Arc<crate::audit::RunSigner>>,
}

impl Effects {
    /// Records a decided review: the audit event (a failure is logged: the decision stands),
    /// then the notification (queued, never waited for).
    pub async fn decided(&self, review: &Review) {
        if let Some(a) = &self.audit {
            let at = review.decided_at.unwrap_or_else(Utc::now);
            if let Err(e) = a.decided_signed(review, at, self.signer.as_ref()).await {
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
