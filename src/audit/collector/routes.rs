//! The collector's HTTP handlers.

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Collector;
use crate::audit::EventKind;
use crate::audit::store::{DEFAULT_PAGE, EventQuery, StoreError};

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let mut resp = (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        json!({"error": message.into()}).to_string(),
    )
        .into_response();
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    resp
}

fn json_response(status: StatusCode, body: String) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// A store error: busy or unreachable → 503 with `Retry-After` (logged as a warning);
/// anything else is a [`fault`].
fn store_fault(what: &str, e: &crate::audit::AuditError) -> Response {
    if let crate::audit::AuditError::Unavailable {
        message,
        retry_after,
    } = e
    {
        tracing::warn!("collector: {what}: {message}");
        let secs = retry_after.as_secs().max(1);
        let mut resp = error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{what}: the store is busy or unavailable; retry after {secs} s"),
        );
        if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return resp;
    }
    fault(what, e)
}

/// A server fault: logged in full, answered without details (no paths, no SQL).
fn fault(what: &str, e: &dyn std::fmt::Display) -> Response {
    tracing::error!("collector: {what}: {e}");
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("{what}; see the collector's log"),
    )
}

fn store_error(e: StoreError) -> Response {
    match e {
        StoreError::NotFound(m) => error(StatusCode::NOT_FOUND, m),
        StoreError::BadRequest(m) => error(StatusCode::BAD_REQUEST, m),
        StoreError::Fault(e) => store_fault("cannot read the store", &e),
    }
}

fn unauthorized() -> Response {
    error(StatusCode::UNAUTHORIZED, "missing or invalid bearer token")
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

pub(super) async fn post_events(
    State(c): State<Collector>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // Auth and headers first: nothing of an unauthenticated body is read.
    if !c.authorized(&headers) {
        return unauthorized();
    }
    if !is_json(&headers) {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        );
    }
    let cfg = &c.shared.config;
    let max = cfg.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("body larger than {max} bytes"),
        );
    }
    let read = tokio::time::timeout(cfg.body_timeout, Limited::new(body, max).collect()).await;
    let body = match read {
        Err(_) => {
            return error(
                StatusCode::REQUEST_TIMEOUT,
                format!("body not received within {:?}", cfg.body_timeout),
            );
        }
        Ok(Err(e)) if e.is::<LengthLimitError>() => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("body larger than {max} bytes"),
            );
        }
        Ok(Err(e)) if crate::http_front::is_body_timeout(&*e) => {
            return error(
                StatusCode::REQUEST_TIMEOUT,
                format!("body not received within {:?}", cfg.body_timeout),
            );
        }
        Ok(Err(e)) => return error(StatusCode::BAD_REQUEST, format!("cannot read body: {e}")),
        Ok(Ok(b)) => b.to_bytes(),
    };
    let events = match super::body::events_of(&body) {
        Ok(e) => e,
        Err(m) => return error(StatusCode::BAD_REQUEST, m),
    };
    if events.len() > cfg.max_batch_events {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "{} events in one batch; at most {} are accepted",
                events.len(),
                cfg.max_batch_events
            ),
        );
    }
    let parsed = tokio::task::spawn_blocking(move || super::body::incoming(events)).await;
    let (batch, bad) = match parsed {
        Ok(b) => b,
        Err(e) => return fault("cannot parse events", &e),
    };
    // A batch of bad events only is refused whole; otherwise each bad event alone (the
    // others, maybe another agent's run, are stored).
    if batch.is_empty()
        && let Some(first) = bad.first()
    {
        return error(StatusCode::BAD_REQUEST, first.reason.clone());
    }
    for b in &bad {
        tracing::warn!(index = b.index, "collector refused an event: {}", b.reason);
    }
    match c.shared.store.ingest(batch).await {
        Ok(outcome) => {
            c.count(&outcome);
            for r in &outcome.rejected {
                tracing::warn!(id = %r.id, "collector rejected an event: {}", r.reason);
            }
            let status = if outcome.rejected.is_empty() && bad.is_empty() {
                StatusCode::OK
            } else {
                StatusCode::CONFLICT
            };
            let mut body = outcome.to_json();
            if let Some(Value::Array(r)) = body.get_mut("rejected") {
                r.extend(bad.iter().map(super::body::BadEvent::to_json));
            }
            json_response(status, body.to_string())
        }
        Err(e) => store_fault("cannot store events", &e),
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RunParams {
    agent_id: Option<String>,
    after_seq: Option<u64>,
    limit: Option<usize>,
}

fn page_size(limit: Option<usize>) -> Result<usize, String> {
    match limit {
        None => Ok(DEFAULT_PAGE),
        Some(n) if (1..=DEFAULT_PAGE).contains(&n) => Ok(n),
        Some(n) => Err(format!("limit {n}: must be 1..={DEFAULT_PAGE}")),
    }
}

fn bad_query(e: QueryRejection) -> Response {
    error(StatusCode::BAD_REQUEST, e.body_text())
}

pub(super) async fn get_run(
    State(c): State<Collector>,
    headers: HeaderMap,
    UrlPath(run_id): UrlPath<String>,
    params: Result<Query<RunParams>, QueryRejection>,
) -> Response {
    if !c.authorized(&headers) {
        return unauthorized();
    }
    let Query(p) = match params {
        Ok(p) => p,
        Err(e) => return bad_query(e),
    };
    let limit = match page_size(p.limit) {
        Ok(l) => l,
        Err(m) => return error(StatusCode::BAD_REQUEST, m),
    };
    match c
        .shared
        .store
        .run_page(p.agent_id.as_deref(), &run_id, p.after_seq, limit)
        .await
    {
        Ok(page) => json_response(
            StatusCode::OK,
            format!(
                "{{\"runId\":{},\"agentId\":{},\"events\":[{}],\"next\":{}}}",
                Value::String(run_id),
                Value::String(page.agent_id),
                page.lines.join(","),
                json!(page.next)
            ),
        ),
        Err(e) => store_error(e),
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct VerifyParams {
    agent_id: Option<String>,
}

pub(super) async fn verify_run(
    State(c): State<Collector>,
    headers: HeaderMap,
    UrlPath(run_id): UrlPath<String>,
    params: Result<Query<VerifyParams>, QueryRejection>,
) -> Response {
    if !c.authorized(&headers) {
        return unauthorized();
    }
    let Query(p) = match params {
        Ok(p) => p,
        Err(e) => return bad_query(e),
    };
    match c
        .shared
        .store
        .verify_run(p.agent_id.as_deref(), &run_id)
        .await
    {
        Ok(check) => {
            let mut v = check.to_json();
            v["runId"] = Value::String(run_id);
            json_response(StatusCode::OK, v.to_string())
        }
        Err(e) => store_error(e),
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct EventParams {
    agent_id: Option<String>,
    kind: Option<String>,
    since: Option<String>,
    until: Option<String>,
    after: Option<String>,
    limit: Option<usize>,
}

fn time_param(
    name: &str,
    v: Option<String>,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, String> {
    v.map(|t| {
        chrono::DateTime::parse_from_rfc3339(&t)
            .map(|d| d.with_timezone(&chrono::Utc))
            .map_err(|e| format!("{name} {t:?} is not RFC 3339: {e}"))
    })
    .transpose()
}

pub(super) async fn get_events(
    State(c): State<Collector>,
    headers: HeaderMap,
    params: Result<Query<EventParams>, QueryRejection>,
) -> Response {
    if !c.authorized(&headers) {
        return unauthorized();
    }
    let Query(p) = match params {
        Ok(p) => p,
        Err(e) => return bad_query(e),
    };
    let kind = match p.kind.map(|k| k.parse::<EventKind>()).transpose() {
        Ok(k) => k,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let (since, until, limit) = match (
        time_param("since", p.since),
        time_param("until", p.until),
        page_size(p.limit),
    ) {
        (Ok(s), Ok(u), Ok(l)) => (s, u, l),
        (Err(m), _, _) | (_, Err(m), _) | (_, _, Err(m)) => {
            return error(StatusCode::BAD_REQUEST, m);
        }
    };
    let q = EventQuery {
        agent_id: p.agent_id,
        kind,
        since,
        until,
        after: p.after,
        limit,
    };
    match c.shared.store.events(&q).await {
        Ok(page) => json_response(
            StatusCode::OK,
            format!(
                "{{\"events\":[{}],\"next\":{}}}",
                page.lines.join(","),
                json!(page.next)
            ),
        ),
        Err(e) => store_error(e),
    }
}

pub(super) async fn healthz(State(c): State<Collector>) -> Response {
    match c.shared.store.stats().await {
        Ok(s) => json_response(
            StatusCode::OK,
            json!({"status": "ok", "events": s.events, "runs": s.runs}).to_string(),
        ),
        Err(e) => {
            tracing::error!("collector: store unhealthy: {e}");
            let mut resp = error(
                StatusCode::SERVICE_UNAVAILABLE,
                "store unavailable; see the collector's log",
            );
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            resp
        }
    }
}
