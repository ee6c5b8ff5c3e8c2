//! One decision: the rules in play, their evaluation, and how their effects combine.

use super::conditions::{eval_async, eval_sync};
pub(crate) use super::ctx::{CallView, DecisionCtx};
use super::ctx::{Tri, UserCodeFailure, call_user_code, release_vec};
use super::in_play::{PLAIN_MAX, plain_entries};

use super::decision::{Decision, DecisionCode, Evaluated, EvaluatedRule};
use super::subjects::SubjectInput;
use crate::policy::{Combine, CompiledPolicies, CompiledRule, EffectType, Phase};
use smallvec::SmallVec;

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
    fn start(&self, ctx: &mut DecisionCtx<'_>, rule: &CompiledRule) {
        ctx.missing.clear();
        if rule.needs_subjects && !self.extraction_missing.is_empty() {
            ctx.missing.extend(self.extraction_missing.iter().cloned());
        }
        ctx.effect_override = None;
    }

    /// Folds in rule `i` (`rule`), whose condition came out `t`.
    #[inline(always)]
    fn push(&mut self, ctx: &mut DecisionCtx<'_>, i: usize, rule: &CompiledRule, t: Tri) {
        let policies = ctx.policies;
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

    /// Frees what the combiner holds, for one kept in a `ManuallyDrop`: its containers
    /// usually never allocated (see [`DecisionCtx::release`]).
    #[inline(always)]
    fn release(&mut self) {
        let Combiner {
            rules: _,
            outcomes,
            n_policies: _,
            any_shadow: _,
            plain: _,
            triggered: _,
            count: _,
            evaluated,
            extraction_missing,
        } = self;
        if outcomes.spilled() {
            // Inline it holds plain `Copy` values: nothing to free.
            drop(std::mem::take(outcomes));
        }
        release_vec(evaluated);
        release_vec(extraction_missing);
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
    let policies = ctx.policies;
    for &i in rules {
        let i = i as usize;
        let rule = &policies.rules[i];
        c.start(ctx, rule);
        let t = if rule.has_signal {
            eval_async(&rule.condition, ctx).await
        } else {
            eval_sync(&rule.condition, ctx)
        };
        c.push(ctx, i, rule, t);
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
    // Released by hand (see `Combiner::release`).
    let mut c = std::mem::ManuallyDrop::new(Combiner::new(ctx, rules));
    // The rule read once per iteration (one bounds check, not three).
    let policies = ctx.policies;
    for &i in rules {
        let i = i as usize;
        let rule = &policies.rules[i];
        c.start(ctx, rule);
        let t = eval_sync(&rule.condition, ctx);
        c.push(ctx, i, rule, t);
    }
    let verdict = c.finish(ctx);
    c.release();
    verdict
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
