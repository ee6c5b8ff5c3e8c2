//! One client of the shared gateway: a [`Gateway`] (the §7 relay, its run, its decisions), and
//! the routing of what that gateway sends the client onto HTTP responses — each answer to the
//! POST that asked (with the client's own id again), anything else onto an open stream.
//!
//! Client ids are replaced by the session's own numbers before the gateway sees them: many
//! HTTP clients may share one session (2026-07-28 clients of one token or run id), and their ids
//! may coincide.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::{OwnedRwLockReadGuard, RwLock};
use tokio::task::AbortHandle;

use super::super::ProxyConfig;
use super::super::frame::Frame;
use super::super::gateway::{Gateway, id_key};
use super::super::hub::Hub;
use super::super::jsonrpc::{self, Kind};
use super::super::transport::{self, Incoming, Receiver};
use super::outq::{Budget, OutRx, OutTx, Refused, out_queue, streams_cut};

/// An answer waited for by a POST.
struct Waiter {
    tx: OutTx,
    /// The client's id (JSON text).
    id: Box<str>,
    /// A 2026-07-28 request (results carry `resultType`).
    modern: bool,
    /// A 2026-07-28 cacheable request (results carry `ttlMs` and `cacheScope`).
    cacheable: bool,
    /// The client's `_meta.progressToken` (the gateway sees the request's number instead), so
    /// the upstream's progress reaches this request's stream, and no other.
    progress: Option<Value>,
}

/// A `subscriptions/listen` stream.
struct Listener {
    tx: OutTx,
    /// The listen request's id (JSON value), the subscription id.
    id: Value,
    /// Notification methods the client opted in to.
    methods: Vec<&'static str>,
}

#[derive(Default)]
struct Routes {
    waiters: Mutex<HashMap<u64, Waiter>>,
    /// Streams that may carry messages not answering a request (2025-11-25): open POST streams
    /// by their request's number, the GET stream as 0. The latest is used.
    side: Mutex<Vec<(u64, OutTx)>>,
    listeners: Mutex<Vec<Listener>>,
    /// The bytes queued on all of the session's streams (see [`super::outq`]).
    budget: Arc<Budget>,
}

/// The current-run record a session stands for (2026-07-28: a token's run, or on a shared store
/// a named run).
#[derive(Debug, Clone)]
pub(crate) struct Current {
    /// The agent (of the token).
    pub(crate) agent: String,
    /// The record's key (derived from the token).
    pub(crate) key: String,
    /// The run.
    pub(crate) run: String,
}

/// A client session (2025-11-25: one `MCP-Session-Id`; 2026-07-28: one run id or token).
pub(crate) struct Session {
    /// The token (index in the token file) that opened it.
    pub(crate) token: usize,
    pub(crate) gw: Arc<Gateway>,
    sid: u64,
    hub: Arc<Hub>,
    next: AtomicU64,
    routes: Arc<Routes>,
    started: Instant,
    /// Milliseconds since `started` of the last request.
    last_used: AtomicU64,
    tasks: Vec<AbortHandle>,
    closed: std::sync::atomic::AtomicBool,
    /// The record of a session of a token's run, or of a shared named run.
    pub(crate) current: Option<Current>,
    /// On a state store shared with other replicas: the run is held only while requests of it
    /// are in flight here (each holds a read guard) and left before the last one's answer goes
    /// out, so that the client's next call, on whichever replica, continues it and its audit
    /// chain (design §8). Leaving takes the write guard.
    gate: Option<Arc<RwLock<()>>>,
}

/// A POST waiting for its answer; dropped before the answer came (the client went away), it
/// cancels the request.
pub(crate) struct Pending {
    session: Arc<Session>,
    n: u64,
    pub(crate) rx: OutRx,
    /// The hold on a shared run (see [`Session`]'s `gate`).
    hold: Option<OwnedRwLockReadGuard<()>>,
}

impl Pending {
    /// The answer came: lets go of the run when this was the last request holding it here,
    /// before the answer goes out (the client's next call may reach another replica at once).
    pub(crate) async fn answered(&mut self) {
        if let Some(hold) = self.hold.take() {
            drop(hold);
            self.session.leave_if_unheld().await;
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let s = &self.session;
        s.routes.side.lock().retain(|(k, _)| *k != self.n);
        let hold = self.hold.take();
        let cancel = s.routes.waiters.lock().remove(&self.n).is_some() && !s.is_closed();
        if !cancel && hold.is_none() {
            return;
        }
        let session = s.clone();
        let n = self.n;
        tokio::spawn(async move {
            if cancel {
                let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": n, "reason": "the client closed the response stream"}});
                session.gw.on_client(Incoming::Frame(note.into())).await;
            }
            if let Some(hold) = hold {
                drop(hold);
                session.leave_if_unheld().await;
            }
        });
    }
}

impl Session {
    /// Opens a session with its own gateway (configured for its token) on the shared upstream;
    /// `current`: the recorded run it stands for; `handover`: that run is shared with other
    /// replicas (held only while requests are in flight).
    pub(crate) fn open(
        cfg: ProxyConfig,
        hub: &Arc<Hub>,
        token: usize,
        current: Option<Current>,
        handover: bool,
    ) -> Arc<Session> {
        let (client_tx, client_rx) = transport::queue();
        let (up_tx, up_rx) = transport::queue();
        let gw = Arc::new(Gateway::new(cfg, client_tx, up_tx));
        let (sid, mut inbound) = hub.attach(up_rx, token, &gw);
        let g = gw.clone();
        let up = tokio::spawn(async move {
            while let Some(m) = inbound.recv().await {
                g.on_upstream(m.value).await;
            }
        });
        let routes = Arc::new(Routes::default());
        let pump = tokio::spawn(pump(client_rx, routes.clone(), gw.clone()));
        Arc::new(Session {
            token,
            gw,
            sid,
            hub: hub.clone(),
            next: AtomicU64::new(1),
            routes,
            started: Instant::now(),
            last_used: AtomicU64::new(0),
            tasks: vec![up.abort_handle(), pump.abort_handle()],
            closed: std::sync::atomic::AtomicBool::new(false),
            current,
            gate: handover.then(|| Arc::new(RwLock::new(()))),
        })
    }

    /// Leaves the run unless a request here holds it (or another task is leaving it).
    async fn leave_if_unheld(&self) {
        let Some(gate) = &self.gate else { return };
        if let Ok(_only) = gate.try_write() {
            self.gw.leave_run().await;
        }
    }

    /// Whether requests are in flight.
    pub(crate) fn busy(&self) -> bool {
        !self.routes.waiters.lock().is_empty()
    }

    /// Marks the session used now. Called, under the map's lock, by whoever takes it from
    /// `sessions` or `runs` for a request: the reaper decides staleness under the same lock,
    /// so a session just taken is never closed as idle before its request registers.
    pub(crate) fn touch(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_used.store(ms, Ordering::Relaxed);
    }

    /// How long since the last request, when none is in flight.
    pub(crate) fn idle_for(&self) -> Option<std::time::Duration> {
        if !self.routes.waiters.lock().is_empty() {
            return None;
        }
        let last = std::time::Duration::from_millis(self.last_used.load(Ordering::Relaxed));
        Some(self.started.elapsed().saturating_sub(last))
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Sends a client request to the gateway under a fresh number; its answer (and, with
    /// `side`, other messages for the client) arrive on the returned [`Pending`].
    pub(crate) async fn request(
        self: &Arc<Self>,
        mut msg: Frame,
        modern: bool,
        side: bool,
    ) -> Pending {
        let hold = match &self.gate {
            Some(g) => Some(g.clone().read_owned().await),
            None => None,
        };
        self.touch();
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        // The client's progress token becomes the request's number: progress is routed by
        // request (two clients of one session may pick the same token).
        let progress = msg
            .msg_mut()
            .pointer_mut("/params/_meta")
            .and_then(Value::as_object_mut)
            .and_then(|m| {
                let t = m.get_mut("progressToken")?;
                Some(std::mem::replace(t, Value::from(n)))
            });
        let (tx, rx) = out_queue(&self.routes.budget);
        let id: Box<str> = msg
            .id_text()
            .map(|t| t.as_ref().into())
            .unwrap_or("null".into());
        let cacheable = modern
            && matches!(
                msg.get("method").and_then(Value::as_str),
                Some(
                    "tools/list"
                        | "prompts/list"
                        | "resources/list"
                        | "resources/read"
                        | "resources/templates/list"
                )
            );
        if side {
            self.routes.side.lock().push((n, tx.clone()));
        }
        self.routes.waiters.lock().insert(
            n,
            Waiter {
                tx,
                id,
                modern,
                cacheable,
                progress,
            },
        );
        let pending = Pending {
            session: self.clone(),
            n,
            rx,
            hold,
        };
        self.gw
            .on_client(Incoming::Frame(msg.with_id(&n.to_string())))
            .await;
        pending
    }

    /// A message that is not a request (a notification, or an answer to the gateway's
    /// question).
    pub(crate) async fn message(&self, mut msg: Frame) {
        self.touch();
        if let Kind::Notification("notifications/cancelled") = jsonrpc::kind(&msg) {
            // The client names its own id; the gateway knows the request by the session's
            // number for it. A cancellation of no request in flight here is dropped.
            let key = msg.pointer("/params/requestId").and_then(id_key);
            let n = key.and_then(|key| {
                self.routes.waiters.lock().iter().find_map(|(n, w)| {
                    let id: Value = serde_json::from_str(&w.id).ok()?;
                    (id_key(&id)? == key).then_some(*n)
                })
            });
            let Some(n) = n else {
                tracing::debug!("client: dropped a cancellation of no request in flight");
                return;
            };
            if let Some(p) = msg
                .msg_mut()
                .get_mut("params")
                .and_then(Value::as_object_mut)
            {
                p.insert("requestId".into(), Value::from(n));
            }
        }
        self.gw.on_client(Incoming::Frame(msg)).await;
    }

    /// A GET stream (2025-11-25): messages the gateway starts on its own.
    pub(crate) fn get_stream(&self) -> OutRx {
        let (tx, rx) = out_queue(&self.routes.budget);
        let mut side = self.routes.side.lock();
        side.retain(|(k, _)| *k != 0);
        side.insert(0, (0, tx));
        rx
    }

    /// A `subscriptions/listen` stream: the acknowledgment first, then the notifications the
    /// client opted in to (of those the upstream sends).
    pub(crate) fn listen(&self, id: Value, params: Option<&Value>) -> OutRx {
        let (tx, rx) = out_queue(&self.routes.budget);
        let want = params.and_then(|p| p.get("notifications"));
        let on = |k: &str| want.and_then(|w| w.get(k)).and_then(Value::as_bool) == Some(true);
        let mut methods = Vec::new();
        let mut acked = serde_json::Map::new();
        for (k, m) in [
            ("toolsListChanged", "notifications/tools/list_changed"),
            ("promptsListChanged", "notifications/prompts/list_changed"),
            (
                "resourcesListChanged",
                "notifications/resources/list_changed",
            ),
        ] {
            if on(k) {
                methods.push(m);
                acked.insert(k.into(), Value::Bool(true));
            }
        }
        let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": id}, "notifications": acked}});
        let _ = tx.send(ack.into());
        self.routes
            .listeners
            .lock()
            .push(Listener { tx, id, methods });
        rx
    }

    /// Ends the session: requests in flight are recorded as "client gone", the run ends with
    /// `status` (a shared run this replica left is taken up to be ended), the gateway and its
    /// tasks stop.
    pub(crate) async fn close(&self, status: &str) {
        self.close_as(Some(status)).await;
    }

    /// [`close`](Self::close); `end` `None`: the run is left open, not ended (a shared run other
    /// replicas continue, or one another replica ended or replaced).
    pub(crate) async fn close_as(&self, end: Option<&str>) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.gw.client_gone().await;
        match end {
            Some(status) if self.gate.is_some() => self.gw.end_run_anyway(status).await,
            Some(status) => self.gw.end_run(status).await,
            None => self.gw.leave_run().await,
        }
        self.gw.close();
        self.hub.detach(self.sid);
        for t in &self.tasks {
            t.abort();
        }
        self.routes.waiters.lock().clear();
        self.routes.side.lock().clear();
        self.routes.listeners.lock().clear();
    }
}

/// Says (and counts) that a stream of the session fell behind and was cut.
fn cut(gw: &Gateway, what: &str) {
    let run = gw
        .started_run()
        .map(|r| r.context().run_id.clone())
        .unwrap_or_default();
    tracing::warn!(
        "session of run {run} (agent {}): its {what} fell behind (the client does not read it; \
         over {} bytes queued): cut and freed; {} streams cut so far",
        gw.cfg.agent_id.as_deref().unwrap_or("?"),
        transport::QUEUE_BYTES,
        streams_cut()
    );
}

/// Queues `f` on a stream; false when it is closed or was cut (now: said and counted).
fn deliver(gw: &Gateway, tx: &OutTx, f: Frame, what: &str) -> bool {
    match tx.send(f) {
        Ok(()) => true,
        Err(Refused::Cut) => {
            cut(gw, what);
            false
        }
        Err(Refused::Gone) => false,
    }
}

/// Routes what the gateway sends the client. Never waits on a stream (see [`super::outq`]).
async fn pump(mut rx: Receiver<Frame>, routes: Arc<Routes>, gw: Arc<Gateway>) {
    while let Some(item) = rx.recv().await {
        let f = item.value;
        match jsonrpc::kind(&f) {
            Kind::Response => {
                let n = f.get("id").and_then(Value::as_u64);
                let w = n.and_then(|n| routes.waiters.lock().remove(&n));
                let Some(w) = w else {
                    tracing::debug!("client: dropped an answer no request waits for");
                    continue;
                };
                if let Some(n) = n {
                    routes.side.lock().retain(|(k, _)| *k != n);
                }
                let mut f = f.with_id(&w.id);
                if w.modern {
                    complete(&mut f, w.cacheable);
                }
                deliver(&gw, &w.tx, f, "response stream");
            }
            Kind::Notification("notifications/progress") => {
                // To the request it reports on (its number is the token), under the client's
                // own token, on that request's stream.
                let n = f.pointer("/params/progressToken").and_then(Value::as_u64);
                let to = n.and_then(|n| {
                    let w = routes.waiters.lock();
                    let w = w.get(&n)?;
                    Some((w.tx.clone(), w.progress.clone()?))
                });
                match to {
                    Some((tx, token)) => {
                        let mut f = f;
                        if let Some(p) =
                            f.msg_mut().get_mut("params").and_then(Value::as_object_mut)
                        {
                            p.insert("progressToken".into(), token);
                        }
                        deliver(&gw, &tx, f, "response stream");
                    }
                    None => tracing::debug!("client: dropped progress for no request in flight"),
                }
            }
            Kind::Notification(m) if m.ends_with("/list_changed") => {
                let mut sent = false;
                let listeners: Vec<(OutTx, Value)> = routes
                    .listeners
                    .lock()
                    .iter()
                    .filter(|l| l.methods.contains(&m))
                    .map(|l| (l.tx.clone(), l.id.clone()))
                    .collect();
                for (tx, id) in listeners {
                    let mut n = f.clone();
                    if let Some(p) = n.msg_mut().as_object_mut() {
                        let params = p.entry("params").or_insert_with(|| json!({}));
                        if let Some(params) = params.as_object_mut() {
                            let meta = params.entry("_meta").or_insert_with(|| json!({}));
                            meta["io.modelcontextprotocol/subscriptionId"] = id;
                        }
                    }
                    sent |= deliver(&gw, &tx, n, "subscriptions/listen stream");
                }
                routes.listeners.lock().retain(|l| !l.tx.is_closed());
                if !sent {
                    side(&routes, &gw, f).await;
                }
            }
            _ => side(&routes, &gw, f).await,
        }
    }
}

/// A message for the client that answers no request: onto its latest open stream. A request
/// (the upstream's, or the gateway's own question) that cannot be delivered — no stream open,
/// or the stream was cut — is answered at once (the upstream gets a JSON-RPC error; the
/// gateway's question counts as not approved), never left waiting.
async fn side(routes: &Routes, gw: &Gateway, f: Frame) {
    let request = match jsonrpc::kind(&f) {
        Kind::Request(_) => f.get("id").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    };
    let tx = {
        let mut s = routes.side.lock();
        s.retain(|(_, tx)| !tx.is_closed());
        s.last().map(|(_, tx)| tx.clone())
    };
    let delivered = match &tx {
        Some(tx) => deliver(gw, tx, f, "stream"),
        None => {
            tracing::debug!("client: no open stream for a message of the gateway's");
            false
        }
    };
    if let (false, Some(id)) = (delivered, request) {
        gw.undeliverable(&id).await;
    }
}

/// A 2026-07-28 result carries `resultType` (`complete` unless it says otherwise), and a
/// cacheable one `ttlMs` and `cacheScope` (an older upstream gives neither: not cached, private —
/// what a client may see depends on its token).
fn complete(f: &mut Frame, cacheable: bool) {
    let needs = |r: &Value| {
        r.get("resultType").is_none()
            || (cacheable && (r.get("ttlMs").is_none() || r.get("cacheScope").is_none()))
    };
    if f.get("result").is_some_and(|r| r.is_object() && needs(r))
        && let Some(r) = f.msg_mut().get_mut("result").and_then(Value::as_object_mut)
    {
        r.entry("resultType").or_insert_with(|| json!("complete"));
        if cacheable {
            r.entry("ttlMs").or_insert_with(|| json!(0));
            r.entry("cacheScope").or_insert_with(|| json!("private"));
        }
    }
}
