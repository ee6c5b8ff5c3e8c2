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
}

/// Wraps a collector's routes: the events of each `POST /v1/events` the collector accepts
/// (2xx) go to `export` after the collector has answered them. Bodies above `max_body_bytes`
/// are refused with 413 as the collector would.
pub fn collector_layer(router: Router, export: Arc<AuditExport>, max_body_bytes: usize) -> Router {
    router.layer(from_fn_with_state(
        LayerState {
            export,
            max_body_bytes,
        },
        observe_events,
    ))
}

async fn observe_events(State(s): State<LayerState>, req: Request, next: Next) -> Response {
    if req.method() != Method::POST || req.uri().path() != "/v1/events" {
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
    if resp.status().is_success()
        && let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(&bytes)
        && let Some(Value::Array(events)) = body.remove("events")
    {
        s.export.events(&events);
    }
    resp
}
