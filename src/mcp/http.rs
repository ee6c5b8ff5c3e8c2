//! The upstream over MCP's streamable HTTP transport, relaying raw JSON-RPC frames: each frame
//! is POSTed; the answer is one JSON message or an SSE stream of them. The session id and the
//! negotiated protocol version ride on every later request; a GET stream carries messages the
//! server starts on its own; the session is DELETEd at the end.
//!
//! Messages keep the exact text they came in (see [`Frame`]). The server is *gone* when it can
//! no longer be reached or a response breaks off (connection refused or reset, an event stream
//! cut short): the link's receiving end then closes, as a child's output does when it exits, and
//! the gateway answers what is pending with −32603 and exits 1.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

use super::ProxyError;
use super::frame::Frame;
use super::jsonrpc;
use super::transport::Link;

/// How long the server may take to answer the probe at start (and to accept a connection).
const START_TIMEOUT: Duration = Duration::from_secs(10);

const SESSION: &str = "mcp-session-id";
const VERSION: &str = "mcp-protocol-version";

#[derive(Default)]
struct Session {
    id: Mutex<Option<String>>,
    version: Mutex<Option<String>>,
}

struct Http {
    client: reqwest::Client,
    url: String,
    session: Session,
    /// Frames to the gateway; taken (closing the link) when the server is gone.
    down: Mutex<Option<UnboundedSender<Frame>>>,
}

/// An error with its chain of causes (`error sending request: connection refused`).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let t = s.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        source = s.source();
    }
    text
}

/// Connects to a streamable HTTP MCP endpoint: checks that it answers HTTP at all (any status
/// will do, within [`START_TIMEOUT`]), then relays. A malformed URL cannot start the gateway; an
/// endpoint that cannot be reached is [`ProxyError::Unreachable`].
pub(crate) async fn connect(url: String) -> Result<Link, ProxyError> {
    let spawn = |message: String| ProxyError::Spawn {
        program: url.clone(),
        message,
    };
    match reqwest::Url::parse(&url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        Ok(u) => return Err(spawn(format!("not an http(s) URL (scheme {})", u.scheme()))),
        Err(e) => return Err(spawn(format!("not a URL: {e}"))),
    }
    let client = reqwest::Client::builder()
        .connect_timeout(START_TIMEOUT)
        .build()
        .map_err(|e| spawn(chain(&e)))?;
    let probe = client
        .head(&url)
        .timeout(START_TIMEOUT)
        .send()
        .await
        .map_err(|e| ProxyError::Unreachable {
            url: url.clone(),
            message: format!("cannot reach the upstream server at {url}: {}", chain(&e)),
        })?;
    tracing::debug!("upstream {url}: answers (HTTP {} to HEAD)", probe.status());
    let (up_tx, mut up_rx) = unbounded_channel::<Frame>();
    let (down_tx, down_rx) = unbounded_channel::<Frame>();
    let http = Arc::new(Http {
        client,
        url,
        session: Session::default(),
        down: Mutex::new(Some(down_tx)),
    });
    let writer = tokio::spawn(async move {
        let mut listening = false;
        while let Some(msg) = up_rx.recv().await {
            let method = msg
                .get("method")
                .and_then(Value::as_str)
                .map(str::to_string);
            if method.as_deref() == Some("initialize") {
                // Inline: later frames need the session id its answer carries.
                http.post(msg).await;
                continue;
            }
            let h = http.clone();
            tokio::spawn(async move { h.post(msg).await });
            if method.as_deref() == Some("notifications/initialized") && !listening {
                listening = true;
                let h = http.clone();
                tokio::spawn(async move { h.listen().await });
            }
        }
        http.close().await;
    });
    Ok(Link {
        tx: up_tx,
        rx: down_rx,
        child: None,
        writer: Some(writer),
    })
}

impl Http {
    fn request(&self, method: reqwest::Method) -> reqwest::RequestBuilder {
        let mut req = self.client.request(method, &self.url);
        if let Some(s) = self.session.id.lock().as_deref() {
            req = req.header(SESSION, s);
        }
        if let Some(v) = self.session.version.lock().as_deref() {
            req = req.header(VERSION, v);
        }
        req
    }

    /// Sends a frame to the gateway (false when the link is closed).
    fn send_down(&self, f: Frame) -> bool {
        self.down.lock().as_ref().is_some_and(|d| d.send(f).is_ok())
    }

    /// The request in `msg` failed while the server is there: it gets −32603 with `why`.
    fn fail(&self, msg: &Value, why: String) {
        tracing::warn!("upstream: {why}");
        if let (Some(id), Some(_)) = (msg.get("id"), msg.get("method")) {
            self.send_down(jsonrpc::error(id, jsonrpc::INTERNAL_ERROR, &why).into());
        }
    }

    /// The server is gone: closes the link (the gateway answers what is pending and exits 1).
    fn gone(&self, why: String) {
        if self.down.lock().take().is_some() {
            tracing::error!("the upstream server at {} is gone: {why}", self.url);
        }
    }

    async fn post(&self, msg: Frame) {
        let body = match serde_json::to_vec(&msg) {
            Ok(b) => b,
            Err(e) => return self.fail(&msg, e.to_string()),
        };
        let sent = self
            .request(reqwest::Method::POST)
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) => {
                return self.gone(format!(
                    "cannot reach the upstream server at {}: {}",
                    self.url,
                    chain(&e)
                ));
            }
        };
        if let Some(s) = resp.headers().get(SESSION).and_then(|v| v.to_str().ok()) {
            *self.session.id.lock() = Some(s.to_string());
        }
        let status = resp.status();
        if status == reqwest::StatusCode::ACCEPTED {
            return;
        }
        let is_init = msg.get("method").and_then(Value::as_str) == Some("initialize");
        let forwarded = match self.read_body(resp, is_init).await {
            Ok(n) => n,
            Err(why) => return self.gone(why),
        };
        if forwarded == 0 && !status.is_success() {
            self.fail(&msg, format!("upstream answered HTTP {status}"));
        }
    }

    /// Forwards the messages of a response body (JSON or SSE); returns how many, or why the
    /// body broke off.
    async fn read_body(&self, mut resp: reqwest::Response, is_init: bool) -> Result<usize, String> {
        let sse = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        let mut n = 0;
        if !sse {
            let bytes = resp
                .bytes()
                .await
                .map_err(|e| format!("its response broke off: {}", chain(&e)))?;
            if bytes.is_empty() {
                return Ok(0);
            }
            match serde_json::from_slice::<Box<RawValue>>(&bytes) {
                Ok(raw) if raw.get().starts_with('[') => {
                    let batch: Vec<Box<RawValue>> =
                        serde_json::from_str(raw.get()).unwrap_or_default();
                    for m in batch {
                        n += self.forward(m, is_init);
                    }
                }
                Ok(raw) => n += self.forward(raw, is_init),
                Err(e) => tracing::warn!("upstream: a response that is not JSON: {e}"),
            }
            return Ok(n);
        }
        let mut buf: Vec<u8> = Vec::new();
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => buf.extend_from_slice(&chunk),
                Ok(None) => break,
                Err(e) => return Err(format!("its event stream broke off: {}", chain(&e))),
            }
            while let Some(end) = event_end(&buf) {
                let event: Vec<u8> = buf.drain(..end.1).collect();
                if let Some(m) = sse_data(&event[..end.0]) {
                    n += self.forward(m, is_init);
                }
            }
        }
        Ok(n)
    }

    fn forward(&self, raw: Box<RawValue>, is_init: bool) -> usize {
        let m = match Frame::from_raw(raw) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("upstream: skipped a message that is not JSON: {e}");
                return 0;
            }
        };
        if is_init && let Some(v) = m.pointer("/result/protocolVersion").and_then(Value::as_str) {
            *self.session.version.lock() = Some(v.to_string());
        }
        usize::from(self.send_down(m))
    }

    /// The GET stream of messages the server starts on its own (if it offers one).
    async fn listen(&self) {
        let resp = self
            .request(reqwest::Method::GET)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await;
        match resp {
            Ok(r) if r.status().is_success() => {
                if let Err(why) = self.read_body(r, false).await {
                    self.gone(why);
                }
            }
            Ok(r) => tracing::debug!("upstream: no GET stream (HTTP {})", r.status()),
            Err(e) => tracing::debug!("upstream: no GET stream: {e}"),
        }
    }

    async fn close(&self) {
        if self.session.id.lock().is_some() {
            // Bounded: a server that stopped answering must not hold up the gateway's exit.
            let delete = self.request(reqwest::Method::DELETE).timeout(START_TIMEOUT);
            let _ = delete.send().await;
        }
    }
}

/// The end of the first complete SSE event in `buf`: (end of its text, end including the blank
/// line).
fn event_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf
        .windows(2)
        .position(|w| w == b"\n\n")
        .map(|i| (i, i + 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, i + 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 < b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// The JSON message in an SSE event's `data:` lines, if any (its text as it came).
fn sse_data(event: &[u8]) -> Option<Box<RawValue>> {
    let text = std::str::from_utf8(event).ok()?;
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    if data.is_empty() {
        return None;
    }
    serde_json::from_str(&data.join("\n")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events() {
        let buf = b"event: message\nid: 1\ndata: {\"a\":1}\n\nrest";
        let (text_end, end) = event_end(buf).unwrap();
        assert_eq!(&buf[end..], b"rest");
        let text = |r: Option<Box<RawValue>>| r.map(|r| r.get().to_string());
        assert_eq!(
            text(sse_data(&buf[..text_end])).as_deref(),
            Some(r#"{"a":1}"#)
        );
        let crlf = b"data: {\"b\":\r\ndata: 2}\r\n\r\n";
        let (t, _) = event_end(crlf).unwrap();
        assert_eq!(text(sse_data(&crlf[..t])).as_deref(), Some("{\"b\":\n2}"));
        assert!(sse_data(b": keep-alive").is_none());
        assert!(event_end(b"data: {").is_none());
    }
}
