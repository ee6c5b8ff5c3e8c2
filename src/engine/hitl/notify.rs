//! Notifications of reviews: a signed JSON POST to each webhook for every review raised and
//! decided (design §15), or a Slack incoming-webhook message.
//!
//! The decision path only hands the review to a bounded queue ([`Notifier::send`] never
//! waits: a full queue drops the notification with a warning); a worker thread of its own posts
//! it to every URL, retrying network errors and 5xx answers with exponential backoff. So a
//! webhook that never answers delays no decision: nothing on the decision path waits for it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::mpsc::{Receiver, Sender, channel};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::reviews::{Review, status_word};

/// The header carrying the body's HMAC-SHA256: `sha256=<hex>`.
pub const SIGNATURE_HEADER: &str = "X-Toolgate-Signature";

/// Notifications waiting for the worker past which new ones are dropped.
pub const QUEUE: usize = 1024;

/// What is posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NotifyFormat {
    /// `{"type": "review.created"|"review.decided", "review": {…}, "consoleUrl"?}`.
    #[default]
    Json,
    /// A Slack incoming-webhook message: `{"text": "…"}` (the tool, the rule, a link).
    Slack,
}

/// Where and how reviews are announced (see [`EngineBuilder::notify`](crate::engine::EngineBuilder::notify)).
#[derive(Clone, Default)]
pub struct NotifyConfig {
    /// The webhook URLs; each notification is posted to each.
    pub urls: Vec<String>,
    /// The HMAC key of `X-Toolgate-Signature` (no header without one).
    pub secret: Option<Vec<u8>>,
    /// JSON (default) or Slack.
    pub format: NotifyFormat,
    /// The console's base URL, linked from each notification.
    pub console_url: Option<String>,
    /// Attempts per URL (default 6: backoff 0.5 s, 1 s, 2 s, 4 s, 8 s).
    pub attempts: u32,
    /// The wait before the first retry (default 0.5 s); each next wait doubles, up to 60 s.
    pub backoff: Duration,
    /// How long one POST may take (default 10 s).
    pub timeout: Duration,
}

impl std::fmt::Debug for NotifyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifyConfig")
            .field("urls", &self.urls.len())
            .field("secret", &self.secret.as_ref().map(|_| "…"))
            .field("format", &self.format)
            .field("console_url", &self.console_url)
            .finish()
    }
}

impl NotifyConfig {
    /// Posts to `urls` as JSON, unsigned, with the default retries.
    pub fn new(urls: Vec<String>) -> Self {
        NotifyConfig {
            urls,
            attempts: 6,
            backoff: Duration::from_millis(500),
            timeout: Duration::from_secs(10),
            ..Default::default()
        }
    }
}

/// The kind of a notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyKind {
    /// A review was raised.
    Created,
    /// A review was decided.
    Decided,
}

impl NotifyKind {
    /// `review.created` or `review.decided`.
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyKind::Created => "review.created",
            NotifyKind::Decided => "review.decided",
        }
    }
}

/// The JSON body of a notification.
pub fn body(kind: NotifyKind, review: &Review, config: &NotifyConfig) -> Value {
    match config.format {
        NotifyFormat::Json => {
            let mut v = json!({"type": kind.as_str(), "review": review});
            if let Some(u) = &config.console_url {
                v["consoleUrl"] = Value::String(u.clone());
            }
            v
        }
        NotifyFormat::Slack => {
            let what = match kind {
                NotifyKind::Created => "waits for review".to_string(),
                NotifyKind::Decided => format!(
                    "was {} by {}",
                    status_word(review.status),
                    review.decided_by.as_deref().unwrap_or("someone")
                ),
            };
            let mut text = format!(
                "toolgate: agent `{}` calling `{}` {what} (rule `{}`{})",
                review.agent_id,
                review.tool_name,
                review.rule_id,
                review
                    .reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            );
            if let Some(c) = &review.comment {
                text.push_str(&format!(" — “{c}”"));
            }
            if let Some(u) = &config.console_url {
                text.push_str(&format!(" <{u}|Open the console>"));
            }
            json!({ "text": text })
        }
    }
}

/// HMAC-SHA256 of `body` under `key` (RFC 2104), hex.
pub fn sign(key: &[u8], body: &[u8]) -> String {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let pad = |b: u8| -> [u8; BLOCK] { k.map(|x| x ^ b) };
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(body)
        .finalize();
    let outer = Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize();
    hex::encode(outer)
}

/// A notification on its way: the body, serialized once.
struct Job {
    body: Arc<Vec<u8>>,
}

/// Notifications queued or being posted, and a signal each time that number drops.
#[derive(Default)]
struct Outstanding {
    count: std::sync::atomic::AtomicUsize,
    done: tokio::sync::Notify,
}

impl Outstanding {
    fn add(&self, n: usize) {
        self.count.fetch_add(n, std::sync::atomic::Ordering::AcqRel);
    }

    fn finish(&self) {
        self.count.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        self.done.notify_waiters();
    }

    fn pending(&self) -> usize {
        self.count.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// Sends notifications from a worker thread of its own (see the module docs).
pub struct Notifier {
    config: Arc<NotifyConfig>,
    tx: Sender<Job>,
    outstanding: Arc<Outstanding>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("config", &self.config)
            .finish()
    }
}

impl Notifier {
    /// Starts the worker. Without the `http` feature, notifications are logged and dropped.
    pub fn start(config: NotifyConfig) -> Notifier {
        let config = Arc::new(config);
        // A tokio channel: `try_send` needs no runtime, so callers on any thread queue freely,
        // and the worker awaits jobs instead of polling for them.
        let (tx, rx) = channel::<Job>(QUEUE);
        let worker_config = Arc::clone(&config);
        let outstanding = Arc::new(Outstanding::default());
        let worker_outstanding = Arc::clone(&outstanding);
        let spawned = std::thread::Builder::new()
            .name("toolgate-notify".into())
            .spawn(move || worker(worker_config, rx, worker_outstanding));
        if let Err(e) = spawned {
            tracing::warn!("review notifications are off: cannot start their worker: {e}");
        }
        Notifier {
            config,
            tx,
            outstanding,
        }
    }

    /// Waits until every notification queued so far was posted (or given up on), at most
    /// `limit`: for a process about to exit (`GovernanceEngine::shutdown`). Returns how many
    /// are still outstanding.
    pub async fn drain(&self, limit: std::time::Duration) -> usize {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let done = self.outstanding.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            let left = self.outstanding.pending();
            if left == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, done).await.is_err() {
                return self.outstanding.pending();
            }
        }
    }

    /// The configuration.
    pub fn config(&self) -> &NotifyConfig {
        &self.config
    }

    /// Queues a notification; never waits (a full queue drops it, with a warning).
    pub fn send(&self, kind: NotifyKind, review: &Review) {
        if self.config.urls.is_empty() {
            return;
        }
        let body = match serde_json::to_vec(&body(kind, review, &self.config)) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!("review {}: notification not built: {e}", review.id);
                return;
            }
        };
        let posts = self.config.urls.len();
        self.outstanding.add(posts);
        let sent = self.tx.try_send(Job {
            body: Arc::new(body),
        });
        if sent.is_err() {
            for _ in 0..posts {
                self.outstanding.finish();
            }
        }
        match sent {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => tracing::warn!(
                "review {}: {} notification dropped: {QUEUE} are waiting for the webhooks",
                review.id,
                kind.as_str()
            ),
            Err(TrySendError::Closed(_)) => {
                tracing::warn!("review {}: notification worker is gone", review.id)
            }
        }
    }
}

#[cfg(feature = "http")]
fn worker(config: Arc<NotifyConfig>, mut rx: Receiver<Job>, outstanding: Arc<Outstanding>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("review notifications are off: {e}");
            return;
        }
    };
    let client = match reqwest::Client::builder().timeout(config.timeout).build() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("review notifications are off: {e}");
            return;
        }
    };
    runtime.block_on(async move {
        let mut tasks = tokio::task::JoinSet::new();
        // Each URL of each notification is posted (and retried) by a task of its own, so a
        // dead webhook holds back neither the others nor later notifications.
        while let Some(job) = rx.recv().await {
            for url in &config.urls {
                let (client, url, body, config, outstanding) = (
                    client.clone(),
                    url.clone(),
                    Arc::clone(&job.body),
                    Arc::clone(&config),
                    Arc::clone(&outstanding),
                );
                tasks.spawn(async move {
                    post(&client, &url, &body, &config).await;
                    outstanding.finish();
                });
            }
            while tasks.try_join_next().is_some() {}
        }
        // The engine is gone: finish what is under way.
        while tasks.join_next().await.is_some() {}
    });
}

#[cfg(feature = "http")]
async fn post(client: &reqwest::Client, url: &str, body: &[u8], config: &NotifyConfig) {
    let mut delay = config.backoff;
    let attempts = config.attempts.max(1);
    for attempt in 1..=attempts {
        let mut req = client
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_vec());
        if let Some(key) = &config.secret {
            req = req.header(SIGNATURE_HEADER, format!("sha256={}", sign(key, body)));
        }
        match req.send().await {
            Ok(r) if r.status().is_success() => return,
            Ok(r) if !r.status().is_server_error() && r.status().as_u16() != 429 => {
                tracing::warn!(
                    "webhook {}: answered {}; not retried",
                    redact(url),
                    r.status()
                );
                return;
            }
            Ok(r) => tracing::debug!("webhook {}: attempt {attempt}: {}", redact(url), r.status()),
            Err(e) => tracing::debug!(
                "webhook {}: attempt {attempt}: {}",
                redact(url),
                e.without_url()
            ),
        }
        if attempt < attempts {
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(60));
        }
    }
    tracing::warn!("webhook {}: gave up after {attempts} attempts", redact(url));
}

/// A webhook URL without its path and query (Slack's carry the secret).
#[cfg(feature = "http")]
fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => format!("{}://{}/…", u.scheme(), u.host_str().unwrap_or("?")),
        Err(_) => "(unparsable url)".into(),
    }
}

#[cfg(not(feature = "http"))]
fn worker(config: Arc<NotifyConfig>, mut rx: Receiver<Job>, outstanding: Arc<Outstanding>) {
    while let Some(job) = rx.blocking_recv() {
        for _ in 0..config.urls.len() {
            outstanding.finish();
        }
        tracing::warn!(
            "review notification ({} bytes) to {} webhook(s) not sent: toolgate is built without the `http` feature",
            job.body.len(),
            config.urls.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review() -> Review {
        serde_json::from_value(json!({
            "id": "r1", "fingerprint": "fp", "status": "approved", "agentId": "support-bot",
            "ruleId": "big-refund", "toolName": "refund", "args": {"amount": 500},
            "runId": "run-1", "callId": "c1", "reason": "a lead must approve",
            "createdAt": "2026-01-05T10:00:00Z", "decidedAt": "2026-01-05T10:05:00Z",
            "decidedBy": "alice", "comment": "fine"
        }))
        .unwrap()
    }

    #[test]
    fn json_and_slack_bodies() {
        let mut config = NotifyConfig::new(vec!["http://x".into()]);
        config.console_url = Some("https://console.example/".into());
        let v = body(NotifyKind::Decided, &review(), &config);
        assert_eq!(v["type"], "review.decided");
        assert_eq!(v["review"]["decidedBy"], "alice");
        assert_eq!(v["consoleUrl"], "https://console.example/");
        config.format = NotifyFormat::Slack;
        let v = body(NotifyKind::Decided, &review(), &config);
        assert_eq!(
            v,
            json!({"text": "toolgate: agent `support-bot` calling `refund` was approved by alice (rule `big-refund`: a lead must approve) — “fine” <https://console.example/|Open the console>"})
        );
        let v = body(NotifyKind::Created, &review(), &config);
        assert!(v["text"].as_str().unwrap().contains("waits for review"));
    }

    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        // RFC 4231, test case 2.
        assert_eq!(
            sign(b"Jefe", b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Test case 6: a key longer than the block.
        assert_eq!(
            sign(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            ),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    /// Statuses by webhook name.
    #[cfg(feature = "http")]
    type Statuses = Arc<std::sync::Mutex<std::collections::HashMap<String, Vec<u16>>>>;

    /// A loopback webhook answering each POST to `/<name>` with the next status of that
    /// name's script (200 once the script is used up); every POST is counted.
    #[cfg(feature = "http")]
    async fn scripted(scripts: Vec<(&'static str, Vec<u16>)>) -> (String, Statuses) {
        use axum::extract::{Path, State};
        let answered: Statuses = Arc::default();
        let scripts: Statuses = Arc::new(std::sync::Mutex::new(
            scripts
                .into_iter()
                .map(|(k, mut v)| {
                    v.reverse();
                    (k.to_string(), v)
                })
                .collect(),
        ));
        let state = (Arc::clone(&scripts), Arc::clone(&answered));
        let app = axum::Router::new()
            .route(
                "/{name}",
                axum::routing::post(
                    |State((scripts, answered)): State<(Statuses, Statuses)>,
                     Path(name): Path<String>| async move {
                        let status = scripts
                            .lock()
                            .unwrap()
                            .get_mut(&name)
                            .and_then(Vec::pop)
                            .unwrap_or(200);
                        answered
                            .lock()
                            .unwrap()
                            .entry(name)
                            .or_default()
                            .push(status);
                        axum::http::StatusCode::from_u16(status).unwrap()
                    },
                ),
            )
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}"), answered)
    }

    /// 5xx and 429 are retried with backoff until a success or the last attempt; other 4xx
    /// are not retried; `drain` returns once every post is done.
    #[cfg(feature = "http")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn retries_server_errors_with_backoff_and_gives_up_on_client_errors() {
        let (base, answered) = scripted(vec![
            ("flaky", vec![503, 502, 200]),
            ("limited", vec![429, 200]),
            ("refusing", vec![400]),
            ("dead", vec![500; 10]),
        ])
        .await;
        let mut config = NotifyConfig::new(
            ["flaky", "limited", "refusing", "dead"]
                .iter()
                .map(|n| format!("{base}/{n}"))
                .collect(),
        );
        config.attempts = 4;
        config.backoff = Duration::from_millis(5);
        let notifier = Notifier::start(config);
        notifier.send(NotifyKind::Created, &review());
        assert_eq!(notifier.drain(Duration::from_secs(30)).await, 0);
        let answered = answered.lock().unwrap().clone();
        assert_eq!(answered["flaky"], vec![503, 502, 200]);
        assert_eq!(answered["limited"], vec![429, 200]);
        assert_eq!(answered["refusing"], vec![400]);
        // Gave up after its 4 attempts.
        assert_eq!(answered["dead"], vec![500; 4]);
    }

    /// Queued from a thread without a runtime (the engine's callers need none).
    #[cfg(feature = "http")]
    #[test]
    fn send_needs_no_runtime() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let (base, answered) = rt.block_on(scripted(vec![]));
        let notifier = Notifier::start(NotifyConfig::new(vec![format!("{base}/plain")]));
        std::thread::spawn(move || {
            notifier.send(NotifyKind::Decided, &review());
            notifier
        })
        .join()
        .map(|notifier| {
            assert_eq!(rt.block_on(notifier.drain(Duration::from_secs(30))), 0);
        })
        .unwrap();
        assert_eq!(answered.lock().unwrap()["plain"], vec![200]);
    }
}
