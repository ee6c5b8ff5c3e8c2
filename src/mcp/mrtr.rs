//! Human approval for 2026-07-28 clients, which a server may no longer send
//! `elicitation/create`: the call gets an `input_required` result carrying the question (one
//! elicitation input request) and a sealed `requestState`; the client's retry of the same call
//! with `inputResponses` and that state approves or denies the review, then the call is decided
//! again. A state that is forged, expired, replayed (its review already resolved) or for
//! another call or principal is rejected: the call stays blocked and an `error` audit event
//! names why.

use serde_json::{Map, Value, json};

use super::approval::{self, APPROVAL_KEY};
use super::frame::Frame;
use super::gateway::{Cancel, ClientReq, Gateway};
use super::jsonrpc;
use super::seal::{RequestState, fingerprint};
use crate::audit::EventKind;
use crate::engine::{Decision, ReviewStatus, Run, ToolCall};

/// The code of a call whose `requestState` was rejected.
pub const BLOCKED_REQUEST_STATE: &str = "BLOCKED_REQUEST_STATE";

fn now_ms(run: &Run) -> i64 {
    run.engine.clock.now().timestamp_millis()
}

impl Gateway {
    /// The `input_required` answer to a call needing approval.
    pub(crate) async fn input_required(
        &self,
        run: &Run,
        req: &ClientReq,
        call: &ToolCall,
        d: &Decision,
        review: &str,
    ) {
        let ctx = run.context();
        let ttl = i64::try_from(self.cfg.approval_timeout.as_millis()).unwrap_or(i64::MAX);
        let state = RequestState {
            review: review.to_string(),
            call: fingerprint(&call.name, &call.args),
            agent: ctx.agent_id.clone(),
            enduser: ctx.enduser.as_ref().map(|e| e.id.clone()),
            expires_ms: now_ms(run).saturating_add(ttl),
        };
        let message = approval::question(call, d);
        let mut meta = Map::new();
        meta.insert("effect".into(), json!("hitl"));
        meta.insert("code".into(), json!(d.code.as_str()));
        if let Some(r) = &d.rule_id {
            meta.insert("ruleId".into(), json!(r));
        }
        meta.insert("reviewId".into(), json!(review));
        let result = json!({
            "resultType": "input_required",
            "inputRequests": {APPROVAL_KEY: {
                "method": "elicitation/create",
                "params": {"mode": "form", "message": message, "requestedSchema": approval::approve_schema(call)},
            }},
            "requestState": self.cfg.request_state_key.seal(&state),
            "_meta": {"toolgate": meta},
        });
        self.answer(req, jsonrpc::result_to(&req.id, &result)).await;
    }

    /// A retry carrying `requestState`: checks it, approves or denies its review by the
    /// client's answer, and decides the call again.
    pub(crate) async fn retry_with_state(
        &self,
        run: &Run,
        req: ClientReq,
        call: ToolCall,
        msg: Frame,
        cancel: &Cancel,
    ) {
        let params = msg.get("params");
        let sealed = params
            .and_then(|p| p.get("requestState"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let state = match self.check_state(run, &call, sealed) {
            Ok(s) => s,
            Err(why) => return self.reject_state(run, &req, &call, &why).await,
        };
        let answer = params
            .and_then(|p| p.get("inputResponses"))
            .and_then(|r| r.get(APPROVAL_KEY));
        let approved = answer.and_then(|a| a.get("action")).and_then(Value::as_str)
            == Some("accept")
            && answer
                .and_then(|a| a.pointer("/content/approve"))
                .and_then(Value::as_bool)
                == Some(true);
        let reviews = self.cfg.engine.reviews();
        let decided = if approved {
            reviews.approve(&state.review)
        } else {
            reviews.deny(&state.review)
        };
        if let Err(e) = decided {
            // Resolved meanwhile (another retry, another replica): a replay.
            let why = format!("requestState replayed: review {} {e}", state.review);
            return self.reject_state(run, &req, &call, &why).await;
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

    fn check_state(
        &self,
        run: &Run,
        call: &ToolCall,
        sealed: &str,
    ) -> Result<RequestState, String> {
        let s = self
            .cfg
            .request_state_key
            .open(sealed)
            .map_err(str::to_string)?;
        if s.expires_ms < now_ms(run) {
            return Err(format!("requestState expired (review {})", s.review));
        }
        let ctx = run.context();
        if s.agent != ctx.agent_id || s.enduser != ctx.enduser.as_ref().map(|e| e.id.clone()) {
            return Err(format!(
                "requestState mismatched: sealed for another agent or end user (review {})",
                s.review
            ));
        }
        if s.call != fingerprint(&call.name, &call.args) {
            return Err(format!(
                "requestState mismatched: sealed for another call (review {})",
                s.review
            ));
        }
        let status = self
            .cfg
            .engine
            .reviews()
            .list()
            .into_iter()
            .find(|r| r.id == s.review)
            .map(|r| r.status);
        match status {
            Some(ReviewStatus::Pending) => Ok(s),
            Some(st) => Err(format!(
                "requestState replayed: review {} is already {st:?}",
                s.review
            )),
            None => Err(format!("requestState names no known review ({})", s.review)),
        }
    }

    async fn reject_state(&self, run: &Run, req: &ClientReq, call: &ToolCall, why: &str) {
        tracing::warn!("tool {}: {why}", call.name);
        let mut body = Map::new();
        body.insert("message".into(), json!(why));
        body.insert("callId".into(), json!(call.id));
        body.insert("tool".into(), json!({"name": call.name}));
        run.emit(EventKind::Error, body, run.engine.clock.now());
        let r = jsonrpc::blocked_result(
            BLOCKED_REQUEST_STATE,
            Some(&format!("the approval could not be accepted: {why}")),
            None,
            None,
            None,
        );
        self.answer(req, jsonrpc::result_to(&req.id, &r)).await;
    }
}
