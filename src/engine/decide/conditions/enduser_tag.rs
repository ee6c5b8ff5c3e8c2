//! `enduserTag`: tests a tag of the end user. No end user or no tag: false.
use super::Tri;
use crate::engine::decide::ctx::DecisionCtx;
use crate::policy::EnduserTagOp;

pub(crate) fn eval(op: &EnduserTagOp, ctx: &mut DecisionCtx<'_>) -> Tri {
    let tag = |t: &str| ctx.run.context.enduser.as_ref().and_then(|u| u.tags.get(t));
    match op {
        EnduserTagOp::Has { tag: t } => {
            tag(t).is_some_and(|v| !v.is_empty() && v != "false" && v != "0")
        }
        EnduserTagOp::HasValue { tag: t, value } => tag(t).is_some_and(|v| v == value),
        EnduserTagOp::HasValueAny { tag: t, values } => {
            tag(t).is_some_and(|v| values.iter().any(|x| x == v))
        }
    }
    .into()
}
