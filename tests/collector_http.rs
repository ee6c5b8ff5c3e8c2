//! The `toolgate collect` process on loopback, tried as a careless or hostile client would:
//! half-sent requests, unauthenticated bodies, idle connections, signals, a full disk.
#![cfg(feature = "http")]

mod common;
use common::collect::{Collect, body_of, get_json, post, sealed_run};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use chrono::Utc;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use toolgate::audit::{AuditEvent, verify_paths};

fn events(run_id: &str, agent: &str, n: usize) -> Vec<AuditEvent> {
    sealed_run(run_id, agent, n, Utc::now, |i| {
        if i > 0 {
            json!({"callId": format!("c{i}"), "output": {"text": "x".repeat(400)}})
        } else {
            json!({})
        }
    })
}

/// Sends raw bytes and returns the status of the answer, or `None` when the server closed the
/// connection without one. Bounded by `limit`.
async fn raw_status(addr: &str, bytes: &[u8], limit: Duration) -> Option<u16> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(limit, async {
        let mut chunk = [0u8; 1024];
        loop {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
            }
        }
    })
    .await;
    assert!(read.is_ok(), "no answer and no close within {limit:?}");
    let text = String::from_utf8_lossy(&buf);
    text.split_whitespace().nth(1).and_then(|c| c.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_time_out_and_sigterm_stops_the_collector_within_its_grace() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collect::start_with(
        dir.path(),
        &[
            "--header-timeout-secs",
            "1",
            "--body-timeout-secs",
            "1",
            "--shutdown-grace-secs",
            "1",
        ],
        &[],
    );
    // Headers never finished: the connection is closed (finding 10).
    let status = raw_status(
        c.addr(),
        b"POST /v1/events HTTP/1.1\r\nHost: localhost\r\n",
        Duration::from_secs(10),
    )
    .await;
    assert!(status.is_none() || status == Some(408), "{status:?}");
    // Body never finished: 408.
    let status = raw_status(
        c.addr(),
        b"POST /v1/events HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"events\"",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(status, Some(408));
    // SIGTERM while a client holds a half-sent request: the process still exits, in bounds.
    let mut held = TcpStream::connect(c.addr()).await.unwrap();
    held.write_all(b"POST /v1/events HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
        .await
        .unwrap();
    c.signal("-TERM");
    let status = c.exits_within(Duration::from_secs(10));
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_comes_before_the_body_and_tokens_come_from_a_file_or_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let store = dir.path().join("store");
    let c = Collect::start_with(
        &store,
        &[
            "--token-file",
            token_file.to_str().unwrap(),
            "--max-connections",
            "2",
            "--header-timeout-secs",
            "1",
        ],
        &[],
    );
    // A 10 MB body announced without the token: refused before a byte of it is read (11).
    let status = raw_status(
        c.addr(),
        b"POST /v1/events HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer nope\r\nContent-Type: application/json\r\nContent-Length: 10000000\r\n\r\n",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(status, Some(401));
    // Not JSON: 415 (18).
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/events", c.url()))
        .bearer_auth("s3cret")
        .header("content-type", "text/plain")
        .body(body_of(&events("r", "a", 1)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 415);
    // Idle connections fill the cap; they are dropped at the header timeout and an
    // authenticated client gets through.
    let _idle1 = TcpStream::connect(c.addr()).await.unwrap();
    let _idle2 = TcpStream::connect(c.addr()).await.unwrap();
    let run = events("r", "a", 3);
    let answer = tokio::time::timeout(
        Duration::from_secs(20),
        post(&c.url(), Some("s3cret"), body_of(&run)),
    )
    .await
    .expect("an authenticated client is not locked out");
    assert_eq!(answer.0, 200, "{answer:?}");
    drop(c);

    // The token from the environment.
    let c = Collect::start_with(&store, &[], &[("TOOLGATE_COLLECTOR_TOKEN", "fromenv")]);
    let run = events("r2", "a", 2);
    assert_eq!(post(&c.url(), None, body_of(&run)).await.0, 401);
    assert_eq!(post(&c.url(), Some("fromenv"), body_of(&run)).await.0, 200);
}

/// A small tmpfs, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs { dir })
    }
    fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_a_batch_without_losing_or_duplicating_anything() {
    let Some(fs) = Tmpfs::mount("512k") else {
        eprintln!("cannot mount a tmpfs (not root?): skipping the full-disk test");
        return;
    };
    let store = fs.path().join("store");
    let c = Collect::start_with(&store, &[], &[]);
    let first = events("first", "support", 1);
    assert_eq!(post(&c.url(), None, body_of(&first)).await.0, 200);

    // Fill the disk, then free one page: the next batch is written in part and fails.
    let filler = fs.path().join("filler");
    {
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 4096];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
        let len = f.metadata().unwrap().len();
        f.set_len(len.saturating_sub(4096)).unwrap();
    }
    let big = events("big", "support", 60);
    let (status, answer) = post(&c.url(), None, body_of(&big)).await;
    assert_eq!(status, 500, "{answer}");
    let msg = answer["error"].as_str().unwrap();
    assert!(
        !msg.contains(fs.path().to_str().unwrap()),
        "no server paths: {msg}"
    );

    // Space again: a new run is acknowledged...
    std::fs::remove_file(&filler).unwrap();
    let next = events("next", "support", 5);
    assert_eq!(post(&c.url(), None, body_of(&next)).await.0, 200);
    // ...and the client's retry of the failed batch stores it once.
    let (status, answer) = post(&c.url(), None, body_of(&big)).await;
    assert_eq!((status, &answer["accepted"]), (200, &json!(60)), "{answer}");

    // Everything acknowledged survives a kill -9 and a restart; no line is duplicated.
    c.signal("-KILL");
    let _ = c.exits_within(Duration::from_secs(10));
    let c = Collect::start_with(&store, &[], &[]);
    for (run, n) in [("first", 1), ("next", 5), ("big", 60)] {
        let (_, page) = get_json(&format!("{}/v1/runs/{run}", c.url())).await;
        assert_eq!(page["events"].as_array().map(Vec::len), Some(n), "{run}");
    }
    let report = verify_paths(&[&store]);
    assert!(report.is_ok(), "{:?}", report.breaks);
    assert_eq!(report.events, 66);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_to_a_collector_exits_non_zero_when_events_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let c = Collect::start_with(&store, &[], &[]);
    let long = "a".repeat(300);
    let trace = format!(
        "{}\n{}\n{}\n{}\n",
        json!({"type":"run.start","runId":"r-long","agentId": long,"at":"2026-01-05T10:00:00Z"}),
        json!({"type":"run.start","runId":"r-ok","agentId":"support","at":"2026-01-05T10:00:00Z"}),
        json!({"type":"run.end","runId":"r-long","status":"success","at":"2026-01-05T10:00:01Z"}),
        json!({"type":"run.end","runId":"r-ok","status":"success","at":"2026-01-05T10:00:01Z"}),
    );
    let trace_path = dir.path().join("t.jsonl");
    std::fs::write(&trace_path, trace).unwrap();
    let policy = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/customer-support.json");
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .current_dir(dir.path())
        .args(["replay", "--policy"])
        .arg(&policy)
        .arg("--trace")
        .arg(&trace_path)
        .args(["--collector", &c.url()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("id too long"), "{stderr}");
    let (_, page) = get_json(&format!("{}/v1/runs/r-ok", c.url())).await;
    assert_eq!(page["events"].as_array().map(Vec::len), Some(2), "{page}");
}
