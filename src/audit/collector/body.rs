//! The shape of a `POST /v1/events` body, checked the same way by the collector and by the
//! `collector_body` fuzz target.
//!
//! The body is read without a depth limit of its own (its events are only delimited, by
//! serde_json's iterative skip), then each event is read on its own with serde_json's limit
//! (`crate::json::MAX_EVENT_DEPTH`): an event nested deeper than any reader takes is refused
//! alone, and the other events of its batch (another agent's run) are stored.

use serde_json::Value;
use serde_json::value::RawValue;

use crate::audit::store::Incoming;

const SHAPE: &str = "body must be {\"events\": [...]} with an array";

/// The events of a body `{"events": [...]}` (no other field), each read on its own (or why
/// it cannot be), or why the whole body is refused.
pub(super) fn events_of(body: &[u8]) -> Result<Vec<Result<Value, String>>, String> {
    let top: &RawValue =
        serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    if !top.get().starts_with('{') {
        return Err(SHAPE.into());
    }
    let mut fields: serde_json::Map<String, Value> = serde_json::Map::new();
    let members: std::collections::BTreeMap<String, &RawValue> =
        serde_json::from_str(top.get()).map_err(|e| format!("body is not JSON: {e}"))?;
    let mut events = None;
    for (k, v) in members {
        if k == "events" {
            events = Some(v);
        } else {
            fields.insert(k, Value::Null);
        }
    }
    let Some(events) = events.filter(|e| e.get().starts_with('[')) else {
        return Err(SHAPE.into());
    };
    if !fields.is_empty() {
        let extra: Vec<&String> = fields.keys().collect();
        return Err(format!("unknown fields in body: {extra:?}"));
    }
    let raw: Vec<&RawValue> =
        serde_json::from_str(events.get()).map_err(|e| format!("body is not JSON: {e}"))?;
    Ok(raw
        .into_iter()
        .map(|r| {
            serde_json::from_str::<Value>(r.get()).map_err(|e| {
                format!(
                    "not readable ({e}); events may nest at most {} levels",
                    crate::json::MAX_EVENT_DEPTH
                )
            })
        })
        .collect())
}

/// An event of a batch refused before the store saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BadEvent {
    /// Its position in the batch.
    pub(super) index: usize,
    /// Its id, when it could be read.
    pub(super) id: Option<String>,
    /// Why.
    pub(super) reason: String,
}

impl BadEvent {
    pub(super) fn to_json(&self) -> Value {
        serde_json::json!({"id": self.id, "index": self.index, "reason": self.reason})
    }
}

/// Each event of a batch as the stores take it, and the ones that are not well-formed audit
/// events (each refused alone).
pub(super) fn incoming(events: Vec<Result<Value, String>>) -> (Vec<Incoming>, Vec<BadEvent>) {
    let mut good = Vec::with_capacity(events.len());
    let mut bad = Vec::new();
    for (i, v) in events.into_iter().enumerate() {
        let id = v
            .as_ref()
            .ok()
            .and_then(|v| v.get("id"))
            .and_then(Value::as_str)
            .map(str::to_string);
        match v.and_then(|v| Incoming::from_value(v).map_err(|e| e.to_string())) {
            Ok(e) => good.push(e),
            Err(e) => bad.push(BadEvent {
                index: i,
                id,
                reason: format!("events[{i}]: {e}"),
            }),
        }
    }
    (good, bad)
}

/// Parses and validates a `POST /v1/events` body as the collector does before storing
/// anything: `{"events": [...]}` and nothing else, each event a well-formed audit event.
/// Returns the number of events, or the reason the body (or its first bad event) is refused
/// (the collector itself refuses a bad event alone and stores the others). Per-event
/// acceptance (duplicates, forks, chain links) is the store's and is not checked here.
pub fn check_events_body(body: &[u8]) -> Result<usize, String> {
    let events = events_of(body)?;
    let n = events.len();
    let (_, bad) = incoming(events);
    match bad.into_iter().next() {
        Some(b) => Err(b.reason),
        None => Ok(n),
    }
}
