//! A raw JSON-RPC MCP client driving `toolgate mcp-proxy` over real pipes, for the tests.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

/// How long any single message may take to arrive before the test fails.
const PATIENCE: Duration = Duration::from_secs(30);

pub const TOOLGATE: &str = env!("CARGO_BIN_EXE_toolgate");

/// The fixture MCP server (tests/mcp_fixture/server.rs, the example `mcp_fixture`): next to this
/// test's executable, in `target/<profile>/examples/`. `cargo test` builds it with the tests;
/// a run of single test targets (`cargo test --test mcp_proxy`) does not, so this says how.
pub fn fixture() -> String {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test> -> target/<profile>/examples/mcp_fixture
    let path = exe
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("examples")
        .join(format!("mcp_fixture{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "the fixture MCP server {} is not built: run `cargo test` (it builds the examples) or `cargo build --example mcp_fixture`",
        path.display()
    );
    path.display().to_string()
}

/// The test policy: destructive tools blocked, `publish` needs approval, the note "forbidden"
/// is off limits for tools tagged `notes` (by the tools file).
pub const POLICY: &str = r#"{"policy": {"name": "mcp-test"}, "rules": [
 {"id": "no-destructive", "name": "No destructive tools", "priority": 10, "enabled": true,
  "selector": {"phase": "tool.before", "tool": {"tagsAny": ["mcp:destructive"]}},
  "condition": {"kind": "toolName", "op": "glob", "value": "*"},
  "effect": {"type": "block", "reason": "destructive tools are not allowed"}},
 {"id": "publish-needs-approval", "name": "Publishing needs approval", "priority": 5, "enabled": true,
  "selector": {"phase": "tool.before", "tool": {"name": "publish"}},
  "condition": {"kind": "toolName", "op": "glob", "value": "*"},
  "effect": {"type": "hitl", "reason": "publishing needs approval"}},
 {"id": "withhold-classified", "name": "Withhold classified notes", "priority": 1, "enabled": true,
  "selector": {"phase": "tool.after", "tool": {"name": "read_note"}},
  "condition": {"kind": "toolArg", "type": "string", "op": "eq", "path": "id", "value": "classified"},
  "effect": {"type": "block", "reason": "classified output withheld"}},
 {"id": "forbidden-note", "name": "Forbidden note", "priority": 1, "enabled": true,
  "selector": {"phase": "tool.before", "tool": {"tagsAll": ["notes"]}},
  "condition": {"kind": "toolArg", "type": "string", "op": "eq", "path": "id", "value": "forbidden"},
  "effect": {"type": "block", "reason": "that note is off limits"}}
]}"#;

pub const TOOLS: &str = r#"{"tools": {"*_note": {"tags": ["notes"]}}, "hide": ["secret_*"]}"#;

/// A folder with the policy, the tools file, and room for pins, reviews and the audit trail.
pub struct Setup {
    pub dir: tempfile::TempDir,
}

impl Setup {
    pub fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("policy.json"), POLICY).unwrap();
        std::fs::write(dir.path().join("tools.json"), TOOLS).unwrap();
        Setup { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The usual gateway arguments (policy, tools, pins, reviews, audit) plus `extra`.
    pub fn args(&self) -> Vec<String> {
        let p = |n: &str| self.path(n).display().to_string();
        vec![
            "--policy".into(),
            p("policy.json"),
            "--tools".into(),
            p("tools.json"),
            "--pin".into(),
            p("pins.json"),
            "--reviews".into(),
            p("reviews.json"),
            "--audit".into(),
            p("audit"),
        ]
    }

    pub fn start(&self) -> Proxy {
        Proxy::start(&self.args(), &[fixture()])
    }

    /// Runs `toolgate ARGS...`, returning (success, stdout).
    pub fn toolgate(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(TOOLGATE).args(args).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    }

    /// Every audit event in the trail.
    pub fn audit_events(&self) -> Vec<Value> {
        read_events(&self.path("audit"))
    }
}

pub fn read_events(dir: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        out.extend(
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()),
        );
    }
    out
}

/// A running gateway and the messages it sent that no call has consumed yet.
pub struct Proxy {
    pub child: Child,
    stdin: Option<ChildStdin>,
    rx: mpsc::Receiver<Value>,
    next_id: u64,
    /// Messages received while waiting for something else.
    pub seen: Vec<Value>,
}

impl Proxy {
    pub fn start(args: &[String], upstream: &[String]) -> Proxy {
        Proxy::start_env(args, upstream, &[])
    }

    /// [`Proxy::start`] with environment variables for the gateway (and so its upstream child).
    pub fn start_env(args: &[String], upstream: &[String], env: &[(&str, &str)]) -> Proxy {
        let mut child = Command::new(TOOLGATE)
            .envs(env.iter().copied())
            .arg("mcp-proxy")
            .args(args)
            .arg("--")
            .args(upstream)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("the gateway wrote a non-JSON line {line:?}: {e}"));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        Proxy {
            child,
            stdin,
            rx,
            next_id: 1,
            seen: Vec::new(),
        }
    }

    pub fn send(&mut self, v: Value) {
        self.send_line(&v.to_string());
    }

    /// Sends one line as it is.
    pub fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// The gateway's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Closes the gateway's stdin (the client is gone) without waiting.
    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    /// The next message from the gateway (`None` when its output closed).
    pub fn recv(&mut self) -> Option<Value> {
        match self.rx.recv_timeout(PATIENCE) {
            Ok(v) => Some(v),
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("no message from the gateway in time"),
        }
    }

    /// Waits for a message matching `pred` (looking at `seen` first); others go to `seen`.
    pub fn wait_for(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.seen.iter().position(&pred) {
            return self.seen.remove(i);
        }
        loop {
            let v = self.recv().expect("the gateway closed its output");
            if pred(&v) {
                return v;
            }
            self.seen.push(v);
        }
    }

    /// Sends a request; returns its id.
    pub fn send_request(&mut self, method: &str, params: Value) -> Value {
        let id = json!(self.next_id);
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    pub fn response(&mut self, id: &Value) -> Value {
        let id = id.clone();
        self.wait_for(move |v| v.get("id") == Some(&id) && v.get("method").is_none())
    }

    /// A request and its response.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        self.response(&id)
    }

    /// `tools/call`; returns the response.
    pub fn call(&mut self, name: &str, args: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": args}))
    }

    /// `initialize` (+ `notifications/initialized`); returns the result.
    pub fn initialize(&mut self, version: &str, elicitation: bool) -> Value {
        let mut caps = json!({"roots": {"listChanged": false}});
        if elicitation {
            caps["elicitation"] = json!({});
        }
        self.initialize_with(version, caps)
    }

    /// `initialize` with these client capabilities (+ `notifications/initialized`).
    pub fn initialize_with(&mut self, version: &str, caps: Value) -> Value {
        let r = self.request(
            "initialize",
            json!({"protocolVersion": version, "capabilities": caps,
                   "clientInfo": {"name": "test-client", "version": "0"}}),
        );
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        r["result"].clone()
    }

    /// Closes the gateway's stdin and waits for it to exit.
    pub fn finish(mut self) -> ExitStatus {
        self.stdin.take();
        self.child.wait().unwrap()
    }

    /// Waits for the gateway to exit (stdin left open).
    pub fn wait(mut self) -> ExitStatus {
        self.child.wait().unwrap()
    }
}

/// The text of a tool result's first content item.
pub fn text(response: &Value) -> String {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The `_meta.toolgate.code` of a blocked result.
pub fn code(response: &Value) -> String {
    response["result"]["_meta"]["toolgate"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The `dist/index.js` of the npm package `@modelcontextprotocol/<package>`: the path in the
/// environment variable `env_var`, else `target/mcp-npm`, where `npm install --prefix
/// target/mcp-npm @modelcontextprotocol/<package>` puts it. Missing: `None` (the test skips),
/// except under CI (`CI` set), where the test fails.
#[allow(dead_code)]
pub fn npm_server(env_var: &str, package: &str) -> Option<PathBuf> {
    let path = match std::env::var_os(env_var) {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!(
            "target/mcp-npm/node_modules/@modelcontextprotocol/{package}/dist/index.js"
        )),
    };
    if path.is_file() {
        return Some(path);
    }
    let msg = format!(
        "{} is missing: run `npm install --prefix target/mcp-npm @modelcontextprotocol/{package}` or set {env_var}",
        path.display()
    );
    if std::env::var_os("CI").is_some() {
        panic!("{msg}");
    }
    eprintln!("skipped: {msg}");
    None
}
