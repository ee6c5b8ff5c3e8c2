//! `enduserTag`: tests a tag of the end user. No end user or no tag: false.
use super::Tri;
use crate::engine::decide::ctx::DecisionCtx;
use crate::policy::EnduserTagOp;
use crate::policy::eq_bytes;

pub(crate) fn eval(op: &EnduserTagOp, ctx: &mut DecisionCtx<'_>) -> Tri {
    let tag = |t: &str| match &ctx.run.enduser_tags {
        Some(tags) => tags.get(t),
        None => ctx
            .run
            .context
            .enduser
            .as_ref()
            .and_then(|u| u.tags.get(t))
            .map(String::as_str),
    };
    let eq = |a: &str, b: &str| eq_bytes(a.as_bytes(), b.as_bytes());
    match op {
        EnduserTagOp::Has { tag: t } => {
            tag(t).is_some_and(|v| !v.is_empty() && !eq(v, "false") && !eq(v, "0"))
        }
        EnduserTagOp::HasValue { tag: t, value } => tag(t).is_some_and(|v| eq(v, value)),
        EnduserTagOp::HasValueAny { tag: t, values } => {
            tag(t).is_some_and(|v| values.iter().any(|x| eq(x, v)))
        }
    }
    .into()
}
