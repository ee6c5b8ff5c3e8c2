//! The queues between a session and its HTTP response streams (a POST's answer stream, the
//! GET stream, `subscriptions/listen` streams), bounded in bytes per session as stdio's queues
//! are ([`QUEUE_BYTES`]): the streams of one session hold at most that much between them (a
//! larger message passes alone, into an empty stream).
//!
//! Unlike stdio, a stream that falls behind does not slow the other side down — the upstream is
//! shared by every client, and one client that does not read must not hold up the others. A
//! stream that already holds messages when the session's bytes would go over the bound is
//! **cut**: its queue is freed at once, it ends, further messages for it are refused (the
//! session answers an upstream's request that could not be delivered with an error), and the
//! cut is counted ([`streams_cut`]) and logged by the session.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::super::frame::Frame;
use super::super::jsonrpc::{self, Kind};
use super::super::transport::QUEUE_BYTES;

/// Streams cut in this process so far.
static CUT: AtomicU64 = AtomicU64::new(0);

/// How many streams were cut in this process so far (they fell behind).
pub(crate) fn streams_cut() -> u64 {
    CUT.load(Ordering::Relaxed)
}

/// A message queued for a stream: its JSON text only (a parsed message would take several
/// times its text's size).
#[derive(Debug)]
pub(crate) struct Out {
    /// The message's JSON text (one line).
    pub(crate) json: Vec<u8>,
    /// It is a response (it ends a request's stream).
    pub(crate) response: bool,
}

impl Out {
    fn of(f: &Frame) -> Out {
        Out {
            json: f.to_bytes(),
            response: matches!(jsonrpc::kind(f), Kind::Response),
        }
    }

    fn weight(&self) -> usize {
        self.json.len().max(1)
    }
}

/// The bytes queued on all the streams of one session.
#[derive(Debug, Default)]
pub(crate) struct Budget(AtomicUsize);

impl Budget {
    fn add(&self, n: usize) {
        self.0.fetch_add(n, Ordering::AcqRel);
    }

    fn sub(&self, n: usize) {
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                Some(v.saturating_sub(n))
            });
    }

    /// Bytes queued now.
    pub(crate) fn queued(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

#[derive(Debug, PartialEq, Eq)]
enum End {
    Open,
    /// Cut by the sender (fell behind).
    Cut,
    /// The receiver is gone (the client closed the stream).
    Closed,
}

struct State {
    items: VecDeque<Out>,
    bytes: usize,
    senders: usize,
    end: End,
}

struct Inner {
    state: Mutex<State>,
    notify: Notify,
    budget: Arc<Budget>,
}

impl Inner {
    /// Frees the queue (outside the lock) and ends the stream as `end`.
    fn finish(&self, end: End) {
        let freed = {
            let mut s = self.state.lock();
            if s.end == End::Open {
                s.end = end;
            }
            self.budget.sub(s.bytes);
            s.bytes = 0;
            std::mem::take(&mut s.items)
        };
        drop(freed);
        self.notify.notify_one();
    }
}

/// The sending end (the session's pump).
pub(crate) struct OutTx(Arc<Inner>);

/// The receiving end (an HTTP response's body).
pub(crate) struct OutRx(Arc<Inner>);

/// Why a message was not queued.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The stream was already closed (by its client) or cut.
    Gone,
    /// The stream fell behind: it is cut now.
    Cut,
}

/// A stream's queue, counting against the session's `budget`.
pub(crate) fn out_queue(budget: &Arc<Budget>) -> (OutTx, OutRx) {
    let inner = Arc::new(Inner {
        state: Mutex::new(State {
            items: VecDeque::new(),
            bytes: 0,
            senders: 1,
            end: End::Open,
        }),
        notify: Notify::new(),
        budget: budget.clone(),
    });
    (OutTx(inner.clone()), OutRx(inner))
}

impl OutTx {
    /// Queues `f`, never waiting; cuts the stream when it holds messages already and the
    /// session's streams would hold more than [`QUEUE_BYTES`].
    pub(crate) fn send(&self, f: Frame) -> Result<(), Refused> {
        if self.is_closed() {
            return Err(Refused::Gone);
        }
        let f = Out::of(&f);
        let w = f.weight();
        {
            let mut s = self.0.state.lock();
            if s.end != End::Open {
                return Err(Refused::Gone);
            }
            if s.bytes == 0 || self.0.budget.queued().saturating_add(w) <= QUEUE_BYTES {
                s.items.push_back(f);
                s.bytes += w;
                self.0.budget.add(w);
                drop(s);
                self.0.notify.notify_one();
                return Ok(());
            }
        }
        CUT.fetch_add(1, Ordering::Relaxed);
        self.0.finish(End::Cut);
        Err(Refused::Cut)
    }

    /// Whether the stream is closed or cut (nothing more can be queued).
    pub(crate) fn is_closed(&self) -> bool {
        self.0.state.lock().end != End::Open
    }
}

impl Clone for OutTx {
    fn clone(&self) -> Self {
        self.0.state.lock().senders += 1;
        OutTx(self.0.clone())
    }
}

impl Drop for OutTx {
    fn drop(&mut self) {
        let last = {
            let mut s = self.0.state.lock();
            s.senders -= 1;
            s.senders == 0
        };
        if last {
            self.0.notify.notify_one();
        }
    }
}

impl OutRx {
    /// The next message; `None` once every sender is gone and the queue is empty, or the stream
    /// was cut.
    pub(crate) async fn recv(&mut self) -> Option<Out> {
        loop {
            {
                let mut s = self.0.state.lock();
                if s.end == End::Cut {
                    return None;
                }
                if let Some(f) = s.items.pop_front() {
                    let w = f.weight();
                    s.bytes = s.bytes.saturating_sub(w);
                    self.0.budget.sub(w);
                    return Some(f);
                }
                if s.senders == 0 {
                    return None;
                }
            }
            self.0.notify.notified().await;
        }
    }
}

impl Drop for OutRx {
    fn drop(&mut self) {
        self.0.finish(End::Closed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn note(bytes: usize) -> Frame {
        json!({"jsonrpc": "2.0", "method": "n", "params": {"d": "x".repeat(bytes)}}).into()
    }

    #[tokio::test]
    async fn a_stream_that_falls_behind_is_cut_and_freed() {
        let budget = Arc::new(Budget::default());
        let (tx, mut rx) = out_queue(&budget);
        let before = streams_cut();
        let mut sent = 0;
        let refused = loop {
            match tx.send(note(1000)) {
                Ok(()) => sent += 1,
                Err(e) => break e,
            }
            assert!(sent < 100_000, "never cut");
        };
        assert_eq!(refused, Refused::Cut);
        assert!(sent > 8000, "{sent}");
        assert!(streams_cut() > before);
        // Freed at once, and ended.
        assert_eq!(budget.queued(), 0);
        assert!(tx.is_closed());
        assert_eq!(tx.send(note(10)), Err(Refused::Gone));
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test]
    async fn a_stream_read_in_time_is_never_cut_and_a_large_message_passes_alone() {
        let budget = Arc::new(Budget::default());
        let (tx, mut rx) = out_queue(&budget);
        for _ in 0..50_000 {
            tx.send(note(1000)).unwrap();
            assert!(rx.recv().await.is_some());
        }
        // Larger than the bound, into an empty stream: passes.
        tx.send(note(QUEUE_BYTES + 10)).unwrap();
        assert!(budget.queued() > QUEUE_BYTES);
        // Another stream of the session that holds something is cut while the session is over.
        let (tx2, _rx2) = out_queue(&budget);
        tx2.send(note(10)).unwrap();
        assert_eq!(tx2.send(note(10)), Err(Refused::Cut));
        assert!(rx.recv().await.is_some());
        assert_eq!(budget.queued(), 0);
        drop(tx);
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test]
    async fn a_closed_receiver_frees_its_queue() {
        let budget = Arc::new(Budget::default());
        let (tx, rx) = out_queue(&budget);
        tx.send(note(1000)).unwrap();
        assert!(budget.queued() > 0);
        drop(rx);
        assert_eq!(budget.queued(), 0);
        assert!(tx.is_closed());
        assert_eq!(tx.send(note(1)), Err(Refused::Gone));
    }
}
