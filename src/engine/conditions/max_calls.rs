//! `maxCalls`: caps calls allowed to proceed. A slot is taken atomically when the count is
//! below `max` (condition false); it is given back if the call ends up not proceeding.
//!
//! A call that the counter's selector does not select takes no slot: the condition is then
//! just `count ≥ max` (the rule may cap other tools once the counted ones used the budget).
use super::Tri;
use crate::engine::evaluate::DecisionCtx;
use crate::policy::CounterIndex;

/// Whether counter `counter` counts a call of this tool.
fn selects(idx: &CounterIndex, counter: u32, name_lc: &str, tags_lc: &[String]) -> bool {
    if tags_lc
        .iter()
        .any(|t| idx.by_tag.get(t).is_some_and(|cs| cs.contains(&counter)))
    {
        return true;
    }
    idx.glob_counter.contains(&counter)
        && idx
            .names
            .matches(name_lc)
            .into_iter()
            .any(|g| idx.glob_counter.get(g) == Some(&counter))
}

pub(crate) fn eval(counter: u32, max: u64, ctx: &mut DecisionCtx<'_>) -> Tri {
    if ctx.permits.iter().any(|(c, _, _)| *c == counter) {
        // Already counted for this call by an identical condition evaluation.
        return Tri::False;
    }
    let idx = &ctx.policies.counters;
    let Some(spec) = idx.counters.get(counter as usize) else {
        return Tri::Unknown;
    };
    let key = ctx.run.state_key(spec.slot, spec.scope);
    if !selects(idx, counter, ctx.call.name_lc, ctx.call.tags_lc) {
        return (ctx
            .engine
            .state
            .count(&key, spec.window_seconds, ctx.now_ms)
            >= max)
            .into();
    }
    match ctx
        .engine
        .state
        .try_acquire(&key, max, spec.window_seconds, ctx.now_ms)
    {
        Some(permit) => {
            ctx.permits.push((counter, key, permit));
            Tri::False
        }
        None => Tri::True,
    }
}
