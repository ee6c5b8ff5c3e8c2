//! Child processes for the tests: the `toolgate` binary or a server, killed when dropped, and
//! every wait on one bounded (a hang is a failure, never a stuck test).

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// The `toolgate` binary under test.
pub fn toolgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
}

/// A loopback port free when asked (for a server that takes its port from its arguments).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Sends `sig` (`-TERM`, `-KILL`, `-STOP`, …) to `pid` with kill(1).
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill runs")
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// Waits for `child` to exit, at most `limit`; past it the child is killed, reaped, and
/// `None` is the answer.
fn exit_within(child: Child, limit: Duration) -> Option<ExitStatus> {
    let pid = child.id();
    let (tx, rx) = channel();
    let mut child = child;
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    match rx.recv_timeout(limit) {
        Ok(status) => Some(status.expect("wait")),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            let _ = rx.recv_timeout(Duration::from_secs(10));
            None
        }
    }
}

/// The lines of a pipe, read on a thread of their own (so a wait for one is bounded).
fn lines(pipe: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// All of a pipe, read on a thread of its own.
fn slurp(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut all = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut all);
        }
        all
    })
}

/// Runs `cmd` to its end (stdin closed, stdout and stderr captured), at most `limit`: `None`
/// when it was still running then (it is killed).
pub fn run_within(cmd: &mut Command, limit: Duration) -> Option<Output> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the process starts");
    let out = slurp(child.stdout.take());
    let err = slurp(child.stderr.take());
    let status = exit_within(child, limit)?;
    Some(Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// [`run_within`], a hang being a failure.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> Output {
    run_within(cmd, limit)
        .unwrap_or_else(|| panic!("still running after {limit:?}: it hangs ({cmd:?})"))
}

/// How long a server may take to say it is ready.
pub const READY: Duration = Duration::from_secs(60);

/// Starts a server with `cmd` (stdout discarded) and waits, at most [`READY`], for a line of
/// its stderr `ready` holds for (it logs it listens): no sleeping. Killed when dropped.
pub fn serve(cmd: &mut Command, ready: impl Fn(&str) -> bool) -> Proc {
    let server = Proc::spawn(cmd.stdout(Stdio::null()).stderr(Stdio::piped()));
    server
        .stderr_line(ready, READY)
        .unwrap_or_else(|| panic!("not ready within {READY:?}: {cmd:?}"));
    server
}

/// A Node MCP server script (`dist/index.js`) serving streamable HTTP on a free loopback port,
/// once it says it listens: the server and its port.
pub fn node_streamable_http(js: &Path) -> (Proc, u16) {
    let port = free_port();
    let server = serve(
        Command::new("node")
            .arg(js)
            .arg("streamableHttp")
            .env("PORT", port.to_string()),
        |line| line.contains("listening"),
    );
    (server, port)
}

/// A long-running child (a server), killed when dropped. Its piped stdout and stderr are read
/// line by line on threads of their own.
pub struct Proc {
    child: Option<Child>,
    pid: u32,
    out: Option<Receiver<String>>,
    err: Option<Receiver<String>>,
}

impl Proc {
    /// Spawns `cmd` as configured (pipe stdout or stderr to read its lines).
    pub fn spawn(cmd: &mut Command) -> Proc {
        let mut child = cmd.spawn().expect("the process starts");
        let out = child.stdout.take().map(lines);
        let err = child.stderr.take().map(lines);
        Proc {
            pid: child.id(),
            child: Some(child),
            out,
            err,
        }
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// Its stdin, when piped (taken: dropping it closes the child's input).
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.as_mut().and_then(|c| c.stdin.take())
    }

    /// The next stdout line `pred` holds for (the lines before it are passed over), waiting
    /// at most `limit`; `None` past it or when stdout closes first.
    pub fn stdout_line(&self, pred: impl Fn(&str) -> bool, limit: Duration) -> Option<String> {
        line_where(self.out.as_ref().expect("stdout piped"), pred, limit)
    }

    /// The next stderr line `pred` holds for, like [`Proc::stdout_line`].
    pub fn stderr_line(&self, pred: impl Fn(&str) -> bool, limit: Duration) -> Option<String> {
        line_where(self.err.as_ref().expect("stderr piped"), pred, limit)
    }

    /// Sends `sig` (`-TERM`, `-KILL`, `-STOP`, …).
    pub fn signal(&self, sig: &str) {
        signal(self.pid, sig);
    }

    /// SIGKILL, and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().expect("kill");
            c.wait().expect("wait");
        }
    }

    /// Waits for it to exit, at most `limit` (panics past it, killing it).
    pub fn exits_within(&mut self, limit: Duration) -> ExitStatus {
        let child = self.child.take().expect("not yet reaped");
        exit_within(child, limit).unwrap_or_else(|| panic!("still running after {limit:?}"))
    }

    /// What stderr said that was not yet read (all of it once the process has exited).
    pub fn stderr_rest(&self) -> String {
        let err = self.err.as_ref().expect("stderr piped");
        let mut text = String::new();
        while let Ok(line) = err.recv_timeout(Duration::from_secs(10)) {
            text.push_str(&line);
            text.push('\n');
        }
        text
    }
}

fn line_where(
    lines: &Receiver<String>,
    pred: impl Fn(&str) -> bool,
    limit: Duration,
) -> Option<String> {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if pred(&line) => return Some(line),
            Ok(_) => {}
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
