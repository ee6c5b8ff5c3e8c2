//! Latency of a `tools/call` through `toolgate mcp-proxy` vs directly to the same fixture server
//! over stdio, and calls/s for 1,000 sequential calls. Prints numbers (not a criterion bench):
//! `cargo build --release --example mcp_fixture && cargo bench --bench mcp_proxy` (the fixture
//! server, tests/mcp_fixture, is an example that `cargo bench --bench` alone does not build).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const TOOLGATE: &str = env!("CARGO_BIN_EXE_toolgate");
const CALLS: usize = 1000;
const WARMUP: usize = 200;

/// A policy with two rules in play for the measured call (neither triggers).
const POLICY: &str = r#"[
 {"id": "no-secrets", "name": "No secrets", "priority": 2, "enabled": true,
  "selector": {"phase": "tool.before", "tool": {"name": "*"}},
  "condition": {"kind": "toolArg", "type": "string", "op": "contains", "path": "text", "value": "password"},
  "effect": {"type": "block", "reason": "no secrets"}},
 {"id": "budget", "name": "Budget", "priority": 1, "enabled": true,
  "selector": {"phase": "tool.before", "tool": {"name": "echo"}},
  "condition": {"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["echo"]}, "max": 1000000},
  "effect": {"type": "block", "reason": "budget"}}
]"#;

struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    line: String,
    next: u64,
}

impl Peer {
    fn start(cmd: &mut Command) -> Peer {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut p = Peer {
            child,
            stdin,
            stdout,
            line: String::new(),
            next: 1,
        };
        p.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"}}),
        );
        writeln!(
            p.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .unwrap();
        p.request("tools/list", json!({}));
        p
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        writeln!(
            self.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        )
        .unwrap();
        self.stdin.flush().unwrap();
        loop {
            self.line.clear();
            if self.stdout.read_line(&mut self.line).unwrap() == 0 {
                panic!("the peer closed its output");
            }
            let v: Value = serde_json::from_str(&self.line).unwrap();
            if v["id"] == json!(id) {
                return v;
            }
        }
    }

    fn finish(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }
}

fn measure(label: &str, mut peer: Peer) -> Duration {
    let call = |p: &mut Peer, i: usize| {
        let r = p.request(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": format!("hello {i}")}}),
        );
        assert!(r["result"]["structuredContent"]["echo"].is_string(), "{r}");
    };
    for i in 0..WARMUP {
        call(&mut peer, i);
    }
    let mut lat = Vec::with_capacity(CALLS);
    let all = Instant::now();
    for i in 0..CALLS {
        let t = Instant::now();
        call(&mut peer, i);
        lat.push(t.elapsed());
    }
    let total = all.elapsed();
    peer.finish();
    lat.sort();
    let median = lat[CALLS / 2];
    let p99 = lat[CALLS * 99 / 100];
    println!(
        "{label:<28} median {:>7.1} µs   p99 {:>7.1} µs   {:>7.0} calls/s ({CALLS} sequential calls)",
        median.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6,
        CALLS as f64 / total.as_secs_f64()
    );
    median
}

/// The fixture server next to this bench's executable: target/release/examples/mcp_fixture.
fn fixture() -> String {
    let exe = std::env::current_exe().expect("the bench's path");
    let path = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target/<profile>/deps")
        .join("examples")
        .join(format!("mcp_fixture{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "the fixture MCP server {} is not built: run `cargo build --release --example mcp_fixture` first",
        path.display()
    );
    path.display().to_string()
}

fn main() {
    // `cargo bench` passes `--bench`; any other filter argument is ignored.
    let fixture = fixture();
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.json");
    std::fs::write(&policy, POLICY).unwrap();
    let proxy = |audit: bool| {
        // TOOLGATE_BENCH_BIN: another toolgate binary to measure (e.g. one built from main).
        let bin = std::env::var("TOOLGATE_BENCH_BIN").unwrap_or_else(|_| TOOLGATE.to_string());
        let mut c = Command::new(bin);
        c.args(["mcp-proxy", "--policy", policy.to_str().unwrap()]);
        if audit {
            c.args(["--audit", dir.path().join("audit").to_str().unwrap()]);
        }
        c.args(["--", &fixture]);
        c
    };
    let direct = measure(
        "direct (fixture over stdio)",
        Peer::start(&mut Command::new(&fixture)),
    );
    let through = measure("through mcp-proxy", Peer::start(&mut proxy(false)));
    let audited = measure("through mcp-proxy + audit", Peer::start(&mut proxy(true)));
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "proxy overhead (median): {:.1} µs; with the audit trail: {:.1} µs",
        us(through) - us(direct),
        us(audited) - us(direct)
    );
}
