//! The sending task of [`super::HttpSink`]: posts batches (the spool first), classifies the
//! answers, retries with backoff and jitter, spools while the collector is down.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::rejected::{reject, reject_some, rejected_list};
use super::spool::{batch_body, count_events, spill, spool_path};
use super::{HttpSinkConfig, Inflight, Outcome, Shared, truncate};
use crate::audit::AuditEvent;

fn backoff(config: &HttpSinkConfig, attempt: u32) -> Duration {
    let initial = config.backoff_initial_ms.max(1);
    let max = config.backoff_max_ms.max(initial);
    let exp = initial.saturating_mul(1u64 << attempt.min(30)).min(max);
    // "Equal jitter": half fixed, half random, so retries of many sinks spread out.
    let half = exp / 2;
    Duration::from_millis(half + rand::thread_rng().gen_range(0..=exp - half))
}

async fn post(shared: &Shared, body: Vec<u8>) -> Outcome {
    shared.counters.requests.fetch_add(1, Ordering::Relaxed);
    let mut req = shared
        .client
        .post(&shared.endpoint)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body);
    if let Some(token) = &shared.config.token {
        req = req.bearer_auth(token);
    }
    match req.send().await {
        Err(e) => Outcome::Retry {
            error: format!("{e}"),
            after: None,
        },
        Ok(resp) => {
            let status = resp.status();
            let retry_after = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let text = resp.text().await.unwrap_or_default();
            classify(status.as_u16(), text, retry_after)
        }
    }
}

/// Posts `body` (`{"events": [...]}`); a batch the collector finds too large (413) is split in
/// halves, each posted the same way, down to single events, so one large event, or a batch
/// larger than the collector's `--max-body-bytes`, costs no other event its delivery. The
/// halves' answers combine: any retry retries the whole body (the collector deduplicates the
/// halves already stored); events refused (a single event still too large, or a half's 4xx)
/// are listed as a partial rejection.
fn post_splitting<'a>(
    shared: &'a Shared,
    body: &'a [u8],
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + Send + 'a>> {
    Box::pin(async move {
        let outcome = post(shared, body.to_vec()).await;
        let Outcome::Rejected {
            status: 413,
            body: answer,
        } = outcome
        else {
            return outcome;
        };
        let events: Vec<serde_json::Value> = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v.get("events").and_then(|e| e.as_array()).cloned())
            .unwrap_or_default();
        if events.len() < 2 {
            // Nothing to split: the event is too large by itself (its parent, when split from
            // one, lists it as a rejected event).
            return Outcome::Rejected {
                status: 413,
                body: answer,
            };
        }
        shared
            .counters
            .split_batches
            .fetch_add(1, Ordering::Relaxed);
        let mut events = events;
        let second = events.split_off(events.len() / 2);
        let mut rejected = Vec::new();
        let mut answers = Vec::new();
        for half in [events, second] {
            let half_body = serde_json::json!({ "events": half })
                .to_string()
                .into_bytes();
            match post_splitting(shared, &half_body).await {
                Outcome::Delivered => {}
                retry @ Outcome::Retry { .. } => return retry,
                Outcome::Partial {
                    rejected: some,
                    body,
                    ..
                } => {
                    rejected.extend(some);
                    answers.push(body);
                }
                Outcome::Rejected { status, body } => {
                    let reason = format!("HTTP {status}: {}", truncate(&body, 300));
                    rejected.extend(
                        half.iter()
                            .filter_map(|e| e.get("id").and_then(|i| i.as_str()))
                            .map(|id| (id.to_string(), reason.clone())),
                    );
                    answers.push(body);
                }
            }
        }
        if rejected.is_empty() {
            Outcome::Delivered
        } else {
            Outcome::Partial {
                status: 413,
                rejected,
                body: answers.join("\n"),
            }
        }
    })
}

fn classify(status: u16, text: String, retry_after: Option<Duration>) -> Outcome {
    match status {
        200..=299 => Outcome::Delivered,
        409 => match rejected_list(&text) {
            Some(rejected) => Outcome::Partial {
                status,
                rejected,
                body: text,
            },
            None => Outcome::Rejected { status, body: text },
        },
        408 | 429 | 500..=599 => Outcome::Retry {
            error: format!("HTTP {status}: {}", truncate(&text, 300)),
            after: retry_after,
        },
        _ => Outcome::Rejected { status, body: text },
    }
}

/// Sleeps `d` unless stopped first; returns false when stopped.
async fn pause(shared: &Shared, d: Duration) -> bool {
    let mut stop = shared.stop.subscribe();
    if *stop.borrow() {
        return false;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = stop.wait_for(|s| *s) => false,
    }
}

pub(super) fn bump(shared: &Shared) {
    shared.progress.send_modify(|n| *n = n.wrapping_add(1));
}

enum Work {
    Spool(u64),
    Batch(Vec<Arc<AuditEvent>>),
    Idle(Option<Instant>),
}

pub(super) async fn sender(shared: Arc<Shared>) {
    let mut stop = shared.stop.subscribe();
    let mut attempt: u32 = 0;
    loop {
        if *stop.borrow() {
            break;
        }
        let work = {
            let mut st = shared.state.lock().await;
            let interval = Duration::from_millis(shared.config.batch_interval_ms);
            if let Some(&seq) = st.spool.front() {
                Work::Spool(seq)
            } else if !st.mem.is_empty()
                && (st.urgent
                    || st.mem.len() >= shared.config.batch_size.max(1)
                    || st.oldest_at.is_none_or(|t| t.elapsed() >= interval))
            {
                let n = st.mem.len().min(shared.config.batch_size.max(1));
                let events: Vec<Arc<AuditEvent>> = st.mem.drain(..n).collect();
                st.oldest_at = if st.mem.is_empty() {
                    None
                } else {
                    Some(Instant::now())
                };
                st.inflight = Some(Inflight {
                    events: events.clone(),
                    spooled: false,
                });
                Work::Batch(events)
            } else {
                if st.mem.is_empty() {
                    st.urgent = false;
                }
                Work::Idle(st.oldest_at.map(|t| t + interval))
            }
        };
        match work {
            Work::Idle(deadline) => {
                let far = Instant::now() + Duration::from_secs(3600);
                tokio::select! {
                    _ = shared.wake.notified() => {}
                    _ = tokio::time::sleep_until(deadline.unwrap_or(far)) => {}
                    _ = stop.wait_for(|s| *s) => break,
                }
            }
            Work::Spool(seq) => {
                let path = spool_path(&shared.config.spool_dir, seq);
                let body = match tokio::fs::read(&path).await {
                    Ok(b) => b,
                    Err(e) => {
                        tracing::error!(
                            "audit spool file {} unreadable, skipped: {e}",
                            path.display()
                        );
                        shared.state.lock().await.spool.pop_front();
                        bump(&shared);
                        continue;
                    }
                };
                let outcome = tokio::select! {
                    o = post_splitting(&shared, &body) => o,
                    _ = stop.wait_for(|s| *s) => break,
                };
                match outcome {
                    Outcome::Delivered => {
                        attempt = 0;
                        let _ = tokio::fs::remove_file(&path).await;
                        let n = count_events(&body);
                        shared
                            .counters
                            .delivered_events
                            .fetch_add(n, Ordering::Relaxed);
                        let mut st = shared.state.lock().await;
                        st.spool.pop_front();
                        st.last_error = None;
                        drop(st);
                        bump(&shared);
                    }
                    Outcome::Rejected {
                        status,
                        body: answer,
                    } => {
                        attempt = 0;
                        reject(&shared, body, status, answer).await;
                        let _ = tokio::fs::remove_file(&path).await;
                        shared.state.lock().await.spool.pop_front();
                        bump(&shared);
                    }
                    Outcome::Partial {
                        status,
                        rejected,
                        body: answer,
                    } => {
                        attempt = 0;
                        let stored = reject_some(&shared, &body, status, &rejected, answer).await;
                        shared
                            .counters
                            .delivered_events
                            .fetch_add(stored, Ordering::Relaxed);
                        let _ = tokio::fs::remove_file(&path).await;
                        shared.state.lock().await.spool.pop_front();
                        bump(&shared);
                    }
                    Outcome::Retry { error, after } => {
                        {
                            // Still down: move what has piled up in memory to disk.
                            let mut st = shared.state.lock().await;
                            let interval = Duration::from_millis(shared.config.batch_interval_ms);
                            let due = st.mem.len() >= shared.config.batch_size.max(1)
                                || st.oldest_at.is_some_and(|t| t.elapsed() >= interval);
                            if due && let Err(e) = spill(&shared, &mut st, &[]).await {
                                tracing::error!("audit http sink cannot spool: {e}");
                            }
                        }
                        if !retry_pause(&shared, &mut attempt, error, after).await {
                            break;
                        }
                    }
                }
            }
            Work::Batch(events) => {
                let body = batch_body(&events);
                let outcome = tokio::select! {
                    o = post_splitting(&shared, &body) => o,
                    _ = stop.wait_for(|s| *s) => break,
                };
                match outcome {
                    Outcome::Delivered => {
                        attempt = 0;
                        shared
                            .counters
                            .delivered_events
                            .fetch_add(events.len() as u64, Ordering::Relaxed);
                        let mut st = shared.state.lock().await;
                        st.inflight = None;
                        st.last_error = None;
                        drop(st);
                        bump(&shared);
                    }
                    Outcome::Rejected {
                        status,
                        body: answer,
                    } => {
                        attempt = 0;
                        // The batch stays in flight (marked spooled, so a spill does not write
                        // it again) until the rejection is recorded: a flush that looked in
                        // between would see an idle sink and no rejection.
                        if let Some(i) = shared.state.lock().await.inflight.as_mut() {
                            i.spooled = true;
                        }
                        reject(&shared, body, status, answer).await;
                        shared.state.lock().await.inflight = None;
                        bump(&shared);
                    }
                    Outcome::Partial {
                        status,
                        rejected,
                        body: answer,
                    } => {
                        attempt = 0;
                        let stored = reject_some(&shared, &body, status, &rejected, answer).await;
                        shared
                            .counters
                            .delivered_events
                            .fetch_add(stored, Ordering::Relaxed);
                        shared.state.lock().await.inflight = None;
                        bump(&shared);
                    }
                    Outcome::Retry { error, after } => {
                        {
                            let mut st = shared.state.lock().await;
                            // Keep order: the failed batch, then everything queued behind it.
                            if let Err(e) = spill(&shared, &mut st, &[]).await {
                                tracing::error!("audit http sink cannot spool: {e}");
                                // Put the batch back in front of the queue rather than lose it.
                                if let Some(inf) = st.inflight.take()
                                    && !inf.spooled
                                {
                                    for ev in inf.events.into_iter().rev() {
                                        st.mem.push_front(ev);
                                    }
                                }
                            }
                            st.inflight = None;
                        }
                        bump(&shared);
                        if !retry_pause(&shared, &mut attempt, error, after).await {
                            break;
                        }
                    }
                }
            }
        }
    }
}

async fn retry_pause(
    shared: &Shared,
    attempt: &mut u32,
    error: String,
    after: Option<Duration>,
) -> bool {
    shared.counters.retries.fetch_add(1, Ordering::Relaxed);
    let delay = match after {
        Some(a) => a.min(Duration::from_millis(shared.config.backoff_max_ms.max(1))),
        None => backoff(&shared.config, *attempt),
    };
    *attempt = attempt.saturating_add(1);
    if *attempt == 1 || attempt.is_power_of_two() {
        tracing::warn!(
            endpoint = %shared.endpoint,
            attempt = *attempt,
            "audit collector unavailable ({error}); retrying in {delay:?}, batches are spooled"
        );
    }
    shared.state.lock().await.last_error = Some(error);
    bump(shared);
    pause(shared, delay).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        assert!(matches!(
            classify(200, String::new(), None),
            Outcome::Delivered
        ));
        assert!(matches!(
            classify(503, String::new(), None),
            Outcome::Retry { .. }
        ));
        assert!(matches!(
            classify(429, String::new(), Some(Duration::from_secs(1))),
            Outcome::Retry { after: Some(_), .. }
        ));
        assert!(matches!(
            classify(400, String::new(), None),
            Outcome::Rejected { status: 400, .. }
        ));
        assert!(matches!(
            classify(401, String::new(), None),
            Outcome::Rejected { .. }
        ));
        let partial = r#"{"accepted":1,"duplicates":0,"rejected":[{"id":"a","reason":"fork"}]}"#;
        match classify(409, partial.into(), None) {
            Outcome::Partial { rejected, .. } => {
                assert_eq!(rejected, vec![("a".to_string(), "fork".to_string())]);
            }
            _ => panic!("a 409 with a rejected list is a partial delivery"),
        }
        assert!(matches!(
            classify(409, "{}".into(), None),
            Outcome::Rejected { status: 409, .. }
        ));
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let mut c = HttpSinkConfig::new("http://x");
        c.backoff_initial_ms = 100;
        c.backoff_max_ms = 1_000;
        for attempt in 0..40 {
            let d = backoff(&c, attempt).as_millis() as u64;
            let exp = (100u64 << attempt.min(30)).min(1_000);
            assert!(d >= exp / 2 && d <= exp, "attempt {attempt}: {d}");
        }
    }
}
