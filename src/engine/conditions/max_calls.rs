//! `maxCalls`: caps calls allowed to proceed. A slot is taken atomically when the count is
//! below `max` (condition false); it is given back if the call ends up not proceeding.
use super::Tri;
use crate::engine::evaluate::DecisionCtx;

pub(crate) fn eval(counter: u32, max: u64, ctx: &mut DecisionCtx<'_>) -> Tri {
    if ctx.permits.iter().any(|(c, _, _)| *c == counter) {
        // Already counted for this call by an identical condition evaluation.
        return Tri::False;
    }
    let Some(spec) = ctx.policies.counters.counters.get(counter as usize) else {
        return Tri::Unknown;
    };
    let key = ctx.run.state_key(spec.slot, spec.scope);
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
