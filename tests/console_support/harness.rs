//! The console tests' harness: a fixture folder, a running console, logging in, deciding,
//! the live events and a webhook receiver.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::HeaderMap;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use toolgate::engine::{
    DELIVERY_HEADER, FileReviewStore, Review, ReviewStatus, SIGNATURE_HEADER, TIMESTAMP_HEADER,
    notify_delivery_signature,
};

pub const TOKEN: &str = "alice-s3cret-token-0123456789";
pub const SECRET: &str = "webhook-key-42";

pub const POLICY: &str = r#"[{"id": "big-refund", "name": "big refund",
    "selector": {"phase": "tool.before", "tool": {"name": "refund"}},
    "condition": {"kind": "toolArg", "type": "number", "op": "gt", "path": "amount", "value": 100},
    "effect": {"type": "hitl", "reason": "a lead must approve refunds over 100"}}]"#;

pub fn bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("toolgate")
}

/// A folder with the tokens, the policy, a webhook secret and room for reviews and audit.
pub struct Fixture {
    /// The folder.
    pub dir: tempfile::TempDir,
}

impl Fixture {
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let digest = hex::encode(Sha256::digest(TOKEN.as_bytes()));
        std::fs::write(
            dir.path().join("tokens.json"),
            json!({"tokens": [{"sha256": digest, "name": "alice"}]}).to_string(),
        )
        .unwrap();
        std::fs::write(dir.path().join("policy.json"), POLICY).unwrap();
        std::fs::write(dir.path().join("secret"), format!("{SECRET}\n")).unwrap();
        Fixture { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn s(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    /// A trace of one run calling `refund` for `amount`.
    pub fn trace(&self, name: &str, run: &str, amount: u64) -> String {
        // Times of now (replay decides by the trace's clock): the page shows true ages.
        let at = |s: i64| {
            (chrono::Utc::now() + chrono::Duration::seconds(s))
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        };
        let lines = [
            json!({"type": "run.start", "runId": run, "agentId": "support-bot",
                   "enduser": {"id": "cust-1001", "tags": {"tier": "gold"}}, "at": at(-3)}),
            json!({"type": "tool.call", "runId": run, "id": "c1", "tool": {"name": "refund", "tags": ["payments"]},
                   "args": {"amount": amount, "order": {"id": "A-77", "lines": [1, 2]}, "note": "parcel arrived damaged"},
                   "at": at(-2)}),
            json!({"type": "run.end", "runId": run, "status": "success", "at": at(-1)}),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(self.path(name), text).unwrap();
        self.s(name)
    }

    /// `toolgate replay` of `trace` on the review file, auditing into `audit/`; its stdout.
    pub fn replay(&self, trace: &str, extra: &[String]) -> String {
        let out = Command::new(bin())
            .args(["replay", "-p", &self.s("policy.json"), "-t", trace])
            .args([
                "--reviews",
                &self.s("reviews.json"),
                "--audit",
                &self.s("audit"),
            ])
            .args(extra)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "replay failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }
}

/// A running `toolgate console`, stopped when dropped.
pub struct Console {
    child: Child,
    /// The console's address, `http://127.0.0.1:PORT`.
    pub base: String,
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Console {
    pub fn start(fx: &Fixture, store: &[String], extra: &[String]) -> Console {
        let mut child = Command::new(bin())
            .args(["console", "--listen", "127.0.0.1:0", "--token-file"])
            .arg(fx.path("tokens.json"))
            .args(store)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base = line
            .trim()
            .strip_prefix("toolgate console listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .trim_end_matches('/')
            .to_string();
        Console { child, base }
    }
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The value of cookie `name` set by `res`, with its attributes.
pub fn set_cookie(headers: &reqwest::header::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(str::to_string)
}

pub fn cookie_value(set_cookie: &str) -> String {
    set_cookie
        .split(';')
        .next()
        .and_then(|kv| kv.split_once('='))
        .map(|(_, v)| v.to_string())
        .unwrap_or_default()
}

pub fn csrf_in(html: &str) -> String {
    let at = html.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
    html[at..].split('"').next().unwrap().to_string()
}

/// Logs in with `token`: the session cookie and the session's CSRF token, or the status.
pub async fn login(base: &str, token: &str) -> Result<(String, String), (u16, String)> {
    let c = http();
    let form = c.get(format!("{base}/login")).send().await.unwrap();
    let login_cookie = cookie_value(&set_cookie(form.headers(), "toolgate_login").unwrap());
    let csrf = csrf_in(&form.text().await.unwrap());
    let res = c
        .post(format!("{base}/login"))
        .header("cookie", format!("toolgate_login={login_cookie}"))
        .form(&[("csrf", csrf.as_str()), ("token", token)])
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let Some(session) = set_cookie(res.headers(), "toolgate_session") else {
        return Err((status, res.text().await.unwrap_or_default()));
    };
    assert_eq!(status, 303);
    assert!(
        session.contains("HttpOnly") && session.contains("SameSite=Strict"),
        "{session}"
    );
    let cookie = cookie_value(&session);
    let home = page(base, "/", &cookie).await;
    Ok((cookie, csrf_in(&home)))
}

/// Reads `/events` until an event's HTML satisfies `want`; returns that HTML.
pub async fn await_event(base: &str, cookie: &str, want: impl Fn(&str) -> bool) -> String {
    let mut res = http()
        .get(format!("{base}/events"))
        .header("cookie", format!("toolgate_session={cookie}"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let mut buf = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let chunk = tokio::time::timeout_at(deadline, res.chunk())
            .await
            .expect("an event in time")
            .unwrap()
            .expect("stream open");
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf[..end].to_string();
            buf.drain(..end + 2);
            let data: String = event
                .lines()
                .filter_map(|l| l.strip_prefix("data: ").or(l.strip_prefix("data:")))
                .collect::<Vec<_>>()
                .join("\n");
            if want(&data) {
                return data;
            }
        }
    }
}

/// A webhook receiver on loopback: every POST's headers and body.
pub async fn receiver() -> (String, mpsc::UnboundedReceiver<(HeaderMap, Bytes)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let tx = tx.clone();
            async move {
                let _ = tx.send((headers, body));
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/hook"), rx)
}

/// The next notification of `kind`, checked for its signature.
pub async fn next_signed(
    rx: &mut mpsc::UnboundedReceiver<(HeaderMap, Bytes)>,
    kind: &str,
) -> Value {
    loop {
        let (headers, body) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("a notification in time")
            .expect("receiver open");
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_else(|| panic!("no {name} header"))
                .to_string()
        };
        let (sig, ts) = (header(SIGNATURE_HEADER), header(TIMESTAMP_HEADER));
        assert!(!header(DELIVERY_HEADER).is_empty());
        // The signature covers the timestamp and the body; the timestamp is now-ish.
        assert_eq!(
            sig,
            format!(
                "sha256={}",
                notify_delivery_signature(SECRET.as_bytes(), &ts, &body)
            )
        );
        let age = chrono::Utc::now().timestamp() - ts.parse::<i64>().unwrap();
        assert!((-300..=300).contains(&age), "timestamp {ts} is {age} s old");
        let v: Value = serde_json::from_slice(&body).unwrap();
        if v["type"] == kind {
            return v;
        }
    }
}

pub fn reviews_in(fx: &Fixture) -> Vec<Review> {
    FileReviewStore::new(fx.path("reviews.json"))
        .try_list()
        .unwrap()
}

pub fn walk_jsonl(dir: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    for e in walkdir::WalkDir::new(dir).into_iter().flatten() {
        if e.path().extension().is_some_and(|x| x == "jsonl") {
            for line in std::fs::read_to_string(e.path()).unwrap().lines() {
                out.push(serde_json::from_str(line).unwrap());
            }
        }
    }
    out
}

pub fn overdue(i: u32, on_expire: toolgate::policy::OnExpire) -> Review {
    let now = chrono::Utc::now();
    Review {
        id: uuid::Uuid::now_v7().to_string(),
        fingerprint: format!("fp-expiry-{i}-{}", uuid::Uuid::now_v7().simple()),
        status: ReviewStatus::Pending,
        agent_id: "support-bot".into(),
        rule_id: "big-refund".into(),
        tool_name: "refund".into(),
        args: json!({"amount": 900}),
        redacted: Vec::new(),
        enduser_id: None,
        run_id: "run-x".into(),
        call_id: "c1".into(),
        reason: None,
        created_at: now - chrono::Duration::seconds(120),
        decided_at: None,
        expires_at: Some(now - chrono::Duration::seconds(60)),
        on_expire: Some(on_expire),
        decided_by: None,
        comment: None,
    }
}

/// POSTs a decision `form` on review `id` with the session `cookie`.
pub async fn decide(
    base: &str,
    id: &str,
    cookie: &str,
    form: &[(&str, &str)],
) -> reqwest::Response {
    http()
        .post(format!("{base}/reviews/{id}/decide"))
        .header("cookie", format!("toolgate_session={cookie}"))
        .form(form)
        .send()
        .await
        .unwrap()
}

/// The text of the page at `path` (`/…`), read with the session `cookie`.
pub async fn page(base: &str, path: &str, cookie: &str) -> String {
    http()
        .get(format!("{base}{path}"))
        .header("cookie", format!("toolgate_session={cookie}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}
