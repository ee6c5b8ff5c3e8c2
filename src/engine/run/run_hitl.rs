//! The hitl part of a before decision: the call's fingerprint, then the review for it (an
//! existing one decides; else a new one is requested and the run aborts).

use super::handle::{Run, ToolCall};
use crate::engine::decide::decision::{Decision, DecisionCode, HitlInfo, ReviewStatus};
use crate::engine::hitl::reviews::{Review, ReviewHead};
use crate::policy::EffectType;

impl Run {
    /// Settles a hitl decision `d` on `call` by the review for the call's fingerprint.
    pub(crate) fn resolve_hitl(
        &self,
        d: &mut Decision,
        call: &ToolCall,
        now: chrono::DateTime<chrono::Utc>,
    ) {
        let ctx = &self.shared.context;
        let rule_id = d.rule_id.as_deref().unwrap_or("");
        let enduser = ctx.enduser.as_ref().map(|u| u.id.as_str());
        let fp =
            self.engine
                .fingerprints
                .get(&ctx.agent_id, rule_id, &call.name, &call.args, enduser);
        let store = &self.engine.reviews;
        let head = store.head(&fp);
        let live = |r: &ReviewHead| {
            !(r.status == ReviewStatus::Pending && r.expires_at.is_some_and(|e| e <= now))
                && r.status != ReviewStatus::Expired
        };
        let review = match head {
            Some(r) if live(&r) => r,
            old => {
                // A pending review past its expiry is marked expired before a new one starts.
                if let Some(old) = old.filter(|r| r.status == ReviewStatus::Pending) {
                    let _ = store.decide(&old.id, ReviewStatus::Expired, now);
                }
                let review = Review {
                    id: uuid::Uuid::now_v7().to_string(),
                    fingerprint: fp.clone(),
                    status: ReviewStatus::Pending,
                    agent_id: ctx.agent_id.clone(),
                    rule_id: rule_id.to_string(),
                    tool_name: call.name.clone(),
                    args: call.args.clone(),
                    enduser_id: enduser.map(str::to_string),
                    run_id: ctx.run_id.clone(),
                    call_id: call.id.clone(),
                    reason: d.reason.as_deref().map(str::to_string),
                    created_at: now,
                    decided_at: None,
                    expires_at: self
                        .engine
                        .review_ttl
                        .and_then(|t| chrono::Duration::from_std(t).ok())
                        .map(|t| now + t),
                };
                let stored = store.insert_if_absent(review.clone());
                if stored.id == review.id {
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
}
