//! The audit store of the console (`--store DIR|postgres://…`, else `--audit DIR` for writing
//! only): run pages read from it; the console's decisions are written by
//! [`crate::audit_out::AuditOut::decided`].

use serde_json::Value;

use crate::audit::store::RunCheck;
pub use crate::audit_out::AuditOut;

/// One row of a run page.
pub struct RunRow {
    /// `seq`.
    pub seq: u64,
    /// `ts`.
    pub ts: String,
    /// `kind`.
    pub kind: String,
    /// The body.
    pub body: Value,
}

/// Events of one run shown at most.
pub const RUN_EVENTS_SHOWN: usize = 5_000;

impl AuditOut {
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
    if !dir.exists() {
        // Nothing written yet: no run.
        return Ok(Vec::new());
    }
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
