//! `maxCalls`: caps calls allowed to proceed. A slot is taken atomically when the count is
//! below `max` (condition false); it is given back if the call ends up not proceeding.
//!
//! A call that the counter's selector does not select takes no slot: the condition is then
//! just `count ≥ max` (the rule may cap other tools once the counted ones used the budget).
use super::Tri;
use crate::engine::decide::ctx::DecisionCtx;

pub(crate) fn eval(counter: u32, max: u64, ctx: &mut DecisionCtx<'_>) -> Tri {
    let idx = &ctx.policies.counters;
    let Some(spec) = idx.counters.get(counter as usize) else {
        return Tri::Unknown;
    };
    if !spec.tag_filter.is_empty() && !spec.passes(ctx.call.tags_lc) {
        // `tagFilter`: a call lacking a listed tag is neither counted nor limited.
        return Tri::False;
    }
    if let Some(remote) = &ctx.remote {
        // Read (and reserved, all or none) in the decision's one round trip: a slot was taken
        // iff every counting counter was below its limit.
        return match remote.count(counter) {
            Some(n) => (n >= max).into(),
            None => Tri::Unknown,
        };
    }
    if ctx.permits.iter().any(|(c, _, _)| *c == counter) {
        // Already counted for this call by an identical condition evaluation.
        return Tri::False;
    }
    let key = ctx.run.state_key(spec.slot, spec.scope);
    if !ctx.profile.counts(counter) {
        return (ctx
            .engine
            .state
            .count(&key, spec.window_seconds, ctx.now_ms())
            >= max)
            .into();
    }
    match ctx
        .engine
        .state
        .try_acquire(&key, max, spec.window_seconds, ctx.now_ms())
    {
        Some(permit) => {
            ctx.permits.push((counter, key, permit));
            Tri::False
        }
        None => Tri::True,
    }
}
