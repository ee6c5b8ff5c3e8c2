//! The review store in memory.

use dashmap::DashMap;

use super::{Review, ReviewError, ReviewHead, ReviewStore, ReviewVerdict};
use crate::engine::decide::decision::ReviewStatus;

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
