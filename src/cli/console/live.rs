//! Live updates: one poller per console looks at the review store every `--poll-ms` (a file:
//! one `stat`, read only when it changed; Redis: one round trip for the pending page and one
//! for the newest reviews), decides the reviews whose `onExpire` is due, and publishes a new
//! snapshot when anything changed; each open page holds a server-sent-events stream that
//! renders the snapshot for its session and sends it.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::{Notify, watch};

use super::App;
use super::pages::{self, Viewer};
use super::store::{DECIDED_SHOWN, PENDING_SHOWN, Snapshot, sweep_expired};

/// The poller's outputs.
pub(crate) struct Live {
    tx: watch::Sender<Arc<Snapshot>>,
    rx: watch::Receiver<Arc<Snapshot>>,
    wake: Notify,
    every: Duration,
    /// Set once the first snapshot is read.
    ready: Notify,
    started: std::sync::atomic::AtomicBool,
}

impl Live {
    pub(crate) fn new(every: Duration) -> Live {
        let (tx, rx) = watch::channel(Arc::new(Snapshot::default()));
        Live {
            tx,
            rx,
            wake: Notify::new(),
            every,
            ready: Notify::new(),
            started: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The latest snapshot.
    pub(crate) fn current(&self) -> Arc<Snapshot> {
        self.rx.borrow().clone()
    }

    /// Makes the poller look now (after a decision here).
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    /// Waits for the first snapshot.
    pub(crate) async fn ready(&self) {
        let notified = self.ready.notified();
        if self.started.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        notified.await;
    }
}

/// Starts the poller task.
pub(crate) fn start_poller(app: Arc<App>) {
    tokio::spawn(async move {
        let mut last_token: Option<String> = None;
        let mut first = true;
        loop {
            let reviews = Arc::clone(&app.reviews);
            let now = chrono::Utc::now();
            let current = app.live.current();
            // Due expiries must be decided even when nothing else changed.
            let expiry_due = current
                .pending
                .iter()
                .any(|r| r.expiry_verdict(now).is_some());
            let token = {
                let r = Arc::clone(&reviews);
                tokio::task::spawn_blocking(move || r.change_token())
                    .await
                    .ok()
                    .flatten()
            };
            let unchanged = token.is_some() && token == last_token && !expiry_due && !first;
            if !unchanged {
                let read = tokio::task::spawn_blocking(move || {
                    let snap = reviews.snapshot(PENDING_SHOWN, DECIDED_SHOWN)?;
                    let expired = sweep_expired(reviews.as_ref(), &snap, now);
                    let snap = if expired.is_empty() {
                        snap
                    } else {
                        reviews.snapshot(PENDING_SHOWN, DECIDED_SHOWN)?
                    };
                    Ok::<_, crate::engine::ReviewError>((snap, expired))
                })
                .await;
                match read {
                    Ok(Ok((snap, expired))) => {
                        for r in &expired {
                            app.effects.decided(r).await;
                        }
                        if snap != *current {
                            app.live.tx.send_replace(Arc::new(snap));
                        }
                        // The token read before the listing: a change in between is seen next time.
                        last_token = token;
                    }
                    Ok(Err(e)) => {
                        tracing::warn!("console: reviews not read: {e}");
                        last_token = None;
                    }
                    Err(e) => tracing::warn!("console: reviews not read: {e}"),
                }
            }
            if first {
                first = false;
                app.live
                    .started
                    .store(true, std::sync::atomic::Ordering::Release);
                app.live.ready.notify_waiters();
            }
            tokio::select! {
                _ = tokio::time::sleep(app.live.every) => {}
                _ = app.live.wake.notified() => {}
            }
        }
    });
}

/// `GET /events`: the reviews part of the page, rendered for this session, now and after each
/// change (event `reviews`).
pub(crate) async fn events(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let Some((_, session)) = super::session(&app, &headers) else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    let rx = app.live.rx.clone();
    let runs = app.runs.is_some();
    let stream =
        futures::stream::unfold((rx, session, true), move |(mut rx, s, first)| async move {
            if !first && rx.changed().await.is_err() {
                return None;
            }
            let snap = rx.borrow_and_update().clone();
            let viewer = Viewer {
                name: &s.name,
                csrf: &s.csrf,
            };
            let html = pages::fragment(&viewer, &snap, chrono::Utc::now(), runs).into_string();
            let event = Event::default().event("reviews").data(html);
            Some((Ok::<_, Infallible>(event), (rx, s, false)))
        });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}
