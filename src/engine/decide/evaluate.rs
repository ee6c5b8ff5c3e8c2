//! One decision: the rules in play, their evaluation, and how their effects combine.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde_json::{Map, Value};

use super::call::SubjectRef;
use super::conditions::{Tri, eval_async, eval_sync};
use super::decision::{Decision, DecisionCode, Evaluated, EvaluatedRule, SignalRecord};
use super::env::{DecideEnv, RunFacts};
use super::profile::ToolProfile;
use super::subjects::SubjectInput;
use crate::policy::{Combine, CompiledPolicies, EffectType, Phase, phase_slot};
use smallvec::SmallVec;

use crate::state::{Permit, StateKey};

/// What a decision knows of the call.
pub(crate) struct CallView<'a> {
    pub(crate) name: &'a str,
    pub(crate) name_lc: &'a str,
    pub(crate) tags: &'a [String],
    pub(crate) tags_lc: &'a [String],
    pub(crate) args: &'a Value,
    pub(crate) duration_ms: Option<f64>,
    /// The tool's result (after phase): its output, or its error as a string.
    pub(crate) output: Option<&'a Value>,
}

/// Everything one decision reads and accumulates.
pub(crate) struct DecisionCtx<'a> {
    pub(crate) engine: &'a DecideEnv,
    pub(crate) policies: &'a CompiledPolicies,
    pub(crate) run: &'a RunFacts,
    /// What the policies say about the tool (rules in play, counters it takes).
    pub(crate) profile: &'a ToolProfile,
    pub(crate) call: CallView<'a>,
    /// The decision's time: read from `clock` when first asked (see [`DecisionCtx::now`]).
    now: std::cell::Cell<Option<DateTime<Utc>>>,
    /// Where `now` is read from when not given (`None`: it always is).
    clock: Option<&'a dyn crate::engine::clock::Clock>,
    pub(crate) subjects: Vec<SubjectRef>,
    pub(crate) permits: SmallVec<[(u32, StateKey, Permit); 4]>,
    pub(crate) signals: Vec<SignalRecord>,
    /// Missing data noted while evaluating the current rule.
    pub(crate) missing: Vec<String>,
    /// Effect forced by a condition's `onMissing` in the current rule.
    pub(crate) effect_override: Option<EffectType>,
    /// What `sensitiveData` conditions detected in the current rule (`None` when nothing was:
    /// a policy without `sensitiveData` pays one null pointer, moved into each evaluated rule).
    pub(crate) detections: Option<Box<[super::decision::Detection]>>,
    /// Detections of the current rule past those kept, counted.
    pub(crate) detected_more: u32,
    /// On a shared state store: what the decision read from it (conditions read here).
    pub(crate) remote: Option<super::remote::RemoteView>,
}

impl<'a> DecisionCtx<'a> {
    /// A fresh context for one decision about `call` at `now`.
    pub(crate) fn new(
        engine: &'a DecideEnv,
        policies: &'a CompiledPolicies,
        run: &'a RunFacts,
        profile: &'a ToolProfile,
        call: CallView<'a>,
        now: DateTime<Utc>,
        subjects: Vec<SubjectRef>,
    ) -> Self {
        let ctx = Self::new_at(engine, policies, run, profile, call, None, subjects);
        ctx.now.set(Some(now));
        ctx
    }

    /// [`new`](Self::new), the time read from `clock` only if the decision needs it (see
    /// [`set_now`](Self::set_now) when the caller has it already): a decision whose rules read
    /// no time and that raises no review never reads the clock.
    pub(crate) fn new_at(
        engine: &'a DecideEnv,
        policies: &'a CompiledPolicies,
        run: &'a RunFacts,
        profile: &'a ToolProfile,
        call: CallView<'a>,
        clock: Option<&'a dyn crate::engine::clock::Clock>,
        subjects: Vec<SubjectRef>,
    ) -> Self {
        DecisionCtx {
            engine,
            policies,
            run,
            profile,
            call,
            now: std::cell::Cell::new(None),
            clock,
            subjects,
            permits: SmallVec::new(),
            signals: Vec::new(),
            missing: Vec::new(),
            effect_override: None,
            detections: None,
            detected_more: 0,
            remote: None,
        }
    }
}

impl DecisionCtx<'_> {
    /// The decision's time (read from the clock once, when first asked).
    #[inline]
    pub(crate) fn now(&self) -> DateTime<Utc> {
        match self.now.get() {
            Some(t) => t,
            None => self.read_clock(),
        }
    }

    #[cold]
    #[inline(never)]
    fn read_clock(&self) -> DateTime<Utc> {
        let t = self.clock.map_or_else(Utc::now, |c| c.now());
        self.now.set(Some(t));
        t
    }

    /// Sets the decision's time (known to the caller).
    pub(crate) fn set_now(&mut self, now: DateTime<Utc>) {
        self.now.set(Some(now));
    }

    /// [`now`](Self::now) in milliseconds since the epoch.
    #[inline]
    pub(crate) fn now_ms(&self) -> i64 {
        self.now().timestamp_millis()
    }

    /// The decision's time, if something read it.
    pub(crate) fn now_if_read(&self) -> Option<DateTime<Utc>> {
        self.now.get()
    }

    pub(crate) fn note_missing(&mut self, what: String) {
        self.missing.push(what);
    }

    /// Adds detections of a `sensitiveData` condition to the current rule's.
    #[cold]
    pub(crate) fn add_detections(&mut self, found: Vec<super::decision::Detection>, more: u32) {
        self.detected_more = self.detected_more.saturating_add(more);
        if found.is_empty() {
            return;
        }
        self.detections = Some(match self.detections.take() {
            None => found.into_boxed_slice(),
            Some(had) => {
                let mut all = had.into_vec();
                all.extend(found);
                all.into_boxed_slice()
            }
        });
    }

    pub(crate) fn org_timezone(&self) -> Option<Tz> {
        self.engine.org_timezone.or(self.policies.org_timezone)
    }

    /// The value of a signal for these arguments: cached per decision, provider called with a
    /// timeout; panics, errors, timeouts and absent providers are missing data.
    pub(crate) async fn signal_value(
        &mut self,
        key: &Arc<str>,
        args: Map<String, Value>,
    ) -> Option<Value> {
        let args = Value::Object(args);
        if let Some(r) = self
            .signals
            .iter()
            .find(|r| &r.key == key && r.args == args)
        {
            let (value, error) = (r.value.clone(), r.error.clone());
            if let Some(e) = error {
                self.note_missing(format!("signal {key}: {e}"));
            }
            return value;
        }
        let provider = self.engine.signals.load().get(&**key).cloned();
        let started = Instant::now();
        let result: Result<Value, String> = match provider {
            None => Err("no provider registered".to_string()),
            Some(p) => {
                let Value::Object(map) = args.clone() else {
                    return None;
                };
                let timeout = self.engine.signal_timeout;
                call_user_code(timeout, || p.call(map))
                    .await
                    .map_err(|f| match f {
                        UserCodeFailure::Panicked => "the provider panicked".to_string(),
                        UserCodeFailure::Failed(e) => format!("the provider failed: {e}"),
                        UserCodeFailure::TimedOut => {
                            format!("timed out after {} ms", timeout.as_millis())
                        }
                    })
            }
        };
        let duration_us = started.elapsed().as_micros() as u64;
        let (value, error) = match result {
            Ok(v) => (Some(v), None),
            Err(e) => {
                self.note_missing(format!("signal {key}: {e}"));
                (None, Some(e))
            }
        };
        self.signals.push(SignalRecord {
            key: key.clone(),
            args,
            value: value.clone(),
            error,
            duration_us,
        });
        value
    }
}

impl DecisionCtx<'_> {
    /// The rules whose policy applies to the run's agent (its `agentSelector`).
    #[cold]
    fn selected_rules(&self, rules: &[u32]) -> SmallVec<[u32; 16]> {
        let ctx = &self.run.context;
        rules
            .iter()
            .copied()
            .filter(|&i| {
                let p = self.policies.rules[i as usize].policy as usize;
                match self
                    .policies
                    .policies
                    .get(p)
                    .and_then(|p| p.agents.as_ref())
                {
                    None => true,
                    Some(a) => a.selects(&ctx.agent_id, &ctx.agent_tags),
                }
            })
            .collect()
    }

    /// A custom condition's value: its registered function called with `args` and the call's
    /// context, with the signal timeout; panics, errors, timeouts and unregistered names are
    /// missing data.
    pub(crate) async fn custom_value(&mut self, name: &Arc<str>, args: &Value) -> Tri {
        let f = self.engine.customs.load().get(&**name).cloned();
        let Some(f) = f else {
            self.note_missing(format!("custom {name}: no function registered"));
            return Tri::Unknown;
        };
        let cc = super::custom::CustomContext {
            tool_name: self.call.name.to_string(),
            tool_tags: self.call.tags.to_vec(),
            args: self.call.args.clone(),
            run: self.run.context.clone(),
        };
        let args = args.clone();
        let timeout = self.engine.signal_timeout;
        match call_user_code(timeout, || f.call(args, cc)).await {
            Ok(b) => b.into(),
            Err(e) => {
                let why = match e {
                    UserCodeFailure::Panicked => "the function panicked".to_string(),
                    UserCodeFailure::Failed(e) => format!("the function failed: {e}"),
                    UserCodeFailure::TimedOut => {
                        format!("timed out after {} ms", timeout.as_millis())
                    }
                };
                self.note_missing(format!("custom {name}: {why}"));
                Tri::Unknown
            }
        }
    }
}

/// Why registered user code (a signal provider, a subject extractor) gave no result.
enum UserCodeFailure {
    Panicked,
    Failed(String),
    TimedOut,
}

/// Runs registered user code with a timeout, containing a panic while it makes its future as
/// well as while the future runs.
async fn call_user_code<T>(
    timeout: std::time::Duration,
    make: impl FnOnce() -> Pin<Box<dyn Future<Output = Result<T, String>> + Send>>,
) -> Result<T, UserCodeFailure> {
    let Ok(fut) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(make)) else {
        return Err(UserCodeFailure::Panicked);
    };
    let fut = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(fut));
    match tokio::time::timeout(timeout, fut).await {
        Err(_) => Err(UserCodeFailure::TimedOut),
        Ok(Err(_)) => Err(UserCodeFailure::Panicked),
        Ok(Ok(Err(e))) => Err(UserCodeFailure::Failed(e)),
        Ok(Ok(Ok(v))) => Ok(v),
    }
}

/// Per-policy combination state.
#[derive(Clone, Copy)]
struct Outcome {
    effect: EffectType,
    rule: u32,
}

fn fold(slot: &mut Option<Outcome>, combine: Combine, effect: EffectType, rule: u32) {
    match (slot.as_ref(), combine) {
        (None, _) => *slot = Some(Outcome { effect, rule }),
        (Some(_), Combine::PriorityFirst) => {}
        (Some(cur), Combine::MostSevereWins) => {
            if effect > cur.effect {
                *slot = Some(Outcome { effect, rule });
            }
        }
    }
}

/// Across policies the most severe effect wins; the deciding rule is the first (in priority
/// order) whose effect is the final one.
fn overall(per_policy: &[Option<Outcome>]) -> Option<Outcome> {
    let mut best: Option<Outcome> = None;
    for o in per_policy.iter().flatten() {
        best = match best {
            None => Some(*o),
            Some(b) if o.effect > b.effect || (o.effect == b.effect && o.rule < b.rule) => Some(*o),
            b => b,
        };
    }
    best
}

/// The result of evaluating the rules, before hitl lookup and audit.
pub(crate) struct RuleVerdict {
    pub(crate) effect: EffectType,
    pub(crate) rule: Option<usize>,
    pub(crate) shadow_effect: Option<EffectType>,
    pub(crate) evaluated: Evaluated,
}

/// Rules in play for a call in a phase, in evaluation order, worked out from the indexes
/// (decisions read them from the tool's cached profile).
pub(crate) fn rules_in_play_uncached(
    policies: &CompiledPolicies,
    phase: Phase,
    name_lc: &str,
    tags_lc: &[String],
) -> Vec<usize> {
    let index = &policies.phases[phase_slot(phase)];
    if !index.any {
        return Vec::new();
    }
    let mut out: Vec<usize> = Vec::new();
    if !index.glob_rule.is_empty() {
        // The glob hits, turned into rule indices in place (one allocation, not two).
        index.names.matches_into(name_lc, &mut out);
        out.retain_mut(|g| match index.glob_rule.get(*g) {
            Some(r) => {
                *g = *r as usize;
                true
            }
            None => false,
        });
    }
    out.extend(index.always.iter().map(|r| *r as usize));
    out.sort_unstable();
    out.dedup();
    out.retain(|&i| {
        let r = &policies.rules[i];
        r.tags_all.iter().all(|t| tags_lc.contains(t))
            && (r.tags_any.is_empty() || r.tags_any.iter().any(|t| tags_lc.contains(t)))
    });
    out
}

/// Extracts subjects with the extractors registered for the tool.
pub(crate) async fn extract_subjects(ctx: &mut DecisionCtx<'_>, rules: &[u32]) {
    if !rules
        .iter()
        .any(|&i| ctx.policies.rules[i as usize].needs_subjects)
    {
        return;
    }
    let extractors = ctx.engine.extractors.load();
    let name_lc = ctx.call.name_lc;
    for ex in extractors.iter().filter(|e| e.glob.is_match(name_lc)) {
        let input = SubjectInput {
            tool_name: ctx.call.name.to_string(),
            tool_tags: ctx.call.tags.to_vec(),
            args: ctx.call.args.clone(),
            run: ctx.run.context.clone(),
        };
        match call_user_code(ctx.engine.signal_timeout, || ex.extractor.extract(input)).await {
            Ok(subjects) => ctx.subjects.extend(subjects),
            Err(UserCodeFailure::Failed(e)) => {
                ctx.note_missing(format!("subject extractor failed: {e}"))
            }
            Err(UserCodeFailure::Panicked) => {
                ctx.note_missing("subject extractor panicked".to_string())
            }
            Err(UserCodeFailure::TimedOut) => {
                ctx.note_missing("subject extractor timed out".to_string())
            }
        }
    }
}

/// Combines the rules' results as they are evaluated, in priority order.
///
/// While every rule comes out plainly (true or false, no missing data, no detection, no
/// effect forced by `onMissing`), each rule's entry in the decision's `evaluated` list follows
/// from the rule and one bit (triggered): the bits are kept instead of the list, and the list
/// for those bits is shared from the tool's profile (see `EvaluatedCache`). The first rule
/// that does not come out plainly turns the bits into a list of the decision's own.
struct Combiner<'r> {
    /// The rules evaluated, in order.
    rules: &'r [u32],
    /// Per policy: the outcome of the enforced rules (first half) and of all rules (second half).
    outcomes: SmallVec<[Option<Outcome>; 8]>,
    n_policies: usize,
    any_shadow: bool,
    /// Every rule so far came out plainly: `triggered` stands for `evaluated`.
    plain: bool,
    /// Bit `k`: the `k`-th rule evaluated triggered (while `plain`).
    triggered: u64,
    /// Rules evaluated so far.
    count: usize,
    evaluated: Vec<EvaluatedRule>,
    extraction_missing: Vec<String>,
}

/// Rules a decision's bits stand for at most (beyond: the list of its own).
const PLAIN_MAX: usize = 64;

/// The `evaluated` entry of a rule that came out plainly.
fn plain_entry(rule: &crate::policy::CompiledRule, triggered: bool) -> EvaluatedRule {
    EvaluatedRule {
        rule_id: rule.id.clone(),
        triggered,
        effect: rule.effect,
        shadow: rule.shadow,
        missing: Vec::new(),
        error: None,
        detected: None,
        detected_more: 0,
    }
}

/// The `evaluated` entries of plainly evaluated `rules` whose triggered ones are the bits of
/// `triggered`.
pub(crate) fn plain_entries<'p>(
    policies: &'p CompiledPolicies,
    rules: &'p [u32],
    triggered: u64,
) -> impl Iterator<Item = EvaluatedRule> + 'p {
    rules
        .iter()
        .enumerate()
        .map(move |(k, &i)| plain_entry(&policies.rules[i as usize], (triggered >> k) & 1 == 1))
}

impl<'r> Combiner<'r> {
    #[inline(always)]
    fn new(ctx: &mut DecisionCtx<'_>, rules: &'r [u32]) -> Combiner<'r> {
        let n_policies = ctx.policies.policies.len();
        Combiner {
            rules,
            outcomes: smallvec::smallvec![None; 2 * n_policies],
            n_policies,
            any_shadow: false,
            plain: rules.len() <= PLAIN_MAX,
            triggered: 0,
            count: 0,
            evaluated: if rules.len() <= PLAIN_MAX {
                Vec::new()
            } else {
                Vec::with_capacity(rules.len())
            },
            extraction_missing: std::mem::take(&mut ctx.missing),
        }
    }

    /// Resets the per-rule state of the context before rule `i` is evaluated.
    #[inline(always)]
    fn start(&self, ctx: &mut DecisionCtx<'_>, i: usize) {
        let rule = &ctx.policies.rules[i];
        ctx.missing.clear();
        if rule.needs_subjects && !self.extraction_missing.is_empty() {
            ctx.missing.extend(self.extraction_missing.iter().cloned());
        }
        ctx.effect_override = None;
    }

    /// Folds in rule `i`, whose condition came out `t`.
    #[inline(always)]
    fn push(&mut self, ctx: &mut DecisionCtx<'_>, i: usize, t: Tri) {
        let policies = ctx.policies;
        let rule = &policies.rules[i];
        let (triggered, effect) = match t {
            Tri::True => (true, ctx.effect_override.unwrap_or(rule.effect)),
            Tri::False => (false, rule.effect),
            Tri::Unknown => match rule.on_missing {
                EffectType::Allow => (false, rule.effect),
                e => (true, e),
            },
        };
        let p = rule.policy as usize;
        let combine = policies.policies[p].combine;
        if triggered {
            let (enforced, full) = self.outcomes.split_at_mut(self.n_policies);
            fold(&mut full[p], combine, effect, i as u32);
            if rule.shadow {
                self.any_shadow = true;
            } else {
                fold(&mut enforced[p], combine, effect, i as u32);
            }
        }
        let plain = t != Tri::Unknown
            && ctx.effect_override.is_none()
            && ctx.missing.is_empty()
            && ctx.detections.is_none()
            && ctx.detected_more == 0;
        if self.plain {
            if plain {
                self.triggered |= u64::from(triggered) << self.count;
                self.count += 1;
                return;
            }
            self.own_list(policies);
        }
        self.count += 1;
        self.evaluated.push(EvaluatedRule {
            rule_id: rule.id.clone(),
            triggered,
            effect,
            shadow: rule.shadow,
            missing: std::mem::take(&mut ctx.missing),
            error: None,
            detected: ctx.detections.take(),
            detected_more: std::mem::take(&mut ctx.detected_more),
        });
    }

    /// Turns the bits of the rules evaluated so far into a list of the decision's own.
    #[cold]
    #[inline(never)]
    fn own_list(&mut self, policies: &CompiledPolicies) {
        self.plain = false;
        let mut list = Vec::with_capacity(self.rules.len());
        list.extend(plain_entries(
            policies,
            &self.rules[..self.count],
            self.triggered,
        ));
        self.evaluated = list;
    }

    #[inline(always)]
    /// The verdict (by reference: moving the combiner in would copy it).
    fn finish(&mut self, ctx: &DecisionCtx<'_>) -> RuleVerdict {
        let (enforced, full) = self.outcomes.split_at(self.n_policies);
        let decided = overall(enforced);
        let shadow_effect = if self.any_shadow {
            Some(overall(full).map_or(EffectType::Allow, |o| o.effect))
        } else {
            None
        };
        let evaluated = if !self.plain {
            Evaluated::from(std::mem::take(&mut self.evaluated))
        } else if self.count == 0 {
            Evaluated::default()
        } else {
            ctx.profile
                .evaluated_list(ctx.policies, &self.rules[..self.count], self.triggered)
        };
        RuleVerdict {
            effect: decided.map_or(EffectType::Allow, |o| o.effect),
            rule: decided.map(|o| o.rule as usize),
            shadow_effect,
            evaluated,
        }
    }
}

/// Evaluates the rules in play and combines their effects; signal providers are awaited.
pub(crate) async fn evaluate_rules(ctx: &mut DecisionCtx<'_>, rules: &[u32]) -> RuleVerdict {
    if ctx.policies.agent_gated {
        let selected = ctx.selected_rules(rules);
        return Box::pin(evaluate_selected(ctx, &selected)).await;
    }
    evaluate_selected(ctx, rules).await
}

/// [`evaluate_rules`] over rules already filtered by their policies' `agentSelector`.
async fn evaluate_selected(ctx: &mut DecisionCtx<'_>, rules: &[u32]) -> RuleVerdict {
    let mut c = Combiner::new(ctx, rules);
    for &i in rules {
        let i = i as usize;
        c.start(ctx, i);
        let rule = &ctx.policies.rules[i];
        let t = if rule.has_signal {
            eval_async(&rule.condition, ctx).await
        } else {
            eval_sync(&rule.condition, ctx)
        };
        c.push(ctx, i, t);
    }
    c.finish(ctx)
}

/// Evaluates rules none of which asks a signal provider, without a runtime.
pub(crate) fn evaluate_rules_sync(ctx: &mut DecisionCtx<'_>, rules: &[u32]) -> RuleVerdict {
    if ctx.policies.agent_gated {
        return evaluate_gated_sync(ctx, rules);
    }
    evaluate_selected_sync(ctx, rules)
}

/// [`evaluate_rules_sync`] when a policy has an `agentSelector`: out of line, so that policies
/// without one do not carry its frame.
#[cold]
#[inline(never)]
fn evaluate_gated_sync(ctx: &mut DecisionCtx<'_>, rules: &[u32]) -> RuleVerdict {
    let selected = ctx.selected_rules(rules);
    evaluate_selected_sync(ctx, &selected)
}

#[inline(always)]
fn evaluate_selected_sync(ctx: &mut DecisionCtx<'_>, rules: &[u32]) -> RuleVerdict {
    let mut c = Combiner::new(ctx, rules);
    for &i in rules {
        let i = i as usize;
        c.start(ctx, i);
        let t = eval_sync(&ctx.policies.rules[i].condition, ctx);
        c.push(ctx, i, t);
    }
    c.finish(ctx)
}

/// Builds the decision from a verdict (hitl handled by the caller).
pub(crate) fn base_decision(
    phase: Phase,
    verdict: &RuleVerdict,
    policies: &CompiledPolicies,
) -> Decision {
    let mut d = Decision::simple(phase, verdict.effect, DecisionCode::Allowed, None);
    base_decision_into(&mut d, phase, verdict, policies);
    d
}

/// [`base_decision`], written into `d` (a decision fresh from `Decision::simple`): sets the
/// phase, effect, code, reason, rule, policy and shadow fields.
pub(crate) fn base_decision_into(
    d: &mut Decision,
    phase: Phase,
    verdict: &RuleVerdict,
    policies: &CompiledPolicies,
) {
    let rule = verdict.rule.map(|i| &policies.rules[i]);
    d.phase = phase;
    d.effect = verdict.effect;
    d.code = match verdict.effect {
        EffectType::Allow => DecisionCode::Allowed,
        EffectType::Block => DecisionCode::BlockedRule,
        EffectType::Hitl => DecisionCode::BlockedHitlRequested,
    };
    if let Some(r) = rule {
        d.reason.clone_from(&r.reason);
        d.rule_id = Some(r.id.clone());
        d.policy_id.clone_from(&r.policy_id);
    }
    d.shadow = verdict.shadow_effect.is_some();
    d.shadow_effect = verdict.shadow_effect;
}
