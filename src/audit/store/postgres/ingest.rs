//! Storing a batch: one transaction that locks the runs it touches, reads their stored
//! neighbours, applies the shared acceptance rules and inserts what they accept.

use tokio_postgres::error::SqlState;
use uuid::Uuid;

use super::{PgStore, RUN_LOCK_BUCKETS, RUN_LOCK_CLASS, RUN_LOCK_CLASS_SQL};
use crate::audit::AuditError;
use crate::audit::store::{Incoming, IngestOutcome, Slot, Snapshot, decide, neighbour_seqs};

/// Attempts of one batch when a concurrent writer got in first.
pub(super) const ATTEMPTS: usize = 5;

impl PgStore {
    pub(super) async fn try_ingest(&self, batch: &[Incoming]) -> Result<IngestOutcome, TxError> {
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
            .filter(|i| crate::audit::store::ids_problem(i).is_none())
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
}

/// Why one attempt at a batch failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum TxError {
    #[error("{0}")]
    Store(AuditError),
    #[error("{0}")]
    Db(#[from] tokio_postgres::Error),
}

pub(super) fn retryable(e: &TxError) -> bool {
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
