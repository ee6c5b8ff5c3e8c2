//! The PostgreSQL store (`toolgate collect --store postgres://...`): any number of collectors
//! may share one database.
//!
//! * Table `toolgate_events`: `id` (primary key), `(agent_id, run_id, seq)` unique, the exact
//!   canonical line, and `pos` (a sequence, the `GET /v1/events` cursor). The schema is migrated
//!   on start (`toolgate_migrations`, under an advisory lock so replicas starting together do
//!   not race). Pick a schema with the URL, e.g. `?options=-c%20search_path%3Daudit`.
//! * A batch is one transaction: it takes an advisory lock per (agent, run) it touches (in a
//!   fixed order), reads the stored neighbours, applies the shared acceptance rules
//!   ([`super::decide`]), inserts the accepted events, and commits; the answer follows the
//!   commit. The constraints still stop a duplicate or fork that slipped past (e.g. one id posted
//!   to two runs at once); the transaction is then retried and sees the committed row.

use std::collections::HashMap;

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;
use uuid::Uuid;

use super::{
    DEFAULT_PAGE, EventPage, EventQuery, EventStore, Incoming, IngestOutcome, RunCheck, RunHead,
    RunHeadPage, RunHeadQuery, RunPage, Slot, Snapshot, StoreError, StoreStats, decide,
    neighbour_seqs,
};

use crate::audit::AuditError;

mod verify;
use verify::{ROW_COLUMNS, StoredRow};
pub use verify::{verify_postgres, verify_postgres_with};

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
/// Attempts of one batch when a concurrent writer got in first.
const ATTEMPTS: usize = 5;

/// The first key of the two-key advisory locks a batch takes is `RUN_LOCK_CLASS #
/// hashtext(current_schema())` (see [`RUN_LOCK_CLASS_SQL`]); the second is the run's bucket
/// (see [`RUN_LOCK_BUCKETS`]). Advisory locks belong to the database, not the schema: the
/// schema's hash keeps stores in different schemas of one database (tenants, tests) from
/// waiting on each other's runs.
pub const RUN_LOCK_CLASS: i32 = 0x746f_6f6c;
/// The SQL expression of a run lock's first key, with `RUN_LOCK_CLASS` as `$2`: a peer that
/// must exclude the store's writers of a run (a migration tool, a test) takes
/// `pg_advisory_xact_lock(<this>, bucket)` on a connection to the same schema.
pub const RUN_LOCK_CLASS_SQL: &str = "($2::int # hashtext(coalesce(current_schema(), '')))";
/// Runs are locked by bucket: `hashtextextended(agentId || U+001F || runId, 0) & 63`, so a
/// batch takes at most 64 advisory locks however many runs it touches (one lock per run
/// exhausted the server's lock table with many-run batches).
pub const RUN_LOCK_BUCKETS: i64 = 64;

/// Session limits every store connection sets (the URL's own `options` come after and win):
/// a lock not granted in 2 s, a statement over 30 s, a transaction idle (a frozen peer) for
/// 10 s end with an error, so a stalled peer holds others up a bounded time.
const SESSION_OPTIONS: &str = "-c lock_timeout=2000 -c statement_timeout=30000 \
                               -c idle_in_transaction_session_timeout=10000";
/// Longest wait for a free pooled connection, and for a new connection to open.
const POOL_WAIT: Duration = Duration::from_secs(3);
/// `Retry-After` of a busy store.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// A PostgreSQL error for people: the server's message, detail and SQLSTATE when the server
/// sent one (tokio-postgres alone says "db error"), else the error and its causes. Never
/// holds a password (the server's messages do not carry one; URLs are shown redacted).
pub fn describe_pg_error(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut out = format!("{}: {}", db.severity(), db.message());
        if let Some(d) = db.detail() {
            out.push_str(&format!(" ({d})"));
        }
        out.push_str(&format!(" [SQLSTATE {}]", db.code().code()));
        return out;
    }
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(&format!(": {text}"));
        }
        source = s.source();
    }
    out
}

/// Whether the error means "busy or unreachable, try again" rather than a fault of the request.
fn transient(e: &tokio_postgres::Error) -> bool {
    match e.code() {
        Some(c) => {
            *c == SqlState::LOCK_NOT_AVAILABLE
                || *c == SqlState::QUERY_CANCELED
                || *c == SqlState::T_R_DEADLOCK_DETECTED
                || *c == SqlState::T_R_SERIALIZATION_FAILURE
                || *c == SqlState::TOO_MANY_CONNECTIONS
                || *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
                || *c == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT
        }
        // No server answer: the connection broke or could not be made.
        None => e.is_closed() || std::error::Error::source(e).is_some(),
    }
}

fn db_error(what: &str, e: &tokio_postgres::Error) -> AuditError {
    let message = format!("postgres: {what}: {}", describe_pg_error(e));
    if transient(e) {
        AuditError::Unavailable {
            message,
            retry_after: RETRY_AFTER,
        }
    } else {
        AuditError::Sink(message)
    }
}

fn pool_error(e: deadpool_postgres::PoolError) -> AuditError {
    let message = match &e {
        deadpool_postgres::PoolError::Backend(pg) => describe_pg_error(pg),
        other => other.to_string(),
    };
    AuditError::Unavailable {
        message: format!("postgres: connect: {message}"),
        retry_after: RETRY_AFTER,
    }
}

/// The URL parsed, with the session limits added and a connect timeout.
fn config_of(url: &str) -> Result<tokio_postgres::Config, AuditError> {
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

/// The PostgreSQL store (module docs).
#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
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
    async fn client(&self) -> Result<deadpool_postgres::Object, AuditError> {
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

    async fn try_ingest(&self, batch: &[Incoming]) -> Result<IngestOutcome, TxError> {
        let mut client = self.client().await.map_err(TxError::Store)?;
        let tx = client.transaction().await?;
        let neighbours = neighbour_seqs(batch);
        let keys: Vec<String> = neighbours
            .keys()
            .map(|(a, r)| format!("{a}\u{1f}{r}"))
            .collect();
        // One lock per bucket of runs, in bucket order (no deadlock between batches), at most
        // RUN_LOCK_BUCKETS of them.
        tx.execute(
            &format!(
                "SELECT count(pg_advisory_xact_lock({RUN_LOCK_CLASS_SQL}, b)) FROM \
                 (SELECT DISTINCT (hashtextextended(k, 0) & $3)::int AS b \
                  FROM unnest($1::text[]) AS t(k) ORDER BY b) AS buckets"
            ),
            &[&keys, &RUN_LOCK_CLASS, &(RUN_LOCK_BUCKETS - 1)],
        )
        .await?;
        let ids: Vec<Uuid> = batch
            .iter()
            .filter(|i| super::ids_problem(i).is_none())
            .map(|i| i.id)
            .collect();
        let mut snap = Snapshot::default();
        for row in tx
            .query(
                "SELECT id, hash FROM toolgate_events WHERE id = ANY($1)",
                &[&ids],
            )
            .await?
        {
            snap.ids.insert(row.get(0), row.get(1));
        }
        let (mut qa, mut qr, mut qs) = (Vec::new(), Vec::new(), Vec::new());
        for ((a, r), seqs) in &neighbours {
            for s in seqs {
                if let Ok(s) = i64::try_from(*s) {
                    qa.push(a.as_str());
                    qr.push(r.as_str());
                    qs.push(s);
                }
            }
        }
        for row in tx
            .query(
                "SELECT e.agent_id, e.run_id, e.seq, e.id, e.hash, e.prev_hash \
                 FROM toolgate_events e \
                 JOIN unnest($1::text[], $2::text[], $3::bigint[]) AS k(a, r, s) \
                 ON e.agent_id = k.a AND e.run_id = k.r AND e.seq = k.s",
                &[&qa, &qr, &qs],
            )
            .await?
        {
            let seq: i64 = row.get(2);
            snap.slots.insert(
                (row.get(0), row.get(1), seq as u64),
                Slot {
                    id: row.get(3),
                    hash: row.get(4),
                    prev_hash: row.get(5),
                },
            );
        }
        let plan = decide(batch.to_vec(), &snap);
        if !plan.accept.is_empty() {
            let a = &plan.accept;
            let ids: Vec<Uuid> = a.iter().map(|i| i.id).collect();
            let agents: Vec<&str> = a.iter().map(|i| i.agent_id.as_str()).collect();
            let runs: Vec<&str> = a.iter().map(|i| i.run_id.as_str()).collect();
            let seqs: Vec<i64> = a.iter().map(|i| i.seq as i64).collect();
            let kinds: Vec<&str> = a.iter().map(|i| i.kind.as_str()).collect();
            let ts: Vec<chrono::DateTime<chrono::Utc>> = a.iter().map(|i| i.ts).collect();
            let hashes: Vec<&str> = a.iter().map(|i| i.hash.as_str()).collect();
            let prevs: Vec<Option<&str>> = a.iter().map(|i| i.prev_hash.as_deref()).collect();
            let lines: Vec<&str> = a.iter().map(|i| i.line.as_str()).collect();
            tx.execute(
                "INSERT INTO toolgate_events \
                 (id, agent_id, run_id, seq, kind, ts, hash, prev_hash, line) \
                 SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[], \
                 $5::text[], $6::timestamptz[], $7::text[], $8::text[], $9::text[])",
                &[
                    &ids, &agents, &runs, &seqs, &kinds, &ts, &hashes, &prevs, &lines,
                ],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(IngestOutcome {
            accepted: plan.accept.len(),
            duplicates: plan.duplicates,
            rejected: plan.rejected,
        })
    }

    async fn resolve_agent(&self, agent: Option<&str>, run_id: &str) -> Result<String, StoreError> {
        if run_id.contains('\0') || agent.is_some_and(|a| a.contains('\0')) {
            // No stored id holds a NUL (it is an invalid id), and PostgreSQL refuses it in text.
            return Err(StoreError::NotFound(format!("no run {run_id:?}")));
        }
        if let Some(a) = agent {
            return Ok(a.to_string());
        }
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT DISTINCT agent_id FROM toolgate_events WHERE run_id = $1 LIMIT 5",
                &[&run_id],
            )
            .await
            .map_err(|e| db_error("read", &e))?;
        match rows.as_slice() {
            [] => Err(StoreError::NotFound(format!("no run {run_id:?}"))),
            [one] => Ok(one.get(0)),
            many => {
                let agents: Vec<String> = many.iter().map(|r| r.get(0)).collect();
                Err(StoreError::BadRequest(format!(
                    "run {run_id:?} is used by agents {agents:?}: pass agentId"
                )))
            }
        }
    }
}

/// Why one attempt at a batch failed.
#[derive(Debug, thiserror::Error)]
enum TxError {
    #[error("{0}")]
    Store(AuditError),
    #[error("{0}")]
    Db(#[from] tokio_postgres::Error),
}

fn retryable(e: &TxError) -> bool {
    let TxError::Db(e) = e else {
        return false;
    };
    matches!(
        e.code(),
        Some(c) if *c == SqlState::UNIQUE_VIOLATION
            || *c == SqlState::T_R_SERIALIZATION_FAILURE
            || *c == SqlState::T_R_DEADLOCK_DETECTED
    )
}

#[async_trait::async_trait]
impl EventStore for PgStore {
    async fn ingest(&self, batch: Vec<Incoming>) -> Result<IngestOutcome, AuditError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.try_ingest(&batch).await {
                Ok(o) => return Ok(o),
                Err(e) if retryable(&e) && attempt < ATTEMPTS => {
                    tracing::debug!("postgres: batch raced another writer ({e}); retrying");
                }
                Err(TxError::Store(e)) => return Err(e),
                Err(TxError::Db(e)) => return Err(db_error("store batch", &e)),
            }
        }
    }

    async fn run_page(
        &self,
        agent: Option<&str>,
        run_id: &str,
        after_seq: Option<u64>,
        limit: usize,
    ) -> Result<RunPage, StoreError> {
        let agent_id = self.resolve_agent(agent, run_id).await?;
        let after = after_seq.map_or(-1, |s| i64::try_from(s).unwrap_or(i64::MAX));
        let limit = limit.max(1);
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT seq, line FROM toolgate_events \
                 WHERE agent_id = $1 AND run_id = $2 AND seq > $3 ORDER BY seq LIMIT $4",
                &[&agent_id, &run_id, &after, &(limit as i64 + 1)],
            )
            .await
            .map_err(|e| db_error("read", &e))?;
        if rows.is_empty() && after_seq.is_none() {
            return Err(StoreError::NotFound(format!(
                "no run {run_id:?} of agent {agent_id:?}"
            )));
        }
        let more = rows.len() > limit;
        let mut lines = Vec::with_capacity(rows.len().min(limit));
        let mut last = None;
        for row in rows.iter().take(limit) {
            let seq: i64 = row.get(0);
            last = Some(seq as u64);
            lines.push(row.get::<_, String>(1));
        }
        Ok(RunPage {
            agent_id,
            lines,
            next: if more { last } else { None },
        })
    }

    /// Checks a run's stored chain page by page, and that every row's indexed columns equal
    /// its line.
    async fn verify_run(&self, agent: Option<&str>, run_id: &str) -> Result<RunCheck, StoreError> {
        let agent_id = self.resolve_agent(agent, run_id).await?;
        let client = self.client().await?;
        let sql = format!(
            "SELECT {ROW_COLUMNS} FROM toolgate_events \
             WHERE agent_id = $1 AND run_id = $2 AND seq > $3 ORDER BY seq LIMIT $4"
        );
        let mut check = RunCheck::default();
        let mut after: i64 = -1;
        loop {
            let rows = client
                .query(&sql, &[&agent_id, &run_id, &after, &(DEFAULT_PAGE as i64)])
                .await
                .map_err(|e| db_error("read", &e))?;
            for row in &rows {
                let row = StoredRow::from_row(row).map_err(|e| db_error("read", &e))?;
                check.push_line(&row.line);
                for m in row.mismatches() {
                    check.push_break(u64::try_from(row.seq).ok(), m);
                }
                after = row.seq;
            }
            if rows.len() < DEFAULT_PAGE {
                break;
            }
        }
        if check.events == 0 {
            return Err(StoreError::NotFound(format!(
                "no run {run_id:?} of agent {agent_id:?}"
            )));
        }
        Ok(check)
    }

    async fn events(&self, q: &EventQuery) -> Result<EventPage, StoreError> {
        if q.agent_id.as_deref().is_some_and(|a| a.contains('\0')) {
            return Ok(EventPage {
                lines: Vec::new(),
                next: None,
            });
        }
        let after: i64 = match &q.after {
            None => 0,
            Some(c) => c
                .parse()
                .map_err(|_| StoreError::BadRequest(format!("bad cursor {c:?}")))?,
        };
        let limit = q.limit.max(1);
        let kind = q.kind.map(|k| k.as_str());
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT pos, line FROM toolgate_events WHERE pos > $1 \
                 AND ($2::text IS NULL OR agent_id = $2) AND ($3::text IS NULL OR kind = $3) \
                 AND ($4::timestamptz IS NULL OR ts >= $4) AND ($5::timestamptz IS NULL OR ts < $5) \
                 ORDER BY pos LIMIT $6",
                &[&after, &q.agent_id, &kind, &q.since, &q.until, &(limit as i64 + 1)],
            )
            .await
            .map_err(|e| db_error("read", &e))?;
        let more = rows.len() > limit;
        let mut lines = Vec::with_capacity(rows.len().min(limit));
        let mut last = None;
        for row in rows.iter().take(limit) {
            last = Some(row.get::<_, i64>(0));
            lines.push(row.get::<_, String>(1));
        }
        Ok(EventPage {
            lines,
            next: if more {
                last.map(|p| p.to_string())
            } else {
                None
            },
        })
    }

    /// One indexed query per page: runs grouped and paged by (agent, run id) in byte order
    /// (`COLLATE "C"`, the order of Rust strings), the seq-0 row's kind and time picked out.
    async fn run_heads(&self, q: &RunHeadQuery) -> Result<RunHeadPage, StoreError> {
        if q.agent_id.as_deref().is_some_and(|a| a.contains('\0')) {
            return Ok(RunHeadPage {
                runs: Vec::new(),
                next: None,
            });
        }
        let limit = q.limit.max(1);
        let (after_agent, after_run) = match &q.after {
            Some((a, r)) => (Some(a.as_str()), Some(r.as_str())),
            None => (None, None),
        };
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT agent_id, run_id, min(kind) FILTER (WHERE seq = 0), \
                 min(ts) FILTER (WHERE seq = 0) FROM toolgate_events \
                 WHERE ($1::text IS NULL OR agent_id = $1) \
                 AND ($2::timestamptz IS NULL OR ts >= $2) \
                 AND ($3::text IS NULL OR (agent_id COLLATE \"C\", run_id COLLATE \"C\") > \
                      ($3::text COLLATE \"C\", $4::text COLLATE \"C\")) \
                 GROUP BY agent_id, run_id \
                 ORDER BY agent_id COLLATE \"C\", run_id COLLATE \"C\" LIMIT $5",
                &[
                    &q.agent_id,
                    &q.since,
                    &after_agent,
                    &after_run,
                    &(limit as i64 + 1),
                ],
            )
            .await
            .map_err(|e| db_error("read", &e))?;
        let more = rows.len() > limit;
        let mut runs = Vec::with_capacity(rows.len().min(limit));
        for row in rows.iter().take(limit) {
            let kind: Option<String> = row.get(2);
            let ts: Option<chrono::DateTime<chrono::Utc>> = row.get(3);
            runs.push(RunHead {
                agent_id: row.get(0),
                run_id: row.get(1),
                first: kind
                    .and_then(|k| k.parse::<crate::audit::EventKind>().ok())
                    .zip(ts),
            });
        }
        let next = if more {
            runs.last().map(|h| (h.agent_id.clone(), h.run_id.clone()))
        } else {
            None
        };
        Ok(RunHeadPage { runs, next })
    }

    async fn stats(&self) -> Result<StoreStats, AuditError> {
        let client = self.client().await?;
        client
            .query_one("SELECT 1", &[])
            .await
            .map_err(|e| db_error("health", &e))?;
        Ok(StoreStats::default())
    }
}

/// Counts rows per (agent, run) — for tests and tools.
pub async fn count_runs(url: &str) -> Result<HashMap<(String, String), u64>, AuditError> {
    let store = PgStore::connect(url).await?;
    let client = store.client().await?;
    let rows = client
        .query(
            "SELECT agent_id, run_id, count(*) FROM toolgate_events GROUP BY 1, 2",
            &[],
        )
        .await
        .map_err(|e| db_error("read", &e))?;
    Ok(rows
        .iter()
        .map(|r| ((r.get(0), r.get(1)), r.get::<_, i64>(2) as u64))
        .collect())
}
