//! Redis for tests: the shared server's URL (`TOOLGATE_TEST_REDIS_URL`) and a private
//! `redis-server` a fault test starts, stops and restarts itself (never the shared one).
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `TOOLGATE_TEST_REDIS_URL`, or `None` with a printed reason.
pub fn url() -> Option<String> {
    match std::env::var("TOOLGATE_TEST_REDIS_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            eprintln!("skipped: TOOLGATE_TEST_REDIS_URL is not set");
            None
        }
    }
}

/// A private `redis-server` on loopback (no persistence), stopped when dropped.
pub struct OwnRedis {
    child: Child,
    /// Its port.
    pub port: u16,
}

impl OwnRedis {
    /// Starts one on `port` and waits until it accepts connections.
    pub fn start(port: u16) -> OwnRedis {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (the fault test starts its own)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "own redis-server did not start");
            std::thread::yield_now();
        }
        OwnRedis { child, port }
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Its process id (to freeze it with SIGSTOP).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops it (kill, then wait for the process).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}
