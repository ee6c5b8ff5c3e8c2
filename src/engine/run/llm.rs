//! The model's side of a run: the `llm.before` decision on a model call
//! ([`Run::before_llm`]), its `llm.decision` and `llm.messages` events, and the usage of a
//! call made ([`Run::record_llm_usage`]).
//!
//! A model call is decided like a tool call with the model's name as the tool's name, no
//! tags, and the messages as its arguments: the rules in play, counters and flags come from
//! the model's cached profile (`ToolCache::for_models`). A policy set without `llm.before`
//! rules answers at once (allow, nothing written), from one flag of the compiled policies.

use super::stopwatch::Stopwatch;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use super::handle::{Run, ToolCall, obj};
use super::parts::{aborted_decision, count_allowed};
use super::refused::closed_decision;
use crate::audit::EventKind;
use crate::engine::blocking::block_on;
use crate::engine::decide::decision::{Decision, DecisionCode};
use crate::engine::decide::evaluate::{
    CallView, DecisionCtx, RuleVerdict, base_decision_into, evaluate_rules, evaluate_rules_sync,
};
use crate::engine::decide::profile::ToolProfile;
use crate::engine::llm::{LlmCall, LlmUsage};
use crate::json::{MAX_VALUE_DEPTH, deeper_than};
use crate::policy::{EffectType, InbuiltMetric, Phase};

/// Bytes of one message's content kept in an `llm.messages` event; past it the content is cut
/// (at a character boundary) and the entry says `truncated: true`.
pub const MAX_MESSAGE_CONTENT: usize = 16 * 1024;

/// Messages kept in one `llm.messages` event; past it the rest are counted (`omitted`).
pub const MAX_MESSAGES_RECORDED: usize = 256;

/// What deciding a model call needs once the quick checks passed.
enum Step {
    /// Decided already (closed run, no rules, aborted run, messages too deep).
    Done(Decision),
    /// The rules in play need deciding.
    Decide {
        policies: Arc<crate::engine::decide::profile::PolicySet>,
        profile: Arc<ToolProfile>,
        id: String,
    },
}

impl Run {
    /// Decides whether a model call may be made (phase `llm.before`).
    ///
    /// Allow: make the call, then record its usage with
    /// [`record_llm_usage`](Run::record_llm_usage). Block: do not call the model; the agent's
    /// turn ends (adapters end the run with status
    /// [`STATUS_BUDGET_EXCEEDED`](crate::engine::STATUS_BUDGET_EXCEEDED) or raise). Hitl: a
    /// review was raised and the run is paused, as for a tool call.
    ///
    /// A policy set without `llm.before` rules allows at once and writes nothing (unless the
    /// engine records messages). Never fails: an internal fault yields a decision by the
    /// engine's failure mode.
    pub async fn before_llm(&self, call: &LlmCall) -> Decision {
        if let Some(d) = self.llm_quick() {
            return d;
        }
        let started = Stopwatch::start();
        let now = self.engine.clock.now();
        let (policies, profile, id) = match self.llm_start(call, now) {
            Step::Done(d) => return d,
            Step::Decide {
                policies,
                profile,
                id,
            } => (policies, profile, id),
        };
        let (d, _) = if self.engine.shared.is_some() || profile.has_signal[0] {
            let fut = AssertUnwindSafe(self.llm_decide_async(call, &id, now, &policies, &profile));
            match futures::FutureExt::catch_unwind(fut).await {
                Ok(r) => r,
                Err(_) => self.llm_failure(&id, now),
            }
        } else {
            self.llm_decide_sync(call, &id, now, &policies, &profile)
        };
        self.llm_finish(call, id, d, started, now)
    }

    /// [`before_llm`](Run::before_llm) for callers that are not async (no runtime needed);
    /// see [`before_tool_blocking`](Run::before_tool_blocking) for when it waits.
    pub fn before_llm_blocking(&self, call: &LlmCall) -> Decision {
        if let Some(d) = self.llm_quick() {
            return d;
        }
        let started = Stopwatch::start();
        let now = self.engine.clock.now();
        let (policies, profile, id) = match self.llm_start(call, now) {
            Step::Done(d) => return d,
            Step::Decide {
                policies,
                profile,
                id,
            } => (policies, profile, id),
        };
        let (d, _) = if self.engine.shared.is_some() || profile.has_signal[0] {
            let fut = AssertUnwindSafe(self.llm_decide_async(call, &id, now, &policies, &profile));
            match block_on(futures::FutureExt::catch_unwind(fut)) {
                Some(Ok(r)) => r,
                _ => self.llm_failure(&id, now),
            }
        } else {
            self.llm_decide_sync(call, &id, now, &policies, &profile)
        };
        self.llm_finish(call, id, d, started, now)
    }

    /// Whether [`before_llm`](Run::before_llm) does anything with a call's messages now: some
    /// `llm.before` rule is loaded, or the engine records messages. When not, a caller may
    /// skip building the messages (the bindings skip converting them): the decision is allow.
    pub fn gates_llm(&self) -> bool {
        self.engine.llm.record_messages || self.engine.policies.load().has_llm_rules()
    }

    /// The decision without reading the clock or the call: a closed run is refused; a policy
    /// set without `llm.before` rules (the common case: one flag) allows, unless messages are
    /// recorded.
    #[inline]
    fn llm_quick(&self) -> Option<Decision> {
        if let Some(why) = self.closed() {
            return Some(closed_decision(Phase::LlmBefore, why));
        }
        if !self.engine.llm.record_messages && !self.engine.policies.load().has_llm_rules() {
            return Some(llm_allowed());
        }
        None
    }

    /// The other checks (an aborted run, messages nested too deep), then what to decide.
    fn llm_start(&self, call: &LlmCall, now: DateTime<Utc>) -> Step {
        let policies = self.engine.policies.load_full();
        let rules = policies.has_llm_rules();
        let id = match &call.id {
            Some(id) => id.clone(),
            None => {
                let n = self.shared.totals.llm_calls.fetch_add(1, Ordering::Relaxed) + 1;
                format!("llm-{n}")
            }
        };
        if deeper_than(&call.messages, MAX_VALUE_DEPTH) {
            return Step::Done(self.llm_too_deep(call, &id, now));
        }
        if !rules {
            // Messages recorded, nothing to decide.
            self.record_messages(call, &id, now);
            return Step::Done(llm_allowed());
        }
        if self.engine.shared.is_none() && self.is_aborted() {
            let mut d = aborted_decision();
            d.phase = Phase::LlmBefore;
            return Step::Done(self.llm_finish(call, id, d, Stopwatch::start(), now));
        }
        let profile = policies.models.profile(&policies, &call.model, &[]);
        Step::Decide {
            policies,
            profile,
            id,
        }
    }

    fn llm_view<'a>(call: &'a LlmCall, profile: &'a ToolProfile) -> CallView<'a> {
        CallView {
            name: &call.model,
            name_lc: &profile.name_lc,
            tags: &[],
            tags_lc: &[],
            args: &call.messages,
            duration_ms: None,
            output: None,
        }
    }

    fn llm_decide_sync(
        &self,
        call: &LlmCall,
        id: &str,
        now: DateTime<Utc>,
        policies: &crate::engine::decide::profile::PolicySet,
        profile: &ToolProfile,
    ) -> (Decision, bool) {
        let decide = AssertUnwindSafe(|| {
            let mut ctx = DecisionCtx::new(
                &self.engine.decide,
                policies,
                &self.shared.facts,
                profile,
                Self::llm_view(call, profile),
                now,
                Vec::new(),
            );
            let verdict = evaluate_rules_sync(&mut ctx, &profile.rules[0]);
            self.llm_conclude(call, id, now, &mut ctx, verdict)
        });
        match std::panic::catch_unwind(decide) {
            Ok(r) => r,
            Err(_) => self.llm_failure(id, now),
        }
    }

    async fn llm_decide_async(
        &self,
        call: &LlmCall,
        id: &str,
        now: DateTime<Utc>,
        policies: &Arc<crate::engine::decide::profile::PolicySet>,
        profile: &Arc<ToolProfile>,
    ) -> (Decision, bool) {
        if let Some(store) = self.engine.shared.clone() {
            // One read (and reservation) on the shared store, as for a tool call: the model's
            // profile holds the llm.before rules and counters in its first slot.
            let tool = as_tool_call(call, id);
            let (mut d, proceeds) = self
                .decide_before_shared(&*store, &tool, now, policies.clone(), profile.clone())
                .await;
            d.phase = Phase::LlmBefore;
            return (d, proceeds);
        }
        let mut ctx = DecisionCtx::new(
            &self.engine.decide,
            policies,
            &self.shared.facts,
            profile,
            Self::llm_view(call, profile),
            now,
            Vec::new(),
        );
        let verdict = evaluate_rules(&mut ctx, &profile.rules[0]).await;
        self.llm_conclude(call, id, now, &mut ctx, verdict)
    }

    /// The decision from the verdict: hitl lookup (the review's fingerprint binds the model's
    /// name and the exact messages), then counters kept when the call proceeds.
    fn llm_conclude(
        &self,
        call: &LlmCall,
        id: &str,
        now: DateTime<Utc>,
        ctx: &mut DecisionCtx<'_>,
        verdict: RuleVerdict,
    ) -> (Decision, bool) {
        let mut d = llm_allowed();
        base_decision_into(&mut d, Phase::LlmBefore, &verdict, ctx.policies);
        d.evaluated = verdict.evaluated;
        if d.effect == EffectType::Hitl {
            self.resolve_hitl(&mut d, &as_tool_call(call, id), now);
        }
        d.signals = std::mem::take(&mut ctx.signals);
        let proceeds = d.effect == EffectType::Allow;
        if proceeds {
            count_allowed(&self.engine, ctx, &ctx.permits);
        } else {
            for (_, key, permit) in ctx.permits.drain(..) {
                self.engine.decide.state.release(&key, permit);
            }
        }
        (d, proceeds)
    }

    fn llm_failure(&self, id: &str, now: DateTime<Utc>) -> (Decision, bool) {
        let mut d = self.failure(
            Phase::LlmBefore,
            id,
            now,
            "internal error while deciding a model call",
        );
        d.phase = Phase::LlmBefore;
        let proceeds = d.effect == EffectType::Allow;
        (d, proceeds)
    }

    /// Latency, the `llm.decision` event, then the `llm.messages` event (when recorded).
    fn llm_finish(
        &self,
        call: &LlmCall,
        id: String,
        mut d: Decision,
        started: Stopwatch,
        now: DateTime<Utc>,
    ) -> Decision {
        // The run may have ended while this call was decided: then it is refused, unwritten.
        let _open = self.shared.gate.read();
        if let Some(why) = self.closed() {
            return closed_decision(Phase::LlmBefore, why);
        }
        d.latency_ns = started.elapsed_ns();
        if self.engine.audit_enabled() {
            self.emit(
                EventKind::LlmDecision,
                obj(json!({"callId": id, "model": call.model, "decision": d})),
                now,
            );
            self.record_messages(call, &id, now);
        }
        d
    }

    /// A call whose messages nest deeper than the limit: blocked (not an engine fault), its
    /// event holding a stand-in for the messages.
    fn llm_too_deep(&self, call: &LlmCall, id: &str, now: DateTime<Utc>) -> Decision {
        let msg = super::edge::too_deep_message("messages");
        let mut d = Decision::simple(
            Phase::LlmBefore,
            EffectType::Block,
            DecisionCode::BlockedFailure,
            Some(Arc::from(msg.as_str())),
        );
        d.error = Some(msg);
        let _open = self.shared.gate.read();
        if let Some(why) = self.closed() {
            return closed_decision(Phase::LlmBefore, why);
        }
        self.emit(
            EventKind::LlmDecision,
            obj(json!({
                "callId": id,
                "model": call.model,
                "messages": super::edge::too_deep_stand_in(),
                "decision": d,
            })),
            now,
        );
        d
    }

    /// Writes the `llm.messages` event of a call (with the engine's `record_messages` on):
    /// each message's role, kind and content (cut past [`MAX_MESSAGE_CONTENT`]), at most
    /// [`MAX_MESSAGES_RECORDED`] of them. The sealer redacts what the policies' redacting
    /// detectors find, as in every event.
    fn record_messages(&self, call: &LlmCall, id: &str, now: DateTime<Utc>) {
        if !self.engine.llm.record_messages || !self.engine.audit_enabled() {
            return;
        }
        let (messages, omitted) = message_entries(&call.messages);
        let mut body = obj(json!({"callId": id, "model": call.model, "messages": messages}));
        if omitted > 0 {
            body.insert("omitted".into(), Value::from(omitted));
        }
        self.emit(EventKind::LlmMessages, body, now);
    }

    /// Records a model call's usage: its tokens and cost become the inbuilt metrics
    /// `llm_tokens_in`, `llm_tokens_out` and `llm_cost_usd` (read by `metricWindow` rules,
    /// `llm.before` ones included), and an `llm.result` event (`tokensIn`, `tokensOut`,
    /// `costUsd`, `model`, `durationMs`, `callId`).
    ///
    /// The cost is the caller's when given; else the engine's price for the model (see
    /// [`Prices`](crate::engine::Prices)); else none (`costUsd: null`, nothing recorded for
    /// `llm_cost_usd`). A given cost that is negative or not finite is refused (an `error`
    /// event names it) and treated as not given, so it can neither lower a budget's sum nor
    /// poison it.
    pub fn record_llm_usage(&self, usage: LlmUsage) {
        let now = self.engine.clock.now();
        let LlmUsage {
            tokens_in,
            tokens_out,
            cost_usd,
            model,
            duration_ms,
            call_id,
        } = usage;
        let mut refused = None;
        let given = match cost_usd {
            Some(c) if c.is_finite() && c >= 0.0 => Some(c),
            Some(c) => {
                refused = Some(c);
                None
            }
            None => None,
        };
        let cost = given.or_else(|| {
            let price = self.engine.llm.prices.get(model.as_deref()?)?;
            Some(price.cost(tokens_in, tokens_out)).filter(|c| c.is_finite())
        });
        let policies = self.engine.policies.load_full();
        let t = now.timestamp_millis();
        let mut metrics = vec![
            (InbuiltMetric::LlmTokensIn, tokens_in as f64),
            (InbuiltMetric::LlmTokensOut, tokens_out as f64),
        ];
        if let Some(c) = cost {
            metrics.push((InbuiltMetric::LlmCostUsd, c));
        }
        for (m, v) in metrics {
            super::after::record_metric(&self.engine, &policies, &self.shared, m.key(), None, v, t);
        }
        let totals = &self.shared.totals;
        totals.tokens_in.fetch_add(tokens_in, Ordering::Relaxed);
        totals.tokens_out.fetch_add(tokens_out, Ordering::Relaxed);
        if let Some(c) = cost.filter(|c| *c > 0.0) {
            totals
                .cost_micro_usd
                .fetch_add((c * 1e6).round() as u64, Ordering::Relaxed);
        }
        if !self.engine.audit_enabled() {
            return;
        }
        if let Some(c) = refused {
            self.emit(
                EventKind::Error,
                obj(json!({"message": format!(
                    "record_llm: cost {c} is not a non-negative number; not recorded"
                )})),
                now,
            );
        }
        let mut body = Map::new();
        body.insert("tokensIn".into(), Value::from(tokens_in));
        body.insert("tokensOut".into(), Value::from(tokens_out));
        body.insert(
            "costUsd".into(),
            cost.map_or(Value::Null, crate::policy::json_number),
        );
        if let Some(m) = model {
            body.insert("model".into(), Value::String(m));
        }
        if let Some(ms) = duration_ms.filter(|d| d.is_finite() && *d >= 0.0) {
            body.insert("durationMs".into(), crate::policy::json_number(ms));
        }
        if let Some(id) = call_id {
            body.insert("callId".into(), Value::String(id));
        }
        self.emit(EventKind::LlmResult, body, now);
    }
}

/// The decision of a model call no rule stops.
fn llm_allowed() -> Decision {
    Decision::simple(
        Phase::LlmBefore,
        EffectType::Allow,
        DecisionCode::Allowed,
        None,
    )
}

/// The model call as the tool-call machinery sees it (hitl fingerprints, the shared store):
/// the model's name as the tool's, the messages as its arguments.
fn as_tool_call(call: &LlmCall, id: &str) -> ToolCall {
    ToolCall::new(id, call.model.clone(), call.messages.clone())
}

/// The entries of an `llm.messages` event, and how many messages were left out past
/// [`MAX_MESSAGES_RECORDED`]. A message is `{role, kind, content}` (+ `truncated: true`):
/// `role` its `role` (else `type`, else "unknown"), `kind` the caller's `kind`, else "text"
/// for string content, else "json"; `content` a string (compact JSON when not one).
pub(crate) fn message_entries(messages: &Value) -> (Vec<Value>, usize) {
    let list: &[Value] = match messages {
        Value::Array(a) => a,
        other => std::slice::from_ref(other),
    };
    let entries = list
        .iter()
        .take(MAX_MESSAGES_RECORDED)
        .map(message_entry)
        .collect();
    (entries, list.len().saturating_sub(MAX_MESSAGES_RECORDED))
}

fn message_entry(m: &Value) -> Value {
    let field = |k: &str| m.get(k).and_then(Value::as_str);
    let role = field("role").or_else(|| field("type")).unwrap_or("unknown");
    // A string is cut before it is copied (a huge content is never copied whole).
    let (content, default_kind) = match m {
        Value::String(s) => (head(s), "text"),
        Value::Object(o) => match o.get("content") {
            Some(Value::String(s)) => (head(s), "text"),
            Some(other) => (bounded_json(other), "json"),
            None => {
                // No `content`: everything but the role (tool calls, function results).
                let rest: Map<String, Value> = o
                    .iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "role" | "kind"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                (bounded_json(&Value::Object(rest)), "json")
            }
        },
        other => (bounded_json(other), "json"),
    };
    let kind = field("kind").unwrap_or(default_kind);
    let (content, truncated) = cut(content, MAX_MESSAGE_CONTENT);
    let mut e = obj(
        json!({"role": cut(role.to_string(), 256).0, "kind": cut(kind.to_string(), 256).0, "content": content}),
    );
    if truncated {
        e.insert("truncated".into(), Value::Bool(true));
    }
    Value::Object(e)
}

/// Compact JSON of `v`, written at most a little past [`MAX_MESSAGE_CONTENT`] bytes (a huge
/// value is not copied whole only to be cut).
fn bounded_json(v: &Value) -> String {
    struct Bounded(Vec<u8>);
    impl std::io::Write for Bounded {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.0.len() > MAX_MESSAGE_CONTENT {
                return Err(std::io::Error::other("long enough"));
            }
            self.0.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut b = Bounded(Vec::new());
    let _ = serde_json::to_writer(&mut b, v);
    let mut bytes = b.0;
    // Cut at the last whole character (the writer may stop inside one).
    while std::str::from_utf8(&bytes).is_err() && !bytes.is_empty() {
        bytes.pop();
    }
    String::from_utf8(bytes).unwrap_or_default()
}

/// The first [`MAX_MESSAGE_CONTENT`] bytes of `s` and one more character (so [`cut`] sees
/// that it was longer), copied.
fn head(s: &str) -> String {
    let mut end = (MAX_MESSAGE_CONTENT + 1).min(s.len());
    while !s.is_char_boundary(end) {
        end += 1;
    }
    s[..end].to_string()
}

/// `s` cut to at most `max` bytes at a character boundary; whether it was cut.
fn cut(mut s: String, max: usize) -> (String, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    (s, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_entries_keep_role_kind_and_bounded_content() {
        let long = "é".repeat(MAX_MESSAGE_CONTENT);
        let (e, omitted) = message_entries(&json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "tool_calls": [{"id": "t1"}]},
            {"role": "user", "content": long},
            {"type": "human", "content": "x", "kind": "prompt"},
            "plain",
        ]));
        assert_eq!(omitted, 0);
        assert_eq!(
            e[0],
            json!({"role": "system", "kind": "text", "content": "be brief"})
        );
        assert_eq!(e[1]["kind"], "json");
        assert_eq!(e[1]["content"], r#"[{"text":"hi","type":"text"}]"#);
        assert_eq!(e[2]["content"], r#"{"tool_calls":[{"id":"t1"}]}"#);
        assert_eq!(e[3]["truncated"], true);
        let c = e[3]["content"].as_str().expect("a string");
        assert!(c.len() <= MAX_MESSAGE_CONTENT && c.len() > MAX_MESSAGE_CONTENT - 4);
        assert_eq!(
            e[4],
            json!({"role": "human", "kind": "prompt", "content": "x"})
        );
        assert_eq!(e[5]["role"], "unknown");
    }

    #[test]
    fn past_the_bound_messages_are_counted_not_kept() {
        let many: Vec<Value> = (0..MAX_MESSAGES_RECORDED + 7)
            .map(|i| json!({"role": "user", "content": i.to_string()}))
            .collect();
        let (e, omitted) = message_entries(&Value::Array(many));
        assert_eq!(e.len(), MAX_MESSAGES_RECORDED);
        assert_eq!(omitted, 7);
        let huge = json!({"role": "tool", "content": {"x": "y".repeat(10 << 20)}});
        let (e, _) = message_entries(&json!([huge]));
        assert_eq!(e[0]["truncated"], true);
    }
}
