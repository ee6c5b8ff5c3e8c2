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
        std::thread::spawn(move || {
            for l in lines.map_while(Result::ok) {
                eprintln!("gateway: {l}");
            }
        });
        Gateway {
            child: Some(child),
            url,
        }
    }

    /// The gateway's process id (to kill or freeze it).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
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
