//! The collector's `--otel`: events stored by `POST /v1/events` become spans and metrics.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::AuditExport;

#[derive(Clone)]
struct LayerState {
    export: Arc<AuditExport>,
    max_body_bytes: usize,
    token: Option<Arc<str>>,
}

/// Wraps a collector's routes: the events of each `POST /v1/events` the collector stores (all of
/// them on 200; those not listed as rejected on 409) go to `export` after the collector has
/// answered. Requests the collector refuses before reading the body (a missing or wrong token,
/// another content type) reach it untouched, so the body is never read for them; bodies above
/// `max_body_bytes` are refused with 413 as the collector would.
pub fn collector_layer(
    router: Router,
    export: Arc<AuditExport>,
    max_body_bytes: usize,
    token: Option<String>,
) -> Router {
    router.layer(from_fn_with_state(
        LayerState {
            export,
            max_body_bytes,
            token: token.map(Arc::from),
        },
        observe_events,
    ))
}

/// Whether the collector will read this request's body: right token (when one is set) and a
/// JSON content type.
fn admitted(s: &LayerState, req: &Request) -> bool {
    let headers = req.headers();
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        });
    let authorized = match &s.token {
        None => true,
        Some(t) => headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|given| given.as_bytes() == t.as_bytes()),
    };
    json && authorized
}

async fn observe_events(State(s): State<LayerState>, req: Request, next: Next) -> Response {
    if req.method() != Method::POST || req.uri().path() != "/v1/events" || !admitted(&s, &req) {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let Ok(bytes) = to_bytes(body, s.max_body_bytes).await else {
        let msg = serde_json::json!({
            "error": format!("body larger than {} bytes", s.max_body_bytes)
        });
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            [(header::CONTENT_TYPE, "application/json")],
            msg.to_string(),
        )
            .into_response();
    };
    let resp = next
        .run(Request::from_parts(parts, Body::from(bytes.clone())))
        .await;
    let status = resp.status();
    if !status.is_success() && status != StatusCode::CONFLICT {
        return resp;
    }
    let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(&bytes) else {
        return resp;
    };
    let Some(Value::Array(mut events)) = body.remove("events") else {
        return resp;
    };
    if status.is_success() {
        s.export.events(&events);
        return resp;
    }
    // 409: the answer lists the rejected events; the others were stored.
    let (parts, answer) = resp.into_parts();
    let Ok(answer) = to_bytes(answer, 16 * 1024 * 1024).await else {
        return (StatusCode::CONFLICT, "").into_response();
    };
    if let Ok(Value::Object(a)) = serde_json::from_slice::<Value>(&answer)
        && let Some(Value::Array(rejected)) = a.get("rejected")
    {
        let ids: std::collections::HashSet<&str> = rejected
            .iter()
            .filter_map(|r| r.get("id").and_then(Value::as_str))
            .collect();
        events.retain(|e| {
            e.get("id")
                .and_then(Value::as_str)
                .is_some_and(|id| !ids.contains(id))
        });
        s.export.events(&events);
    }
    Response::from_parts(parts, Body::from(answer))
}
