//! Driving `toolgate mcp-proxy --listen` over real loopback HTTP, for the tests: the gateway
//! process, and a raw streamable-HTTP MCP client (2025-11-25 sessions and 2026-07-28 stateless
//! requests).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub const TOOLGATE: &str = env!("CARGO_BIN_EXE_toolgate");
pub const MODERN: &str = "2026-07-28";

/// The tokens of the tests: alice and bob act for agent `team-agent`; carol's token is another
/// agent's.
pub const TOKENS: [(&str, &str, Option<&str>); 3] = [
    ("tok-alice", "team-agent", Some("alice")),
    ("tok-bob", "team-agent", Some("bob")),
    ("tok-carol", "carol-agent", None),
];

fn sha(t: &str) -> String {
    hex::encode(Sha256::digest(t.as_bytes()))
}

/// Writes the token file of [`TOKENS`] into `dir`.
pub fn token_file(dir: &Path) -> PathBuf {
    let tokens: Vec<Value> = TOKENS
        .iter()
        .map(|(t, a, u)| {
            let mut e = json!({"sha256": sha(t), "agentId": a, "agentTags": ["team"]});
            if let Some(u) = u {
                e["enduser"] = json!({"id": u, "tags": {"team": "blue"}});
            }
            e
        })
        .collect();
    let p = dir.join("tokens.json");
    std::fs::write(&p, json!({"tokens": tokens}).to_string()).unwrap();
    p
}

/// A running `toolgate mcp-proxy --listen 127.0.0.1:0`.
pub struct Gateway {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    /// Its stderr so far (one entry a line).
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Gateway {
    /// Starts the gateway with `args` (the usual `--policy` etc.) in front of `upstream`.
    pub fn start(args: &[String], upstream: &[String], env: &[(&str, &str)]) -> Gateway {
        let mut cmd = Command::new(TOOLGATE);
        cmd.arg("mcp-proxy")
            .args(["--listen", "127.0.0.1:0"])
            .args(args);
        if !upstream.is_empty() {
            cmd.arg("--").args(upstream);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let url = loop {
            let line = match lines.next() {
                Some(Ok(l)) => l,
                _ => {
                    let status = child.wait().unwrap();
                    panic!("the gateway exited before listening ({status})");
                }
            };
            eprintln!("gateway: {line}");
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.trim().to_string();
            }
        };
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = log.clone();
        std::thread::spawn(move || {
            for l in lines.map_while(Result::ok) {
                eprintln!("gateway: {l}");
                keep.lock().unwrap().push(l);
            }
        });
        Gateway {
            child: Some(child),
            url,
            log,
        }
    }

    /// The gateway's process id (to kill or freeze it).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Whether a line of its stderr so far contains `s`.
    pub fn logged(&self, s: &str) -> bool {
        self.log.lock().unwrap().iter().any(|l| l.contains(s))
    }

    /// Stops the gateway with SIGTERM and waits for it (its runs end, its trail is flushed).
    pub fn stop(mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        child.wait().unwrap()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// An HTTP response: its status, headers, and the JSON-RPC messages in it (one JSON body, or
/// every SSE event).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub msgs: Vec<Value>,
}

impl Reply {
    /// The last message (the answer).
    pub fn answer(&self) -> &Value {
        self.msgs.last().expect("a message in the reply")
    }
}

/// Reads the messages of an SSE response as they come.
pub struct Events {
    resp: reqwest::Response,
    buf: Vec<u8>,
}

impl Events {
    /// The events of an SSE response.
    pub fn of(resp: reqwest::Response) -> Events {
        Events {
            resp,
            buf: Vec::new(),
        }
    }

    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buf.drain(..i + 2).collect();
                let text = String::from_utf8_lossy(&event);
                let data: String = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                if data.is_empty() {
                    continue;
                }
                return Some(serde_json::from_str(&data).unwrap());
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.resp.chunk())
                .await
                .expect("an event within 30 s")
                .ok()??;
            self.buf.extend_from_slice(&chunk);
        }
    }
}

/// A client of the gateway.
pub struct Client {
    pub http: reqwest::Client,
    pub url: String,
    pub token: Option<String>,
    /// 2025-11-25: the session id once initialized.
    pub session: Option<String>,
    /// Speak 2026-07-28 (stateless).
    pub modern: bool,
    /// 2026-07-28: `_meta["dev.toolgate/runId"]`.
    pub run: Option<String>,
    /// 2026-07-28: declare the elicitation capability.
    pub elicitation: bool,
    next: AtomicU64,
}

impl Client {
    pub fn new(url: &str, token: &str, modern: bool) -> Client {
        Client {
            http: reqwest::Client::new(),
            url: url.to_string(),
            token: Some(token.to_string()),
            session: None,
            modern,
            run: None,
            elicitation: false,
            next: AtomicU64::new(1),
        }
    }

    pub fn id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// A request body (2026-07-28: with the `_meta` every request carries).
    pub fn body(&self, id: u64, method: &str, params: Value) -> Value {
        let mut params = if params.is_null() { json!({}) } else { params };
        if self.modern {
            let mut caps = json!({});
            if self.elicitation {
                caps["elicitation"] = json!({});
            }
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": caps,
            });
            if let Some(r) = &self.run {
                params["_meta"]["dev.toolgate/runId"] = json!(r);
            }
        }
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    }

    /// POSTs `body` with the usual headers (token, session, 2026-07-28 headers) and `extra`.
    pub async fn send(&self, body: &str, extra: &[(&str, &str)]) -> reqwest::Response {
        let mut r = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(t) = &self.token {
            r = r.bearer_auth(t);
        }
        if let Some(s) = &self.session {
            r = r.header("mcp-session-id", s);
        }
        let v: Option<Value> = serde_json::from_str(body).ok();
        let skip = |h: &str| extra.iter().any(|(k, _)| k.eq_ignore_ascii_case(h));
        if self.modern {
            if !skip("mcp-protocol-version") {
                r = r.header("mcp-protocol-version", MODERN);
            }
            if let Some(v) = &v {
                if let Some(m) = v["method"].as_str()
                    && !skip("mcp-method")
                {
                    r = r.header("mcp-method", m);
                }
                let name = v["params"]["name"].as_str().or(v["params"]["uri"].as_str());
                if let Some(n) = name
                    && !skip("mcp-name")
                {
                    r = r.header("mcp-name", n);
                }
            }
        }
        for (k, val) in extra {
            r = r.header(*k, *val);
        }
        r.body(body.to_string()).send().await.unwrap()
    }

    /// POSTs and reads the whole reply.
    pub async fn post(&self, body: &str, extra: &[(&str, &str)]) -> Reply {
        let resp = self.send(body, extra).await;
        read(resp).await
    }

    /// A request; its whole reply.
    pub async fn request(&self, method: &str, params: Value) -> Reply {
        let body = self.body(self.id(), method, params);
        self.post(&body.to_string(), &[]).await
    }

    /// A request whose answer is awaited as events arrive.
    pub async fn stream(&self, method: &str, params: Value) -> Events {
        let body = self.body(self.id(), method, params);
        let resp = self.send(&body.to_string(), &[]).await;
        assert_eq!(resp.status(), 200);
        Events {
            resp,
            buf: Vec::new(),
        }
    }

    /// 2025-11-25: `initialize` (keeping the session id) and `notifications/initialized`.
    pub async fn initialize(&mut self, elicitation: bool) -> Value {
        let caps = if elicitation {
            json!({"elicitation": {}})
        } else {
            json!({})
        };
        let r = self
            .request(
                "initialize",
                json!({"protocolVersion": "2025-11-25", "capabilities": caps,
                       "clientInfo": {"name": "test", "version": "1"}}),
            )
            .await;
        assert_eq!(r.status, 200, "{r:?}");
        self.session = Some(r.headers["mcp-session-id"].to_str().unwrap().to_string());
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let n = self.post(&note.to_string(), &[]).await;
        assert_eq!(n.status, 202);
        r.answer().clone()
    }

    /// 2025-11-25: the session's GET stream (what the server sends on its own).
    pub async fn get_stream(&self) -> Events {
        let mut r = self
            .http
            .get(&self.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", self.session.as_deref().unwrap());
        if let Some(t) = &self.token {
            r = r.bearer_auth(t);
        }
        let resp = r.send().await.unwrap();
        assert_eq!(resp.status(), 200);
        Events::of(resp)
    }

    /// `tools/call`: the answer.
    pub async fn call(&self, name: &str, args: Value) -> Value {
        let r = self
            .request("tools/call", json!({"name": name, "arguments": args}))
            .await;
        assert_eq!(r.status, 200, "{r:?}");
        r.answer().clone()
    }
}

/// Reads a whole reply.
pub async fn read(resp: reqwest::Response) -> Reply {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let sse = headers
        .get("content-type")
        .is_some_and(|c| c.to_str().unwrap_or("").starts_with("text/event-stream"));
    let msgs = if sse {
        let mut ev = Events {
            resp,
            buf: Vec::new(),
        };
        let mut v = Vec::new();
        while let Some(m) = ev.next().await {
            v.push(m);
        }
        v
    } else {
        let bytes = resp.bytes().await.unwrap();
        serde_json::from_slice::<Value>(&bytes)
            .into_iter()
            .collect()
    };
    Reply {
        status,
        headers,
        msgs,
    }
}

/// The text of a tool result.
pub fn text(answer: &Value) -> String {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The toolgate code of a blocked result.
pub fn code(answer: &Value) -> String {
    answer["result"]["_meta"]["toolgate"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A process's resident memory (KiB), and its peak so far.
pub fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The child processes of `pid`.
pub fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
    {
        let t = t.unwrap().path().join("children");
        out.extend(
            std::fs::read_to_string(t)
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok()),
        );
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Bytes a process wrote so far.
pub fn written(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap_or_default();
    io.lines()
        .find_map(|l| l.strip_prefix("wchar:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Polls `done` (what it watches cannot be awaited: another process's state) until it holds;
/// panics naming `what` after `limit`.
pub async fn until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A raw HTTP/1.1 request on its own connection, written whole; the response is left unread
/// (a client that does not read), but for its head when `head` is true. Returns the socket.
pub fn raw_request(
    url: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &str,
    head: bool,
) -> std::net::TcpStream {
    use std::io::{Read, Write};
    let hostport = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let mut s = std::net::TcpStream::connect(&hostport).unwrap();
    let mut req = format!("{method} /mcp HTTP/1.1\r\nhost: {hostport}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).unwrap();
    if head {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut got = Vec::new();
        let mut b = [0u8; 1];
        while !got.ends_with(b"\r\n\r\n") {
            assert_eq!(s.read(&mut b).unwrap(), 1, "the response head");
            got.push(b[0]);
        }
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    }
    s
}

/// Reads a chunked response on `s` to its end (the last chunk); false when the connection
/// closed (or went quiet for 60 s) first.
pub fn read_to_end_of_response(s: &mut std::net::TcpStream) -> bool {
    use std::io::Read;
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut tail: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => {
                tail.extend_from_slice(&buf[..n]);
                if tail.ends_with(b"\r\n0\r\n\r\n") || tail == b"0\r\n\r\n" {
                    return true;
                }
                let keep = tail.len().saturating_sub(8);
                tail.drain(..keep);
            }
        }
    }
}
