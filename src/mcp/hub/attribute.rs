//! Which session a message the upstream starts on its own belongs to (issue 31 point 3), and
//! what is done with one that cannot be attributed: refused, counted, logged and audited.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::json;

use super::super::gateway::Gateway;
use super::{Hub, Route};

/// The most `error` audit events a second for messages that could not be attributed (a
/// hostile upstream must not flood the trail); the others are counted in the next one.
const UNATTRIBUTED_EVENTS: u32 = 32;

/// The most runs one unattributed message is written into.
const UNATTRIBUTED_RUNS: usize = 64;

impl Hub {
    /// The sessions with requests in flight, by the hub's id of their newest request.
    fn in_flight(&self) -> HashMap<u64, u64> {
        let mut newest: HashMap<u64, u64> = HashMap::new();
        for (g, r) in self.routes.lock().iter() {
            if let Route::Session { sid, .. } = r {
                let e = newest.entry(*sid).or_insert(*g);
                *e = (*e).max(*g);
            }
        }
        newest
    }

    /// The one session a message of the upstream's own belongs to: the newest session with a
    /// request in flight, when every request in flight is of one token. `None` when no
    /// request is in flight or requests of two tokens are (a shared upstream does not say
    /// which call a message serves: never guess across tokens). An upstream of one token's
    /// (or session's) own speaks for that token only: with nothing in flight, its newest
    /// session.
    pub(super) fn attribute(&self) -> Option<u64> {
        let in_flight = self.in_flight();
        let sessions = self.sessions.lock();
        if in_flight.is_empty() && self.dedicated.load(Ordering::Acquire) {
            return sessions.keys().max().copied();
        }
        let mut token = None;
        let mut newest: Option<(u64, u64)> = None;
        for (sid, g) in in_flight {
            let t = sessions.get(&sid)?.1;
            if token.is_some_and(|k| k != t) {
                return None;
            }
            token = Some(t);
            if newest.is_none_or(|(n, _)| g > n) {
                newest = Some((g, sid));
            }
        }
        newest.map(|(_, sid)| sid)
    }

    /// Counts, says and audits a message of the upstream's that could not be attributed: an
    /// `error` event in the run of every session it might have been for (those with requests
    /// in flight; with none, every session) — naming the method only, never the message,
    /// which may carry another token's data. At most [`UNATTRIBUTED_EVENTS`] log lines and
    /// event rounds a second (the others are counted, and named in the next event).
    pub(super) fn unattributed(&self, what: &str, method: &str) {
        let n = self.unattributed.fetch_add(1, Ordering::Relaxed) + 1;
        let suppressed = {
            let mut ev = self.events.lock();
            if ev.0.elapsed() >= Duration::from_secs(1) {
                *ev = (Instant::now(), 0, ev.2);
            }
            if ev.1 >= UNATTRIBUTED_EVENTS {
                ev.2 += 1;
                return;
            }
            ev.1 += 1;
            std::mem::take(&mut ev.2)
        };
        tracing::error!(
            "upstream: {what} not attributable to exactly one token (requests of several \
             tokens, or none, in flight; see --upstream-per): not delivered; {n} so far"
        );
        let in_flight = self.in_flight();
        let gws: Vec<Arc<Gateway>> = self
            .sessions
            .lock()
            .iter()
            .filter(|(sid, _)| in_flight.is_empty() || in_flight.contains_key(sid))
            .filter_map(|(_, (_, _, gw))| gw.upgrade())
            .take(UNATTRIBUTED_RUNS)
            .collect();
        let tokens = {
            let sessions = self.sessions.lock();
            let mut t: Vec<usize> = in_flight
                .keys()
                .filter_map(|sid| sessions.get(sid).map(|s| s.1))
                .collect();
            t.sort_unstable();
            t.dedup();
            t.len()
        };
        let message = format!(
            "the upstream's {what} could not be attributed to exactly one client (requests of \
             {tokens} tokens in flight): not delivered; run the server with --upstream-per token"
        );
        for gw in gws {
            if let Some(run) = gw.started_run() {
                let mut body = serde_json::Map::new();
                body.insert("message".into(), json!(message));
                body.insert("upstreamMethod".into(), json!(method));
                body.insert("unattributed".into(), json!(n));
                if suppressed > 0 {
                    body.insert("unattributedNotAudited".into(), json!(suppressed));
                }
                run.emit(crate::audit::EventKind::Error, body, run.engine.clock.now());
            }
        }
    }
}
