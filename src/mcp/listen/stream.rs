//! Answers on HTTP: a POSTed request's answer (JSON, or an SSE stream of what comes before
//! it), and the open streams (GET, subscriptions).

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;

use super::super::jsonrpc;
use super::outq::{Out, OutRx};
use super::rpc_error;
use super::session::{self, Session};

/// The answer to a POSTed request: JSON when the answer comes first, else an SSE stream of
/// what comes before it, then it.
pub(super) async fn answer(mut p: session::Pending) -> Response {
    let Some(first) = p.rx.recv().await else {
        return rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "null",
            jsonrpc::INTERNAL_ERROR,
            "the session ended",
        );
    };
    if first.response {
        p.answered().await;
        let mut r = Response::new(Body::from(first.json));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return r;
    }
    sse_after(first, p)
}

fn sse_event(f: &Out) -> Bytes {
    let mut out = Vec::with_capacity(f.json.len() + 24);
    out.extend_from_slice(b"event: message\ndata: ");
    // One data line: the frame's text has no newlines (see `Frame::to_bytes`).
    out.extend_from_slice(&f.json);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

fn sse_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}

/// An SSE stream starting with `first`, ending after the answer to the request `p` waits for.
fn sse_after(first: Out, p: session::Pending) -> Response {
    let stream = futures::stream::unfold((Some(first), Some(p)), |(first, p)| async move {
        if let Some(f) = first {
            return Some((Ok::<Bytes, Infallible>(sse_event(&f)), (None, p)));
        }
        let mut p = p?;
        let f = p.rx.recv().await?;
        let last = f.response;
        if last {
            p.answered().await;
        }
        Some((Ok(sse_event(&f)), (None, (!last).then_some(p))))
    });
    sse_headers(Response::new(Body::from_stream(stream)))
}

/// An open SSE stream of `rx` (GET, subscriptions).
pub(super) fn sse(rx: OutRx, keep: Option<Arc<Session>>) -> Response {
    let stream = futures::stream::unfold((rx, keep), |(mut rx, keep)| async move {
        let f = rx.recv().await?;
        Some((Ok::<Bytes, Infallible>(sse_event(&f)), (rx, keep)))
    });
    sse_headers(Response::new(Body::from_stream(stream)))
}
