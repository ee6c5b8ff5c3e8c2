//! `sequence`: over the run's history of allowed calls whose result was recorded.
//!
//! Each history entry was matched against every sequence entry of the policies once, when its
//! result was recorded (the tool's profile holds the bits); the run keeps the union, so a
//! condition is a few bit tests whatever the length of the history.
use super::Tri;
use crate::engine::decide::ctx::DecisionCtx;
use crate::engine::decide::history::bit;

pub(crate) fn eval(must: &[u32], must_not: &[u32], ctx: &mut DecisionCtx<'_>) -> Tri {
    if let Some(remote) = &ctx.remote {
        return test(must, must_not, remote.seen());
    }
    let mut history = ctx.run.history.lock();
    test(must, must_not, history.seen(ctx.policies))
}

fn test(must: &[u32], must_not: &[u32], seen: &[u64]) -> Tri {
    let missing_required = must.iter().any(|&e| !bit(seen, e));
    let forbidden_seen = must_not.iter().any(|&e| bit(seen, e));
    (missing_required || forbidden_seen).into()
}
