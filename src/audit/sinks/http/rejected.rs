//! What the HTTP sink does with events the collector refuses: whole batches (a 4xx) and single
//! events (a 409 listing `rejected` events) are saved to `spoolDir/rejected/` with the answer,
//! counted, and reported by the next flush (and by shutdown, for the sink's whole life).

use std::sync::atomic::Ordering;

use super::spool::{count_events, write_synced};
use super::{Shared, truncate};
use crate::audit::AuditError;

/// The `(id, reason)` list of a 409 answer `{"accepted","duplicates","rejected":[...]}`.
pub(super) fn rejected_list(text: &str) -> Option<Vec<(String, String)>> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    v.get("accepted")?.as_u64()?;
    let list = v.get("rejected")?.as_array()?;
    let out: Vec<(String, String)> = list
        .iter()
        .filter_map(|r| {
            Some((
                r.get("id")?.as_str()?.to_string(),
                r.get("reason")
                    .and_then(|x| x.as_str())
                    .unwrap_or("")
                    .to_string(),
            ))
        })
        .collect();
    (!out.is_empty() && out.len() == list.len()).then_some(out)
}

pub(super) async fn reject(shared: &Shared, body: Vec<u8>, status: u16, answer: String) {
    shared
        .counters
        .rejected_batches
        .fetch_add(1, Ordering::Relaxed);
    shared
        .counters
        .rejected_events
        .fetch_add(count_events(&body), Ordering::Relaxed);
    let summary = format!("HTTP {status}: {}", truncate(&answer, 300));
    let dir = shared.config.spool_dir.join("rejected");
    let name = format!(
        "{}-{}.json",
        chrono::Utc::now().format("%Y%m%dT%H%M%S%.6fZ"),
        uuid::Uuid::now_v7().simple()
    );
    let events: serde_json::Value = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("events").cloned())
        .unwrap_or(serde_json::Value::Null);
    let record = serde_json::json!({"status": status, "response": answer, "events": events});
    let path = dir.join(&name);
    let written = tokio::task::spawn_blocking(move || -> Result<(), AuditError> {
        std::fs::create_dir_all(&dir).map_err(|e| AuditError::io(&dir, e))?;
        write_synced(&path, record.to_string().as_bytes())
    })
    .await;
    let where_ = match written {
        Ok(Ok(())) => format!(
            "saved as {}",
            shared
                .config
                .spool_dir
                .join("rejected")
                .join(name)
                .display()
        ),
        Ok(Err(e)) => format!("could not be saved: {e}"),
        Err(e) => format!("could not be saved: {e}"),
    };
    tracing::error!(
        endpoint = %shared.endpoint,
        "audit batch rejected by collector ({summary}), not retried; {where_}"
    );
    note_rejection(shared, summary).await;
}

/// Saves the events a 409 rejected one by one (with their reasons), or that a split 413 batch
/// left (each too large by itself), to `rejected/`; returns how many events of the batch were
/// stored.
pub(super) async fn reject_some(
    shared: &Shared,
    body: &[u8],
    status: u16,
    rejected: &[(String, String)],
    answer: String,
) -> u64 {
    let events: Vec<serde_json::Value> = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("events").and_then(|e| e.as_array()).cloned())
        .unwrap_or_default();
    let total = events.len() as u64;
    let picked: Vec<serde_json::Value> = events
        .into_iter()
        .filter(|e| {
            e.get("id")
                .and_then(|i| i.as_str())
                .is_some_and(|id| rejected.iter().any(|(r, _)| r == id))
        })
        .collect();
    let n = rejected.len() as u64;
    shared
        .counters
        .rejected_events
        .fetch_add(n, Ordering::Relaxed);
    let reasons: Vec<serde_json::Value> = rejected
        .iter()
        .map(|(id, reason)| serde_json::json!({"id": id, "reason": reason}))
        .collect();
    let summary = format!(
        "{n} event(s) rejected: {}",
        rejected
            .iter()
            .take(3)
            .map(|(id, reason)| format!("{id}: {reason}"))
            .collect::<Vec<_>>()
            .join("; ")
    );
    let dir = shared.config.spool_dir.join("rejected");
    let name = format!(
        "{}-{}.json",
        chrono::Utc::now().format("%Y%m%dT%H%M%S%.6fZ"),
        uuid::Uuid::now_v7().simple()
    );
    let record = serde_json::json!({
        "status": status, "response": answer, "rejected": reasons, "events": picked
    });
    let path = dir.join(&name);
    let shown = path.display().to_string();
    let written = tokio::task::spawn_blocking(move || -> Result<(), AuditError> {
        std::fs::create_dir_all(&dir).map_err(|e| AuditError::io(&dir, e))?;
        write_synced(&path, record.to_string().as_bytes())
    })
    .await;
    let where_ = match written {
        Ok(Ok(())) => format!("saved as {shown}"),
        Ok(Err(e)) => format!("could not be saved: {e}"),
        Err(e) => format!("could not be saved: {e}"),
    };
    tracing::error!(
        endpoint = %shared.endpoint,
        "audit collector {summary}; the rest of the batch is stored; {where_}"
    );
    note_rejection(shared, summary).await;
    total.saturating_sub(n)
}

async fn note_rejection(shared: &Shared, summary: String) {
    let mut st = shared.state.lock().await;
    let (list, count) = &mut st.rejected_ever;
    *count += 1;
    if list.len() < 20 {
        list.push(summary.clone());
    }
    st.rejected_since_flush.push(summary);
}
