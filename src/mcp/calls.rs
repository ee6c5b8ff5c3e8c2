//! Deciding a `tools/call`: hidden tools, pins, the paused run, the engine's decision, and
//! human approval through `elicitation/create`.

use std::sync::atomic::Ordering;
use std::time::Instant;

use serde_json::{Value, json};

use super::TOOL_CHANGED;
use super::approval;
use super::frame::Frame;
use super::gateway::{Cancel, ClientReq, Gateway, PendingWhat};
use super::jsonrpc;
use crate::engine::{Decision, DecisionCode, ReviewStatus, Run, ToolCall, ToolOutcome};
use crate::policy::EffectType;

/// What a human is asked to approve.
struct Asked<'a> {
    call: &'a ToolCall,
    decision: &'a Decision,
    review: &'a str,
}

impl Gateway {
    /// Decides a `tools/call` request (its tool named `name`) and forwards it or answers it.
    pub(crate) async fn decide_call(
        &self,
        msg: Frame,
        name: String,
        req: ClientReq,
        cancel: &Cancel,
    ) {
        if self.cfg.tools.is_hidden(&name) {
            return self.unknown_tool(&req, &name).await;
        }
        // Decide with the tool's listed definition, even before the client lists tools.
        let listed = self.ensure_listed().await;
        let info = self.catalog.lock().get(&name).cloned();
        let Some(info) = info else {
            return match listed {
                Ok(()) => self.unknown_tool(&req, &name).await,
                Err(why) => self.not_listed(&req, &name, &why).await,
            };
        };
        let params = msg.get("params");
        let args = params
            .and_then(|p| p.get("arguments"))
            .cloned()
            .unwrap_or_else(|| json!({}));
        let call_id = jsonrpc::call_id(&serde_json::from_str(&req.id).unwrap_or(Value::Null));
        let run = self.run(None).await;
        if info.changed && !self.pin_accepted(&info.name, &info.hash) {
            run.record_tool_changed(&info.name, &info.hash, Some(&call_id));
            let reason = format!(
                "the definition of tool \"{0}\" changed since it was pinned; accept it with `toolgate mcp pins accept {0} --pin {1}`",
                info.name,
                self.cfg
                    .pins
                    .as_ref()
                    .map(|p| p.path().display().to_string())
                    .unwrap_or_default()
            );
            let r = jsonrpc::blocked_result(TOOL_CHANGED, Some(&reason), None, None, None);
            return self.answer(&req, jsonrpc::result_to(&req.id, &r)).await;
        }
        self.resume_if_resolved(&run).await;
        let call = ToolCall::new(call_id.clone(), name, args).with_tags(info.tags.clone());
        let meta = |k: &str| {
            params
                .and_then(|p| p.get("_meta"))
                .and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let modern = super::approval::is_modern(&msg);
        let ours = params
            .and_then(|p| p.get("inputResponses"))
            .and_then(|r| r.get(super::approval::APPROVAL_KEY))
            .is_some();
        if modern && ours {
            return self.retry_with_state(&run, req, call, msg, cancel).await;
        }
        let d = decide(&run, call.clone(), meta("traceparent"), meta("tracestate")).await;
        match d.effect {
            EffectType::Allow => {
                self.forward_or_cancel(&run, req, call_id, msg, cancel)
                    .await
            }
            EffectType::Block => {
                let extra = self.paused_note(&d);
                let r = jsonrpc::blocked_by(&d, extra.as_deref());
                self.answer(&req, jsonrpc::result_to(&req.id, &r)).await;
            }
            EffectType::Hitl => {
                let review = d.hitl.as_ref().map(|h| h.review_id.clone());
                *self.paused.lock() = review.clone();
                match review {
                    Some(review) if modern && super::approval::can_elicit(&msg) => {
                        self.input_required(&run, &req, &call, &d, &review).await;
                    }
                    Some(review) if !modern && self.elicitation.load(Ordering::Acquire) => {
                        let asked = Asked {
                            call: &call,
                            decision: &d,
                            review: &review,
                        };
                        self.ask_client(&run, req, asked, msg, cancel).await;
                    }
                    _ => {
                        let extra =
                            self.approve_note(d.hitl.as_ref().map(|h| h.review_id.as_str()));
                        let r = jsonrpc::blocked_by(&d, Some(&extra));
                        self.answer(&req, jsonrpc::result_to(&req.id, &r)).await;
                    }
                }
            }
        }
    }

    async fn unknown_tool(&self, req: &ClientReq, name: &str) {
        self.answer_error(
            req,
            jsonrpc::INVALID_PARAMS,
            &format!("Unknown tool: {name}"),
        )
        .await;
    }

    /// A call of a tool the gateway could not look up because the upstream gave no tool list:
    /// not decided, not forwarded (fail-closed), and the answer says why.
    async fn not_listed(&self, req: &ClientReq, name: &str, why: &str) {
        self.answer_error(
            req,
            jsonrpc::INTERNAL_ERROR,
            &format!(
                "tool {name:?} was not called: the upstream did not list its tools ({why}); try again"
            ),
        )
        .await;
    }

    /// Forwards an allowed call; one cancelled while it was decided is recorded as cancelled.
    pub(crate) async fn forward_or_cancel(
        &self,
        run: &Run,
        req: ClientReq,
        call_id: String,
        msg: Frame,
        cancel: &Cancel,
    ) {
        let started = Instant::now();
        let what = PendingWhat::ToolsCall {
            call_id: call_id.clone(),
            started,
        };
        if !self.forward(msg, Some(req), what, Some(cancel)).await {
            run.after_tool(&call_id, ToolOutcome::err(cancel.why(), started.elapsed()))
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
    /// The review store is read on a blocking thread with no lock held (it may be Redis).
    async fn resume_if_resolved(&self, run: &Run) {
        let Some(review) = self.paused.lock().clone() else {
            return;
        };
        let engine = self.cfg.engine.clone();
        let id = review.clone();
        let pending = tokio::task::spawn_blocking(move || {
            engine
                .reviews()
                .list()
                .iter()
                .any(|r| r.id == id && r.status == ReviewStatus::Pending)
        })
        .await
        .unwrap_or(true);
        if pending {
            return;
        }
        let resume = {
            let mut paused = self.paused.lock();
            let same = paused.as_deref() == Some(review.as_str());
            if same {
                *paused = None;
            }
            same
        };
        if resume {
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
            (Some(r), None) if self.elicitation.load(Ordering::Acquire) => format!(
                "Review {r} is pending. This gateway keeps reviews in memory, so `toolgate review` cannot reach it: start the gateway with `--reviews FILE` to approve with `toolgate review --store FILE approve {r}`."
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
    /// decides the call again (now `ALLOWED_HITL_APPROVED` or `BLOCKED_HITL_DENIED`). No answer
    /// within `--approval-timeout` denies it; a user who cancels the question leaves the review
    /// pending (a human can still approve it with `toolgate review`).
    async fn ask_client(
        &self,
        run: &Run,
        req: ClientReq,
        asked: Asked<'_>,
        msg: Frame,
        cancel: &Cancel,
    ) {
        let Asked {
            call,
            decision: d,
            review,
        } = asked;
        if cancel.is_cancelled() {
            return;
        }
        let (ask_id, rx) = self
            .ask(json!({
                "jsonrpc": "2.0",
                "method": "elicitation/create",
                "params": {"message": approval::question(call, d), "requestedSchema": approval::approve_schema(call)},
            }))
            .await;
        enum Got {
            Cancelled,
            Timeout,
            Answer(Value),
        }
        let got = tokio::select! {
            biased;
            _ = cancel.notify.notified() => Got::Cancelled,
            a = rx => Got::Answer(a.unwrap_or(Value::Null)),
            _ = tokio::time::sleep(self.cfg.approval_timeout) => Got::Timeout,
        };
        let got = if cancel.is_cancelled() {
            Got::Cancelled
        } else {
            got
        };
        let approved = match got {
            Got::Cancelled => {
                // The call was cancelled: the question is moot, the review stays pending and
                // the run paused.
                self.outbound.lock().remove(&ask_id);
                return;
            }
            Got::Timeout => {
                self.outbound.lock().remove(&ask_id);
                self.send_client(
                    json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": ask_id, "reason": "toolgate: approval timed out"}}),
                )
                .await;
                tracing::warn!("review {review}: no answer within the approval timeout; denied");
                false
            }
            Got::Answer(answer) => {
                let action = answer.pointer("/result/action").and_then(Value::as_str);
                if action == Some("cancel") {
                    // The user dismissed the question: the review stays pending.
                    let extra = self.approve_note(Some(review));
                    let r = jsonrpc::blocked_by(d, Some(&extra));
                    return self.answer(&req, jsonrpc::result_to(&req.id, &r)).await;
                }
                action == Some("accept")
                    && answer
                        .pointer("/result/content/approve")
                        .and_then(Value::as_bool)
                        == Some(true)
            }
        };
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
            self.forward_or_cancel(run, req, call.id.clone(), msg, cancel)
                .await;
        } else {
            let r = jsonrpc::blocked_by(&d2, None);
            self.answer(&req, jsonrpc::result_to(&req.id, &r)).await;
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
