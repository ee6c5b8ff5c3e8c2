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

use super::ProxyError;
use super::frame::Frame;
use super::jsonrpc;
use super::transport::{self, Incoming, Link, Sender};
use parking_lot::Mutex;
use serde_json::Value;
use serde_json::value::RawValue;

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
    /// What goes to the gateway; taken (closing the link) when the server is gone.
    down: Mutex<Option<Sender<Incoming>>>,
    /// The largest message (and response body) accepted.
    max: usize,
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
pub(crate) async fn connect(url: String, max: usize) -> Result<Link, ProxyError> {
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
    let (up_tx, mut up_rx) = transport::queue::<Frame>();
    let (down_tx, down_rx) = transport::queue::<Incoming>();
    let http = Arc::new(Http {
        client,
        url,
        session: Session::default(),
        down: Mutex::new(Some(down_tx)),
        max,
    });
    let writer = tokio::spawn(async move {
        let mut listening = false;
        while let Some(item) = up_rx.recv().await {
            let msg = item.value;
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

/// The headers of a 2026-07-28 request (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`),
/// from its body; none for older revisions (their version header comes from `initialize`).
fn modern_headers(msg: &Frame) -> Vec<(&'static str, String)> {
    let version = msg
        .pointer("/params/_meta")
        .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .and_then(Value::as_str);
    let (Some(v), Some(method)) = (version, msg.get("method").and_then(Value::as_str)) else {
        return Vec::new();
    };
    let mut h = vec![(VERSION, v.to_string()), ("mcp-method", method.to_string())];
    let name = match method {
        "tools/call" | "prompts/get" => msg.pointer("/params/name"),
        "resources/read" => msg.pointer("/params/uri"),
        _ => None,
    };
    if let Some(n) = name.and_then(Value::as_str) {
        let plain = !n.is_empty()
            && n.bytes().all(|b| (0x20..0x7f).contains(&b))
            && n.trim() == n
            && !(n.starts_with("=?base64?") && n.ends_with("?="));
        let value = if plain {
            n.to_string()
        } else {
            format!("=?base64?{}?=", base64(n.as_bytes()))
        };
        h.push(("mcp-name", value));
    }
    h
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
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

    /// Sends to the gateway once there is room (false when the link is closed).
    async fn send_down(&self, i: Incoming) -> bool {
        let down = self.down.lock().clone();
        match down {
            Some(d) => {
                let room = d.reserve(64).await;
                d.send_in(room, i)
            }
            None => false,
        }
    }

    /// Sends a frame to the gateway (false when the link is closed).
    async fn send_frame(&self, f: Frame) -> bool {
        let down = self.down.lock().clone();
        match down {
            Some(d) => {
                let room = d.reserve(f.weight()).await;
                d.send_in(room, Incoming::Frame(f))
            }
            None => false,
        }
    }

    /// The request in `msg` failed while the server is there: it gets −32603 with `why`.
    async fn fail(&self, msg: &Value, why: String) {
        tracing::warn!("upstream: {why}");
        if let (Some(id), Some(_)) = (msg.get("id"), msg.get("method")) {
            self.send_frame(jsonrpc::error(id, jsonrpc::INTERNAL_ERROR, &why).into())
                .await;
        }
    }

    /// The server is gone: closes the link (the gateway answers what is pending and exits 1).
    fn gone(&self, why: String) {
        if self.down.lock().take().is_some() {
            tracing::error!("the upstream server at {} is gone: {why}", self.url);
        }
    }

    async fn post(&self, msg: Frame) {
        let body = msg.to_bytes();
        let mut req = self
            .request(reqwest::Method::POST)
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        for (k, v) in modern_headers(&msg) {
            req = req.header(k, v);
        }
        let sent = req.body(body).send().await;
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
        // A gateway in front of the server that cannot reach it (502, 503, 504), or a session
        // the server no longer knows (404): the server is gone for this session.
        let lost_session =
            status == reqwest::StatusCode::NOT_FOUND && self.session.id.lock().is_some();
        if lost_session
            || matches!(
                status,
                reqwest::StatusCode::BAD_GATEWAY
                    | reqwest::StatusCode::SERVICE_UNAVAILABLE
                    | reqwest::StatusCode::GATEWAY_TIMEOUT
            )
        {
            return self.gone(format!("it answered HTTP {status}"));
        }
        let is_init = msg.get("method").and_then(Value::as_str) == Some("initialize");
        // An error answer (non-2xx) to a request may carry a JSON-RPC error with id `null`
        // (the TypeScript SDK answers a request it cannot take, such as the `server/discover`
        // probe to an older server, with HTTP 400 and such an error): it answers this request.
        let orphan = (!status.is_success() && msg.get("method").is_some())
            .then(|| msg.id_text().map(|t| t.into_owned()))
            .flatten();
        let forwarded = match self.read_body(resp, is_init, orphan.as_deref()).await {
            Ok(n) => n,
            Err(Broke::TooLarge) => {
                // The response to this request is over the limit: it fails, naming the limit.
                let id = msg.id_text().map(|t| t.into_owned());
                self.send_down(Incoming::TooLarge { id }).await;
                return;
            }
            Err(Broke::Gone(why)) => return self.gone(why),
        };
        if forwarded == 0 && !status.is_success() {
            self.fail(&msg, format!("upstream answered HTTP {status}"))
                .await;
        }
    }

    /// Forwards the messages of a response body (JSON or SSE); returns how many, or why the
    /// body broke off. A body (or one event) over the message limit is not kept.
    /// `orphan`: the id of the request this body answers with an error status (an error with
    /// id `null` in it is that request's answer).
    async fn read_body(
        &self,
        mut resp: reqwest::Response,
        is_init: bool,
        orphan: Option<&str>,
    ) -> Result<usize, Broke> {
        let sse = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        let broke =
            |e: reqwest::Error| Broke::Gone(format!("its response broke off: {}", chain(&e)));
        let mut n = 0;
        if !sse {
            if resp.content_length().is_some_and(|l| l > self.max as u64) {
                return Err(Broke::TooLarge);
            }
            let mut bytes: Vec<u8> = Vec::new();
            while let Some(chunk) = resp.chunk().await.map_err(broke)? {
                if bytes.len() + chunk.len() > self.max {
                    return Err(Broke::TooLarge);
                }
                bytes.extend_from_slice(&chunk);
            }
            if bytes.is_empty() {
                return Ok(0);
            }
            match serde_json::from_slice::<Box<RawValue>>(&bytes) {
                Ok(raw) if raw.get().starts_with('[') => {
                    let batch: Vec<Box<RawValue>> =
                        serde_json::from_str(raw.get()).unwrap_or_default();
                    for m in batch {
                        n += self.forward(m, is_init, orphan).await;
                    }
                }
                Ok(raw) => n += self.forward(raw, is_init, orphan).await,
                Err(e) => tracing::warn!("upstream: a response that is not JSON: {e}"),
            }
            return Ok(n);
        }
        let mut events = Events::default();
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => events.push(&chunk),
                Ok(None) => break,
                Err(e) => return Err(broke(e)),
            }
            while let Some(event) = events.next() {
                if let Some(m) = sse_data(&event) {
                    n += self.forward(m, is_init, orphan).await;
                }
            }
            if events.pending() > self.max {
                return Err(Broke::TooLarge);
            }
        }
        Ok(n)
    }

    async fn forward(&self, raw: Box<RawValue>, is_init: bool, orphan: Option<&str>) -> usize {
        let mut m = match Frame::from_raw(&raw) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("upstream: skipped a message that is not JSON: {e}");
                return 0;
            }
        };
        if let Some(id) = orphan
            && m.get("id").is_some_and(Value::is_null)
            && m.get("error").is_some()
            && m.get("method").is_none()
        {
            m = m.with_id(id);
        }
        if is_init && let Some(v) = m.pointer("/result/protocolVersion").and_then(Value::as_str) {
            *self.session.version.lock() = Some(v.to_string());
        }
        usize::from(self.send_frame(m).await)
    }

    /// The GET stream of messages the server starts on its own (if it offers one).
    async fn listen(&self) {
        let resp = self
            .request(reqwest::Method::GET)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await;
        match resp {
            Ok(r) if r.status().is_success() => match self.read_body(r, false, None).await {
                Ok(_) => {}
                Err(Broke::Gone(why)) => self.gone(why),
                Err(Broke::TooLarge) => self.gone(format!(
                    "an event on its GET stream is over {} bytes",
                    self.max
                )),
            },
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

/// Why a response body was not read to its end.
enum Broke {
    /// The server is gone (the body broke off).
    Gone(String),
    /// Over the message limit.
    TooLarge,
}

/// SSE events cut from a byte stream in linear time: each byte is looked at once for the
/// blank line that ends an event.
#[derive(Default)]
struct Events {
    buf: Vec<u8>,
    /// Where the next event starts.
    start: usize,
    /// How far `buf` was searched for the end of the event at `start`.
    searched: usize,
}

impl Events {
    fn push(&mut self, chunk: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
            self.searched = 0;
        } else if self.start > 64 * 1024 && self.start * 2 > self.buf.len() {
            self.buf.drain(..self.start);
            self.searched -= self.start;
            self.start = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// Bytes of the event not complete yet.
    fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The next complete event's text (without its blank line).
    fn next(&mut self) -> Option<Vec<u8>> {
        // Resume a little before where the last search stopped: a terminator may straddle.
        let from = self.searched.saturating_sub(3).max(self.start);
        let hay = self.buf.get(from..)?;
        let mut i = 0;
        while let Some(j) = memchr::memchr(b'\n', &hay[i..]) {
            let at = i + j;
            // "\n\n" or "\n\r\n" ends an event.
            let end = match (hay.get(at + 1), hay.get(at + 2)) {
                (Some(b'\n'), _) => Some(at + 2),
                (Some(b'\r'), Some(b'\n')) => Some(at + 3),
                _ => None,
            };
            if let Some(end) = end {
                let text_end = if at > 0 && hay[at - 1] == b'\r' {
                    at - 1
                } else {
                    at
                };
                let event = self.buf[self.start..from + text_end].to_vec();
                self.start = from + end;
                self.searched = self.start;
                return Some(event);
            }
            i = at + 1;
        }
        self.searched = self.buf.len();
        None
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
        let text = |r: Option<Box<RawValue>>| r.map(|r| r.get().to_string());
        let mut ev = Events::default();
        ev.push(b"event: message\nid: 1\ndata: {\"a\":1}\n\nrest");
        let e = ev.next().unwrap();
        assert_eq!(text(sse_data(&e)).as_deref(), Some(r#"{"a":1}"#));
        assert!(ev.next().is_none());
        assert_eq!(ev.pending(), 4);
        let mut ev = Events::default();
        for b in b"data: {\"b\":\r\ndata: 2}\r\n\r\ndata: 3\n\n" {
            ev.push(&[*b]);
        }
        let e = ev.next().unwrap();
        assert_eq!(text(sse_data(&e)).as_deref(), Some("{\"b\":\n2}"));
        assert_eq!(text(sse_data(&ev.next().unwrap())).as_deref(), Some("3"));
        assert!(sse_data(b": keep-alive").is_none());
        let mut ev = Events::default();
        ev.push(b"data: {");
        assert!(ev.next().is_none());
    }
}
