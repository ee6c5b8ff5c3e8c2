//! A `toolgate collect` server in a child process, for the collector and fleet tests.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A running `toolgate collect --listen 127.0.0.1:0`, killed when dropped.
pub struct Collect {
    child: Child,
    addr: String,
    _stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Collect {
    /// Starts a collector on `store` (a folder or a `postgres://` URL).
    pub fn start(store: impl AsRef<OsStr>) -> Collect {
        Collect::start_with(store, &[], &[])
    }

    /// Starts a collector on `store` with more arguments and environment variables; waits for
    /// its `listening on` line.
    pub fn start_with(store: impl AsRef<OsStr>, args: &[&str], envs: &[(&str, &str)]) -> Collect {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
        cmd.args(["collect", "--listen", "127.0.0.1:0", "--store"])
            .arg(store)
            .args(args)
            .env_remove("TOOLGATE_COLLECTOR_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let addr = line
            .strip_prefix("listening on http://")
            .and_then(|r| r.split(',').next())
            .unwrap_or_else(|| panic!("collector did not start: {line:?}"))
            .to_string();
        Collect {
            child,
            addr,
            _stdout: stdout,
        }
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
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args([sig, &pid])
                .status()
                .unwrap()
                .success()
        );
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Waits (bounded) for the process to exit.
    pub fn exits_within(mut self, limit: Duration) -> std::process::ExitStatus {
        let (tx, rx) = mpsc::channel();
        let mut child = std::mem::replace(&mut self.child, Command::new("true").spawn().unwrap());
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        rx.recv_timeout(limit)
            .unwrap_or_else(|_| panic!("collector still running after {limit:?}"))
            .unwrap()
    }
}

impl Drop for Collect {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
