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
use tokio::task::JoinHandle;

use super::ProxyConfig;
use super::frame::Frame;
use super::jsonrpc;
use super::transport::Sender;
use crate::engine::{Run, RunContext, ToolOutcome};

mod inbound;

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

/// How long a client that left waits for its calls still being decided to record how they
/// ended ("client gone"); a decision task still running then is stopped.
const DECIDING_GRACE: Duration = Duration::from_secs(2);

/// The cancellation of a `tools/call` waiting on its decision.
#[derive(Debug, Default)]
pub(crate) struct Cancel {
    pub(crate) notify: tokio::sync::Notify,
    /// Why, once cancelled (set: cancelled): recorded as the call's error outcome.
    why: std::sync::OnceLock<&'static str>,
}

impl Cancel {
    /// Cancels (the first reason given stands) and wakes the task waiting on it.
    pub(crate) fn cancel(&self, why: &'static str) {
        let _ = self.why.set(why);
        self.notify.notify_one();
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.why.get().is_some()
    }

    /// The reason given to [`cancel`](Self::cancel) ("cancelled" if none was).
    pub(crate) fn why(&self) -> &'static str {
        self.why.get().copied().unwrap_or("cancelled")
    }
}

/// Where a client request in flight is.
pub(crate) enum InFlight {
    /// A `tools/call` waiting on its decision.
    Deciding {
        /// The client's id (JSON text).
        id: Box<str>,
        task: JoinHandle<()>,
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
        if cancel.is_some_and(Cancel::is_cancelled) {
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

    /// The client is gone: calls in flight are recorded as error outcomes "client gone" (a
    /// call still being decided is cancelled and given [`DECIDING_GRACE`] to record that
    /// itself, then stopped). Returns whether any request was in flight.
    pub(crate) async fn client_gone(&self) -> bool {
        const GONE: &str = "client gone";
        // Calls being decided are cancelled while the map is held: `forward` checks the
        // cancellation under the same lock, so none can be forwarded after this drain and be
        // missed by it (its allowed decision left without an outcome).
        let inflight: Vec<InFlight> = {
            let mut map = self.inflight.lock();
            let drained: Vec<InFlight> = map.drain().map(|(_, v)| v).collect();
            for f in &drained {
                if let InFlight::Deciding { cancel, .. } = f {
                    cancel.cancel(GONE);
                }
            }
            drained
        };
        let any = !inflight.is_empty();
        let mut deciding = Vec::new();
        for f in inflight {
            match f {
                InFlight::Deciding { task, .. } => deciding.push(task),
                InFlight::Forwarded(up) => {
                    let p = self.pending.lock().remove(&up);
                    if let Some(Pending {
                        what: PendingWhat::ToolsCall { call_id, started },
                        ..
                    }) = p
                    {
                        self.run(None)
                            .await
                            .after_tool(&call_id, ToolOutcome::err(GONE, started.elapsed()))
                            .await;
                    }
                }
            }
        }
        let deadline = tokio::time::Instant::now() + DECIDING_GRACE;
        for mut task in deciding {
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                tracing::warn!("client gone: a call still being decided was stopped");
                task.abort();
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
