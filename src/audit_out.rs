//! Where the `review.decided` events of humans' decisions go: the console's and `toolgate
//! review approve|deny|expire --audit …`'s.
//!
//! Each decision is a run of its own, `review-<reviewId>`: one `review.decided` event, its own
//! chain (seq 0), so writing it never races an agent's chain, and `toolgate verify` checks it
//! like any run. In a folder it is appended to `DIR/toolgate-console/<YYYY-MM-DD>.jsonl`; in
//! PostgreSQL it is ingested as a collector would.

use std::io::Write;
use std::path::PathBuf;
#[cfg(feature = "postgres")]
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::audit::{EventKind, RunChain};
use crate::engine::{Review, decided_event_body};

/// Where events are read and written.
#[derive(Clone)]
pub enum AuditOut {
    /// A folder of JSONL files (searched recursively, as `toolgate verify DIR` does).
    Dir(PathBuf),
    /// A collector's PostgreSQL store.
    #[cfg(feature = "postgres")]
    Postgres(Arc<crate::audit::store::postgres::PgStore>, String),
}

impl AuditOut {
    /// For messages (a database URL without its password).
    pub fn place(&self) -> String {
        match self {
            AuditOut::Dir(d) => d.display().to_string(),
            #[cfg(feature = "postgres")]
            AuditOut::Postgres(_, shown) => shown.clone(),
        }
    }

    /// The folder, for a folder.
    pub fn dir(&self) -> Option<&std::path::Path> {
        match self {
            AuditOut::Dir(d) => Some(d),
            #[cfg(feature = "postgres")]
            AuditOut::Postgres(..) => None,
        }
    }

    /// Opens `spec`: `postgres://…` (tables created when missing) or a folder.
    pub async fn open(spec: &str) -> Result<AuditOut, String> {
        if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
            #[cfg(feature = "postgres")]
            {
                let shown = crate::audit::collector::redact_url(spec);
                let store = crate::audit::store::postgres::PgStore::connect(spec)
                    .await
                    .map_err(|e| {
                        format!(
                            "--store {shown}: {}",
                            crate::audit::collector::redact_in(spec, &e.to_string())
                        )
                    })?;
                return Ok(AuditOut::Postgres(Arc::new(store), shown));
            }
            #[cfg(not(feature = "postgres"))]
            return Err("--store postgres://… needs the `postgres` feature".into());
        }
        Ok(AuditOut::Dir(PathBuf::from(spec)))
    }

    /// Writes the `review.decided` event of a review decided in the console.
    pub async fn decided(&self, review: &Review, at: DateTime<Utc>) -> Result<(), String> {
        self.decided_signed(review, at, None).await
    }

    /// Writes the `review.decided` event of a review decided in the console; with `signer`,
    /// its run (`review-<id>`) is closed by a signed `run.ended`, so that `toolgate verify
    /// --public-key` accepts it.
    pub async fn decided_signed(
        &self,
        review: &Review,
        at: DateTime<Utc>,
        signer: Option<&std::sync::Arc<crate::audit::RunSigner>>,
    ) -> Result<(), String> {
        let mut chain = RunChain::new(
            format!("review-{}", review.id),
            review.agent_id.clone(),
            review.enduser_id.clone(),
        )
        .with_signer(signer.cloned());
        let mut events = vec![chain.seal(EventKind::ReviewDecided, at, decided_event_body(review))];
        if signer.is_some() {
            let mut body = serde_json::Map::new();
            body.insert("status".into(), "success".into());
            events.push(chain.seal(EventKind::RunEnded, at, body));
        }
        match self {
            AuditOut::Dir(dir) => {
                let dir = dir.join("toolgate-console");
                let line: String = events
                    .iter()
                    .map(|e| format!("{}\n", e.canonical_line()))
                    .collect();
                let file = dir.join(format!("{}.jsonl", at.format("%Y-%m-%d")));
                tokio::task::spawn_blocking(move || -> std::io::Result<()> {
                    std::fs::create_dir_all(&dir)?;
                    let mut f = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&file)?;
                    // One write of whole lines to a file opened for appending.
                    f.write_all(line.as_bytes())?;
                    f.sync_data()
                })
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("{}: {e}", self.place()))
            }
            #[cfg(feature = "postgres")]
            AuditOut::Postgres(store, shown) => {
                use crate::audit::store::EventStore;
                let incoming = events
                    .iter()
                    .map(|e| crate::audit::store::Incoming::from_value(e.to_json()))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| e.to_string())?;
                let wanted = incoming.len();
                let outcome = store
                    .ingest(incoming)
                    .await
                    .map_err(|e| format!("{shown}: {e}"))?;
                if outcome.accepted + outcome.duplicates < wanted {
                    return Err(format!("{shown}: event refused: {}", outcome.to_json()));
                }
                Ok(())
            }
        }
    }
}
