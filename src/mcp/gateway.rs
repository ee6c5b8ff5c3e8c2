//! The relay: frames from the client and from the upstream server, intercepting `initialize`,
//! `tools/list`, `tools/call` and `notifications/cancelled`, passing everything else on as it
//! came.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::oneshot;
use tokio::task::AbortHandle;

use super::frame::Frame;
use super::jsonrpc::{self, Kind};
use super::pins::{PinCheck, definition_hash};
use super::{ProxyConfig, TOOL_CHANGED};
use crate::engine::{Run, RunContext, ToolOutcome};

/// A client request forwarded upstream, waiting for its response.
pub(crate) struct Pending {
    pub(crate) id: Value,
    pub(crate) what: PendingWhat,
}

/// What the pending request was.
pub(crate) enum PendingWhat {
    Initialize,
    ToolsList,
    ToolsCall { call_id: String, started: Instant },
    Other,
}

/// The cancellation of a `tools/call` waiting on its decision.
#[derive(Debug, Default)]
pub(crate) struct Cancel {
    pub(crate) cancelled: AtomicBool,
    pub(crate) notify: tokio::sync::Notify,
}

/// A `tools/call` waiting on its decision.
pub(crate) struct Deciding {
    id: Value,
    task: AbortHandle,
    cancel: Arc<Cancel>,
}

/// What toolgate knows of a listed tool.
#[derive(Debug, Clone)]
pub(crate) struct ToolInfo {
    pub(crate) tags: Vec<String>,
    pub(crate) hash: String,
    pub(crate) changed: bool,
}

/// The gateway's state, shared by the relay loop and the decision tasks.
pub(crate) struct Gateway {
    pub(crate) cfg: ProxyConfig,
    to_client: Mutex<Option<UnboundedSender<Frame>>>,
    to_upstream: Mutex<Option<UnboundedSender<Frame>>>,
    run: Mutex<Option<Run>>,
    pending: Mutex<HashMap<String, Pending>>,
    /// `tools/call` requests waiting on a decision, by id key.
    deciding: Mutex<HashMap<String, Deciding>>,
    /// toolgate's own requests to the client (elicitation), by id key.
    pub(crate) asks: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    pub(crate) next_ask: AtomicU64,
    pub(crate) elicitation: AtomicBool,
    pub(crate) catalog: Mutex<HashMap<String, ToolInfo>>,
    /// The review a paused run waits for.
    pub(crate) paused: Mutex<Option<String>>,
}

impl Gateway {
    pub(crate) fn new(
        cfg: ProxyConfig,
        to_client: UnboundedSender<Frame>,
        to_upstream: UnboundedSender<Frame>,
    ) -> Gateway {
        Gateway {
            cfg,
            to_client: Mutex::new(Some(to_client)),
            to_upstream: Mutex::new(Some(to_upstream)),
            run: Mutex::new(None),
            pending: Mutex::new(HashMap::new()),
            deciding: Mutex::new(HashMap::new()),
            asks: Mutex::new(HashMap::new()),
            next_ask: AtomicU64::new(1),
            elicitation: AtomicBool::new(false),
            catalog: Mutex::new(HashMap::new()),
            paused: Mutex::new(None),
        }
    }

    pub(crate) fn send_client(&self, v: impl Into<Frame>) {
        if let Some(tx) = self.to_client.lock().as_ref() {
            let _ = tx.send(v.into());
        }
    }

    pub(crate) fn send_upstream(&self, v: impl Into<Frame>) {
        if let Some(tx) = self.to_upstream.lock().as_ref() {
            let _ = tx.send(v.into());
        }
    }

    /// Stops the decision tasks and closes both outputs (their writers flush what is queued,
    /// then close the streams).
    pub(crate) fn close(&self) {
        for (_, d) in self.deciding.lock().drain() {
            d.task.abort();
        }
        self.to_upstream.lock().take();
        self.to_client.lock().take();
    }

    /// The session's run, started on first use (normally by the `initialize` response, so the
    /// agent id can name the server).
    pub(crate) fn run(&self, server_name: Option<&str>) -> Run {
        let mut g = self.run.lock();
        if let Some(r) = g.as_ref() {
            return r.clone();
        }
        let agent = self
            .cfg
            .agent_id
            .clone()
            .unwrap_or_else(|| format!("mcp:{}", server_name.unwrap_or("unknown")));
        let mut ctx = RunContext::new(uuid::Uuid::now_v7().to_string(), agent);
        ctx.enduser = self.cfg.enduser.clone();
        let run = self.cfg.engine.start_run(ctx);
        *g = Some(run.clone());
        run
    }

    /// Ends the run (if one started) with `status`.
    pub(crate) async fn end_run(&self, status: &str) {
        let run = self.run.lock().clone();
        if let Some(r) = run {
            r.end(status, None).await;
        }
    }

    pub(crate) fn add_pending(&self, id: &Value, what: PendingWhat) {
        self.pending.lock().insert(
            jsonrpc::id_key(id),
            Pending {
                id: id.clone(),
                what,
            },
        );
    }

    /// A frame from the client.
    pub(crate) async fn on_client(self: &Arc<Self>, msg: Frame) {
        match jsonrpc::kind(&msg) {
            Kind::Request("tools/call") => self.spawn_decision(msg),
            Kind::Request(method) => {
                let what = match method {
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
                if let Some(id) = msg.get("id") {
                    self.add_pending(id, what);
                }
                self.send_upstream(msg);
            }
            Kind::Notification("notifications/cancelled") => {
                if let Some(id) = msg.pointer("/params/requestId") {
                    self.cancel(id).await;
                }
                self.send_upstream(msg);
            }
            Kind::Response => {
                let key = msg.get("id").map(jsonrpc::id_key).unwrap_or_default();
                let ask = self.asks.lock().remove(&key);
                let ours = || {
                    msg.get("id")
                        .and_then(Value::as_str)
                        .is_some_and(|i| i.starts_with(super::calls::ASK_PREFIX))
                };
                match ask {
                    Some(tx) => {
                        let _ = tx.send(msg.into_value());
                    }
                    // A late answer to a question toolgate no longer waits for.
                    None if ours() => tracing::debug!("dropped a late answer: {}", *msg),
                    None => self.send_upstream(msg),
                }
            }
            Kind::Notification(_) | Kind::Other => self.send_upstream(msg),
        }
    }

    fn spawn_decision(self: &Arc<Self>, msg: Frame) {
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let key = jsonrpc::id_key(&id);
        let gw = self.clone();
        let key2 = key.clone();
        let cancel = Arc::new(Cancel::default());
        let cancel2 = cancel.clone();
        // Hold the map while spawning, so the task's own removal comes after this insert.
        let mut deciding = self.deciding.lock();
        let task = tokio::spawn(async move {
            gw.decide_call(msg, &cancel2).await;
            gw.deciding.lock().remove(&key2);
        });
        deciding.insert(
            key,
            Deciding {
                id,
                task: task.abort_handle(),
                cancel,
            },
        );
    }

    /// Forwards an allowed call upstream, unless it was cancelled meanwhile (then returns
    /// false). Checked under the same lock `cancel` takes, so a cancellation is never missed.
    pub(crate) fn forward_call(
        &self,
        id: &Value,
        call_id: String,
        msg: Frame,
        cancel: &Cancel,
    ) -> bool {
        let _deciding = self.deciding.lock();
        if cancel.cancelled.load(Ordering::Acquire) {
            return false;
        }
        self.add_pending(
            id,
            PendingWhat::ToolsCall {
                call_id,
                started: Instant::now(),
            },
        );
        self.send_upstream(msg);
        true
    }

    /// `notifications/cancelled` for `id`: a call waiting on a decision stops waiting (and is
    /// recorded as cancelled if it was allowed); a call forwarded upstream is recorded as an
    /// error outcome "cancelled".
    async fn cancel(&self, id: &Value) {
        let key = jsonrpc::id_key(id);
        let p = {
            let deciding = self.deciding.lock();
            if let Some(d) = deciding.get(&key) {
                d.cancel.cancelled.store(true, Ordering::Release);
                d.cancel.notify.notify_one();
            }
            self.pending.lock().remove(&key)
        };
        if let Some(Pending {
            what: PendingWhat::ToolsCall { call_id, started },
            ..
        }) = p
        {
            let run = self.run(None);
            run.after_tool(&call_id, ToolOutcome::err("cancelled", started.elapsed()))
                .await;
        }
    }

    /// A frame from the upstream server.
    pub(crate) async fn on_upstream(&self, mut msg: Frame) {
        if jsonrpc::kind(&msg) != Kind::Response {
            self.send_client(msg);
            return;
        }
        let key = msg.get("id").map(jsonrpc::id_key).unwrap_or_default();
        let p = self.pending.lock().remove(&key);
        match p.map(|p| p.what) {
            Some(PendingWhat::Initialize) => {
                let name = msg
                    .pointer("/result/serverInfo/name")
                    .and_then(Value::as_str);
                self.run(name);
            }
            Some(PendingWhat::ToolsList) => self.filter_tools(&mut msg),
            Some(PendingWhat::ToolsCall { call_id, started }) => {
                let (output, error) = jsonrpc::outcome_of(&msg);
                let outcome = ToolOutcome {
                    output,
                    error,
                    duration: started.elapsed(),
                };
                let run = self.run(None);
                if let Some(d) = run.after_tool(&call_id, outcome).await
                    && !d.is_allowed()
                {
                    let id = msg.get("id").cloned().unwrap_or(Value::Null);
                    msg = jsonrpc::result(&id, jsonrpc::blocked_by(&d, None)).into();
                }
            }
            Some(PendingWhat::Other) | None => {}
        }
        self.send_client(msg);
    }

    /// Drops hidden tools from a `tools/list` result (the only change to it: without hidden
    /// tools it goes on as it came), records tags and definition hashes, and checks the pins.
    fn filter_tools(&self, msg: &mut Frame) {
        let file = &self.cfg.tools;
        let shown = |t: &Value| {
            t.get("name")
                .and_then(Value::as_str)
                .is_none_or(|n| !file.is_hidden(n))
        };
        let Some(tools) = msg.pointer("/result/tools").and_then(Value::as_array) else {
            return;
        };
        if !tools.iter().all(shown)
            && let Some(tools) = msg
                .msg_mut()
                .pointer_mut("/result/tools")
                .and_then(Value::as_array_mut)
        {
            tools.retain(shown);
        }
        let Some(tools) = msg.pointer("/result/tools").and_then(Value::as_array) else {
            return;
        };
        let listed: Vec<(String, String, Vec<String>)> = tools
            .iter()
            .filter_map(|t| {
                let name = t.get("name")?.as_str()?.to_string();
                let tags = file.tags(&name, t.get("annotations"));
                Some((name, definition_hash(t), tags))
            })
            .collect();
        let checks = match &self.cfg.pins {
            None => vec![PinCheck::Ok; listed.len()],
            Some(pins) => {
                let hashes: Vec<(String, String)> = listed
                    .iter()
                    .map(|(n, h, _)| (n.clone(), h.clone()))
                    .collect();
                pins.observe(&hashes).unwrap_or_else(|e| {
                    // Fail closed: a pin file we cannot read pins nothing, so block.
                    tracing::error!("{e}");
                    vec![PinCheck::Changed { new: false }; listed.len()]
                })
            }
        };
        let mut catalog = self.catalog.lock();
        for ((name, hash, tags), check) in listed.into_iter().zip(checks) {
            let changed = matches!(check, PinCheck::Changed { .. });
            if check == (PinCheck::Changed { new: true }) {
                tracing::warn!(
                    "tool {name}: its definition changed; calls are blocked with {TOOL_CHANGED}"
                );
                self.run(None).record_tool_changed(&name, &hash, None);
            }
            catalog.insert(
                name,
                ToolInfo {
                    tags,
                    hash,
                    changed,
                },
            );
        }
    }

    /// The upstream server is gone: every request waiting on it (or on a decision) gets
    /// JSON-RPC −32603, and calls forwarded upstream are recorded as failed.
    pub(crate) async fn upstream_gone(&self) {
        let deciding: Vec<Deciding> = self.deciding.lock().drain().map(|(_, v)| v).collect();
        for d in deciding {
            d.task.abort();
            self.send_client(jsonrpc::error(
                &d.id,
                jsonrpc::INTERNAL_ERROR,
                "upstream server exited",
            ));
        }
        let pending: Vec<Pending> = self.pending.lock().drain().map(|(_, v)| v).collect();
        for p in pending {
            if let PendingWhat::ToolsCall { call_id, started } = &p.what {
                let run = self.run(None);
                run.after_tool(
                    call_id,
                    ToolOutcome::err("upstream server exited", started.elapsed()),
                )
                .await;
            }
            self.send_client(jsonrpc::error(
                &p.id,
                jsonrpc::INTERNAL_ERROR,
                "upstream server exited",
            ));
        }
    }
}
