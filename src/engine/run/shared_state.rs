//! Decisions on a state store shared by processes ([`SharedStateStore`], e.g. Redis).
//!
//! Per tool and policy set the engine works out once ([`StatePlan`], kept in the tool's
//! profile) which counters, metric windows and run data the rules in play read. A decision then
//! asks the store for exactly those in **one** round trip (taking a slot in each counter that
//! counts the call, all or none), evaluates the rules on that snapshot ([`RemoteView`]), and
//! writes the outcome in one more round trip only when there is something to write (slots to
//! give back, counters the call also counts, a history entry, metric events, the abort flag).
//!
//! Metric events recorded outside a call (`Run::record_metric`, `Run::record_llm`) are kept by
//! the run until its next write; reads of the run made meanwhile include them.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use chrono::{DateTime, Utc};
use serde_json::json;

use super::handle::{Run, RunShared, ToolCall, obj};
use super::parts::call_view;
use crate::audit::EventKind;
use crate::engine::decide::decision::Decision;
use crate::engine::decide::evaluate::{DecisionCtx, evaluate_rules, extract_subjects};
use crate::engine::decide::profile::ToolProfile;
use crate::engine::decide::remote::{RemoteView, StatePlan};
use crate::policy::{CompiledPolicies, EffectType, Phase, Scope};
use crate::state::WindowStats;
use crate::state::shared::{
    CounterAdd, CounterOp, LeaseHold, MetricEvent, Settlement, SharedStateError, SharedStateStore,
    StateRequest, StateSnapshot, WindowOp, history_entry, parse_history_entry,
};

fn window_ms(secs: u64) -> i64 {
    i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX)
}

/// Adds an event to window aggregates.
fn patch(w: &mut WindowStats, v: f64) {
    w.count += 1;
    w.sum += v;
    w.min = Some(w.min.map_or(v, |m| m.min(v)));
    w.max = Some(w.max.map_or(v, |m| m.max(v)));
}

/// The request of a plan: counters (a slot taken in those counting the call when `reserve`)
/// and windows.
fn ops(
    policies: &CompiledPolicies,
    run: &RunShared,
    profile: &ToolProfile,
    plan: &StatePlan,
    reserve: bool,
) -> (Vec<CounterOp>, Vec<WindowOp>) {
    let counters = plan
        .counters
        .iter()
        .filter_map(|&(c, max)| {
            let spec = policies.counters.counters.get(c as usize)?;
            Some(CounterOp {
                key: run.facts.state_key(spec.slot, spec.scope),
                max,
                window_secs: spec.window_seconds,
                reserve: reserve && profile.counts(c),
                run_scoped: spec.scope == Scope::Run,
            })
        })
        .collect();
    let windows = plan
        .trackers
        .iter()
        .filter_map(|&t| {
            let spec = policies.trackers.get(t as usize)?;
            Some(WindowOp {
                key: run.facts.state_key(spec.slot, spec.scope),
                window_secs: spec.window_seconds,
            })
        })
        .collect();
    (counters, windows)
}

/// The view of a snapshot, with the run's metric events not written yet.
fn view(
    policies: &crate::engine::decide::profile::PolicySet,
    run: &RunShared,
    plan: &StatePlan,
    snap: &StateSnapshot,
    now_ms: i64,
) -> RemoteView {
    let counters = plan
        .counters
        .iter()
        .zip(&snap.counts)
        .map(|(&(c, _), n)| (c, *n))
        .collect();
    let buffered = run.buffered.lock();
    let windows = plan
        .trackers
        .iter()
        .zip(&snap.windows)
        .map(|(&t, w)| {
            let mut w = *w;
            if let Some(spec) = policies.trackers.get(t as usize) {
                let key = run.facts.state_key(spec.slot, spec.scope);
                let from = now_ms.saturating_sub(window_ms(spec.window_seconds));
                for e in buffered.iter() {
                    if e.key == key && e.at_ms > from && e.at_ms <= now_ms {
                        patch(&mut w, e.value);
                    }
                }
            }
            (t, w)
        })
        .collect();
    let mut seen: Vec<u64> = Vec::new();
    for entry in &snap.history {
        let (name, tags) = parse_history_entry(entry);
        let p = policies.tools.profile(policies, name, &tags);
        if seen.len() < p.seq_bits.len() {
            seen.resize(p.seq_bits.len(), 0);
        }
        for (d, s) in seen.iter_mut().zip(p.seq_bits.iter()) {
            *d |= *s;
        }
    }
    RemoteView {
        counters,
        windows,
        seen,
    }
}

/// The run-scoped counters and windows of the policies (forgotten when a run ends).
pub(crate) fn run_scoped_keys(
    policies: &CompiledPolicies,
    run: &RunShared,
) -> Vec<crate::state::StateKey> {
    let counters = policies
        .counters
        .counters
        .iter()
        .filter(|c| c.scope == Scope::Run)
        .map(|c| run.facts.state_key(c.slot, c.scope));
    let trackers = policies
        .trackers
        .iter()
        .filter(|t| t.scope == Scope::Run)
        .map(|t| run.facts.state_key(t.slot, t.scope));
    counters.chain(trackers).collect()
}

impl Run {
    fn store_request<'a>(
        &'a self,
        counters: &'a [CounterOp],
        windows: &'a [WindowOp],
        history: bool,
        resume: bool,
        now_ms: i64,
        lease: Option<&'a LeaseHold>,
    ) -> StateRequest<'a> {
        StateRequest {
            lease,
            agent: &self.shared.facts.context.agent_id,
            run_id: &self.shared.facts.context.run_id,
            counters,
            windows,
            history,
            resume,
            now_ms,
        }
    }

    /// Writes a settlement (with the run's metric events not written yet); a failure becomes
    /// an `error` audit event (the decision stands) and the metric events are kept for the
    /// next write.
    pub(crate) async fn settle_shared(
        &self,
        store: &dyn SharedStateStore,
        mut settlement: Settlement,
        now: DateTime<Utc>,
        call_id: &str,
    ) {
        if self.shared.audit.lost.load(Ordering::Acquire) {
            // Another holder has the run: its state is not this handle's to write.
            self.shared.buffered.lock().clear();
            return;
        }
        let buffered = std::mem::take(&mut *self.shared.buffered.lock());
        let n_buffered = buffered.len();
        settlement.metrics.extend(buffered);
        if settlement.is_empty() {
            return;
        }
        let ctx = &self.shared.facts.context;
        let at = now.timestamp_millis();
        if let Err(e) = store
            .settle(&ctx.agent_id, &ctx.run_id, &settlement, at)
            .await
        {
            let keep = settlement.metrics.len() - n_buffered;
            let mut back: Vec<MetricEvent> = settlement.metrics.drain(keep..).collect();
            let mut buffered = self.shared.buffered.lock();
            back.append(&mut buffered);
            *buffered = back;
            self.emit(
                EventKind::Error,
                obj(json!({
                    "message": format!("state store: writing the call's outcome failed: {e}"),
                    "callId": call_id,
                })),
                now,
            );
        }
    }

    /// A `tool.before` decision on a shared store: one read (and reservation), the rules, and
    /// one write when the outcome changes anything.
    pub(crate) async fn decide_before_shared(
        &self,
        store: &dyn SharedStateStore,
        call: &ToolCall,
        now: DateTime<Utc>,
        policies: Arc<crate::engine::decide::profile::PolicySet>,
        profile: Arc<ToolProfile>,
    ) -> (Decision, bool) {
        let lease = match self.reservation_lease() {
            Ok(l) => l,
            Err(e) => return self.shared_failure(Phase::Before, &call.id, now, &e),
        };
        let plan = profile.plan(&policies, Phase::Before);
        let (counters, windows) = ops(&policies, &self.shared, &profile, plan, true);
        let now_ms = now.timestamp_millis();
        let resume = self.shared.resume_pending.swap(false, Ordering::AcqRel);
        let req = self.store_request(
            &counters,
            &windows,
            plan.history,
            resume,
            now_ms,
            lease.as_ref(),
        );
        let snap = match store.reserve(req).await.and_then(|s| self.check_lease(s)) {
            Ok(s) => s,
            Err(e) => {
                if resume {
                    self.shared.resume_pending.store(true, Ordering::Release);
                }
                return self.shared_failure(Phase::Before, &call.id, now, &e);
            }
        };
        self.shared.aborted.store(snap.aborted, Ordering::Release);
        if snap.aborted {
            return (super::parts::aborted_decision(), false);
        }
        let mut ctx = DecisionCtx::new(
            &self.engine.decide,
            &policies,
            &self.shared.facts,
            &profile,
            call_view(call, &profile, None),
            now,
            call.subjects.clone(),
        );
        ctx.remote = Some(view(&policies, &self.shared, plan, &snap, now_ms));
        let rules = &profile.rules[0];
        if !rules.is_empty() {
            extract_subjects(&mut ctx, rules).await;
        }
        let verdict = evaluate_rules(&mut ctx, rules).await;
        let (decision, proceeds) = self.conclude_before(call, now, &mut ctx, verdict);

        let mut settlement = Settlement::default();
        if proceeds {
            let reserved = |c: u32| {
                snap.granted && plan.counters.iter().any(|(p, _)| *p == c) && profile.counts(c)
            };
            for &c in profile.counters.iter().filter(|&&c| !reserved(c)) {
                if let Some(spec) = policies.counters.counters.get(c as usize) {
                    settlement.adds.push(CounterAdd {
                        key: self.shared.facts.state_key(spec.slot, spec.scope),
                        window_secs: spec.window_seconds,
                        run_scoped: spec.scope == Scope::Run,
                    });
                }
            }
        } else {
            settlement.release = snap.permits;
        }
        if decision.abort_run {
            settlement.aborted = Some(true);
        }
        self.settle_shared(store, settlement, now, &call.id).await;
        (decision, proceeds)
    }

    /// The after phase's reads on a shared store (`None`: the rules read nothing from the
    /// past), the call's own metric events included.
    pub(crate) async fn read_after_shared(
        &self,
        store: &dyn SharedStateStore,
        policies: &crate::engine::decide::profile::PolicySet,
        profile: &ToolProfile,
        now: DateTime<Utc>,
    ) -> Result<Option<RemoteView>, SharedStateError> {
        let plan = profile.plan(policies, Phase::After);
        if plan.is_empty() {
            return Ok(None);
        }
        let lease = self.reservation_lease()?;
        let (counters, windows) = ops(policies, &self.shared, profile, plan, false);
        let now_ms = now.timestamp_millis();
        let resume = self.shared.resume_pending.swap(false, Ordering::AcqRel);
        let req = self.store_request(
            &counters,
            &windows,
            plan.history,
            resume,
            now_ms,
            lease.as_ref(),
        );
        match store.reserve(req).await.and_then(|s| self.check_lease(s)) {
            Ok(snap) => Ok(Some(view(policies, &self.shared, plan, &snap, now_ms))),
            Err(e) => {
                if resume {
                    self.shared.resume_pending.store(true, Ordering::Release);
                }
                Err(e)
            }
        }
    }

    /// The after phase's write: the history entry, the call's metric events, the abort flag.
    pub(crate) async fn settle_after_shared(
        &self,
        store: &dyn SharedStateStore,
        profile: &ToolProfile,
        abort: bool,
        now: DateTime<Utc>,
        call_id: &str,
    ) {
        let settlement = Settlement {
            history: Some(history_entry(&profile.name_lc, &profile.tags_lc)),
            aborted: abort.then_some(true),
            ..Settlement::default()
        };
        self.settle_shared(store, settlement, now, call_id).await;
    }

    /// The error a decision of a run whose lease was lost (or never had) fails with.
    fn lease_lost_error(&self) -> Option<SharedStateError> {
        let a = &self.shared.audit;
        a.lost.load(Ordering::Acquire).then(|| {
            SharedStateError(format!(
                "this handle does not hold run {:?} (its lease was taken over, or another \
                 holder had it): the call is decided by the failure mode and not written into \
                 the run's chain",
                self.shared.facts.context.run_id
            ))
        })
    }

    /// The lease a reservation renews (`None`: the run is not held under one), or the error
    /// when it was lost. The lease timer can find the loss on its own thread at any moment,
    /// also between the check and the read of the hold: a hold read as gone is checked
    /// again, so a reservation of a run taken over never goes out without its lease (it
    /// would be answered as if the run were still this handle's).
    fn reservation_lease(&self) -> Result<Option<LeaseHold>, SharedStateError> {
        if let Some(e) = self.lease_lost_error() {
            return Err(e);
        }
        let lease = self.engine.lease_hold(&self.shared);
        if lease.is_none()
            && let Some(e) = self.lease_lost_error()
        {
            return Err(e);
        }
        Ok(lease)
    }

    /// A reservation that found the run taken over: the handle lets go of the run's chain.
    fn check_lease(&self, snap: StateSnapshot) -> Result<StateSnapshot, SharedStateError> {
        match &snap.lease_lost {
            None => Ok(snap),
            Some(holder) => {
                self.engine.lose_lease(&self.shared, Some(holder));
                Err(self
                    .lease_lost_error()
                    .unwrap_or_else(|| SharedStateError("the run's lease was taken over".into())))
            }
        }
    }

    /// The decision when the shared store failed: by the failure mode, with an `error` event.
    pub(crate) fn shared_failure(
        &self,
        phase: Phase,
        call_id: &str,
        now: DateTime<Utc>,
        e: &SharedStateError,
    ) -> (Decision, bool) {
        let d = self.failure(phase, call_id, now, &format!("state store: {e}"));
        let proceeds = d.effect == EffectType::Allow;
        (d, proceeds)
    }

    /// Writes the metric events recorded since the last write (a shared store only).
    ///
    /// [`record_metric`](Run::record_metric) and [`record_llm`](Run::record_llm) are not
    /// async: on a shared store their events are written with the run's next decision (and
    /// counted by the run's own decisions meanwhile). Call this to make them visible to other
    /// processes at once. Failures are `error` audit events.
    pub async fn flush_state(&self) {
        if let Some(store) = self.engine.shared.clone() {
            let now = self.engine.clock.now();
            self.settle_shared(&*store, Settlement::default(), now, "")
                .await;
        }
    }
}

/// Keeps a metric event for the run's next write to the shared store.
pub(crate) fn buffer_metric(
    run: &RunShared,
    key: crate::state::StateKey,
    window_secs: u64,
    value: f64,
    at_ms: i64,
) {
    if value.is_finite() {
        run.buffered.lock().push(MetricEvent {
            at_ms,
            key,
            window_secs,
            value,
        });
    }
}

impl Run {
    /// Ends the run on a shared store: writes what is left and forgets the run's history,
    /// flags and run-scoped counters and windows. Failures are `error` audit events.
    pub(crate) async fn end_shared(&self, store: &dyn SharedStateStore) {
        if self.shared.audit.lost.load(Ordering::Acquire) {
            // Another holder has the run: its state is not this handle's to forget.
            return;
        }
        let now = self.engine.clock.now();
        self.settle_shared(store, Settlement::default(), now, "")
            .await;
        let policies = self.engine.policies.load_full();
        let scoped = run_scoped_keys(&policies, &self.shared);
        let ctx = &self.shared.facts.context;
        if let Err(e) = store.end_run(&ctx.agent_id, &ctx.run_id, &scoped).await {
            self.emit(
                EventKind::Error,
                obj(json!({"message": format!("state store: ending the run failed: {e}")})),
                now,
            );
        }
    }
}
