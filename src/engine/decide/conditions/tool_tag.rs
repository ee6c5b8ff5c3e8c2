//! `toolTag`: tests the tool's tags, case-insensitively.
use super::Tri;
use crate::engine::decide::ctx::DecisionCtx;
use crate::policy::TagOp;

pub(crate) fn eval(op: &TagOp, ctx: &mut DecisionCtx<'_>) -> Tri {
    let tags = ctx.call.tags_lc;
    match op {
        TagOp::Has(t) => tags.contains(t),
        TagOp::AnyOf(ts) => ts.iter().any(|t| tags.contains(t)),
        TagOp::AllOf(ts) => ts.iter().all(|t| tags.contains(t)),
    }
    .into()
}
