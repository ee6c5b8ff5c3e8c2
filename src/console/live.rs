//! Live updates: one poller per console looks at the review store every `--poll-ms` (a file:
//! one `stat`, read only when it changed or an expiry is due; Redis: the pending index page by
//! page, and one round trip for the newest reviews), decides every pending review whose
//! `onExpire` is due, and publishes a new snapshot when anything changed (or a banner when
//! the store cannot be read); each open page holds a server-sent-events stream that renders
//! its page of the snapshot for its session and sends it when it changed.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::{Notify, watch};

use super::App;
use super::layout::Viewer;
use super::pages::{self, ListQuery};
use super::store::Snapshot;

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

    /// Shows a decision made here at once (the page a reviewer is redirected to after deciding
    /// must not still show the review pending), then makes the poller look.
    pub(crate) fn decided(&self, review: &crate::engine::Review) {
        self.tx.send_modify(|snap| {
            let snap = Arc::make_mut(snap);
            let before = snap.pending.len();
            snap.pending.retain(|r| r.id != review.id);
            if snap.pending.len() < before {
                snap.pending_total = snap.pending_total.saturating_sub(1);
            }
            snap.decided.retain(|r| r.id != review.id);
            snap.decided.insert(0, review.clone());
            snap.decided.truncate(super::store::DECIDED_SHOWN);
        });
        self.wake();
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
            // Due expiries must be decided even when nothing else changed (every pending
            // review's, held or not: `next_expiry` is over all of them).
            let expiry_due = current.next_expiry.is_some_and(|at| at <= now);
            let token = {
                let r = Arc::clone(&reviews);
                tokio::task::spawn_blocking(move || r.change_token())
                    .await
                    .ok()
                    .flatten()
            };
            let unchanged = token.is_some()
                && token == last_token
                && !expiry_due
                && !first
                && current.unreadable.is_none();
            if !unchanged {
                let read =
                    tokio::task::spawn_blocking(move || super::store::read(reviews.as_ref(), now))
                        .await
                        .map_err(|e| e.to_string())
                        .and_then(|r| r.map_err(|e| e.to_string()));
                match read {
                    Ok((snap, expired)) => {
                        for r in &expired {
                            app.effects.decided(r).await;
                        }
                        if snap != *current {
                            app.live.tx.send_replace(Arc::new(snap));
                        }
                        // The token read before the listing: a change in between is seen next time.
                        last_token = token;
                    }
                    Err(e) => {
                        // The page keeps the last lists, under a banner saying they are stale.
                        if current.unreadable.as_ref().map(|(_, m)| m) != Some(&e) {
                            tracing::warn!("console: reviews not read: {e}");
                            let mut stale = Snapshot::clone(&current);
                            let since = current.unreadable.as_ref().map_or(now, |(at, _)| *at);
                            stale.unreadable = Some((since, e));
                            app.live.tx.send_replace(Arc::new(stale));
                        }
                        last_token = None;
                    }
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

/// `GET /events?page=…&agent=…&tool=…&rule=…`: the reviews part of the page (that page of that
/// filter, rendered for this session: bounded however many reviews wait, and long values cut),
/// now and after each change that alters it (event `reviews`).
pub(crate) async fn events(
    State(app): State<Arc<App>>,
    Query(q): Query<ListQuery>,
    headers: HeaderMap,
) -> Response {
    let Some((_, session)) = super::session(&app, &headers) else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    let rx = app.live.rx.clone();
    let ctx = super::page_context(&app);
    let stream = futures::stream::unfold(
        (rx, session, true, String::new()),
        move |(mut rx, s, mut first, mut last)| {
            let (q, ctx) = (q.clone(), ctx.clone());
            async move {
                loop {
                    if !first && rx.changed().await.is_err() {
                        return None;
                    }
                    first = false;
                    let snap = rx.borrow_and_update().clone();
                    let viewer = Viewer {
                        name: &s.name,
                        csrf: &s.csrf,
                    };
                    let html =
                        pages::fragment(&viewer, &snap, chrono::Utc::now(), &ctx, &q).into_string();
                    // A change elsewhere in the store that leaves this page as it was sends
                    // nothing.
                    if html == last {
                        continue;
                    }
                    last.clone_from(&html);
                    let event = Event::default().event("reviews").data(html);
                    return Some((Ok::<_, Infallible>(event), (rx, s, false, last)));
                }
            }
        },
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}
