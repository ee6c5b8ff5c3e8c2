//! A small Chrome DevTools Protocol client for the console's browser test: starts headless
//! Chromium (Debian's `chromium`), attaches to one page (flat sessions on the browser's
//! websocket) and sends commands, waiting for their answers and for named events.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::{Message, WebSocket, stream::MaybeTlsStream};

/// The Chromium binary: `TOOLGATE_TEST_CHROMIUM`, else `chromium` on PATH.
pub fn chromium_path() -> Option<String> {
    if let Ok(p) = std::env::var("TOOLGATE_TEST_CHROMIUM")
        && !p.is_empty()
    {
        return Some(p);
    }
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .map(str::to_string)
}

/// A headless Chromium with one page attached.
pub struct Browser {
    child: Child,
    ws: WebSocket<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    session: String,
    /// Events received while waiting for something else.
    events: VecDeque<Value>,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    /// Starts `binary` headless (a fresh profile) and opens a blank page.
    pub fn start(binary: &str) -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let mut child = Command::new(binary)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--remote-debugging-port=0",
                "--window-size=1200,900",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("chromium starts");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        let ws_url = loop {
            let line = lines
                .next()
                .expect("chromium printed its DevTools address")
                .expect("stderr line");
            if let Some(rest) = line.strip_prefix("DevTools listening on ") {
                break rest.trim().to_string();
            }
        };
        // Keep draining stderr so Chromium never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let (ws, _) = tungstenite::connect(ws_url.as_str()).expect("DevTools websocket");
        let mut b = Browser {
            child,
            ws,
            next_id: 0,
            session: String::new(),
            events: VecDeque::new(),
            _profile: profile,
        };
        let target = b.browser_call("Target.createTarget", json!({"url": "about:blank"}));
        let target_id = target["targetId"].as_str().expect("targetId").to_string();
        let attached = b.browser_call(
            "Target.attachToTarget",
            json!({"targetId": target_id, "flatten": true}),
        );
        b.session = attached["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_string();
        b.call("Page.enable", json!({}));
        b.call("Runtime.enable", json!({}));
        b
    }

    fn send(&mut self, method: &str, params: Value, session: Option<&str>) -> u64 {
        self.next_id += 1;
        let mut msg = json!({"id": self.next_id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.ws
            .send(Message::text(msg.to_string()))
            .expect("send to DevTools");
        self.next_id
    }

    fn read(&mut self) -> Value {
        loop {
            match self.ws.read().expect("DevTools message") {
                Message::Text(t) => return serde_json::from_str(t.as_str()).expect("json"),
                Message::Binary(b) => return serde_json::from_slice(&b).expect("json"),
                _ => continue,
            }
        }
    }

    fn wait_result(&mut self, id: u64, method: &str) -> Value {
        loop {
            let m = self.read();
            if m["id"].as_u64() == Some(id) {
                if let Some(e) = m.get("error") {
                    panic!("{method}: {e}");
                }
                return m["result"].clone();
            }
            if m.get("method").is_some() {
                self.events.push_back(m);
            }
        }
    }

    fn browser_call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params, None);
        self.wait_result(id, method)
    }

    /// A command on the page.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        let id = self.send(method, params, Some(&session));
        self.wait_result(id, method)
    }

    /// Waits for the page's event `method` (one received earlier counts), at most `limit`.
    pub fn wait_event(&mut self, method: &str, limit: Duration) -> Value {
        if let Some(i) = self.events.iter().position(|e| e["method"] == method) {
            return self.events.remove(i).expect("event");
        }
        let deadline = Instant::now() + limit;
        loop {
            assert!(Instant::now() < deadline, "no {method} within {limit:?}");
            let m = self.read();
            if m["method"] == method {
                return m;
            }
            if m.get("method").is_some() {
                self.events.push_back(m);
            }
        }
    }

    /// Forgets the events received so far.
    pub fn clear_events(&mut self) {
        self.events.clear();
    }

    /// Navigates and waits for the load event.
    pub fn goto(&mut self, url: &str) {
        self.clear_events();
        self.call("Page.navigate", json!({"url": url}));
        self.wait_event("Page.loadEventFired", Duration::from_secs(20));
    }

    /// Evaluates `expr` in the page (awaiting a promise) and returns its value.
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "awaitPromise": true, "returnByValue": true}),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expr}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// The page's HTML, read through the DOM domain (works with JavaScript off).
    pub fn html(&mut self) -> String {
        let doc = self.call("DOM.getDocument", json!({"depth": 0}));
        let root = doc["root"]["nodeId"].clone();
        self.call("DOM.getOuterHTML", json!({"nodeId": root}))["outerHTML"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// Clicks the first element matching `selector` with real mouse events at its centre
    /// (no script of the page is involved).
    pub fn click(&mut self, selector: &str) {
        let doc = self.call("DOM.getDocument", json!({"depth": 0}));
        let root = doc["root"]["nodeId"].clone();
        let node = self.call(
            "DOM.querySelector",
            json!({"nodeId": root, "selector": selector}),
        )["nodeId"]
            .clone();
        assert!(node.as_u64().unwrap_or(0) > 0, "no element {selector}");
        self.call("DOM.scrollIntoViewIfNeeded", json!({"nodeId": node}));
        let model = self.call("DOM.getBoxModel", json!({"nodeId": node}));
        let q = &model["model"]["content"];
        let x = (q[0].as_f64().unwrap() + q[2].as_f64().unwrap()) / 2.0;
        let y = (q[1].as_f64().unwrap() + q[5].as_f64().unwrap()) / 2.0;
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }

    /// Types `text` into the focused element.
    pub fn type_text(&mut self, text: &str) {
        self.call("Input.insertText", json!({"text": text}));
    }

    /// Focuses the first element matching `selector`.
    pub fn focus(&mut self, selector: &str) {
        let doc = self.call("DOM.getDocument", json!({"depth": 0}));
        let root = doc["root"]["nodeId"].clone();
        let node = self.call(
            "DOM.querySelector",
            json!({"nodeId": root, "selector": selector}),
        )["nodeId"]
            .clone();
        self.call("DOM.focus", json!({"nodeId": node}));
    }

    /// A PNG screenshot of the page.
    pub fn screenshot(&mut self) -> Vec<u8> {
        use base64::Engine as _;
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}));
        base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().expect("data"))
            .expect("base64")
    }

    /// The page's cookies for `url`.
    pub fn cookies(&mut self, url: &str) -> Vec<Value> {
        self.call("Network.getCookies", json!({"urls": [url]}))["cookies"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}
