//! `metricWindow`: an aggregate of a metric over the last `windowSeconds`.
use super::Tri;
use crate::engine::decide::ctx::DecisionCtx;
use crate::policy::{Aggregate, CmpOp};

pub(crate) fn eval(
    tracker: u32,
    aggregate: Aggregate,
    op: CmpOp,
    value: f64,
    ctx: &mut DecisionCtx<'_>,
) -> Tri {
    let Some(spec) = ctx.policies.trackers.get(tracker as usize) else {
        return Tri::Unknown;
    };
    let stats = match &ctx.remote {
        Some(remote) => remote.window(tracker).unwrap_or_default(),
        None => {
            let key = ctx.run.state_key(spec.slot, spec.scope);
            ctx.engine
                .state
                .window(&key, spec.window_seconds, ctx.now_ms())
        }
    };
    let agg = match aggregate {
        Aggregate::Sum => Some(stats.sum),
        Aggregate::Count => Some(stats.count as f64),
        Aggregate::Avg => stats.avg(),
        Aggregate::Min => stats.min,
        Aggregate::Max => stats.max,
    };
    match agg {
        Some(x) => op.apply(x, value).into(),
        None => {
            ctx.note_missing(format!(
                "metricWindow {}: no events in the window",
                aggregate.as_str()
            ));
            Tri::Unknown
        }
    }
}
