//! The upstream side of the relay: responses are matched to what the gateway forwarded (by its
//! own ids; anything else is dropped), `tools/call` results are decided, the upstream's own
//! requests reach the client under unguessable ids, and the tool catalog is kept.

use serde_json::{Value, json};

use super::TOOL_CHANGED;
use super::frame::Frame;
use super::gateway::{
    Catalog, Gateway, LIST_TIMEOUT, MAX_IN_FLIGHT, Outbound, Pending, PendingWhat, ToolInfo,
};
use super::jsonrpc::{self, Kind};
use super::pins::{PinCheck, definition_hash};
use super::transport::Incoming;
use crate::engine::ToolOutcome;

/// The gateway id a response carries (integral numbers only).
fn gateway_id(v: Option<&Value>) -> Option<u64> {
    let v = v?;
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 9.0e15)
            .map(|f| f as u64)
    })
}

impl Gateway {
    /// What comes from the upstream server.
    pub(crate) async fn on_upstream(&self, inc: Incoming) {
        let msg = match inc {
            Incoming::Frame(f) => f,
            Incoming::NotJson => return,
            Incoming::TooLarge { id } => {
                let up = id
                    .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                    .and_then(|v| gateway_id(Some(&v)));
                let p = up.and_then(|up| self.pending.lock().remove(&up));
                if let Some(p) = p {
                    let why = self.too_large();
                    if let PendingWhat::ToolsCall { call_id, started } = &p.what {
                        self.run(None)
                            .await
                            .after_tool(call_id, ToolOutcome::err(why.clone(), started.elapsed()))
                            .await;
                    }
                    if let Some(c) = &p.client {
                        self.answer_error(c, jsonrpc::INTERNAL_ERROR, &why).await;
                    }
                }
                return;
            }
        };
        // Only the top level: a tool's result that repeats a key deep inside is relayed as it
        // came (the client parses it as it would without toolgate).
        if !msg.is_object() || msg.dup_top_keys() {
            tracing::warn!("upstream: dropped a message that is not one JSON-RPC object");
            return;
        }
        match jsonrpc::kind(&msg) {
            Kind::Response => self.on_upstream_response(msg).await,
            Kind::Request(_) => {
                let Some(orig) = msg.id_text().map(|t| t.into_owned()) else {
                    return;
                };
                let id = format!("tg-{:032x}", rand::random::<u128>());
                let full = {
                    let mut out = self.outbound.lock();
                    let full = out.len() >= MAX_IN_FLIGHT;
                    if !full {
                        out.insert(id.clone(), Outbound::Upstream(orig.clone().into()));
                    }
                    full
                };
                if full {
                    tracing::warn!(
                        "upstream: over {MAX_IN_FLIGHT} requests wait for the client: refused"
                    );
                    let why = format!(
                        "too many requests wait for the client's answer (limit {MAX_IN_FLIGHT})"
                    );
                    let e = jsonrpc::error_to(&orig, jsonrpc::INTERNAL_ERROR, &why);
                    return self.send_upstream(e).await;
                }
                let id_json = Value::String(id).to_string();
                self.send_client(msg.with_id(&id_json)).await;
            }
            Kind::Notification("notifications/cancelled") => {
                // The upstream cancels a request of its own: under the id the client knows.
                let Some(rid) = msg.pointer("/params/requestId").map(Value::to_string) else {
                    return;
                };
                let ours = self.outbound.lock().iter().find_map(|(k, v)| match v {
                    Outbound::Upstream(o) if **o == *rid => Some(k.clone()),
                    _ => None,
                });
                if let Some(k) = ours {
                    self.outbound.lock().remove(&k);
                    let mut msg = msg;
                    if let Some(p) = msg
                        .msg_mut()
                        .get_mut("params")
                        .and_then(Value::as_object_mut)
                    {
                        p.insert("requestId".into(), Value::String(k));
                    }
                    self.send_client(msg).await;
                }
            }
            Kind::Notification(m) => {
                if m == "notifications/tools/list_changed" {
                    self.catalog.lock().fresh = false;
                }
                self.send_client(msg).await;
            }
            Kind::Other => tracing::warn!("upstream: dropped a message that is not JSON-RPC"),
        }
    }

    async fn on_upstream_response(&self, mut msg: Frame) {
        let p = gateway_id(msg.get("id")).and_then(|up| self.pending.lock().remove(&up));
        let Some(Pending { client, what }) = p else {
            tracing::debug!("upstream: dropped a response to no request the gateway forwarded");
            return;
        };
        match what {
            PendingWhat::Own(tx) => {
                let _ = tx.send(msg);
                return;
            }
            PendingWhat::Initialize => {
                let name = msg
                    .pointer("/result/serverInfo/name")
                    .and_then(Value::as_str);
                self.run(name).await;
            }
            PendingWhat::ToolsList => {
                let complete = msg.pointer("/result/nextCursor").is_none_or(Value::is_null);
                self.filter_tools(&mut msg, false, complete).await;
            }
            PendingWhat::ToolsCall { call_id, started } => {
                let (output, error) = jsonrpc::outcome_of(&msg);
                let outcome = ToolOutcome {
                    output,
                    error,
                    duration: started.elapsed(),
                };
                let run = self.run(None).await;
                if let Some(d) = run.after_tool(&call_id, outcome).await
                    && !d.is_allowed()
                {
                    msg = jsonrpc::result_to("null", &jsonrpc::blocked_by(&d, None));
                }
            }
            PendingWhat::Other => {}
        }
        if let Some(c) = client {
            let f = msg.with_id(&c.id);
            self.answer(&c, f).await;
        }
    }

    /// Lists the upstream's tools itself (every page), unless a complete listing is known.
    /// `Err` says why the upstream gave no listing (it is gone, did not answer in time, or
    /// answered with an error): the catalog then stays as it was, not fresh, and the next call
    /// lists again.
    pub(crate) async fn ensure_listed(&self) -> Result<(), String> {
        if self.catalog.lock().fresh {
            return Ok(());
        }
        let _one = self.listing.lock().await;
        if self.catalog.lock().fresh {
            return Ok(());
        }
        let mut cursor: Option<Value> = None;
        let mut tools: Vec<Value> = Vec::new();
        loop {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let mut params = json!({});
            if let Some(c) = cursor.take() {
                params["cursor"] = c;
            }
            let req = json!({"jsonrpc": "2.0", "id": 0, "method": "tools/list", "params": params});
            if !self
                .forward(req.into(), None, PendingWhat::Own(tx), None)
                .await
            {
                return Err("the upstream is gone".into());
            }
            let Ok(Ok(resp)) = tokio::time::timeout(LIST_TIMEOUT, rx).await else {
                tracing::warn!("upstream: no answer to the gateway's tools/list");
                return Err(format!(
                    "no answer to tools/list within {} s",
                    LIST_TIMEOUT.as_secs()
                ));
            };
            let Some(page) = resp.pointer("/result/tools").and_then(Value::as_array) else {
                let why = list_error(&resp);
                tracing::warn!("upstream: the gateway's tools/list failed: {why}");
                return Err(why);
            };
            tools.extend(page.iter().cloned());
            match resp.pointer("/result/nextCursor") {
                Some(c) if !c.is_null() && tools.len() < 100_000 => cursor = Some(c.clone()),
                _ => break,
            }
        }
        let mut all: Frame = json!({"result": {"tools": tools}}).into();
        self.filter_tools(&mut all, true, true).await;
        Ok(())
    }

    /// Drops hidden tools from a `tools/list` result (the only change to it: without hidden
    /// tools it goes on as it came), records tags and definition hashes, and checks the pins.
    /// `replace`: the listing is the whole catalog; `complete`: no further pages.
    pub(crate) async fn filter_tools(&self, msg: &mut Frame, replace: bool, complete: bool) {
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
        let mut newly_changed = Vec::new();
        {
            let mut catalog = self.catalog.lock();
            if replace {
                *catalog = Catalog::default();
            }
            for ((name, hash, tags), check) in listed.into_iter().zip(checks) {
                let changed = matches!(check, PinCheck::Changed { .. });
                if check == (PinCheck::Changed { new: true }) {
                    tracing::warn!(
                        "tool {name}: its definition changed; calls are blocked with {TOOL_CHANGED}"
                    );
                    newly_changed.push((name.clone(), hash.clone()));
                }
                catalog.insert(ToolInfo {
                    name,
                    tags,
                    hash,
                    changed,
                });
            }
            if complete {
                catalog.fresh = true;
            }
        }
        // Recorded with no lock held (starting the run may wait on the state store).
        if !newly_changed.is_empty() {
            let run = self.run(None).await;
            for (name, hash) in newly_changed {
                run.record_tool_changed(&name, &hash, None);
            }
        }
    }
}

/// Characters of an upstream's error message quoted to the client.
const QUOTED_CHARS: usize = 200;

/// What a `tools/list` answer without a tool list says: the upstream's error message (cut to
/// [`QUOTED_CHARS`], control characters dropped), or that the result held no `tools` array.
fn list_error(resp: &Value) -> String {
    match resp.pointer("/error/message").and_then(Value::as_str) {
        Some(m) => {
            let quoted: String = m
                .chars()
                .filter(|c| !c.is_control())
                .take(QUOTED_CHARS)
                .collect();
            format!("tools/list failed: {quoted}")
        }
        None if resp.get("error").is_some() => "tools/list failed".into(),
        None => "tools/list answered without a tools array".into(),
    }
}
