//! The shape of a `POST /v1/events` body, checked the same way by the collector and by the
//! `collector_body` fuzz target.

use serde_json::Value;

use crate::audit::store::Incoming;

/// The events of a body `{"events": [...]}` (no other field), or why the body is refused.
pub(super) fn events_of(body: &[u8]) -> Result<Vec<Value>, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    match value {
        Value::Object(mut m) => match m.remove("events") {
            Some(Value::Array(a)) if m.is_empty() => Ok(a),
            Some(Value::Array(_)) => {
                let extra: Vec<&String> = m.keys().collect();
                Err(format!("unknown fields in body: {extra:?}"))
            }
            _ => Err("body must be {\"events\": [...]} with an array".into()),
        },
        _ => Err("body must be {\"events\": [...]} with an array".into()),
    }
}

/// Each event of a batch as the stores take it, or the first one that is not a well-formed
/// audit event (`events[i]: why`).
pub(super) fn incoming(events: Vec<Value>) -> Result<Vec<Incoming>, String> {
    events
        .into_iter()
        .enumerate()
        .map(|(i, v)| Incoming::from_value(v).map_err(|e| format!("events[{i}]: {e}")))
        .collect()
}

/// Parses and validates a `POST /v1/events` body as the collector does before storing
/// anything: `{"events": [...]}` and nothing else, each event a well-formed audit event.
/// Returns the number of events, or the reason the body is refused (a 4xx). Per-event
/// acceptance (duplicates, forks, chain links) is the store's and is not checked here.
pub fn check_events_body(body: &[u8]) -> Result<usize, String> {
    let events = events_of(body)?;
    let n = events.len();
    incoming(events)?;
    Ok(n)
}
