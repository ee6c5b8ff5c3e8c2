//! Reading a PostgreSQL store back for verification: every row's line through the checker of
//! `toolgate verify`, and every indexed column against its line.

use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;
use uuid::Uuid;

use super::{config_of, db_error};
use crate::audit::store::Incoming;
use crate::audit::verify::StreamVerifier;
use crate::audit::{AuditError, BreakKind, RunVerifier, VerifyReport};

/// The columns a verification reads: the indexed ones and the line.
pub(super) const ROW_COLUMNS: &str = "id, agent_id, run_id, seq, kind, ts, hash, prev_hash, line";

/// A stored row as a verification reads it.
pub(super) struct StoredRow {
    id: Uuid,
    agent_id: String,
    run_id: String,
    pub(super) seq: i64,
    kind: String,
    ts: chrono::DateTime<chrono::Utc>,
    hash: String,
    prev_hash: Option<String>,
    pub(super) line: String,
}

impl StoredRow {
    pub(super) fn from_row(row: &tokio_postgres::Row) -> Result<StoredRow, tokio_postgres::Error> {
        Ok(StoredRow {
            id: row.try_get(0)?,
            agent_id: row.try_get(1)?,
            run_id: row.try_get(2)?,
            seq: row.try_get(3)?,
            kind: row.try_get(4)?,
            ts: row.try_get(5)?,
            hash: row.try_get(6)?,
            prev_hash: row.try_get(7)?,
            line: row.try_get(8)?,
        })
    }

    /// Every indexed column that differs from the line (the reads, the acceptance rules and
    /// the `/v1/events` filters trust the columns, so a moved or edited row must show).
    pub(super) fn mismatches(&self) -> Vec<String> {
        let Ok(line) = Incoming::from_line(&self.line) else {
            // The line's own problem is reported by the chain check.
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut differ = |column: &str, field: &str, stored: String, lined: String| {
            if stored != lined {
                out.push(format!(
                    "the row's {column} column ({stored}) differs from its line's {field} \
                     ({lined}): the row was moved or edited"
                ));
            }
        };
        differ("id", "id", self.id.to_string(), line.id.to_string());
        differ(
            "agent_id",
            "agentId",
            format!("{:?}", self.agent_id),
            format!("{:?}", line.agent_id),
        );
        differ(
            "run_id",
            "runId",
            format!("{:?}", self.run_id),
            format!("{:?}", line.run_id),
        );
        differ("seq", "seq", self.seq.to_string(), line.seq.to_string());
        differ(
            "kind",
            "kind",
            self.kind.clone(),
            line.kind.as_str().to_string(),
        );
        // The column keeps microseconds.
        differ(
            "ts",
            "ts",
            self.ts.timestamp_micros().to_string(),
            line.ts.timestamp_micros().to_string(),
        );
        differ("hash", "hash", self.hash.clone(), line.hash.clone());
        differ(
            "prev_hash",
            "prevHash",
            format!("{:?}", self.prev_hash),
            format!("{:?}", line.prev_hash),
        );
        out
    }
}

/// Verifies every run of a PostgreSQL store from the stored lines (byte for byte as received,
/// canonical) with the checker `toolgate verify` uses for files ([`StreamVerifier`]); with `key`,
/// every run must also be signed by it. The rows are read in one read-only snapshot, run by run
/// in `seq` order, in pages of 1,000 through a cursor, and checked as they come: memory does not
/// grow with the store or with a run. Breaks are located by run and `seq` (`line` is the row's
/// position in that order).
pub async fn verify_postgres(
    url: &str,
    key: Option<&RunVerifier>,
) -> Result<VerifyReport, AuditError> {
    verify_postgres_with(url, key, false).await
}

/// [`verify_postgres`]; `allow_open`: open signed runs are expected (see
/// [`crate::audit::verify_paths_signed_open`]).
pub async fn verify_postgres_with(
    url: &str,
    key: Option<&RunVerifier>,
    allow_open: bool,
) -> Result<VerifyReport, AuditError> {
    let config = config_of(url)?;
    let (mut client, conn) = config
        .connect(NoTls)
        .await
        .map_err(|e| db_error("connect", &e))?;
    let conn_task = tokio::spawn(conn);
    let result = async {
        let tx = client
            .build_transaction()
            .read_only(true)
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .start()
            .await
            .map_err(|e| db_error("verify", &e))?;
        let portal = tx
            .bind(
                &format!(
                    "SELECT {ROW_COLUMNS} FROM toolgate_events ORDER BY agent_id, run_id, seq"
                ),
                &[],
            )
            .await
            .map_err(|e| {
                if e.code() == Some(&SqlState::UNDEFINED_TABLE) {
                    AuditError::Config(
                        "no toolgate audit store in this database (no toolgate_events table in \
                         its search_path)"
                            .into(),
                    )
                } else {
                    db_error("verify", &e)
                }
            })?;
        let mut verifier = StreamVerifier::new(key).allow_open(allow_open);
        loop {
            let rows = tx
                .query_portal(&portal, 1_000)
                .await
                .map_err(|e| db_error("verify", &e))?;
            if rows.is_empty() {
                break;
            }
            for row in rows {
                let row = StoredRow::from_row(&row).map_err(|e| db_error("verify", &e))?;
                verifier.push_line(&row.line);
                for m in row.mismatches() {
                    verifier.push_break(
                        Some((&row.agent_id, &row.run_id)),
                        u64::try_from(row.seq).ok(),
                        BreakKind::ColumnMismatch,
                        m,
                    );
                }
            }
        }
        Ok::<_, AuditError>(verifier.finish())
    }
    .await;
    drop(client);
    let _ = conn_task.await;
    result
}
