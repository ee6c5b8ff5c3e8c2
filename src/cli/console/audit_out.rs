//! The audit store of the console (`--store DIR|postgres://…`, else `--audit DIR` for writing
//! only): `review.decided` events of the console's decisions, and run pages.
//!
//! Each console decision is a run of its own, `review-<reviewId>`: one `review.decided` event,
//! its own chain (seq 0), so writing it never races an agent's chain, and `toolgate verify`
//! checks it like any run. In a folder it is appended to
//! `DIR/toolgate-console/<YYYY-MM-DD>.jsonl`; in PostgreSQL it is ingested as a collector would.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::pages::RunRow;
use crate::audit::store::RunCheck;
use crate::audit::{EventKind, RunChain};
use crate::engine::{Review, decided_event_body};

/// Events of one run shown at most.
pub const RUN_EVENTS_SHOWN: usize = 5_000;

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
        let mut chain = RunChain::new(
            format!("review-{}", review.id),
            review.agent_id.clone(),
            review.enduser_id.clone(),
        );
        let event = chain.seal(EventKind::ReviewDecided, at, decided_event_body(review));
        match self {
            AuditOut::Dir(dir) => {
                let dir = dir.join("toolgate-console");
                let line = format!("{}\n", event.canonical_line());
                let file = dir.join(format!("{}.jsonl", at.format("%Y-%m-%d")));
                tokio::task::spawn_blocking(move || -> std::io::Result<()> {
                    std::fs::create_dir_all(&dir)?;
                    let mut f = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&file)?;
                    // One write of a whole line to a file opened for appending.
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
                let incoming = crate::audit::store::Incoming::from_value(event.to_json())
                    .map_err(|e| e.to_string())?;
                let outcome = store
                    .ingest(vec![incoming])
                    .await
                    .map_err(|e| format!("{shown}: {e}"))?;
                if outcome.accepted + outcome.duplicates == 0 {
                    return Err(format!("{shown}: event refused: {}", outcome.to_json()));
                }
                Ok(())
            }
        }
    }

    /// The stored events of run `run_id` (of `agent` when given), in seq order, with the
    /// check of its chain (events read, and the breaks found).
    pub async fn run(
        &self,
        agent: Option<&str>,
        run_id: &str,
    ) -> Result<(Vec<RunRow>, RunCheck), String> {
        let lines = match self {
            AuditOut::Dir(dir) => {
                let (dir, run, agent) =
                    (dir.clone(), run_id.to_string(), agent.map(str::to_string));
                tokio::task::spawn_blocking(move || dir_run(&dir, agent.as_deref(), &run))
                    .await
                    .map_err(|e| e.to_string())??
            }
            #[cfg(feature = "postgres")]
            AuditOut::Postgres(store, shown) => {
                use crate::audit::store::EventStore;
                let mut lines = Vec::new();
                let mut after = None;
                loop {
                    let page = store
                        .run_page(agent, run_id, after, 1000)
                        .await
                        .map_err(|e| format!("{shown}: {e}"))?;
                    lines.extend(page.lines);
                    match page.next {
                        Some(n) if lines.len() < RUN_EVENTS_SHOWN => after = Some(n),
                        _ => break,
                    }
                }
                lines
            }
        };
        let mut check = RunCheck::default();
        let mut rows = Vec::with_capacity(lines.len());
        for line in &lines {
            check.push_line(line);
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            rows.push(RunRow {
                seq: v["seq"].as_u64().unwrap_or(0),
                ts: v["ts"].as_str().unwrap_or("").to_string(),
                kind: v["kind"].as_str().unwrap_or("").to_string(),
                body: v,
            });
        }
        Ok((rows, check))
    }
}

/// The lines of run `run` in the JSONL files under `dir`, in seq order.
fn dir_run(dir: &std::path::Path, agent: Option<&str>, run: &str) -> Result<Vec<String>, String> {
    // Canonical lines spell the run id as JSON: a cheap filter before parsing.
    let needle = format!("\"runId\":{}", Value::String(run.to_string()));
    let mut found: Vec<(u64, String)> = Vec::new();
    for entry in walkdir::WalkDir::new(dir).follow_links(false) {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = entry.path();
        if !entry.file_type().is_file() || path.extension().is_none_or(|x| x != "jsonl") {
            continue;
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        for line in text.lines().filter(|l| l.contains(&needle)) {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if v["runId"].as_str() != Some(run)
                || agent.is_some_and(|a| v["agentId"].as_str() != Some(a))
            {
                continue;
            }
            found.push((v["seq"].as_u64().unwrap_or(u64::MAX), line.to_string()));
            if found.len() >= RUN_EVENTS_SHOWN {
                break;
            }
        }
    }
    found.sort_by_key(|(seq, _)| *seq);
    found.dedup();
    Ok(found.into_iter().map(|(_, l)| l).collect())
}
