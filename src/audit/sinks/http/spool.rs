//! The spool of [`super::HttpSink`]: batches written to disk (one fsynced file per batch, named by
//! an increasing sequence number) while the collector cannot take them.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Shared, State};
use crate::audit::{AuditError, AuditEvent};

pub(super) fn scan_spool(dir: &Path) -> Result<VecDeque<u64>, AuditError> {
    std::fs::create_dir_all(dir).map_err(|e| AuditError::io(dir, e))?;
    let mut seqs = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| AuditError::io(dir, e))? {
        let entry = entry.map_err(|e| AuditError::io(dir, e))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if name.ends_with(".tmp") {
            // A spool write that never completed (crash); its events are still in the
            // caller's hands or were never acknowledged to anyone.
            let _ = std::fs::remove_file(entry.path());
        } else if let Some(seq) = name
            .strip_suffix(".json")
            .and_then(|s| s.parse::<u64>().ok())
        {
            seqs.push(seq);
        }
    }
    seqs.sort_unstable();
    Ok(seqs.into())
}

pub(super) fn spool_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}.json"))
}

pub(super) fn batch_body(events: &[Arc<AuditEvent>]) -> Vec<u8> {
    let mut body = String::with_capacity(events.len() * 600 + 16);
    body.push_str("{\"events\":[");
    for (i, e) in events.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&e.to_canonical_json());
    }
    body.push_str("]}");
    body.into_bytes()
}

/// How many events a batch body (`{"events": [...]}`) holds; 0 when it is not one.
pub(super) fn count_events(body: &[u8]) -> u64 {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v.get("events")
                .and_then(|e| e.as_array())
                .map(|a| a.len() as u64)
        })
        .unwrap_or(0)
}

/// Writes `body` durably as the next spool file.
pub(super) async fn write_spool_file(
    shared: &Shared,
    st: &mut State,
    body: Vec<u8>,
) -> Result<(), AuditError> {
    let seq = st.next_seq;
    let dir = shared.config.spool_dir.clone();
    tokio::task::spawn_blocking(move || -> Result<(), AuditError> {
        let path = spool_path(&dir, seq);
        let tmp = path.with_extension("json.tmp");
        write_synced(&tmp, &body)?;
        std::fs::rename(&tmp, &path).map_err(|e| AuditError::io(&path, e))?;
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })
    .await
    .map_err(|e| AuditError::Sink(format!("spool task failed: {e}")))??;
    st.next_seq += 1;
    st.spool.push_back(seq);
    shared
        .counters
        .spooled_batches
        .fetch_add(1, Ordering::Relaxed);
    Ok(())
}

pub(super) fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), AuditError> {
    use std::io::Write;
    let mut f = std::fs::File::create(path).map_err(|e| AuditError::io(path, e))?;
    f.write_all(bytes).map_err(|e| AuditError::io(path, e))?;
    f.sync_all().map_err(|e| AuditError::io(path, e))
}

/// Moves the unspooled in-flight batch, the memory queue and `extra` to the spool, in that order.
pub(super) async fn spill(
    shared: &Shared,
    st: &mut State,
    extra: &[Arc<AuditEvent>],
) -> Result<(), AuditError> {
    let batch_size = shared.config.batch_size.max(1);
    if let Some(inflight) = st.inflight.as_ref().filter(|i| !i.spooled) {
        let body = batch_body(&inflight.events);
        write_spool_file(shared, st, body).await?;
        if let Some(i) = st.inflight.as_mut() {
            i.spooled = true;
        }
    }
    let mut pending: Vec<Arc<AuditEvent>> = st.mem.iter().cloned().collect();
    pending.extend(extra.iter().cloned());
    let mut written = 0;
    for chunk in pending.chunks(batch_size) {
        if let Err(e) = write_spool_file(shared, st, batch_body(chunk)).await {
            // Keep what was not spooled in memory rather than losing it.
            st.mem = pending[written..].iter().cloned().collect();
            return Err(e);
        }
        written += chunk.len();
    }
    st.mem.clear();
    st.oldest_at = None;
    Ok(())
}
