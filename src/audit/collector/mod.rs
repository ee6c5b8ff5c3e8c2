//! The audit collector behind `toolgate collect`: an HTTP server that stores audit events
//! shipped by [`super::HttpSink`]s in an [`EventStore`] (a JSONL folder or PostgreSQL).
//!
//! * `POST /v1/events` with `{"events": [...]}` (`Content-Type: application/json`): a malformed
//!   body gets a 400, an oversized one a 413, a slow one a 408, and nothing of it is stored.
//!   Otherwise every event goes through the store's acceptance rules (see [`super::store`]) and
//!   the answer, sent only once the accepted events are durable, is
//!   `{"accepted": N, "duplicates": M, "rejected": [{"id", "reason"}]}` with 200, or 409 when
//!   some events were rejected (the others are stored). A 5xx means nothing was stored.
//! * `GET /v1/runs/{runId}?agentId=&afterSeq=&limit=` answers
//!   `{"runId", "agentId", "events": [...], "next"}`, a page of the run in `seq` order.
//! * `GET /v1/runs/{runId}/verify?agentId=` answers `{"ok", "events", "breaks": [...]}`.
//! * `GET /v1/events?agentId=&kind=&since=&until=&after=&limit=` answers `{"events", "next"}`.
//! * `GET /healthz` answers `{"status": "ok", ...}`.
//!
//! With a token configured, every route but `/healthz` needs `Authorization: Bearer <token>`,
//! checked before a body is read. Connections are capped, headers and bodies must arrive within
//! timeouts, and shutdown gives requests in flight a bounded grace period.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};

use super::AuditError;
use super::store::EventStore;
use super::store::jsonl::JsonlStore;

mod body;
mod routes;
mod server;

pub use super::url::{redact_in, redact_url};

pub use body::check_events_body;
pub use server::{front_config, serve, serve_collector, serve_router};

/// Where a collector keeps events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// A JSONL folder.
    Dir(PathBuf),
    /// A PostgreSQL connection URL (`postgres://...`).
    Postgres(String),
}

impl StoreSpec {
    /// `postgres://...` / `postgresql://...` is a database, anything else a folder.
    pub fn parse(text: &str) -> StoreSpec {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            StoreSpec::Postgres(text.to_string())
        } else {
            StoreSpec::Dir(PathBuf::from(text))
        }
    }

    /// For messages: the folder, or the database URL without its password.
    pub fn display(&self) -> String {
        match self {
            StoreSpec::Dir(d) => d.display().to_string(),
            StoreSpec::Postgres(url) => redact_url(url),
        }
    }
}

/// Configuration of a collector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectorConfig {
    /// Where events are stored.
    pub store: StoreSpec,
    /// Bearer token required from clients, if set.
    pub token: Option<String>,
    /// Largest accepted request body in bytes (larger: 413). Default 16 MiB.
    pub max_body_bytes: usize,
    /// Most events in one request (more: 413). Default 10 000.
    pub max_batch_events: usize,
    /// Time a client has to send a request's headers. Default 10 s.
    pub header_timeout: Duration,
    /// Time a client has to send a request's body. Default 30 s.
    pub body_timeout: Duration,
    /// Most connections open at once (lowered to keep file descriptors free; see
    /// [`crate::http_front`]). Default 512.
    pub max_connections: usize,
    /// Most connections one client address may hold open. Default 64.
    pub per_address: usize,
    /// Hosts accepted in `Host` besides loopback names, when bound to a loopback address
    /// (DNS rebinding; see [`crate::http_front`]).
    pub allowed_hosts: Vec<String>,
    /// On shutdown, how long requests in flight may still take. Default 10 s.
    pub shutdown_grace: Duration,
}

impl CollectorConfig {
    /// Defaults with a JSONL folder store.
    pub fn new(out_dir: impl Into<PathBuf>) -> CollectorConfig {
        CollectorConfig::with_store(StoreSpec::Dir(out_dir.into()))
    }

    /// Defaults with the given store.
    pub fn with_store(store: StoreSpec) -> CollectorConfig {
        CollectorConfig {
            store,
            token: None,
            max_body_bytes: 16 * 1024 * 1024,
            max_batch_events: 10_000,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_connections: crate::http_front::DEFAULT_MAX_CONNECTIONS,
            per_address: crate::http_front::DEFAULT_PER_ADDRESS,
            allowed_hosts: Vec::new(),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// Counters of a collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CollectorStats {
    /// Events stored: those found at start (when the store can count them) plus those accepted
    /// since.
    pub events: u64,
    /// Events received again and skipped.
    pub duplicates: u64,
    /// Events rejected.
    pub rejected: u64,
}

pub(crate) struct Shared {
    pub(crate) config: CollectorConfig,
    pub(crate) store: Arc<dyn EventStore>,
    events: AtomicU64,
    duplicates: AtomicU64,
    rejected: AtomicU64,
}

/// A collector: its store and its routes.
#[derive(Clone)]
pub struct Collector {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collector")
            .field("store", &self.shared.config.store.display())
            .field("stats", &self.stats())
            .finish()
    }
}

impl Collector {
    /// Opens a JSONL folder store (blocking: it reads the folder). For any store use
    /// [`Collector::connect`].
    pub fn open(config: CollectorConfig) -> Result<Collector, AuditError> {
        match &config.store {
            StoreSpec::Dir(dir) => {
                let store = JsonlStore::open(dir.clone())?;
                let (events, _) = store.counts();
                Ok(Collector::with_store(config, Arc::new(store), events))
            }
            StoreSpec::Postgres(_) => Err(AuditError::Config(
                "a PostgreSQL store is opened with Collector::connect".into(),
            )),
        }
    }

    /// Opens the configured store: reads a JSONL folder (off the async threads), or connects to
    /// PostgreSQL and migrates its schema.
    pub async fn connect(config: CollectorConfig) -> Result<Collector, AuditError> {
        match &config.store {
            StoreSpec::Dir(_) => tokio::task::spawn_blocking(move || Collector::open(config))
                .await
                .map_err(|e| AuditError::Sink(format!("collector start failed: {e}")))?,
            #[cfg(feature = "postgres")]
            StoreSpec::Postgres(url) => {
                let store = super::store::postgres::PgStore::connect(url).await?;
                Ok(Collector::with_store(config, Arc::new(store), 0))
            }
            #[cfg(not(feature = "postgres"))]
            StoreSpec::Postgres(_) => Err(AuditError::Config(
                "built without the `postgres` feature".into(),
            )),
        }
    }

    /// A collector over a store already opened (`events`: how many it holds, for the stats).
    pub fn with_store(
        config: CollectorConfig,
        store: Arc<dyn EventStore>,
        events: u64,
    ) -> Collector {
        Collector {
            shared: Arc::new(Shared {
                config,
                store,
                events: AtomicU64::new(events),
                duplicates: AtomicU64::new(0),
                rejected: AtomicU64::new(0),
            }),
        }
    }

    /// The store.
    pub fn store(&self) -> Arc<dyn EventStore> {
        self.shared.store.clone()
    }

    /// The configuration.
    pub fn config(&self) -> &CollectorConfig {
        &self.shared.config
    }

    /// Counters.
    pub fn stats(&self) -> CollectorStats {
        CollectorStats {
            events: self.shared.events.load(Ordering::Relaxed),
            duplicates: self.shared.duplicates.load(Ordering::Relaxed),
            rejected: self.shared.rejected.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn count(&self, outcome: &super::store::IngestOutcome) {
        let s = &self.shared;
        s.events
            .fetch_add(outcome.accepted as u64, Ordering::Relaxed);
        s.duplicates
            .fetch_add(outcome.duplicates as u64, Ordering::Relaxed);
        s.rejected
            .fetch_add(outcome.rejected.len() as u64, Ordering::Relaxed);
    }

    /// The HTTP routes.
    pub fn router(&self) -> Router {
        Router::new()
            .route(
                "/v1/events",
                post(routes::post_events).get(routes::get_events),
            )
            .route("/v1/runs/{run_id}", get(routes::get_run))
            .route("/v1/runs/{run_id}/verify", get(routes::verify_run))
            .route("/healthz", get(routes::healthz))
            .with_state(self.clone())
    }

    pub(crate) fn authorized(&self, headers: &axum::http::HeaderMap) -> bool {
        let Some(token) = &self.shared.config.token else {
            return true;
        };
        let Some(got) = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return false;
        };
        let want = format!("Bearer {token}");
        // Constant-time comparison.
        got.len() == want.len()
            && got
                .bytes()
                .zip(want.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_specs() {
        assert_eq!(
            StoreSpec::parse("postgres://u:p@h/db"),
            StoreSpec::Postgres("postgres://u:p@h/db".into())
        );
        assert_eq!(StoreSpec::parse("out"), StoreSpec::Dir("out".into()));
    }
}
