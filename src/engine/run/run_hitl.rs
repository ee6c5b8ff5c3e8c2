//! The hitl part of a before decision: the call's fingerprint, then the review for it (an
//! existing one decides; else a new one is requested and the run aborts).

use super::handle::{Run, ToolCall};
use crate::audit::EventKind;
use crate::engine::decide::decision::{Decision, DecisionCode, HitlInfo, ReviewStatus};
use crate::engine::hitl::reviews::{
    MAX_REDACTED, Redacted, Review, ReviewError, ReviewHead, decided_event_body,
};
use crate::policy::EffectType;

impl Run {
    /// Settles a hitl decision `d` on `call` by the review for the call's fingerprint.
    pub(crate) fn resolve_hitl(
        &self,
        d: &mut Decision,
        call: &ToolCall,
        now: chrono::DateTime<chrono::Utc>,
    ) {
        let ctx = &self.shared.facts.context;
        let rule_id = d.rule_id.as_deref().unwrap_or("");
        let enduser = ctx.enduser.as_ref().map(|u| u.id.as_str());
        // Taken over the arguments as the trail holds them (what a redacting sensitiveData
        // condition of the policies finds, redacted): the fingerprint, written in the trail,
        // must not let a guess of the redacted text be checked. When that redaction changed
        // anything, it is extended by a keyed hash of the real arguments (the engine's key, in
        // memory only), so calls differing only inside a redacted span do not share a review.
        let redacting = self.engine.policies.load().redacting.clone();
        let fingerprints = &self.engine.fingerprints;
        let fp = if redacting.is_empty() {
            fingerprints.get(&ctx.agent_id, rule_id, &call.name, &call.args, enduser)
        } else {
            let mut a = call.args.clone();
            crate::engine::decide::conditions::redact_found(&mut a, &redacting);
            let fp = fingerprints.get(&ctx.agent_id, rule_id, &call.name, &a, enduser);
            if a == call.args {
                fp
            } else {
                crate::engine::hitl::reviews::keyed_fingerprint(
                    &fp,
                    &self.engine.fingerprint_key,
                    &call.args,
                )
            }
        };
        let store = &self.engine.reviews;
        let mut head = store.head(&fp);
        // A pending review past its expiry with an `onExpire` is decided by it, as a reviewer
        // would decide it (recorded by `toolgate:expiry`, with a `review.decided` event).
        if let Some(h) = &head
            && let Some(v) = crate::engine::hitl::reviews::expiry_verdict(
                h.status,
                h.expires_at,
                h.on_expire,
                now,
            )
        {
            match store.decide_with(&h.id, &v) {
                Ok(r) => {
                    self.emit(EventKind::ReviewDecided, decided_event_body(&r), now);
                    self.engine.notify_decided(&r);
                    head = Some(ReviewHead::of(&r));
                }
                // Decided meanwhile by someone else: read what they decided.
                Err(ReviewError::AlreadyDecided { .. }) => head = store.head(&fp),
                // Unreadable or unwritable: stays pending (the call stays held).
                Err(e) => tracing::warn!("review {}: expiry not recorded: {e}", h.id),
            }
        }
        let live = |r: &ReviewHead| {
            !(r.status == ReviewStatus::Pending
                && r.on_expire.is_none()
                && r.expires_at.is_some_and(|e| e <= now))
                && r.status != ReviewStatus::Expired
        };
        let review = match head {
            Some(r) if live(&r) => r,
            old => {
                // A pending review past its expiry is marked expired before a new one starts.
                if let Some(old) = old.filter(|r| r.status == ReviewStatus::Pending) {
                    let _ = store.decide(&old.id, ReviewStatus::Expired, now);
                }
                let (expires_at, on_expire) = self.review_expiry(rule_id, now);
                let review = Review {
                    id: uuid::Uuid::now_v7().to_string(),
                    fingerprint: fp.clone(),
                    status: ReviewStatus::Pending,
                    agent_id: ctx.agent_id.clone(),
                    rule_id: rule_id.to_string(),
                    tool_name: call.name.clone(),
                    args: self.review_args(call, d),
                    redacted: review_redactions(d),
                    enduser_id: enduser.map(str::to_string),
                    run_id: ctx.run_id.clone(),
                    call_id: call.id.clone(),
                    reason: d.reason.as_deref().map(str::to_string),
                    created_at: now,
                    decided_at: None,
                    expires_at,
                    on_expire,
                    decided_by: None,
                    comment: None,
                };
                let stored = store.insert_if_absent(review.clone());
                if stored.id == review.id {
                    self.engine.notify_created(&stored);
                    d.code = DecisionCode::BlockedHitlRequested;
                    d.hitl = Some(HitlInfo {
                        review_id: stored.id,
                        status: ReviewStatus::Pending,
                        fingerprint: fp,
                    });
                    self.abort();
                    d.abort_run = true;
                    return;
                }
                ReviewHead::of(&stored)
            }
        };
        let (effect, code, abort) = match review.status {
            ReviewStatus::Approved => (EffectType::Allow, DecisionCode::AllowedHitlApproved, false),
            ReviewStatus::Denied => (EffectType::Block, DecisionCode::BlockedHitlDenied, false),
            _ => (EffectType::Hitl, DecisionCode::BlockedHitlPending, true),
        };
        d.effect = effect;
        d.code = code;
        d.abort_run = abort;
        if abort {
            self.abort();
        }
        d.hitl = Some(HitlInfo {
            review_id: review.id,
            status: review.status,
            fingerprint: fp,
        });
    }

    /// The arguments a review shows: redacted as the call's `tool.decision` audit event
    /// redacts them (detected sensitive data, then the audit trail's redaction rules), so the
    /// review store and the console hold no more than the audit trail does. (So is the
    /// fingerprint's input.)
    fn review_args(&self, call: &ToolCall, d: &Decision) -> serde_json::Value {
        let args = crate::engine::decide::conditions::redaction(&call.args, None, &d.evaluated)
            .map_or_else(|| call.args.clone(), |r| r.args);
        let Some(audit) = &self.engine.audit else {
            return args;
        };
        if !audit.redactor.applies_to(EventKind::ToolDecision) {
            return args;
        }
        let mut body = serde_json::Map::new();
        body.insert("tool".into(), serde_json::json!({"name": call.name}));
        body.insert("args".into(), args);
        audit.redactor.redact(EventKind::ToolDecision, &mut body);
        body.remove("args").unwrap_or(serde_json::Value::Null)
    }

    /// When a review the rule `rule_id` raises now expires, and how it is then decided: the
    /// rule's (or its policy's) `reviewTtlSeconds` and `onExpire`, else the engine's
    /// `review_ttl` (then the review is marked expired and the next call asks again).
    fn review_expiry(
        &self,
        rule_id: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> (
        Option<chrono::DateTime<chrono::Utc>>,
        Option<crate::policy::OnExpire>,
    ) {
        let policies = self.engine.policies.load();
        let rule = policies
            .rules
            .iter()
            .find(|r| &*r.id == rule_id)
            .and_then(|r| r.review_ttl_seconds.map(|t| (t, r.on_expire)));
        match rule {
            Some((ttl, on)) => {
                let at = i64::try_from(ttl)
                    .ok()
                    .and_then(chrono::TimeDelta::try_seconds)
                    .and_then(|t| now.checked_add_signed(t));
                (at, Some(on))
            }
            None => (
                self.engine
                    .review_ttl
                    .and_then(|t| chrono::Duration::from_std(t).ok())
                    .and_then(|t| now.checked_add_signed(t)),
                None,
            ),
        }
    }
}

/// Where the engine redacts a review's arguments: each redacting detection of the decision
/// (path and detector once each, at most [`MAX_REDACTED`]).
fn review_redactions(d: &Decision) -> Vec<Redacted> {
    let mut out: Vec<Redacted> = Vec::new();
    let found = d
        .evaluated
        .iter()
        .flat_map(|e| e.detected.iter().flat_map(|x| x.iter()))
        .filter(|x| x.redact);
    for x in found {
        if out.len() >= MAX_REDACTED {
            break;
        }
        let r = Redacted {
            path: x.path.clone(),
            detector: x.detector.as_str().to_string(),
        };
        if !out.contains(&r) {
            out.push(r);
        }
    }
    out
}
