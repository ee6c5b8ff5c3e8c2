//! The audit trail: immutable, hash-chained events and the sinks they are shipped to.
//!
//! * [`RunChain::seal`] builds an [`AuditEvent`]: envelope (`schema`, `id` UUID v7, `kind`, `ts`,
//!   `runId`, `seq`, `agentId`, `enduserId?`, `prevHash`, `hash`) plus the kind's body fields.
//!   `hash` is the SHA-256 of the [`canonical_json`] of the event without `hash`; `prevHash`
//!   links it to the previous event of the run.
//! * A [`Redactor`] drops or hashes configured JSON paths of a body before it is sealed.
//! * An [`AuditBus`] fans events out to [`AuditSink`]s without blocking:
//!   [`FileSink`] (JSONL, the default), [`ConsoleSink`], [`HttpSink`] (to a collector, with a
//!   disk spool) and [`MemorySink`].
//! * [`verify_paths`] / [`verify_events`] check chains; [`collector::serve`] is the HTTP
//!   collector behind `toolgate collect`.
//!
//! See `docs/audit-trail.md` for the wire format and the exact canonical JSON form.

use std::path::{Path, PathBuf};
use std::time::Duration;

mod bus;
#[cfg(feature = "http")]
pub mod collector;
mod config;
pub(crate) mod event;
mod redact;
pub mod sign;
pub mod sinks;
pub mod store;
#[cfg(feature = "http")]
mod url;
pub mod verify;

pub use bus::{AuditBus, AuditSink, BusConfig, BusStats};
pub use config::{AuditConfig, SinkConfig};
pub use event::{
    AuditEvent, CHECKPOINT_EVERY_EVENTS, CHECKPOINT_EVERY_SECS, ENVELOPE_KEYS, EventKind, RunChain,
    SCHEMA, canonical_json, expected_hash, may_follow_end, sha256_hex,
};
pub use redact::{RedactAction, RedactionConfig, RedactionRule, Redactor};
pub use sign::{RunSigner, RunVerifier, SignatureError};
pub use sinks::console::{ConsoleFormat, ConsoleSink};
pub use sinks::file::{DEFAULT_AUDIT_DIR, FileSink, FileSinkConfig};
#[cfg(feature = "http")]
pub use sinks::http::{HttpSink, HttpSinkConfig, HttpSinkStats};
pub use sinks::memory::MemorySink;
pub use verify::{
    AuditFiles, BreakKind, ChainBreak, FileSummary, StreamVerifier, VerifyNote, VerifyReport,
    audit_files, verify_events, verify_events_signed, verify_paths, verify_paths_signed,
    verify_paths_signed_open,
};

/// Errors of the audit module.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// A file or directory could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// JSON that is not a valid audit event.
    #[error("invalid audit event: {0}")]
    InvalidEvent(String),
    /// Invalid configuration (redaction rules, sinks).
    #[error("invalid audit configuration: {0}")]
    Config(String),
    /// An operation did not finish in time.
    #[error("audit: timed out after {0:?}")]
    Timeout(Duration),
    /// HTTP transport or collector failure.
    #[error("audit http: {0}")]
    Http(String),
    /// The collector rejected events (they were moved to the sink's `rejected/` folder).
    #[error("audit: collector rejected events: {0}")]
    Rejected(String),
    /// A sink failed.
    #[error("audit sink: {0}")]
    Sink(String),
    /// A store is busy (a lock or a connection not free within its limit, e.g. behind a
    /// stalled peer) or unreachable: nothing was stored, and the same request may succeed after
    /// `retry_after` (the collector answers 503 with `Retry-After`).
    #[error("audit store unavailable: {message}")]
    Unavailable {
        /// What was not available, for people (no credentials).
        message: String,
        /// When to try again.
        retry_after: Duration,
    },
    /// The bus or sink has been shut down.
    #[error("audit: shut down")]
    Closed,
}

impl AuditError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> AuditError {
        AuditError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
