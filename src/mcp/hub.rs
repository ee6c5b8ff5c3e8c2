//! One upstream server shared by many gateway sessions (`--listen`): the hub initializes the
//! upstream once in its own revision and keeps that session, answers each client's
//! `initialize` from it, and carries every session's requests under hub-wide ids, routing the
//! responses back to the session that asked (with the session's own id).
//!
//! Each session is a [`Gateway`](super::gateway::Gateway) as in the stdio gateway; its
//! upstream queue is drained by a task here, and what the upstream sends it arrives on its own
//! queue (so one slow session never holds up another's answers).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::frame::Frame;
use super::gateway::Gateway;
use super::jsonrpc::{self, Kind};
use super::transport::{self, Incoming, Link, Receiver, Sender};

mod attribute;

/// The revision toolgate speaks to an upstream it initializes.
pub(crate) const UPSTREAM_VERSION: &str = "2025-11-25";

/// Revisions a client may initialize with (answered in its own revision).
pub(crate) const LEGACY_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// The stateless revision.
pub(crate) const MODERN: &str = "2026-07-28";

/// How long the upstream may take to answer the hub's `initialize`.
const INIT_TIMEOUT: Duration = Duration::from_secs(30);

enum Route {
    /// A session's request: its session and the session's id (text).
    Session {
        sid: u64,
        local: Box<str>,
        /// The client's progress token, replaced by the hub's id upstream.
        progress: Option<Value>,
    },
    /// The hub's own request.
    Own(oneshot::Sender<Frame>),
}

/// An attached session: its queue, its token, its gateway.
type Attached = (Sender<Incoming>, usize, Weak<Gateway>);

/// The shared upstream.
pub(crate) struct Hub {
    to_up: Sender<Frame>,
    next: AtomicU64,
    routes: Mutex<HashMap<u64, Route>>,
    /// (session, the session's id of a request) → the hub's id, for cancellations.
    locals: Mutex<HashMap<(u64, Box<str>), u64>>,
    /// The sessions: their queue, the token (index in the token file) each acts for, and its
    /// gateway (for the audit trail of its run).
    sessions: Mutex<HashMap<u64, Attached>>,
    next_session: AtomicU64,
    /// The upstream's own requests handed to a session, by their id (JSON text): only that
    /// session's answer goes back, and the upstream's cancellation of one goes only to it.
    asks: Mutex<HashMap<Box<str>, u64>>,
    /// Upstream requests refused and notifications dropped because they could not be
    /// attributed to exactly one token.
    pub(crate) unattributed: AtomicU64,
    /// `error` audit events written for unattributed messages in the current second (and when
    /// that second began): at most [`UNATTRIBUTED_EVENTS`] a second, the rest counted.
    events: Mutex<(Instant, u32, u64)>,
    /// The upstream serves one token (or one session) only (`--upstream-per`): what it sends
    /// on its own goes to its newest session even with no request in flight.
    dedicated: AtomicBool,
    /// The upstream's `initialize` result (for a 2026-07-28 upstream: made from its
    /// `server/discover` result).
    init: Mutex<Option<Value>>,
    /// The upstream's `server/discover` result, when it speaks 2026-07-28.
    discover: Mutex<Option<Value>>,
}

impl Hub {
    /// Starts relaying over `link` (its receiving end is read by a task here); returns the hub
    /// and a receiver that closes when the upstream is gone.
    pub(crate) fn start(link: &mut Link) -> (Arc<Hub>, oneshot::Receiver<()>) {
        let hub = Arc::new(Hub {
            to_up: link.tx.clone(),
            next: AtomicU64::new(1),
            routes: Mutex::new(HashMap::new()),
            locals: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            next_session: AtomicU64::new(1),
            asks: Mutex::new(HashMap::new()),
            unattributed: AtomicU64::new(0),
            events: Mutex::new((Instant::now(), 0, 0)),
            dedicated: AtomicBool::new(false),
            init: Mutex::new(None),
            discover: Mutex::new(None),
        });
        let (gone_tx, gone_rx) = oneshot::channel();
        let (_, empty) = transport::queue::<Incoming>();
        let mut rx = std::mem::replace(&mut link.rx, empty);
        let h = hub.clone();
        tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                h.on_upstream_msg(m.value).await;
            }
            let _ = gone_tx.send(());
        });
        (hub, gone_rx)
    }

    /// Finds the upstream's revision: a `server/discover` probe (what 2026-07-28 servers
    /// answer; older ones answer an error and are left as they were); a 2026-07-28 upstream is
    /// then spoken to statelessly (and its change notifications listened to), an older one is
    /// initialized once (`initialize`, `notifications/initialized`) and its session kept.
    pub(crate) async fn initialize(&self) -> Result<(), String> {
        let probe = json!({"jsonrpc": "2.0", "id": 0, "method": "server/discover",
            "params": {"_meta": own_meta()}});
        let found = self.own_request(probe.into()).await?;
        let modern = found
            .pointer("/result/supportedVersions")
            .and_then(Value::as_array)
            .is_some_and(|v| v.iter().any(|x| x == MODERN));
        if modern {
            let d = found.get("result").cloned().unwrap_or_default();
            let init = json!({
                "protocolVersion": UPSTREAM_VERSION,
                "capabilities": d.get("capabilities").cloned().unwrap_or_else(|| json!({})),
                "serverInfo": d.pointer("/_meta/io.modelcontextprotocol~1serverInfo").cloned()
                    .unwrap_or_else(|| json!({"name": "unknown", "version": "0"})),
            });
            *self.init.lock() = Some(init);
            *self.discover.lock() = Some(d);
            // Change notifications come on a listen stream the hub keeps open.
            let g = self.next.fetch_add(1, Ordering::Relaxed);
            let listen = json!({"jsonrpc": "2.0", "id": g, "method": "subscriptions/listen",
                "params": {"_meta": own_meta(), "notifications": {"toolsListChanged": true,
                    "promptsListChanged": true, "resourcesListChanged": true}}});
            self.to_up.send(listen.into()).await;
            return Ok(());
        }
        let req = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": UPSTREAM_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "toolgate", "version": env!("CARGO_PKG_VERSION")},
        }});
        let resp = self.own_request(req.into()).await?;
        let result = resp.get("result").cloned().ok_or_else(|| {
            format!(
                "the upstream refused initialize: {}",
                resp.get("error").cloned().unwrap_or_default()
            )
        })?;
        *self.init.lock() = Some(result);
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        self.to_up.send(note.into()).await;
        Ok(())
    }

    /// Whether the upstream speaks 2026-07-28.
    pub(crate) fn modern_upstream(&self) -> bool {
        self.discover.lock().is_some()
    }

    async fn own_request(&self, req: Frame) -> Result<Frame, String> {
        let g = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.routes.lock().insert(g, Route::Own(tx));
        if !self.to_up.send(req.with_id(&g.to_string())).await {
            return Err("the upstream server is gone".into());
        }
        match tokio::time::timeout(INIT_TIMEOUT, rx).await {
            Ok(Ok(f)) => Ok(f),
            Ok(Err(_)) => Err("the upstream server exited".into()),
            Err(_) => Err("the upstream server did not answer initialize".into()),
        }
    }

    /// The upstream's `initialize` result.
    pub(crate) fn init_result(&self) -> Value {
        self.init.lock().clone().unwrap_or_else(|| json!({}))
    }

    /// The answer to a client's `initialize`: the upstream's, in the client's revision when
    /// toolgate knows it.
    fn initialize_answer(&self, id: &str, req: &Frame) -> Frame {
        let mut r = self.init_result();
        if let Some(v) = req
            .pointer("/params/protocolVersion")
            .and_then(Value::as_str)
            && LEGACY_VERSIONS.contains(&v)
        {
            r["protocolVersion"] = Value::String(v.to_string());
        }
        jsonrpc::result_to(id, &r)
    }

    /// The answer to `server/discover`: the upstream's identity and capabilities, and the
    /// revisions toolgate speaks downstream.
    pub(crate) fn discover_result(&self) -> Value {
        if let Some(d) = self.discover.lock().clone() {
            return d;
        }
        let init = self.init_result();
        let mut r = json!({
            "resultType": "complete",
            "supportedVersions": [MODERN, "2025-11-25", "2025-06-18"],
            "capabilities": init.get("capabilities").cloned().unwrap_or_else(|| json!({})),
            "_meta": {"io.modelcontextprotocol/serverInfo": init.get("serverInfo").cloned().unwrap_or_else(|| json!({"name": "toolgate"}))},
        });
        if let Some(i) = init.get("instructions") {
            r["instructions"] = i.clone();
        }
        r
    }

    /// Adds a session: what the upstream sends it arrives on the returned receiver; what it
    /// sends the upstream is read from `from_gw` by a task until the session's gateway closes it.
    pub(crate) fn attach(
        self: &Arc<Self>,
        mut from_gw: Receiver<Frame>,
        token: usize,
        gw: &Arc<Gateway>,
    ) -> (u64, Receiver<Incoming>) {
        let sid = self.next_session.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = transport::queue();
        self.sessions
            .lock()
            .insert(sid, (tx, token, Arc::downgrade(gw)));
        let hub = self.clone();
        tokio::spawn(async move {
            while let Some(m) = from_gw.recv().await {
                hub.on_session(sid, m.value).await;
            }
            hub.detach(sid);
        });
        (sid, rx)
    }

    /// Marks the upstream as serving one token (or one session) only.
    pub(crate) fn set_dedicated(&self) {
        self.dedicated.store(true, Ordering::Release);
    }

    /// Whether sessions were attached and none is any more.
    pub(crate) fn unused(&self) -> bool {
        self.next_session.load(Ordering::Relaxed) > 1 && self.sessions.lock().is_empty()
    }

    /// Forgets a session (its requests' late answers are dropped).
    pub(crate) fn detach(&self, sid: u64) {
        self.sessions.lock().remove(&sid);
        self.routes
            .lock()
            .retain(|_, r| !matches!(r, Route::Session { sid: s, .. } if *s == sid));
        self.locals.lock().retain(|(s, _), _| *s != sid);
        self.asks.lock().retain(|_, s| *s != sid);
    }

    async fn to_session(&self, sid: u64, f: Frame) {
        let tx = self.sessions.lock().get(&sid).map(|(tx, ..)| tx.clone());
        if let Some(tx) = tx {
            let room = tx.reserve(f.weight()).await;
            tx.send_in(room, Incoming::Frame(f));
        }
    }

    async fn on_session(&self, sid: u64, msg: Frame) {
        match jsonrpc::kind(&msg) {
            Kind::Request("initialize") => {
                let id = msg.id_text().map(|t| t.into_owned()).unwrap_or_default();
                let answer = self.initialize_answer(&id, &msg);
                self.to_session(sid, answer).await;
            }
            Kind::Request(_) => {
                let Some(local) = msg.id_text().map(|t| Box::<str>::from(t.as_ref())) else {
                    return;
                };
                let g = self.next.fetch_add(1, Ordering::Relaxed);
                let mut msg = msg;
                self.in_upstream_revision(&mut msg);
                // Progress tokens are each client's own: upstream they are the hub's id.
                let progress = msg
                    .msg_mut()
                    .pointer_mut("/params/_meta")
                    .and_then(Value::as_object_mut)
                    .and_then(|m| {
                        let t = m.get_mut("progressToken")?;
                        Some(std::mem::replace(t, Value::from(g)))
                    });
                self.locals.lock().insert((sid, local.clone()), g);
                self.routes.lock().insert(
                    g,
                    Route::Session {
                        sid,
                        local,
                        progress,
                    },
                );
                self.to_up.send(msg.with_id(&g.to_string())).await;
            }
            Kind::Notification("notifications/initialized") => {}
            Kind::Notification("notifications/cancelled") => {
                let Some(rid) = msg.pointer("/params/requestId").map(Value::to_string) else {
                    return;
                };
                let g = self.locals.lock().remove(&(sid, rid.into()));
                let Some(g) = g else { return };
                self.routes.lock().remove(&g);
                let mut msg = msg;
                if let Some(p) = msg
                    .msg_mut()
                    .get_mut("params")
                    .and_then(Value::as_object_mut)
                {
                    p.insert("requestId".into(), Value::from(g));
                }
                self.to_up.send(msg).await;
            }
            Kind::Response => {
                // An answer to the upstream's own request: only from the session it was given.
                let id = msg.id_text().map(|t| Box::<str>::from(t.as_ref()));
                let mine = id.is_some_and(|id| {
                    let mut asks = self.asks.lock();
                    if asks.get(&id) == Some(&sid) {
                        asks.remove(&id);
                        true
                    } else {
                        false
                    }
                });
                if mine {
                    self.to_up.send(msg).await;
                } else {
                    tracing::warn!(
                        "client: dropped an answer to an upstream request not asked of it"
                    );
                }
            }
            _ => {
                self.to_up.send(msg).await;
            }
        }
    }

    async fn on_upstream_msg(&self, inc: Incoming) {
        let msg = match inc {
            Incoming::Frame(f) => f,
            Incoming::TooLarge { id } => {
                // The session that asked gets the error its gateway gives for this.
                let g = id.and_then(|t| t.trim().parse::<u64>().ok());
                let route = g.and_then(|g| self.routes.lock().remove(&g));
                if let Some(Route::Session { sid, local, .. }) = route {
                    self.locals.lock().remove(&(sid, local.clone()));
                    let tx = self.sessions.lock().get(&sid).map(|(tx, ..)| tx.clone());
                    if let Some(tx) = tx {
                        let room = tx.reserve(64).await;
                        tx.send_in(
                            room,
                            Incoming::TooLarge {
                                id: Some(local.into()),
                            },
                        );
                    }
                }
                return;
            }
            Incoming::NotJson => return,
        };
        match jsonrpc::kind(&msg) {
            Kind::Response => {
                let g = msg.get("id").and_then(Value::as_u64);
                let route = g.and_then(|g| self.routes.lock().remove(&g));
                match route {
                    Some(Route::Own(tx)) => {
                        let _ = tx.send(msg);
                    }
                    Some(Route::Session { sid, local, .. }) => {
                        self.locals.lock().remove(&(sid, local.clone()));
                        self.to_session(sid, msg.with_id(&local)).await;
                    }
                    None => tracing::debug!("upstream: dropped a response to no request"),
                }
            }
            Kind::Notification("notifications/cancelled") => {
                // The upstream cancels a request of its own: only the session it was given.
                let id = msg.pointer("/params/requestId").map(Value::to_string);
                let sid = id.and_then(|id| self.asks.lock().remove(id.as_str()));
                match sid {
                    Some(sid) => self.to_session(sid, msg).await,
                    None => tracing::debug!("upstream: dropped a cancellation of no request"),
                }
            }
            Kind::Notification("notifications/progress") => {
                // To the session whose request it reports on, under the client's own token.
                let g = msg.pointer("/params/progressToken").and_then(Value::as_u64);
                let to = g.and_then(|g| match self.routes.lock().get(&g) {
                    Some(Route::Session {
                        sid,
                        progress: Some(t),
                        ..
                    }) => Some((*sid, t.clone())),
                    _ => None,
                });
                if let Some((sid, token)) = to {
                    let mut msg = msg;
                    if let Some(p) = msg
                        .msg_mut()
                        .get_mut("params")
                        .and_then(Value::as_object_mut)
                    {
                        p.insert("progressToken".into(), token);
                    }
                    self.to_session(sid, msg).await;
                }
            }
            Kind::Request(method) => {
                // A request of the upstream's own (sampling, elicitation, roots): to the one
                // token whose call it serves, else refused.
                let method = method.to_string();
                let to = self.attribute();
                match (to, msg.id_text()) {
                    (Some(sid), Some(id)) => {
                        self.asks.lock().insert(id.as_ref().into(), sid);
                        self.to_session(sid, msg).await;
                    }
                    (_, id) => {
                        self.unattributed(&format!("{method} request"), &method);
                        if let Some(id) = id {
                            let e = jsonrpc::error_to(
                                &id,
                                jsonrpc::INTERNAL_ERROR,
                                "the gateway cannot tell which client this request is for \
                                 (several clients share this server: run it with \
                                 --upstream-per token)",
                            );
                            self.to_up.send(e).await;
                        }
                    }
                }
            }
            Kind::Notification(m) if m.ends_with("/list_changed") => self.broadcast(msg).await,
            Kind::Notification(m) => match self.attribute() {
                Some(sid) => self.to_session(sid, msg).await,
                None => self.unattributed(&format!("{m} notification"), m),
            },
            Kind::Other => tracing::warn!("upstream: dropped a message that is not JSON-RPC"),
        }
    }

    /// A request in the upstream's revision: a 2026-07-28 upstream needs the per-request
    /// `_meta` (added when the client, of an older revision, sent none); an older one gets no
    /// 2026-07-28 `_meta` keys nor the fields of toolgate's own approvals.
    fn in_upstream_revision(&self, msg: &mut Frame) {
        let ours = msg
            .pointer("/params/inputResponses")
            .and_then(|r| r.get(super::approval::APPROVAL_KEY))
            .is_some();
        let has_modern = msg
            .pointer("/params/_meta")
            .and_then(Value::as_object)
            .is_some_and(|m| m.keys().any(|k| k.starts_with("io.modelcontextprotocol/")));
        let modern_up = self.modern_upstream();
        if !ours && has_modern == modern_up {
            return;
        }
        let Some(p) = msg.msg_mut().as_object_mut() else {
            return;
        };
        let params = p.entry("params").or_insert_with(|| json!({}));
        let Some(params) = params.as_object_mut() else {
            return;
        };
        if ours {
            // toolgate's own approval: the upstream never sees it.
            params.remove("inputResponses");
            params.remove("requestState");
        }
        if modern_up && !has_modern {
            let m = params.entry("_meta").or_insert_with(|| json!({}));
            if let (Some(m), Value::Object(own)) = (m.as_object_mut(), own_meta()) {
                m.extend(own);
            }
        } else if !modern_up && let Some(m) = params.get_mut("_meta").and_then(Value::as_object_mut)
        {
            m.retain(|k, _| !k.starts_with("io.modelcontextprotocol/"));
        }
    }

    async fn broadcast(&self, msg: Frame) {
        let all: Vec<u64> = self.sessions.lock().keys().copied().collect();
        for sid in all {
            self.to_session(sid, msg.clone()).await;
        }
    }
}

/// The `_meta` of a 2026-07-28 request toolgate sends itself.
fn own_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "toolgate", "version": env!("CARGO_PKG_VERSION")},
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}
