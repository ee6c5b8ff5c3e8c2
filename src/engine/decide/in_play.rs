//! Which rules are in play for a tool in a phase (worked out once per tool, kept in its
//! profile), and the `evaluated` list of rules that came out plainly (shared by the profile).

use super::decision::EvaluatedRule;
use crate::policy::{CompiledPolicies, Phase, phase_slot};

/// Rules a decision's bits stand for at most (beyond: the list of its own).
pub(crate) const PLAIN_MAX: usize = 64;

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
