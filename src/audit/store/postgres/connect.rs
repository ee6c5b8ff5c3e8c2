//! Connecting to the database (the URL, session limits, the pool) and migrating its schema.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;

use super::PgStore;
use super::errors::{RETRY_AFTER, db_error, describe_pg_error, pool_error};
use crate::audit::AuditError;

const MIGRATIONS: &[(i32, &str)] = &[(
    1,
    "CREATE TABLE toolgate_events (
        pos BIGSERIAL NOT NULL UNIQUE,
        id UUID PRIMARY KEY,
        agent_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        seq BIGINT NOT NULL,
        kind TEXT NOT NULL,
        ts TIMESTAMPTZ NOT NULL,
        hash TEXT NOT NULL,
        prev_hash TEXT,
        line TEXT NOT NULL,
        received_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        CONSTRAINT toolgate_events_run_seq UNIQUE (agent_id, run_id, seq)
    );
    CREATE INDEX toolgate_events_run ON toolgate_events (run_id);
    CREATE INDEX toolgate_events_ts ON toolgate_events (ts);",
)];

/// An arbitrary constant: the advisory lock taken while migrating.
const MIGRATION_LOCK: i64 = 0x746f_6f6c_6761_7465;

/// Session limits every store connection sets (the URL's own `options` come after and win):
/// a lock not granted in 2 s, a statement over 30 s, a transaction idle (a frozen peer) for
/// 10 s end with an error, so a stalled peer holds others up a bounded time.
const SESSION_OPTIONS: &str = "-c lock_timeout=2000 -c statement_timeout=30000 \
                               -c idle_in_transaction_session_timeout=10000";
/// Longest wait for a free pooled connection, and for a new connection to open.
const POOL_WAIT: Duration = Duration::from_secs(3);

/// The URL parsed, with the session limits added and a connect timeout.
pub(super) fn config_of(url: &str) -> Result<tokio_postgres::Config, AuditError> {
    let mut config: tokio_postgres::Config = url.parse().map_err(|e: tokio_postgres::Error| {
        AuditError::Config(format!(
            "bad PostgreSQL URL {}: {}",
            crate::audit::url::redact_url(url),
            crate::audit::url::redact_in(url, &describe_pg_error(&e))
        ))
    })?;
    let options = match config.get_options() {
        Some(o) if !o.is_empty() => format!("{SESSION_OPTIONS} {o}"),
        _ => SESSION_OPTIONS.to_string(),
    };
    config.options(&options);
    config.connect_timeout(POOL_WAIT);
    Ok(config)
}

impl PgStore {
    /// Connects (a pool of up to 16 connections) and migrates the schema (for a collector).
    pub async fn connect(url: &str) -> Result<PgStore, AuditError> {
        let store = PgStore::pool(url)?;
        store.migrate().await?;
        Ok(store)
    }

    /// Connects to an existing store to read it: never migrates (a read-only role is enough).
    /// A database without toolgate's tables, or with a newer schema than this build knows, is
    /// an [`AuditError::Config`] saying so.
    pub async fn open_existing(url: &str) -> Result<PgStore, AuditError> {
        let store = PgStore::pool(url)?;
        let client = store.client().await?;
        let version = client
            .query_one("SELECT max(version) FROM toolgate_migrations", &[])
            .await;
        let known = MIGRATIONS.iter().map(|(v, _)| *v).max().unwrap_or(0);
        match version {
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => Err(AuditError::Config(
                "no toolgate audit store in this database (no toolgate_migrations table in \
                     its search_path): point it at a collector's database, and schema \
                     (?options=-c%20search_path%3D...), that `toolgate collect` has written"
                    .into(),
            )),
            Err(e) => Err(db_error("read", &e)),
            Ok(row) => match row.try_get::<_, Option<i32>>(0) {
                Ok(Some(v)) if v <= known => Ok(store.clone()),
                Ok(Some(v)) => Err(AuditError::Config(format!(
                    "the store's schema is version {v}; this toolgate knows up to {known}: \
                     upgrade toolgate"
                ))),
                _ => Err(AuditError::Config(
                    "no toolgate audit store in this database (toolgate_migrations is empty)"
                        .into(),
                )),
            },
        }
    }

    fn pool(url: &str) -> Result<PgStore, AuditError> {
        let config = config_of(url)?;
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(16)
            .build()
            .map_err(|e| AuditError::Sink(format!("postgres: pool: {e}")))?;
        Ok(PgStore { pool })
    }

    /// A pooled connection, waiting at most [`POOL_WAIT`] (then: unavailable, retry).
    pub(super) async fn client(&self) -> Result<deadpool_postgres::Object, AuditError> {
        match tokio::time::timeout(POOL_WAIT, self.pool.get()).await {
            Ok(r) => r.map_err(pool_error),
            Err(_) => Err(AuditError::Unavailable {
                message: format!(
                    "postgres: no free connection within {POOL_WAIT:?} (all busy, e.g. behind \
                     a stalled peer's locks)"
                ),
                retry_after: RETRY_AFTER,
            }),
        }
    }

    async fn migrate(&self) -> Result<(), AuditError> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| db_error("migrate", &e))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(|e| db_error("migrate", &e))?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS toolgate_migrations (
                version INT PRIMARY KEY,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
        )
        .await
        .map_err(|e| db_error("migrate", &e))?;
        let done: Vec<i32> = tx
            .query("SELECT version FROM toolgate_migrations", &[])
            .await
            .map_err(|e| db_error("migrate", &e))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        for (version, sql) in MIGRATIONS {
            if done.contains(version) {
                continue;
            }
            tx.batch_execute(sql)
                .await
                .map_err(|e| db_error(&format!("migration {version}"), &e))?;
            tx.execute(
                "INSERT INTO toolgate_migrations (version) VALUES ($1)",
                &[version],
            )
            .await
            .map_err(|e| db_error("migrate", &e))?;
        }
        tx.commit().await.map_err(|e| db_error("migrate", &e))
    }
}
