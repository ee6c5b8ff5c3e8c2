//! Deciding a `tools/call`: hidden tools, pins, the paused run, the engine's decision, and
//! human approval through `elicitation/create`.

use std::sync::atomic::Ordering;
use std::time::Instant;

use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::TOOL_CHANGED;
use super::frame::Frame;
use super::gateway::{Cancel, Gateway, PendingWhat};
use super::jsonrpc;
use crate::engine::{Decision, DecisionCode, ReviewStatus, Run, ToolCall, ToolOutcome};
use crate::policy::EffectType;

/// The prefix of the ids of toolgate's own requests to the client.
pub(crate) const ASK_PREFIX: &str = "toolgate-elicit-";

/// What a human is asked to approve.
struct Asked<'a> {
    call: &'a ToolCall,
    decision: &'a Decision,
    review: &'a str,
}

impl Gateway {
    /// Decides a `tools/call` request and forwards it or answers it.
    pub(crate) async fn decide_call(&self, msg: Frame, cancel: &Cancel) {
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let params = msg.get("params");
        let Some(name) = params
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            // Not a call toolgate can decide: the server answers it.
            self.add_pending(&id, PendingWhat::Other);
            self.send_upstream(msg);
            return;
        };
        if self.cfg.tools.is_hidden(&name) {
            self.send_client(jsonrpc::error(
                &id,
                jsonrpc::INVALID_PARAMS,
                &format!("Unknown tool: {name}"),
            ));
            return;
        }
        let args = params
            .and_then(|p| p.get("arguments"))
            .cloned()
            .unwrap_or_else(|| json!({}));
        let call_id = jsonrpc::call_id(&id);
        let run = self.run(None);
        let info = self.catalog.lock().get(&name).cloned();
        let tags = match &info {
            Some(i) => i.tags.clone(),
            None => self.cfg.tools.tags(&name, None),
        };
        if let Some(i) = info.filter(|i| i.changed)
            && !self.pin_accepted(&name, &i.hash)
        {
            run.record_tool_changed(&name, &i.hash, Some(&call_id));
            let reason = format!(
                "the definition of tool \"{name}\" changed since it was pinned; accept it with `toolgate mcp pins accept {name} --pin {}`",
                self.cfg
                    .pins
                    .as_ref()
                    .map(|p| p.path().display().to_string())
                    .unwrap_or_default()
            );
            let r = jsonrpc::blocked_result(TOOL_CHANGED, Some(&reason), None, None, None);
            self.send_client(jsonrpc::result(&id, r));
            return;
        }
        self.resume_if_resolved(&run);
        let call = ToolCall::new(call_id.clone(), name, args).with_tags(tags);
        let meta = |k: &str| {
            params
                .and_then(|p| p.get("_meta"))
                .and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let d = decide(&run, call.clone(), meta("traceparent"), meta("tracestate")).await;
        match d.effect {
            EffectType::Allow => {
                self.forward_or_cancel(&run, &id, call_id, msg, cancel)
                    .await
            }
            EffectType::Block => {
                let extra = self.paused_note(&d);
                let r = jsonrpc::blocked_by(&d, extra.as_deref());
                self.send_client(jsonrpc::result(&id, r));
            }
            EffectType::Hitl => {
                let review = d.hitl.as_ref().map(|h| h.review_id.clone());
                *self.paused.lock() = review.clone();
                match review {
                    Some(review) if self.elicitation.load(Ordering::Acquire) => {
                        let asked = Asked {
                            call: &call,
                            decision: &d,
                            review: &review,
                        };
                        self.ask_client(&run, &id, asked, msg, cancel).await;
                    }
                    _ => {
                        let extra =
                            self.approve_note(d.hitl.as_ref().map(|h| h.review_id.as_str()));
                        let r = jsonrpc::blocked_by(&d, Some(&extra));
                        self.send_client(jsonrpc::result(&id, r));
                    }
                }
            }
        }
    }

    /// Forwards an allowed call; one cancelled while it was decided is recorded as cancelled.
    async fn forward_or_cancel(
        &self,
        run: &Run,
        id: &Value,
        call_id: String,
        msg: Frame,
        cancel: &Cancel,
    ) {
        let started = Instant::now();
        if !self.forward_call(id, call_id.clone(), msg, cancel) {
            run.after_tool(&call_id, ToolOutcome::err("cancelled", started.elapsed()))
                .await;
        }
    }

    fn pin_accepted(&self, name: &str, hash: &str) -> bool {
        let Some(pins) = &self.cfg.pins else {
            return true;
        };
        match pins.is_accepted(name, hash) {
            Ok(true) => {
                if let Some(i) = self.catalog.lock().get_mut(name) {
                    i.changed = false;
                }
                true
            }
            Ok(false) => false,
            Err(e) => {
                tracing::error!("{e}");
                false
            }
        }
    }

    /// A paused run resumes once its review is no longer pending (approved, denied, expired).
    fn resume_if_resolved(&self, run: &Run) {
        let mut paused = self.paused.lock();
        let Some(review) = paused.as_deref() else {
            return;
        };
        let pending = self
            .cfg
            .engine
            .reviews()
            .list()
            .iter()
            .any(|r| r.id == review && r.status == ReviewStatus::Pending);
        if !pending {
            *paused = None;
            run.resume();
        }
    }

    fn approve_note(&self, review: Option<&str>) -> String {
        match (review, &self.cfg.reviews_file) {
            (Some(r), _) if self.cfg.state_url.is_some() => format!(
                "A human must approve review {r}: `toolgate review --state {} approve {r}`; then retry the call.",
                self.cfg.state_url.as_deref().unwrap_or_default()
            ),
            (Some(r), Some(store)) => format!(
                "A human must approve review {r}: `toolgate review --store {} approve {r}`; then retry the call.",
                store.display()
            ),
            (Some(r), None) => format!(
                "A human must approve review {r}, but this gateway keeps reviews in memory: start it with `--reviews FILE` (or use a client that supports elicitation)."
            ),
            (None, _) => "A human must approve this call.".to_string(),
        }
    }

    fn paused_note(&self, d: &Decision) -> Option<String> {
        if d.code != DecisionCode::BlockedRunAborted {
            return None;
        }
        let review = self.paused.lock().clone()?;
        Some(format!(
            "The session is paused until review {review} is resolved. {}",
            self.approve_note(Some(&review))
        ))
    }

    /// Asks the client's user through `elicitation/create`; approves or denies the review, then
    /// decides the call again (now `ALLOWED_HITL_APPROVED` or `BLOCKED_HITL_DENIED`).
    async fn ask_client(
        &self,
        run: &Run,
        id: &Value,
        asked: Asked<'_>,
        msg: Frame,
        cancel: &Cancel,
    ) {
        let Asked {
            call,
            decision: d,
            review,
        } = asked;
        if cancel.cancelled.load(Ordering::Acquire) {
            return;
        }
        let ask_id = Value::String(format!(
            "{ASK_PREFIX}{}",
            self.next_ask.fetch_add(1, Ordering::Relaxed)
        ));
        let (tx, rx) = oneshot::channel();
        self.asks.lock().insert(jsonrpc::id_key(&ask_id), tx);
        let message = format!(
            "toolgate: approve the call of tool \"{}\" with arguments {}?\nRule {}: {}",
            call.name,
            serde_json::to_string(&call.args).unwrap_or_default(),
            d.rule_id.as_deref().unwrap_or("-"),
            d.reason.as_deref().unwrap_or("needs human approval"),
        );
        self.send_client(json!({
            "jsonrpc": "2.0",
            "id": ask_id,
            "method": "elicitation/create",
            "params": {
                "message": message,
                "requestedSchema": {
                    "type": "object",
                    "properties": {"approve": {
                        "type": "boolean",
                        "title": "Approve",
                        "description": format!("Let tool \"{}\" run with these arguments", call.name),
                    }},
                    "required": ["approve"],
                },
            },
        }));
        let answer = tokio::select! {
            biased;
            _ = cancel.notify.notified() => None,
            a = rx => Some(a.unwrap_or(Value::Null)),
        };
        let Some(answer) = answer.filter(|_| !cancel.cancelled.load(Ordering::Acquire)) else {
            // The call was cancelled: the question is moot, the review stays pending and the
            // run paused.
            self.asks.lock().remove(&jsonrpc::id_key(&ask_id));
            return;
        };
        let approved = answer.pointer("/result/action").and_then(Value::as_str) == Some("accept")
            && answer
                .pointer("/result/content/approve")
                .and_then(Value::as_bool)
                == Some(true);
        let reviews = self.cfg.engine.reviews();
        let decided = if approved {
            reviews.approve(review)
        } else {
            reviews.deny(review)
        };
        if let Err(e) = decided {
            tracing::warn!("review {review}: {e}");
        }
        *self.paused.lock() = None;
        run.resume();
        let d2 = run.before_tool(call.clone()).await;
        if d2.is_allowed() {
            self.forward_or_cancel(run, id, call.id.clone(), msg, cancel)
                .await;
        } else {
            let r = jsonrpc::blocked_by(&d2, None);
            self.send_client(jsonrpc::result(id, r));
        }
    }
}

/// Decides a call; with OpenTelemetry on, a W3C `traceparent` from the request's `_meta` is the
/// parent of the call's span (the client's trace continues through the gateway).
async fn decide(
    run: &Run,
    call: ToolCall,
    traceparent: Option<String>,
    tracestate: Option<String>,
) -> Decision {
    #[cfg(feature = "otel")]
    if let Some(cx) = traceparent
        .as_deref()
        .and_then(|tp| crate::otel::parent_from_traceparent(tp, tracestate.as_deref()))
    {
        use opentelemetry::context::FutureExt as _;
        return run.before_tool(call).with_context(cx).await;
    }
    let _ = (traceparent, tracestate);
    run.before_tool(call).await
}
