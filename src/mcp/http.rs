//! The upstream over MCP's streamable HTTP transport, relaying raw JSON-RPC frames: each frame
//! is POSTed; the answer is one JSON message or an SSE stream of them. The session id and the
//! negotiated protocol version ride on every later request; a GET stream carries messages the
//! server starts on its own; the session is DELETEd at the end.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

use super::jsonrpc;
use super::transport::Link;

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
    down: UnboundedSender<Value>,
}

/// Connects to a streamable HTTP MCP endpoint (no request is made until the first frame).
pub(crate) fn connect(url: String) -> Result<Link, String> {
    let client = reqwest::Client::builder()
        .build()
        .map_err(|e| e.to_string())?;
    let (up_tx, mut up_rx) = unbounded_channel::<Value>();
    let (down_tx, down_rx) = unbounded_channel::<Value>();
    let http = Arc::new(Http {
        client,
        url,
        session: Session::default(),
        down: down_tx,
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

    fn fail(&self, msg: &Value, why: String) {
        tracing::warn!("upstream: {why}");
        if let (Some(id), Some(_)) = (msg.get("id"), msg.get("method")) {
            let _ = self
                .down
                .send(jsonrpc::error(id, jsonrpc::INTERNAL_ERROR, &why));
        }
    }

    async fn post(&self, msg: Value) {
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
            Err(e) => return self.fail(&msg, format!("upstream unreachable: {e}")),
        };
        if let Some(s) = resp.headers().get(SESSION).and_then(|v| v.to_str().ok()) {
            *self.session.id.lock() = Some(s.to_string());
        }
        let status = resp.status();
        if status == reqwest::StatusCode::ACCEPTED {
            return;
        }
        let is_init = msg.get("method").and_then(Value::as_str) == Some("initialize");
        let forwarded = self.read_body(resp, is_init).await;
        if forwarded == 0 && !status.is_success() {
            self.fail(&msg, format!("upstream answered HTTP {status}"));
        }
    }

    /// Forwards the messages of a response body (JSON or SSE); returns how many.
    async fn read_body(&self, mut resp: reqwest::Response, is_init: bool) -> usize {
        let sse = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        let mut n = 0;
        if !sse {
            let Ok(bytes) = resp.bytes().await else {
                return 0;
            };
            match serde_json::from_slice::<Value>(&bytes) {
                Ok(Value::Array(batch)) => {
                    for m in batch {
                        n += self.forward(m, is_init);
                    }
                }
                Ok(m) => n += self.forward(m, is_init),
                Err(_) => {}
            }
            return n;
        }
        let mut buf: Vec<u8> = Vec::new();
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => buf.extend_from_slice(&chunk),
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("upstream: event stream broke: {e}");
                    break;
                }
            }
            while let Some(end) = event_end(&buf) {
                let event: Vec<u8> = buf.drain(..end.1).collect();
                if let Some(m) = sse_data(&event[..end.0]) {
                    n += self.forward(m, is_init);
                }
            }
        }
        n
    }

    fn forward(&self, m: Value, is_init: bool) -> usize {
        if is_init && let Some(v) = m.pointer("/result/protocolVersion").and_then(Value::as_str) {
            *self.session.version.lock() = Some(v.to_string());
        }
        usize::from(self.down.send(m).is_ok())
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
                self.read_body(r, false).await;
            }
            Ok(r) => tracing::debug!("upstream: no GET stream (HTTP {})", r.status()),
            Err(e) => tracing::debug!("upstream: no GET stream: {e}"),
        }
    }

    async fn close(&self) {
        if self.session.id.lock().is_some() {
            let _ = self.request(reqwest::Method::DELETE).send().await;
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

/// The JSON message in an SSE event's `data:` lines, if any.
fn sse_data(event: &[u8]) -> Option<Value> {
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
        assert_eq!(
            sse_data(&buf[..text_end]),
            Some(serde_json::json!({"a": 1}))
        );
        let crlf = b"data: {\"b\":\r\ndata: 2}\r\n\r\n";
        let (t, _) = event_end(crlf).unwrap();
        assert_eq!(sse_data(&crlf[..t]), Some(serde_json::json!({"b": 2})));
        assert_eq!(sse_data(b": keep-alive"), None);
        assert!(event_end(b"data: {").is_none());
    }
}
