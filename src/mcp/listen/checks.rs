//! What a POST must be before it reaches a session (issue 31, conformance): JSON by its
//! `Content-Type` (else 415), and a request id that stdio would accept (a string or a number;
//! `null`, objects, arrays and booleans get −32600, as over stdio).

use axum::http::{HeaderMap, StatusCode, header};
use serde_json::Value;

use super::super::frame::Frame;
use super::super::gateway::id_key;
use super::super::jsonrpc;
use super::{Refusal, rpc_error};

/// 415 unless the body is declared JSON (`application/json`, parameters allowed).
pub(super) fn json_content_type(h: &HeaderMap) -> Result<(), Refusal> {
    let json = h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
    if json {
        return Ok(());
    }
    Err(Box::new(rpc_error(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "null",
        jsonrpc::INVALID_REQUEST,
        "Unsupported Media Type: the body must be application/json",
    )))
}

/// −32600 for a message whose `id` is present but neither a string nor a number.
pub(super) fn valid_id(msg: &Frame) -> Result<(), Refusal> {
    match msg.get("id") {
        None => Ok(()),
        Some(id) if id_key(id).is_some() => Ok(()),
        Some(_) => Err(Box::new(rpc_error(
            StatusCode::BAD_REQUEST,
            "null",
            jsonrpc::INVALID_REQUEST,
            "Invalid Request: an id must be a string or a number",
        ))),
    }
}

/// 429: a token holds as many sessions (or named runs) as it may.
pub(super) fn too_many_sessions(cap: usize) -> Refusal {
    Box::new(rpc_error(
        StatusCode::TOO_MANY_REQUESTS,
        "null",
        jsonrpc::INVALID_REQUEST,
        &format!(
            "this token already holds {cap} sessions (see --max-sessions-per-token); end one \
             with DELETE or let it go idle"
        ),
    ))
}

/// A `server/discover` result with what 2026-07-28 clients require of a cacheable result
/// (`ttlMs`, `cacheScope`) when the upstream gave none: not cached, private.
pub(super) fn discover_complete(mut r: Value) -> Value {
    if let Some(o) = r.as_object_mut() {
        o.entry("resultType").or_insert_with(|| "complete".into());
        o.entry("ttlMs").or_insert_with(|| 0.into());
        o.entry("cacheScope").or_insert_with(|| "private".into());
    }
    r
}
