//! Engine state on Redis, shared by every process that points at the same server.
//!
//! [`RedisStateStore`] keeps `maxCalls` counters, metric windows, each run's tool history and
//! its pause/abort flags under `<prefix>:{<agentId>}:…` (one agent's keys share a Redis Cluster
//! hash slot). Everything one decision reads or reserves goes through **one** Lua script call
//! ([`RedisStateStore::reserve`]); the outcome of a call goes back in one more
//! ([`RedisStateStore::commit`]). Time is the caller's clock (milliseconds), never the
//! server's, and windows are exact: an event at `t` counts at `now` iff `now − w < t ≤ now`.
//!
//! Every call has a timeout (default 50 ms); the connection is re-established in the
//! background after a failure. Passwords in the URL never appear in errors or `Debug` output.

mod chains;
mod config;
mod counters;
mod current_run;
mod keys;
mod requests;
mod scripts;
mod shared;
mod store;
mod url;

pub use crate::engine::redis_reviews::{
    DECIDED_RETENTION_SECS, PAGE as REVIEW_PAGE, PENDING_TTL_SECS, RedisReviewStore, ReviewPage,
};
pub use config::{RedisConfig, RedisStateError};
pub use keys::{Keys, RunKeys};
pub use requests::{
    Commit, CounterSpec, LeaseSpec, RedisPermit, Reservation, ReserveRequest, RunFlag, WindowSpec,
};
pub use shared::LazyRedisStore;
pub use store::RedisStateStore;
pub use url::redact_url;
pub(crate) use url::scrub as scrub_url;
