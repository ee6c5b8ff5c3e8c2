//! Human in the loop: reviews of calls a `hitl` rule holds back — the review stores (in
//! memory, in a file), a call's fingerprint and its review's resolution (`reviews`), and the
//! bounded cache of fingerprints already worked out (`fp_cache`).
//!
//! How a run asks for a review is in `run/run_hitl.rs`.

pub(super) mod fp_cache;
pub(super) mod notify;
pub(super) mod reviews;
