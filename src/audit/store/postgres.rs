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

use deadpool_postgres::Pool;

use super::{
    DEFAULT_PAGE, EventPage, EventQuery, EventStore, Incoming, IngestOutcome, RunCheck, RunHead,
    RunHeadPage, RunHeadQuery, RunPage, StoreError, StoreStats,
};

use crate::audit::AuditError;

mod connect;
mod errors;
mod ingest;
mod verify;
use connect::config_of;
use errors::db_error;
pub use errors::describe_pg_error;
use ingest::{ATTEMPTS, TxError, retryable};
use verify::{ROW_COLUMNS, StoredRow};
pub use verify::{verify_postgres, verify_postgres_with};

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
