//! The one HTTP front of `toolgate collect`, `toolgate console` and `toolgate mcp-proxy --listen`
//! (src/http_front), tried as a hostile client over real sockets against the real binary run
//! under `ulimit -n 1024`: 3,000 half-open connections from one address, a slowloris, a stalled
//! body, DNS rebinding (a `Host` that is not a loopback name).
#![cfg(all(feature = "mcp", feature = "http", feature = "console"))]

mod mcp_client;
mod mcp_http_client;

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const TOOLGATE: &str = env!("CARGO_BIN_EXE_toolgate");

/// A server started under `ulimit -n 1024`, its address read from its "listening on" line.
struct Server {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<String>>,
    /// What a legitimate request asks (method, path, headers).
    probe: String,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(dir: tempfile::TempDir, args: &[String], probe: String) -> Server {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("ulimit -n 1024 && exec \"$0\" \"$@\"")
            .arg(TOOLGATE)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let outs: Vec<Box<dyn Read + Send>> = vec![
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ];
        for out in outs {
            let tx = tx.clone();
            let log = log.clone();
            std::thread::spawn(move || {
                for l in BufReader::new(out).lines().map_while(Result::ok) {
                    log.lock().unwrap().push_str(&format!("{l}\n"));
                    let _ = tx.send(l);
                }
            });
        }
        let addr = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("no listening line: {}", log.lock().unwrap()));
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let end = rest.find(['/', ',', ' ']).unwrap_or(rest.len());
                break rest[..end].parse().unwrap();
            }
        };
        Server {
            child,
            addr,
            log,
            probe,
            _dir: dir,
        }
    }

    fn collect() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let args: Vec<String> = vec![
            "collect".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--store".into(),
            dir.path().join("store").display().to_string(),
            "--body-timeout-secs".into(),
            "2".into(),
        ];
        Server::start(dir, &args, "GET /healthz HTTP/1.1\r\n".into())
    }

    fn console() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let digest = hex::encode(Sha256::digest(b"console-token-0123456789"));
        std::fs::write(
            dir.path().join("tokens.json"),
            json!({"tokens": [{"sha256": digest, "name": "alice"}]}).to_string(),
        )
        .unwrap();
        let args: Vec<String> = vec![
            "console".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--token-file".into(),
            dir.path().join("tokens.json").display().to_string(),
            "--reviews".into(),
            dir.path().join("reviews.json").display().to_string(),
            "--audit".into(),
            dir.path().join("audit").display().to_string(),
        ];
        Server::start(dir, &args, "GET /healthz HTTP/1.1\r\n".into())
    }

    fn gateway() -> Server {
        let setup = mcp_client::Setup::new();
        let mut args: Vec<String> =
            vec!["mcp-proxy".into(), "--listen".into(), "127.0.0.1:0".into()];
        args.extend(setup.args());
        args.push("--token-file".into());
        args.push(
            mcp_http_client::token_file(setup.dir.path())
                .display()
                .to_string(),
        );
        args.push("--".into());
        args.push(mcp_client::fixture());
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}})
        .to_string();
        let probe = format!(
            "POST /mcp HTTP/1.1\r\nAuthorization: Bearer tok-alice\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
             MCP-Method: server/discover\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        Server::start(setup.dir, &args, probe)
    }

    fn rss_kb(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// A legitimate request from `from` (with `host` as its Host): its status and how long the
    /// answer took.
    async fn ask(&self, from: &str, host: &str) -> (Option<u16>, Duration) {
        let started = Instant::now();
        let status = tokio::time::timeout(Duration::from_secs(10), async {
            let sock = TcpSocket::new_v4().ok()?;
            sock.bind(format!("{from}:0").parse().ok()?).ok()?;
            let mut s = sock.connect(self.addr).await.ok()?;
            let (head, rest) = self.probe.split_once("\r\n").unwrap();
            let req = if rest.is_empty() {
                format!("{head}\r\nHost: {host}\r\nConnection: close\r\n\r\n")
            } else {
                format!("{head}\r\nHost: {host}\r\nConnection: close\r\n{rest}")
            };
            s.write_all(req.as_bytes()).await.ok()?;
            let mut buf = [0u8; 64];
            let mut got = 0;
            while got < 12 {
                let n = s.read(&mut buf[got..]).await.ok()?;
                if n == 0 {
                    return None;
                }
                got += n;
            }
            std::str::from_utf8(&buf[9..12]).ok()?.parse().ok()
        })
        .await
        .ok()
        .flatten();
        (status, started.elapsed())
    }

    fn stop(mut self) -> String {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        self.log.lock().unwrap().clone()
    }
}

fn raise_own_fd_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let l = getrlimit(Resource::Nofile);
    let want = 8192u64.min(l.maximum.unwrap_or(u64::MAX));
    if l.current.is_some_and(|c| c < want) {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(want),
                maximum: l.maximum,
            },
        )
        .unwrap();
    }
}

/// `n` connections from 127.0.0.1 that send nothing (or, with `partial`, half a request head).
async fn half_open(addr: SocketAddr, n: usize, partial: bool) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        // A server that stopped accepting leaves connects hanging in its full listen queue.
        match tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr)).await {
            Ok(Ok(mut s)) => {
                if partial {
                    let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nX-Slow: ").await;
                }
                held.push(s);
            }
            Ok(Err(e)) => panic!("connect failed (client side): {e}"),
            Err(_) => {
                eprintln!(
                    "connect {i} of {n} not completed within 2 s: the server stopped accepting"
                );
                break;
            }
        }
    }
    held
}

async fn hold_3000_half_open(server: Server, name: &str) {
    raise_own_fd_limit();
    let before = server.rss_kb();
    let host = server.addr.to_string();
    let silent = half_open(server.addr, 3000, false).await;
    // A legitimate client, from another address and from the attacker's own.
    let (other, t_other) = server.ask("127.0.0.2", &host).await;
    let (same, t_same) = server.ask("127.0.0.1", &host).await;
    // A slowloris: 200 half-sent heads from the attacker's address.
    let slow = half_open(server.addr, 200, true).await;
    let (other2, t_other2) = server.ask("127.0.0.3", &host).await;
    let after = server.rss_kb();
    eprintln!(
        "{name}: 3000 half-open + 200 slow heads from 127.0.0.1: answered {other:?} in {t_other:?} \
         (other address), {same:?} in {t_same:?} (same address), {other2:?} in {t_other2:?} \
         (during the slowloris); RSS {before} kB -> {after} kB"
    );
    drop(silent);
    drop(slow);
    let log = server.stop();
    assert_eq!(
        other,
        Some(200),
        "{name}: another address was not answered\n{log}"
    );
    assert_eq!(
        same,
        Some(200),
        "{name}: the attacker's address, idle ones evicted\n{log}"
    );
    assert_eq!(
        other2,
        Some(200),
        "{name}: not answered during the slowloris\n{log}"
    );
    assert!(
        after.saturating_sub(before) <= 50 * 1024,
        "{name}: RSS grew from {before} kB to {after} kB"
    );
    assert!(
        !log.contains("Too many open files"),
        "{name}: ran out of file descriptors:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_collector_holds_3000_half_open_connections_under_ulimit_1024() {
    hold_3000_half_open(Server::collect(), "collect").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_holds_3000_half_open_connections_under_ulimit_1024() {
    hold_3000_half_open(Server::console(), "console").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_holds_3000_half_open_connections_under_ulimit_1024() {
    hold_3000_half_open(Server::gateway(), "mcp-proxy").await;
}

/// Every server bound to loopback refuses a `Host` that is not a loopback name (DNS
/// rebinding) with 403, unless `--allowed-host` names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_is_not_a_loopback_name_gets_403_on_every_server() {
    for server in [Server::collect(), Server::console(), Server::gateway()] {
        let port = server.addr.port();
        for ok in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
            assert_eq!(server.ask("127.0.0.1", &ok).await.0, Some(200), "{ok}");
        }
        for bad in [
            format!("evil.example:{port}"),
            "evil.example".to_string(),
            format!("127.0.0.1.evil.example:{port}"),
        ] {
            assert_eq!(server.ask("127.0.0.1", &bad).await.0, Some(403), "{bad}");
        }
        server.stop();
    }
    // Named by --allowed-host: accepted.
    let dir = tempfile::tempdir().unwrap();
    let args: Vec<String> = [
        "collect",
        "--listen",
        "127.0.0.1:0",
        "--allowed-host",
        "collector.internal",
        "--store",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([dir.path().join("s").display().to_string()])
    .collect();
    let server = Server::start(dir, &args, "GET /healthz HTTP/1.1\r\n".into());
    assert_eq!(
        server.ask("127.0.0.1", "collector.internal").await.0,
        Some(200)
    );
    assert_eq!(server.ask("127.0.0.1", "other.internal").await.0, Some(403));
    server.stop();
}

/// A body that stalls is cut with 408 within the body timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_gets_408() {
    let server = Server::collect();
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(
        format!(
            "POST /v1/events HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: 1000\r\n\r\n{{\"events\": [",
            server.addr
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = [0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
        .await
        .expect("the stalled body was not cut")
        .unwrap();
    let head = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    server.stop();
}
