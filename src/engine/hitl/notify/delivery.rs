//! Posting notifications: a worker thread of its own posts each to every URL, at most
//! [`super::MAX_IN_FLIGHT`] at a time, retrying network errors and 5xx answers with backoff.

use std::sync::Arc;
#[cfg(feature = "http")]
use std::time::Duration;

use tokio::sync::mpsc::Receiver;

#[cfg(feature = "http")]
use super::{
    DELIVERY_HEADER, MAX_IN_FLIGHT, SIGNATURE_HEADER, TIMESTAMP_HEADER, delivery_signature,
};
use super::{Job, NotifyConfig, Outstanding};

#[cfg(feature = "http")]
pub(super) fn worker(
    config: Arc<NotifyConfig>,
    mut rx: Receiver<Job>,
    outstanding: Arc<Outstanding>,
) {
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
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
        // Each URL of each notification is posted (and retried) by a task of its own, so a
        // dead webhook holds back neither the others nor later notifications; at most
        // `MAX_IN_FLIGHT` at a time, the rest wait in the (bounded) queue.
        while let Some(job) = rx.recv().await {
            for url in &config.urls {
                let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
                    outstanding.finish();
                    continue;
                };
                let (client, url, job, config, outstanding) = (
                    client.clone(),
                    url.clone(),
                    Job {
                        body: Arc::clone(&job.body),
                        delivery: Arc::clone(&job.delivery),
                    },
                    Arc::clone(&config),
                    Arc::clone(&outstanding),
                );
                tasks.spawn(async move {
                    post(&client, &url, &job, &config, &outstanding).await;
                    drop(slot);
                    outstanding.finish();
                });
                while tasks.try_join_next().is_some() {}
            }
        }
        // The engine is gone: finish what is under way.
        while tasks.join_next().await.is_some() {}
    });
}

/// How long one attempt may take once the notifier is closing: the drain's bound, not the
/// configured per-attempt timeout.
#[cfg(feature = "http")]
const CLOSING_ATTEMPT: Duration = Duration::from_millis(400);

#[cfg(feature = "http")]
async fn post(
    client: &reqwest::Client,
    url: &str,
    job: &Job,
    config: &NotifyConfig,
    outstanding: &Outstanding,
) {
    let body: &[u8] = &job.body;
    let mut delay = config.backoff;
    let attempts = config.attempts.max(1);
    for attempt in 1..=attempts {
        let closing = outstanding.closing();
        let timestamp = chrono::Utc::now().timestamp().to_string();
        let mut req = client
            .post(url)
            .header("content-type", "application/json")
            .header(TIMESTAMP_HEADER, &timestamp)
            .header(DELIVERY_HEADER, &*job.delivery)
            .body(body.to_vec());
        if closing {
            req = req.timeout(CLOSING_ATTEMPT.min(config.timeout));
        }
        if let Some(key) = &config.secret {
            req = req.header(
                SIGNATURE_HEADER,
                format!("sha256={}", delivery_signature(key, &timestamp, body)),
            );
        }
        let sent = tokio::select! {
            r = req.send() => Some(r),
            // Closing: an attempt under way gets at most `CLOSING_ATTEMPT` more.
            () = async {
                outstanding.closed().await;
                tokio::time::sleep(CLOSING_ATTEMPT).await;
            }, if !closing => None,
        };
        let Some(sent) = sent else {
            tracing::debug!("webhook {}: attempt {attempt} cut at shutdown", redact(url));
            outstanding.lost_at_close();
            return;
        };
        match sent {
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
        if closing {
            // The one attempt at shutdown was made.
            tracing::debug!("webhook {}: not delivered at shutdown", redact(url));
            outstanding.lost_at_close();
            return;
        }
        if attempt < attempts {
            // A retry waits for its backoff, or for the notifier to close (then the next
            // attempt is the last).
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = outstanding.closed() => {}
            }
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
pub(super) fn worker(
    config: Arc<NotifyConfig>,
    mut rx: Receiver<Job>,
    outstanding: Arc<Outstanding>,
) {
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
