//! A `toolgate collect` server in a child process, for the collector and fleet tests, and the
//! runs, bodies and requests they send it.

use std::borrow::Borrow;
use std::ffi::OsStr;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};
use toolgate::audit::{AuditEvent, EventKind, RunChain, canonical_json};

use super::process::{Proc, toolgate};

/// How long a collector may take to say it listens.
const START: Duration = Duration::from_secs(60);

/// A running `toolgate collect --listen 127.0.0.1:0`, killed when dropped.
pub struct Collect {
    proc: Proc,
    addr: String,
    line: String,
}

impl Collect {
    /// Starts a collector on `store` (a folder or a `postgres://` URL).
    pub fn start(store: impl AsRef<OsStr>) -> Collect {
        Collect::start_with(store, &[], &[])
    }

    /// Starts a collector on `store` with more arguments and environment variables; waits for
    /// its `listening on` line.
    pub fn start_with(store: impl AsRef<OsStr>, args: &[&str], envs: &[(&str, &str)]) -> Collect {
        let mut cmd = toolgate();
        cmd.args(["collect", "--listen", "127.0.0.1:0", "--store"])
            .arg(store)
            .args(args)
            .env_remove("TOOLGATE_COLLECTOR_TOKEN")
            .stderr(Stdio::inherit());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        Collect::spawn(&mut cmd)
    }

    /// Starts `cmd` (a `toolgate collect --listen … ` set up by the caller; its stdout is
    /// taken) and waits, bounded, for its `listening on` line.
    pub fn spawn(cmd: &mut Command) -> Collect {
        Collect::try_spawn(cmd)
            .unwrap_or_else(|(line, _)| panic!("collector did not start: {line:?}"))
    }

    /// [`Collect::spawn`], answering what it said first and the process when it did not
    /// listen (its port not free yet, say).
    pub fn try_spawn(cmd: &mut Command) -> Result<Collect, (String, Proc)> {
        let proc = Proc::spawn(cmd.stdout(Stdio::piped()));
        let line = proc.stdout_line(|_| true, START).unwrap_or_default();
        match line
            .strip_prefix("listening on http://")
            .and_then(|r| r.split(',').next())
        {
            Some(addr) => Ok(Collect {
                addr: addr.to_string(),
                proc,
                line,
            }),
            None => Err((line, proc)),
        }
    }

    /// Its `listening on …` line.
    pub fn line(&self) -> &str {
        &self.line
    }

    /// `HOST:PORT`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sends a signal (`-STOP`, `-TERM`, …) with kill(1).
    pub fn signal(&self, sig: &str) {
        self.proc.signal(sig);
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        self.proc.kill();
    }

    /// Waits (bounded) for the process to exit.
    pub fn exits_within(mut self, limit: Duration) -> ExitStatus {
        self.proc.exits_within(limit)
    }

    /// The process itself (to wait for it and read its stderr).
    pub fn into_proc(self) -> Proc {
        self.proc
    }
}

/// A run of `n` sealed events of `agent`: `run.started`, then `tool.result`s; the `i`-th with
/// the fields of `body(i)` (an object; anything else is no field), sealed at `at()`.
pub fn sealed_run(
    run_id: &str,
    agent: &str,
    n: usize,
    at: impl Fn() -> DateTime<Utc>,
    body: impl Fn(usize) -> Value,
) -> Vec<AuditEvent> {
    let mut chain = RunChain::new(run_id, agent, None);
    (0..n)
        .map(|i| {
            let kind = if i == 0 {
                EventKind::RunStarted
            } else {
                EventKind::ToolResult
            };
            let Value::Object(fields) = body(i) else {
                return chain.seal(kind, at(), Map::new());
            };
            chain.seal(kind, at(), fields)
        })
        .collect()
}

/// A `POST /v1/events` body: `{"events": [...]}`, canonical.
pub fn body_of<E: Borrow<AuditEvent>>(events: &[E]) -> String {
    let list: Vec<Value> = events.iter().map(|e| e.borrow().to_json()).collect();
    canonical_json(&json!({"events": list}))
}

/// `POST {url}/v1/events` (with a bearer `token`): the status and the JSON answer (`null`
/// when it is not JSON).
#[cfg(feature = "http")]
pub async fn post(url: &str, token: Option<&str>, body: impl Into<reqwest::Body>) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{url}/v1/events"))
        .header("content-type", "application/json")
        .body(body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// `GET url`: the status and the JSON answer.
#[cfg(feature = "http")]
pub async fn get_json(url: &str) -> (u16, Value) {
    let resp = reqwest::get(url).await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}
