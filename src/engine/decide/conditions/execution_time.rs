//! `executionTime`: this call's duration (after phase) or the run's elapsed time.
use super::Tri;
use crate::engine::decide::ctx::DecisionCtx;
use crate::policy::{CmpOp, TimeScope};

pub(crate) fn eval(scope: TimeScope, op: CmpOp, ms: f64, ctx: &mut DecisionCtx<'_>) -> Tri {
    let measured = match scope {
        TimeScope::Tool => ctx.call.duration_ms,
        TimeScope::Total => Some((ctx.now_ms() - ctx.run.started_ms) as f64),
    };
    match measured {
        Some(d) => op.apply(d, ms).into(),
        None => {
            ctx.note_missing("executionTime tool: no duration before the call ran".to_string());
            Tri::Unknown
        }
    }
}
