//! Notifications of reviews: a signed JSON POST to each webhook for every review raised and
//! decided (design §15), or a Slack incoming-webhook message.
//!
//! The decision path only hands the review to a bounded queue ([`Notifier::send`] never
//! waits: a full queue drops the notification, counted and logged); a worker thread of its own
//! posts it to every URL, at most [`MAX_IN_FLIGHT`] posts at a time, retrying network errors
//! and 5xx answers with exponential backoff. So a webhook that never answers delays no
//! decision and holds at most [`MAX_IN_FLIGHT`] connections: nothing on the decision path
//! waits for it, and a notification may be dropped, a review never.
//!
//! Each POST carries `X-Toolgate-Timestamp` (Unix seconds), `X-Toolgate-Delivery` (one id per
//! notification, the same on every retry and every URL) and, with a secret,
//! `X-Toolgate-Signature: sha256=<HMAC-SHA256 of "<timestamp>.<body>">` (see
//! [`delivery_signature`]): a receiver that checks the signature and refuses a timestamp
//! outside its tolerance (5 minutes, say) and a delivery id it has seen cannot be replayed.
//!
//! At shutdown ([`Notifier::drain`]) retries stop: what is queued or waiting for a retry gets
//! one last attempt within the drain's limit, and what is left is reported once.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::mpsc::{Sender, channel};

use super::reviews::Review;

mod delivery;
mod message;
mod signing;
use delivery::worker;
pub use message::{NotifyKind, body, slack_escape};
pub use signing::{delivery_signature, sign};

/// The header carrying the HMAC-SHA256 of `<timestamp>.<body>`: `sha256=<hex>`.
pub const SIGNATURE_HEADER: &str = "X-Toolgate-Signature";
/// The header carrying the time of the POST, in Unix seconds (signed with the body).
pub const TIMESTAMP_HEADER: &str = "X-Toolgate-Timestamp";
/// The header carrying the notification's id: the same on each retry and each URL.
pub const DELIVERY_HEADER: &str = "X-Toolgate-Delivery";

/// Notifications waiting for the worker past which new ones are dropped.
pub const QUEUE: usize = 1024;
/// Posts under way at most (over every URL); the others wait in the queue.
pub const MAX_IN_FLIGHT: usize = 16;

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

/// A notification on its way: the body, serialized once, and its delivery id.
struct Job {
    body: Arc<Vec<u8>>,
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    delivery: Arc<str>,
}

/// Notifications queued or being posted, and a signal each time that number drops; whether
/// the notifier is closing (retries stop); how many were dropped.
#[derive(Default)]
struct Outstanding {
    count: std::sync::atomic::AtomicUsize,
    done: tokio::sync::Notify,
    closing: std::sync::atomic::AtomicBool,
    close: tokio::sync::Notify,
    dropped: std::sync::atomic::AtomicU64,
    /// Posts given up on once the notifier closed (their last attempt failed or was cut).
    lost_at_close: std::sync::atomic::AtomicUsize,
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

    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    fn lost_at_close(&self) {
        self.lost_at_close
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    fn closing(&self) -> bool {
        self.closing.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Waits until the notifier closes.
    #[cfg(feature = "http")]
    async fn closed(&self) {
        let notified = self.close.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.closing() {
            return;
        }
        notified.await;
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

    /// For a process about to exit (`GovernanceEngine::shutdown`): retries stop, so each
    /// notification queued or waiting for a retry gets one last attempt (bounded by `limit`),
    /// and this waits until all are posted or given up on, at most `limit`. Returns how many
    /// posts were not delivered: still outstanding at `limit`, or given up on since the
    /// notifier closed (the caller reports them once).
    pub async fn drain(&self, limit: std::time::Duration) -> usize {
        self.outstanding
            .closing
            .store(true, std::sync::atomic::Ordering::Release);
        self.outstanding.close.notify_waiters();
        let left = self.idle(limit).await;
        left + self
            .outstanding
            .lost_at_close
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Waits until every notification queued so far was posted (or given up on, retries
    /// included), at most `limit`; returns how many are still outstanding. Unlike
    /// [`drain`](Self::drain), retries go on as configured.
    pub async fn idle(&self, limit: std::time::Duration) -> usize {
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

    /// Notifications dropped so far (a full queue, or a notifier closed).
    pub fn dropped(&self) -> u64 {
        self.outstanding
            .dropped
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Queues a notification; never waits (a full queue drops it: counted, see
    /// [`dropped`](Self::dropped), and logged).
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
            delivery: uuid::Uuid::now_v7().to_string().into(),
        });
        if sent.is_err() {
            for _ in 0..posts {
                self.outstanding.finish();
            }
        }
        match sent {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                let n = self
                    .outstanding
                    .dropped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    + 1;
                // Logged at the first drop, then every 100th: a flood does not flood the log.
                if n == 1 || n.is_multiple_of(100) {
                    tracing::warn!(
                        "review {}: {} notification dropped: {QUEUE} are waiting for the webhooks ({n} dropped so far)",
                        review.id,
                        kind.as_str()
                    );
                }
            }
            Err(TrySendError::Closed(_)) => {
                tracing::warn!("review {}: notification worker is gone", review.id)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        assert_eq!(notifier.idle(Duration::from_secs(30)).await, 0);
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
            assert_eq!(rt.block_on(notifier.idle(Duration::from_secs(30))), 0);
        })
        .unwrap();
        assert_eq!(answered.lock().unwrap()["plain"], vec![200]);
    }
}
