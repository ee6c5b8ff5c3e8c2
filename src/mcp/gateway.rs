//! The relay's state and the client side: every request the client sends is forwarded under an
//! id the gateway issues (so no spelling of an id can alias another, and the upstream never
//! sees the client's ids), every `tools/call` is decided or refused, and an answer from the
//! client is only taken for a request the gateway sent it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::AbortHandle;

use super::ProxyConfig;
use super::frame::Frame;
use super::jsonrpc::{self, Kind};
use super::transport::{Incoming, Sender};
use crate::engine::{Run, RunContext, ToolOutcome};

/// The longest tool name toolgate decides (longer: JSON-RPC −32602).
pub(crate) const MAX_NAME_BYTES: usize = 256;

/// Client requests in flight at once (more: JSON-RPC −32603); also the most upstream requests
/// waiting for the client's answer (more: answered with −32603 at once).
pub(crate) const MAX_IN_FLIGHT: usize = 4096;

/// The error an upstream's request gets when it cannot reach the client.
#[cfg(feature = "http")]
pub(crate) const UNDELIVERABLE: &str = "the client cannot be reached: no open stream carries \
     this request (a 2026-07-28 client, a closed GET stream, or one cut because the client \
     did not read it)";

/// A client request, as the gateway answers it.
#[derive(Debug, Clone)]
pub(crate) struct ClientReq {
    /// The client's id as it wrote it (JSON text).
    pub(crate) id: Box<str>,
    /// The id's canonical key (numbers by value).
    pub(crate) key: String,
}

/// A request forwarded upstream, by the gateway's id, waiting for its response.
pub(crate) struct Pending {
    /// The client request it forwards (`None`: the gateway's own request).
    pub(crate) client: Option<ClientReq>,
    pub(crate) what: PendingWhat,
}

/// What the pending request was.
pub(crate) enum PendingWhat {
    Initialize,
    ToolsList,
    ToolsCall {
        call_id: String,
        started: Instant,
    },
    /// The gateway's own request; the response goes to the waiting task.
    Own(oneshot::Sender<Frame>),
    Other,
}

/// The cancellation of a `tools/call` waiting on its decision.
#[derive(Debug, Default)]
pub(crate) struct Cancel {
    pub(crate) cancelled: AtomicBool,
    pub(crate) notify: tokio::sync::Notify,
}

/// Where a client request in flight is.
pub(crate) enum InFlight {
    /// A `tools/call` waiting on its decision.
    Deciding {
        /// The client's id (JSON text).
        id: Box<str>,
        task: AbortHandle,
        cancel: Arc<Cancel>,
    },
    /// Forwarded upstream under this gateway id.
    Forwarded(u64),
}

/// A request the gateway sent the client, by its (unguessable) id.
pub(crate) enum Outbound {
    /// The gateway's own question (elicitation).
    Ask(oneshot::Sender<Value>),
    /// The upstream's request, under the upstream's id (JSON text).
    Upstream(Box<str>),
}

/// What toolgate knows of a listed tool.
#[derive(Debug, Clone)]
pub(crate) struct ToolInfo {
    pub(crate) name: String,
    pub(crate) tags: Vec<String>,
    pub(crate) hash: String,
    pub(crate) changed: bool,
}

/// The tools the upstream lists, looked up as policies match names (case-insensitively).
#[derive(Debug, Default)]
pub(crate) struct Catalog {
    pub(crate) by_lc: HashMap<String, Vec<ToolInfo>>,
    /// A complete listing is known (and no `list_changed` came since).
    pub(crate) fresh: bool,
}

impl Catalog {
    /// The tool a call names: the exact name, else the one name equal but for case.
    pub(crate) fn get(&self, name: &str) -> Option<&ToolInfo> {
        let v = self.by_lc.get(&name.to_lowercase())?;
        v.iter().find(|t| t.name == name).or_else(|| v.first())
    }

    pub(crate) fn get_mut(&mut self, name: &str) -> Option<&mut ToolInfo> {
        let v = self.by_lc.get_mut(&name.to_lowercase())?;
        let i = v.iter().position(|t| t.name == name).unwrap_or(0);
        v.get_mut(i)
    }

    pub(crate) fn insert(&mut self, t: ToolInfo) {
        let v = self.by_lc.entry(t.name.to_lowercase()).or_default();
        v.retain(|o| o.name != t.name);
        v.push(t);
    }
}

/// The session's run: not started, being started (the watch says when), or started.
enum RunSlot {
    Empty,
    Starting(tokio::sync::watch::Receiver<Option<Run>>),
    Ready(Run),
}

/// The gateway's state, shared by the relay loops and the decision tasks.
pub(crate) struct Gateway {
    pub(crate) cfg: ProxyConfig,
    to_client: Mutex<Option<Sender<Frame>>>,
    to_upstream: Mutex<Option<Sender<Frame>>>,
    run: Mutex<RunSlot>,
    next_up: AtomicU64,
    /// Requests forwarded upstream, by gateway id.
    pub(crate) pending: Mutex<HashMap<u64, Pending>>,
    /// Client requests in flight, by id key.
    pub(crate) inflight: Mutex<HashMap<String, InFlight>>,
    /// Requests to the client, by gateway id.
    pub(crate) outbound: Mutex<HashMap<String, Outbound>>,
    pub(crate) elicitation: AtomicBool,
    pub(crate) catalog: Mutex<Catalog>,
    /// One listing of the upstream's tools by the gateway at a time.
    pub(crate) listing: tokio::sync::Mutex<()>,
    /// The review a paused run waits for.
    pub(crate) paused: Mutex<Option<String>>,
}

/// The canonical key of a client id: strings by value, numbers by numeric value (`1`, `1.0`,
/// `1e0` are one id). Other ids (null, objects, ...) are not valid.
pub(crate) fn id_key(id: &Value) -> Option<String> {
    match id {
        Value::String(s) => Some(format!("s{s}")),
        Value::Number(n) => Some(match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => format!("n{i}"),
            (_, Some(u), _) => format!("n{u}"),
            (_, _, Some(f)) if f.fract() == 0.0 && f.abs() < 9.2e18 => format!("n{}", f as i64),
            (_, _, Some(f)) => format!("n{f:e}"),
            _ => format!("n{n}"),
        }),
        _ => None,
    }
}

/// An unguessable id for a request to the client.
fn fresh_client_id() -> String {
    format!("tg-{:032x}", rand::random::<u128>())
}

impl Gateway {
    pub(crate) fn new(
        cfg: ProxyConfig,
        to_client: Sender<Frame>,
        to_upstream: Sender<Frame>,
    ) -> Gateway {
        Gateway {
            cfg,
            to_client: Mutex::new(Some(to_client)),
            to_upstream: Mutex::new(Some(to_upstream)),
            run: Mutex::new(RunSlot::Empty),
            next_up: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
            inflight: Mutex::new(HashMap::new()),
            outbound: Mutex::new(HashMap::new()),
            elicitation: AtomicBool::new(false),
            catalog: Mutex::new(Catalog::default()),
            listing: tokio::sync::Mutex::new(()),
            paused: Mutex::new(None),
        }
    }

    /// Sends to the client once its queue has room.
    pub(crate) async fn send_client(&self, f: impl Into<Frame>) {
        let tx = self.to_client.lock().clone();
        if let Some(tx) = tx {
            tx.send(f.into()).await;
        }
    }

    /// Sends upstream once its queue has room.
    pub(crate) async fn send_upstream(&self, f: impl Into<Frame>) {
        let tx = self.to_upstream.lock().clone();
        if let Some(tx) = tx {
            tx.send(f.into()).await;
        }
    }

    /// Answers a client request (and forgets it).
    pub(crate) async fn answer(&self, req: &ClientReq, f: Frame) {
        self.inflight.lock().remove(&req.key);
        self.send_client(f).await;
    }

    /// Answers a client request with a JSON-RPC error.
    pub(crate) async fn answer_error(&self, req: &ClientReq, code: i64, msg: &str) {
        self.answer(req, jsonrpc::error_to(&req.id, code, msg))
            .await;
    }

    /// Stops the decision tasks and closes both outputs (their writers flush what is queued,
    /// then close the streams).
    pub(crate) fn close(&self) {
        for (_, d) in self.inflight.lock().drain() {
            if let InFlight::Deciding { task, .. } = d {
                task.abort();
            }
        }
        self.to_upstream.lock().take();
        self.to_client.lock().take();
    }

    /// The session's run, started on first use (normally by the `initialize` response, so the
    /// agent id can name the server). Starting a run may wait on the state store (a shared
    /// run's chain is claimed there): it runs on a blocking thread, with no lock held, and
    /// concurrent callers wait for the one start (design §16: nothing blocks a runtime worker,
    /// no lock is held across a store call).
    pub(crate) async fn run(&self, server_name: Option<&str>) -> Run {
        loop {
            let step = {
                let mut g = self.run.lock();
                match &*g {
                    RunSlot::Ready(r) => return r.clone(),
                    RunSlot::Starting(rx) => Err(rx.clone()),
                    RunSlot::Empty => {
                        let (tx, rx) = tokio::sync::watch::channel(None);
                        *g = RunSlot::Starting(rx);
                        Ok(tx)
                    }
                }
            };
            let mut wait = match step {
                Ok(tx) => return self.start_run(server_name, tx).await,
                Err(rx) => rx,
            };
            // The starter sets the slot before it signals; a starter that vanished (its task
            // aborted) leaves `Starting`: take over.
            if wait.wait_for(Option::is_some).await.is_err() {
                let mut g = self.run.lock();
                if matches!(&*g, RunSlot::Starting(rx) if rx.same_channel(&wait)) {
                    *g = RunSlot::Empty;
                }
            }
        }
    }

    async fn start_run(
        &self,
        server_name: Option<&str>,
        done: tokio::sync::watch::Sender<Option<Run>>,
    ) -> Run {
        let agent = self
            .cfg
            .agent_id
            .clone()
            .unwrap_or_else(|| format!("mcp:{}", server_name.unwrap_or("unknown")));
        let run_id = self
            .cfg
            .run_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let mut ctx = RunContext::new(run_id, agent);
        ctx.enduser = self.cfg.enduser.clone();
        ctx.agent_tags = self.cfg.agent_tags.clone();
        let engine = self.cfg.engine.clone();
        let started = tokio::task::spawn_blocking({
            let ctx = ctx.clone();
            move || engine.start_run(ctx)
        })
        .await;
        let run = match started {
            Ok(r) => r,
            // The blocking pool is shutting down: start it here (the runtime is ending).
            Err(_) => self.cfg.engine.start_run(ctx),
        };
        *self.run.lock() = RunSlot::Ready(run.clone());
        let _ = done.send(Some(run.clone()));
        run
    }

    /// The run, when one has started.
    pub(crate) fn started_run(&self) -> Option<Run> {
        match &*self.run.lock() {
            RunSlot::Ready(r) => Some(r.clone()),
            _ => None,
        }
    }

    /// Lets go of the run without ending it (design §8: another process, or this gateway's
    /// next use of it, continues it and its audit chain); nothing when none is held. The
    /// audit trail is not flushed for it (see [`Run::hand_over`]).
    #[cfg(feature = "http")]
    pub(crate) async fn leave_run(&self) {
        let run = {
            let mut g = self.run.lock();
            match std::mem::replace(&mut *g, RunSlot::Empty) {
                RunSlot::Ready(r) => Some(r),
                other => {
                    *g = other;
                    None
                }
            }
        };
        if let Some(r) = run {
            r.hand_over().await;
        }
    }

    /// Ends the run with `status`, taking it up first (continuing it) when this gateway holds
    /// none — a run it left, ended here for every process.
    #[cfg(feature = "http")]
    pub(crate) async fn end_run_anyway(&self, status: &str) {
        self.run(None).await;
        self.end_run(status).await;
    }

    /// Ends the run (if one started) with `status`.
    pub(crate) async fn end_run(&self, status: &str) {
        if let Some(r) = self.started_run() {
            r.end(status, None).await;
        }
    }

    /// Forwards `msg` upstream under a fresh gateway id; `what` is kept for its response. With
    /// `cancel`, checked under the same lock `cancel` takes, so a cancellation is never
    /// missed (then nothing is sent and false is returned).
    pub(crate) async fn forward(
        &self,
        msg: Frame,
        client: Option<ClientReq>,
        what: PendingWhat,
        cancel: Option<&Cancel>,
    ) -> bool {
        let tx = self.to_upstream.lock().clone();
        let Some(tx) = tx else { return false };
        let room = tx.reserve(msg.weight()).await;
        let up = self.next_up.fetch_add(1, Ordering::Relaxed);
        let mut inflight = self.inflight.lock();
        if cancel.is_some_and(|c| c.cancelled.load(Ordering::Acquire)) {
            return false;
        }
        if let Some(c) = &client {
            inflight.insert(c.key.clone(), InFlight::Forwarded(up));
        }
        self.pending.lock().insert(up, Pending { client, what });
        tx.send_in(room, msg.with_id(&up.to_string()))
    }

    /// A request for the client that could not be delivered (no stream open to carry it, or
    /// its stream was cut): the upstream's request gets a JSON-RPC error at once, the gateway's
    /// own question counts as not approved. Never left waiting.
    #[cfg(feature = "http")]
    pub(crate) async fn undeliverable(&self, id: &str) {
        let out = self.outbound.lock().remove(id);
        match out {
            Some(Outbound::Upstream(orig)) => {
                tracing::warn!(
                    "client: an upstream request could not be delivered (no open stream); \
                     answered with an error"
                );
                let e = jsonrpc::error_to(&orig, jsonrpc::INTERNAL_ERROR, UNDELIVERABLE);
                self.send_upstream(e).await;
            }
            Some(Outbound::Ask(tx)) => drop(tx),
            None => {}
        }
    }

    /// Sends the client a request of the gateway's own (an unguessable id); its answer comes
    /// on the returned channel.
    pub(crate) async fn ask(&self, mut msg: Value) -> (String, oneshot::Receiver<Value>) {
        let id = fresh_client_id();
        let (tx, rx) = oneshot::channel();
        self.outbound.lock().insert(id.clone(), Outbound::Ask(tx));
        msg["id"] = Value::String(id.clone());
        self.send_client(msg).await;
        (id, rx)
    }

    /// What comes from the client.
    pub(crate) async fn on_client(self: &Arc<Self>, inc: Incoming) {
        let msg = match inc {
            Incoming::Frame(f) => f,
            Incoming::NotJson => {
                return self
                    .send_client(jsonrpc::error_to(
                        "null",
                        jsonrpc::PARSE_ERROR,
                        "Parse error",
                    ))
                    .await;
            }
            Incoming::TooLarge { id } => {
                let id = id
                    .filter(|t| {
                        serde_json::from_str::<Value>(t).is_ok_and(|v| id_key(&v).is_some())
                    })
                    .unwrap_or_else(|| "null".into());
                let why = self.too_large();
                if let Ok(v) = serde_json::from_str::<Value>(&id)
                    && let Some(key) = id_key(&v)
                {
                    // An answer to a request toolgate sent: that request gets no answer (a
                    // question of the gateway's own counts as not approved).
                    if let Value::String(s) = &v
                        && self.outbound.lock().remove(s).is_some()
                    {
                        return;
                    }
                    if self.inflight.lock().contains_key(&key) {
                        return;
                    }
                }
                return self
                    .send_client(jsonrpc::error_to(&id, jsonrpc::INTERNAL_ERROR, &why))
                    .await;
            }
        };
        let invalid = |why: &str| jsonrpc::error_to("null", jsonrpc::INVALID_REQUEST, why);
        if msg.is_array() {
            return self
                .send_client(invalid("JSON-RPC batches are not supported"))
                .await;
        }
        if !msg.is_object() || msg.dup_keys() {
            return self
                .send_client(invalid("not a JSON-RPC message (or a member named twice)"))
                .await;
        }
        match jsonrpc::kind(&msg) {
            Kind::Request(method) => {
                let method = method.to_string();
                self.on_client_request(msg, &method).await
            }
            Kind::Notification("tools/call") => {
                tracing::warn!("client: dropped a tools/call without an id (a notification)");
            }
            Kind::Notification("notifications/cancelled") => self.cancel_from_client(msg).await,
            Kind::Notification(_) => self.send_upstream(msg).await,
            Kind::Response => {
                let id = msg.get("id").and_then(Value::as_str).unwrap_or_default();
                let out = self.outbound.lock().remove(id);
                match out {
                    Some(Outbound::Ask(tx)) => {
                        let _ = tx.send(msg.into_value());
                    }
                    Some(Outbound::Upstream(orig)) => self.send_upstream(msg.with_id(&orig)).await,
                    None => tracing::debug!("client: dropped an answer to no request of ours"),
                }
            }
            Kind::Other => self.send_client(invalid("not a JSON-RPC request")).await,
        }
    }

    /// The answer to a message over `--max-message-bytes`.
    pub(crate) fn too_large(&self) -> String {
        format!(
            "the message exceeds the gateway's limit of {} bytes (--max-message-bytes)",
            self.cfg.max_message_bytes
        )
    }

    async fn on_client_request(self: &Arc<Self>, msg: Frame, method: &str) {
        let id_value = msg.get("id").cloned().unwrap_or(Value::Null);
        let (Some(key), Some(id)) = (id_key(&id_value), msg.id_text()) else {
            return self
                .send_client(jsonrpc::error_to(
                    "null",
                    jsonrpc::INVALID_REQUEST,
                    "a request id must be a string or a number",
                ))
                .await;
        };
        let req = ClientReq { id: id.into(), key };
        let refusal = {
            let inflight = self.inflight.lock();
            if inflight.contains_key(&req.key) {
                Some((
                    jsonrpc::INVALID_REQUEST,
                    "a request with this id is in flight; ids must be unique".to_string(),
                ))
            } else if inflight.len() >= MAX_IN_FLIGHT {
                Some((
                    jsonrpc::INTERNAL_ERROR,
                    format!("too many requests in flight (limit {MAX_IN_FLIGHT})"),
                ))
            } else {
                None
            }
        };
        if let Some((code, why)) = refusal {
            // Not `answer`: the request in flight keeps its entry.
            return self
                .send_client(jsonrpc::error_to(&req.id, code, &why))
                .await;
        }
        let what = match method {
            "tools/call" => return self.spawn_decision(msg, req).await,
            "initialize" => {
                let declared = msg
                    .pointer("/params/capabilities/elicitation")
                    .is_some_and(|c| !c.is_null());
                self.elicitation.store(declared, Ordering::Release);
                PendingWhat::Initialize
            }
            "tools/list" => PendingWhat::ToolsList,
            _ => PendingWhat::Other,
        };
        self.forward(msg, Some(req), what, None).await;
    }

    async fn spawn_decision(self: &Arc<Self>, msg: Frame, req: ClientReq) {
        let name = match msg.pointer("/params/name") {
            Some(Value::String(s)) if s.len() <= MAX_NAME_BYTES => s.clone(),
            Some(Value::String(_)) => {
                return self
                    .send_client(jsonrpc::error_to(
                        &req.id,
                        jsonrpc::INVALID_PARAMS,
                        &format!("tool name too long (over {MAX_NAME_BYTES} bytes)"),
                    ))
                    .await;
            }
            _ => {
                return self
                    .send_client(jsonrpc::error_to(
                        &req.id,
                        jsonrpc::INVALID_PARAMS,
                        "params.name must be a string (the tool's name)",
                    ))
                    .await;
            }
        };
        let cancel = Arc::new(Cancel::default());
        let gw = self.clone();
        let cancel2 = cancel.clone();
        let key = req.key.clone();
        let id_text = req.id.clone();
        // Hold the map while spawning, so the task's own removal comes after this insert.
        let mut inflight = self.inflight.lock();
        let task = tokio::spawn(async move {
            let key = req.key.clone();
            gw.decide_call(msg, name, req, &cancel2).await;
            // Not forwarded (answered, or cancelled): no longer in flight.
            let mut inflight = gw.inflight.lock();
            if matches!(inflight.get(&key), Some(InFlight::Deciding { .. })) {
                inflight.remove(&key);
            }
        });
        inflight.insert(
            key,
            InFlight::Deciding {
                id: id_text,
                task: task.abort_handle(),
                cancel,
            },
        );
    }

    /// `notifications/cancelled` from the client: a call waiting on a decision stops waiting;
    /// a request forwarded upstream is forgotten (a late response is dropped), the upstream
    /// gets the cancellation under the gateway's id, and a `tools/call` is recorded as an error
    /// outcome "cancelled".
    async fn cancel_from_client(&self, mut msg: Frame) {
        let Some(key) = msg.pointer("/params/requestId").and_then(id_key) else {
            return;
        };
        let up = {
            let mut inflight = self.inflight.lock();
            match inflight.get(&key) {
                Some(InFlight::Deciding { cancel, .. }) => {
                    cancel.cancelled.store(true, Ordering::Release);
                    cancel.notify.notify_one();
                    None
                }
                Some(InFlight::Forwarded(up)) => {
                    let up = *up;
                    inflight.remove(&key);
                    Some(up)
                }
                None => None,
            }
        };
        let Some(up) = up else { return };
        let p = self.pending.lock().remove(&up);
        if let Some(params) = msg
            .msg_mut()
            .get_mut("params")
            .and_then(Value::as_object_mut)
        {
            params.insert("requestId".into(), Value::from(up));
        }
        self.send_upstream(msg).await;
        if let Some(Pending {
            what: PendingWhat::ToolsCall { call_id, started },
            ..
        }) = p
        {
            self.run(None)
                .await
                .after_tool(&call_id, ToolOutcome::err("cancelled", started.elapsed()))
                .await;
        }
    }

    /// The client is gone: calls in flight are recorded as error outcomes "client gone".
    /// Returns whether any request was in flight.
    pub(crate) async fn client_gone(&self) -> bool {
        let inflight: Vec<InFlight> = self.inflight.lock().drain().map(|(_, v)| v).collect();
        let any = !inflight.is_empty();
        for f in inflight {
            match f {
                InFlight::Deciding { task, .. } => task.abort(),
                InFlight::Forwarded(up) => {
                    let p = self.pending.lock().remove(&up);
                    if let Some(Pending {
                        what: PendingWhat::ToolsCall { call_id, started },
                        ..
                    }) = p
                    {
                        self.run(None)
                            .await
                            .after_tool(
                                &call_id,
                                ToolOutcome::err("client gone", started.elapsed()),
                            )
                            .await;
                    }
                }
            }
        }
        any
    }

    /// The upstream server is gone: every request waiting on it (or on a decision) gets
    /// JSON-RPC −32603, and calls forwarded upstream are recorded as failed.
    pub(crate) async fn upstream_gone(&self) {
        const GONE: &str = "upstream server exited";
        let deciding: Vec<Box<str>> = {
            let mut inflight = self.inflight.lock();
            let keys: Vec<String> = inflight
                .iter()
                .filter(|(_, v)| matches!(v, InFlight::Deciding { .. }))
                .map(|(k, _)| k.clone())
                .collect();
            keys.iter()
                .filter_map(|k| match inflight.remove(k) {
                    Some(InFlight::Deciding { id, task, .. }) => {
                        task.abort();
                        Some(id)
                    }
                    _ => None,
                })
                .collect()
        };
        for id in deciding {
            self.send_client(jsonrpc::error_to(&id, jsonrpc::INTERNAL_ERROR, GONE))
                .await;
        }
        let pending: Vec<Pending> = self.pending.lock().drain().map(|(_, v)| v).collect();
        for p in pending {
            if let PendingWhat::ToolsCall { call_id, started } = &p.what {
                self.run(None)
                    .await
                    .after_tool(call_id, ToolOutcome::err(GONE, started.elapsed()))
                    .await;
            }
            if let Some(c) = &p.client {
                self.answer_error(c, jsonrpc::INTERNAL_ERROR, GONE).await;
            }
        }
    }
}

/// How long the gateway waits for its own listing of the upstream's tools.
pub(crate) const LIST_TIMEOUT: Duration = Duration::from_secs(60);
