//! The after phase of a call (`tool.after`): its result recorded (history, metrics, the
//! `tool.result` event) and the after-phase rules decided; custom and LLM metrics.

use super::stopwatch::Stopwatch;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::handle::{PendingCall, Run, RunShared, ToolCall, ToolOutcome, obj};
use super::refused::closed_decision;
use crate::audit::EventKind;
use crate::engine::audit::body::{Body, CallMetrics};
use crate::engine::blocking::block_on;
use crate::engine::decide::decision::Decision;
use crate::engine::decide::evaluate::{
    CallView, DecisionCtx, base_decision, evaluate_rules, extract_subjects,
};
use crate::engine::decide::profile::ToolProfile;
use crate::engine::run::inner::EngineInner;
use crate::policy::{CompiledPolicies, EffectType, InbuiltMetric, Phase};

/// The policies a decision is made under and the called tool's profile in them.
type LookedUp = (
    Arc<crate::engine::decide::profile::PolicySet>,
    Arc<ToolProfile>,
);

impl Run {
    /// Records the outcome of an allowed call and decides the after-phase rules
    /// (`tool.after`). Returns `None` when `call_id` was not allowed by
    /// [`before_tool`](Run::before_tool) in this run (its result is ignored) — unless the run
    /// dropped calls waiting for their results (more than 10,000 waited at once): then a
    /// result for a call it does not hold is decided by the failure mode, with an `error`
    /// event, since it may be one of the dropped calls.
    ///
    /// An after-phase `block` means the output must not reach the agent; `hitl` stops the run.
    ///
    /// A run that has ended (or whose engine has shut down) records nothing more: the answer
    /// is a refusal ([`Run::closed`] says why).
    pub async fn after_tool(&self, call_id: &str, outcome: ToolOutcome) -> Option<Decision> {
        if let Some(why) = self.closed() {
            return Some(closed_decision(Phase::After, why));
        }
        self.after_tool_with(call_id, outcome, None).await
    }

    /// [`after_tool`](Run::after_tool), with the policies and the tool's profile when the
    /// caller has looked them up already.
    async fn after_tool_with(
        &self,
        call_id: &str,
        outcome: ToolOutcome,
        looked_up: Option<LookedUp>,
    ) -> Option<Decision> {
        let found = self.shared.pending.lock().remove(call_id);
        let Some(pending) = found else {
            return self.dropped_result(call_id);
        };
        let now = self.engine.clock.now();
        // Observers see the outcome after the decision; copied only when one is registered.
        let observed = (!self.engine.observers.is_empty()).then(|| outcome.clone());
        let fut = AssertUnwindSafe(self.after_allowed(call_id, pending, outcome, now, looked_up));
        let decision = match futures::FutureExt::catch_unwind(fut).await {
            Ok(d) => d,
            Err(_) => Some(self.after_failure(call_id, now)),
        };
        if let Some(outcome) = &observed {
            super::observe::each(&self.engine.observers, |o| {
                o.on_result(
                    &self.shared.facts.context,
                    call_id,
                    outcome,
                    decision.as_ref(),
                )
            });
        }
        decision
    }

    /// Whether call `call_id` was allowed in this run and waits for its result (its
    /// [`after_tool`](Run::after_tool) will record it).
    pub fn awaits_result(&self, call_id: &str) -> bool {
        self.shared.pending.lock().get(call_id).is_some()
    }

    /// The answer for a result whose call is not waiting here: `None` (not allowed in this
    /// run: ignored), unless the run's bound on waiting calls dropped some (see
    /// `pending::MAX_PENDING`): then it may be one of theirs, and it is decided by the failure
    /// mode, with an `error` event, never let through as if its call had not been allowed.
    fn dropped_result(&self, call_id: &str) -> Option<Decision> {
        if self.shared.pending.lock().dropped() == 0 {
            return None;
        }
        let now = self.engine.clock.now();
        Some(self.failure(
            Phase::After,
            call_id,
            now,
            "the call's before decision is no longer held: the run had more calls waiting for \
             their results than it keeps, and the oldest were dropped",
        ))
    }

    fn after_failure(&self, call_id: &str, now: DateTime<Utc>) -> Decision {
        self.failure(
            Phase::After,
            call_id,
            now,
            "internal error while recording the result",
        )
    }

    /// [`after_tool`](Run::after_tool) for callers that are not async: returns without
    /// blocking when no signal provider, subject extractor or tool evaluator is in play, else
    /// waits for them as [`before_tool_blocking`](Run::before_tool_blocking) does.
    pub fn after_tool_blocking(&self, call_id: &str, outcome: ToolOutcome) -> Option<Decision> {
        if let Some(why) = self.closed() {
            return Some(closed_decision(Phase::After, why));
        }
        let (policies, profile) = {
            let pending = self.shared.pending.lock();
            let Some(call) = pending.get(call_id) else {
                drop(pending);
                return self.dropped_result(call_id);
            };
            let policies = self.engine.policies.load_full();
            let profile = policies.tools.profile(&policies, &call.name, &call.tags);
            (policies, profile)
        };
        let awaits = self.engine.shared.is_some()
            || profile.needs_async(&self.engine.decide, Phase::After)
            || (self.engine.audit_enabled()
                && self
                    .engine
                    .evals
                    .per_tool
                    .iter()
                    .any(|(g, _)| g.is_match(&*profile.name_lc)));
        // The profile looked up here serves the decision too.
        let mut fut =
            std::pin::pin!(self.after_tool_with(call_id, outcome, Some((policies, profile))));
        if !awaits {
            // Nothing to await: one poll finishes it.
            if let Poll::Ready(d) = fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                return d;
            }
        }
        let now = self.engine.clock.now();
        block_on(fut).unwrap_or_else(|| Some(self.after_failure(call_id, now)))
    }

    async fn after_allowed(
        &self,
        call_id: &str,
        pending: PendingCall,
        outcome: ToolOutcome,
        now: DateTime<Utc>,
        looked_up: Option<LookedUp>,
    ) -> Option<Decision> {
        let started = Stopwatch::start();
        // A result nested deeper than any reader takes is not decided on nor recorded: a
        // stand-in takes its place, and the after decision blocks it.
        let mut outcome = outcome;
        let too_deep = outcome
            .output
            .as_ref()
            .is_some_and(|o| crate::json::deeper_than(o, crate::json::MAX_VALUE_DEPTH));
        if too_deep {
            outcome.output = Some(super::edge::too_deep_stand_in());
        }
        let (policies, profile) = looked_up.unwrap_or_else(|| {
            let policies = self.engine.policies.load_full();
            let profile = policies
                .tools
                .profile(&policies, &pending.name, &pending.tags);
            (policies, profile)
        });
        let duration_ms = outcome.duration.as_secs_f64() * 1000.0;
        let audit = self.engine.audit_enabled();
        let shared_store = self.engine.shared.clone();

        // Inbuilt metrics of the call: only those a metricWindow tracker or the audit trail uses.
        let mut metrics = CallMetrics::new();
        if audit || !policies.trackers.is_empty() {
            let want =
                |m: InbuiltMetric| audit || policies.trackers_by_metric.contains_key(m.key());
            if want(InbuiltMetric::BytesIn) {
                metrics.push((InbuiltMetric::BytesIn, json_len(&pending.args)));
            }
            if let Some(output) = &outcome.output
                && want(InbuiltMetric::BytesOut)
            {
                metrics.push((InbuiltMetric::BytesOut, json_len(output)));
            }
            metrics.push((InbuiltMetric::DurationMs, duration_ms));
            if let Value::Array(a) = &pending.args {
                metrics.push((InbuiltMetric::RecordsIn, a.len() as f64));
            }
            if let Some(Value::Array(a)) = &outcome.output {
                metrics.push((InbuiltMetric::RecordsOut, a.len() as f64));
            }
        }
        if !policies.trackers.is_empty() {
            for (m, v) in &metrics {
                record_metric(
                    &self.engine,
                    &policies,
                    &self.shared,
                    m.key(),
                    Some((&profile.name_lc, &profile.tags_lc)),
                    *v,
                    now.timestamp_millis(),
                );
            }
        }

        let rules = &profile.rules[1];
        // What `toolOutput` conditions scan: the output, or the error the tool reported.
        let error_text = outcome.error.clone().map(Value::String);
        let decision = if rules.is_empty() {
            None
        } else {
            let view = CallView {
                name: &pending.name,
                name_lc: &profile.name_lc,
                tags: &pending.tags,
                tags_lc: &profile.tags_lc,
                args: &pending.args,
                duration_ms: Some(duration_ms),
                output: outcome.output.as_ref().or(error_text.as_ref()),
            };
            let mut ctx = DecisionCtx::new(
                &self.engine.decide,
                &policies,
                &self.shared.facts,
                &profile,
                view,
                now,
                Vec::new(),
            );
            if let Some(store) = &shared_store {
                match self
                    .read_after_shared(&**store, &policies, &profile, now)
                    .await
                {
                    Ok(view) => ctx.remote = view,
                    Err(e) => {
                        let (d, _) = self.shared_failure(Phase::After, call_id, now, &e);
                        self.settle_after_shared(&**store, &profile, false, now, call_id)
                            .await;
                        return Some(d);
                    }
                }
            }
            extract_subjects(&mut ctx, rules).await;
            let verdict = evaluate_rules(&mut ctx, rules).await;
            // After phase: counters were taken by the before decision; give back any taken now.
            for (_, key, permit) in ctx.permits.drain(..) {
                self.engine.decide.state.release(&key, permit);
            }
            let mut d = base_decision(Phase::After, &verdict, &policies);
            d.evaluated = verdict.evaluated;
            d.signals = std::mem::take(&mut ctx.signals);
            if d.effect == EffectType::Hitl {
                let call = ToolCall {
                    id: call_id.to_string(),
                    name: pending.name.clone(),
                    tags: pending.tags.clone(),
                    args: pending.args.clone(),
                    subjects: Vec::new(),
                };
                self.resolve_hitl(&mut d, &call, now);
            }
            d.latency_ns = started.elapsed_ns();
            Some(d)
        };
        let decision = if too_deep {
            Some(super::edge::too_deep_after(decision))
        } else {
            decision
        };

        match &shared_store {
            Some(store) => {
                let abort = decision.as_ref().is_some_and(|d| d.abort_run);
                self.settle_after_shared(&**store, &profile, abort, now, call_id)
                    .await;
            }
            None => self
                .shared
                .facts
                .history
                .lock()
                .push(&profile, policies.tools.generation()),
        }
        // The evaluators' input lists the run's tool calls: kept only when an evaluator runs.
        let evaluators = &self.engine.evals;
        if audit && (!evaluators.per_tool.is_empty() || evaluators.per_run.is_some()) {
            self.shared
                .audit
                .tool_calls
                .lock()
                .push(crate::eval::ToolCallRecord {
                    name: pending.name.clone(),
                    args: pending.args.clone(),
                    output: outcome.output.clone(),
                    error: outcome.error.clone(),
                });
        }

        if audit {
            // Strings a sensitiveData rule detected (before or now) are redacted.
            let after_redaction = decision.as_ref().and_then(|d| {
                crate::engine::decide::conditions::redaction(
                    &pending.args,
                    pending.redaction.as_deref(),
                    &d.evaluated,
                )
            });
            let redaction = after_redaction.as_ref().or(pending.redaction.as_deref());
            if let Some(d) = &decision {
                let body = json!({
                    "phase": "tool.after",
                    "callId": call_id,
                    "tool": {"name": pending.name, "tags": pending.tags},
                    "args": redaction.map_or(&pending.args, |r| &r.args),
                    "decision": d,
                });
                self.emit(EventKind::ToolDecision, obj(body), now);
            }
            let (evaluation, slow) = self
                .engine
                .evaluate_tool_output(&self.shared, &pending.name, &pending.args, &outcome)
                .await;
            // The outcome is ours: its output moves into the event.
            let ToolOutcome {
                mut output, error, ..
            } = outcome;
            if let (Some(r), Some(out)) = (redaction, output.as_mut()) {
                crate::engine::decide::conditions::redact_strings(out, &r.detectors);
            }
            let body = Body::ToolResult {
                call: pending.into_shared(),
                duration_ms,
                metrics,
                outcome: match error {
                    Some(e) => Err(e),
                    None => Ok(output.unwrap_or(Value::Null)),
                },
                evaluation,
            };
            self.engine.emit_with_evaluation(
                &self.shared,
                EventKind::ToolResult,
                body,
                now,
                slow,
                Some(call_id),
            );
        }
        decision
    }

    /// Records a custom metric event for `metricWindow` rules.
    pub fn record_metric(&self, key: &str, value: f64) {
        let now = self.engine.clock.now();
        let policies = self.engine.policies.load_full();
        record_metric(
            &self.engine,
            &policies,
            &self.shared,
            key,
            None,
            value,
            now.timestamp_millis(),
        );
    }

    /// Records an LLM call: tokens and cost become the inbuilt metrics `llm_tokens_in`,
    /// `llm_tokens_out` and `llm_cost_usd`, and an `llm.result` event. The same as
    /// [`record_llm_usage`](Run::record_llm_usage) with a cost and no model, duration or call
    /// id.
    pub fn record_llm(&self, tokens_in: u64, tokens_out: u64, cost_usd: f64) {
        self.record_llm_usage(
            crate::engine::llm::LlmUsage::new(tokens_in, tokens_out).with_cost_usd(cost_usd),
        );
    }
}

pub(crate) fn record_metric(
    engine: &EngineInner,
    policies: &CompiledPolicies,
    run: &RunShared,
    key: &str,
    tool: Option<(&str, &[String])>,
    value: f64,
    at_ms: i64,
) {
    let Some(trackers) = policies.trackers_by_metric.get(key) else {
        return;
    };
    for &t in trackers {
        let spec = &policies.trackers[t];
        let accepted = match tool {
            Some((name, tags)) => spec.accepts(Some(name), tags),
            None => spec.accepts(None, &[]),
        };
        if !accepted {
            continue;
        }
        let key = run.facts.state_key(spec.slot, spec.scope);
        if engine.shared.is_some() {
            super::shared_state::buffer_metric(run, key, spec.window_seconds, value, at_ms);
        } else {
            engine
                .decide
                .state
                .record(&key, spec.window_seconds, at_ms, value);
        }
    }
}

/// The length of `v`'s compact JSON text, counted as it is written (nothing is kept).
fn json_len(v: &Value) -> f64 {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    match serde_json::to_writer(&mut n, v) {
        Ok(()) => n.0 as f64,
        Err(_) => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn json_len_is_the_compact_text_length() {
        for v in [
            json!(null),
            json!({"a": [1, "é\n", {"b": 2.5}]}),
            json!("x"),
        ] {
            let text = serde_json::to_vec(&v).expect("json");
            assert_eq!(super::json_len(&v), text.len() as f64);
        }
    }
}
