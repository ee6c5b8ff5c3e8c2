//! The client side of the relay: what the client sends — requests (renumbered, decided or
//! refused), notifications, cancellations, and answers to the gateway's own questions.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::Value;

use super::super::frame::Frame;
use super::super::jsonrpc::{self, Kind};
use super::super::transport::Incoming;
use super::{
    Cancel, ClientReq, Gateway, InFlight, MAX_IN_FLIGHT, MAX_NAME_BYTES, Outbound, Pending,
    PendingWhat, id_key,
};
use crate::engine::ToolOutcome;

impl Gateway {
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
                task,
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
                    cancel.cancel("cancelled");
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
}
