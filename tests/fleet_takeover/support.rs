//! Live `toolgate replay --trace -` processes a test feeds line by line, and their trails.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::process::Proc;
pub use crate::common::process::toolgate;

/// Every cap test allows 10 calls per agent.
pub const CAP10: &str = r#"[
  {"id": "cap", "name": "cap", "priority": 1, "enabled": true,
   "selector": {"phase": "tool.before", "tool": {}},
   "condition": {"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["*"]}, "max": 10, "per": "agent"},
   "effect": {"type": "block"}}
]"#;

/// Nothing is blocked (the run's flags are still read and its lease renewed per decision).
pub const ALLOW: &str = r#"[
  {"id": "never", "name": "never", "priority": 1, "enabled": true,
   "selector": {"phase": "tool.before", "tool": {"name": "never-called"}},
   "condition": {"kind": "enduserTag", "op": "has", "tag": "never"},
   "effect": {"type": "block"}}
]"#;

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

/// A `toolgate replay --trace -` process fed by the test; each decision row is read back.
pub struct Replay {
    proc: Proc,
    stdin: Option<ChildStdin>,
    pub trail: PathBuf,
    n: usize,
}

impl Replay {
    /// Starts one with `policy`, `--state url`, `mode`, a lease of `lease_ms`, its trail in
    /// `trail`.
    pub fn start(policy: &Path, url: &str, mode: &str, lease_ms: u64, trail: &Path) -> Replay {
        let mut proc = Proc::spawn(
            toolgate()
                .args(["replay", "--format", "jsonl", "--trace", "-", "--policy"])
                .arg(policy)
                .args(["--state", url, "--failure-mode", mode])
                .args(["--state-timeout-ms", "1000"])
                .args(["--state-lease-ms", &lease_ms.to_string()])
                .arg("--audit")
                .arg(trail)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit()),
        );
        let stdin = proc.take_stdin();
        Replay {
            proc,
            stdin,
            trail: trail.to_path_buf(),
            n: 0,
        }
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.proc.id()
    }

    /// Sends one trace line.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write to replay");
        stdin.flush().expect("flush");
    }

    /// Starts run `run` of `agent`.
    pub fn start_run(&mut self, run: &str, agent: &str) {
        self.send(&format!(
            r#"{{"type":"run.start","runId":"{run}","agentId":"{agent}","at":"2026-01-05T09:00:00Z"}}"#
        ));
    }

    /// One call in run `run`; answers its decision row (waits for it, bounded).
    pub fn call(&mut self, run: &str) -> Value {
        self.n += 1;
        let id = format!("c{}-{}", self.proc.id(), self.n);
        self.send(&format!(
            r#"{{"type":"tool.call","runId":"{run}","id":"{id}","tool":{{"name":"search"}},"args":{{}},"at":"2026-01-05T09:00:01Z"}}"#
        ));
        let row = self
            .proc
            .stdout_line(
                |l| serde_json::from_str::<Value>(l).is_ok(),
                Duration::from_secs(60),
            )
            .expect("a decision row within 60 s");
        serde_json::from_str(&row).expect("a JSON row")
    }

    /// Ends run `run`.
    pub fn end_run(&mut self, run: &str) {
        self.send(&format!(
            r#"{{"type":"run.end","runId":"{run}","status":"success","at":"2026-01-05T09:00:02Z"}}"#
        ));
    }

    /// Closes its input and waits (bounded) for it to exit (runs still open are left).
    pub fn finish(mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        self.proc.exits_within(Duration::from_secs(60))
    }

    /// Waits until its trail holds an event with `callId` `id` of kind `kind` (the event was
    /// written to the file: what a `kill -9` cannot take back).
    pub fn wait_written(&self, pred: impl Fn(&Value) -> bool) {
        for _ in 0..3000 {
            if trail_events(&self.trail).iter().any(&pred) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("event not written to {}", self.trail.display());
    }

    /// `kill -9`.
    pub fn kill9(&mut self) {
        self.proc.kill();
    }

    /// Sends `sig` (a name for `kill -s`).
    pub fn signal(&self, sig: &str) {
        self.proc.signal(&format!("-{sig}"));
    }
}

/// Every event of every `*.jsonl` file under `dir`.
pub fn trail_events(dir: &Path) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for f in entries.flatten() {
        let Ok(text) = std::fs::read_to_string(f.path()) else {
            continue;
        };
        out.extend(
            text.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok()),
        );
    }
    out
}

/// `toolgate verify` over `dirs` (plus `extra` arguments): (exit code, stdout).
pub fn verify(dirs: &[&Path], extra: &[&str]) -> (i32, String) {
    let out = toolgate()
        .arg("verify")
        .args(extra)
        .args(dirs)
        .output()
        .expect("toolgate runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Runs a Redis command on the private server.
pub fn redis_cmd(port: u16, args: &[&str]) -> redis::RedisResult<redis::Value> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/0"))?;
    let mut con = client.get_connection()?;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut con)
}

pub fn allowed(row: &Value) -> bool {
    row["effect"] == "allow"
}
