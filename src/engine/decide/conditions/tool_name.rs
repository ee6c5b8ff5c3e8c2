//! `toolName`: tests the tool's name, case-insensitively.
use super::Tri;
use crate::engine::decide::ctx::DecisionCtx;
use crate::policy::StrTest;

pub(crate) fn eval(test: &StrTest, ctx: &mut DecisionCtx<'_>) -> Tri {
    test.matches(ctx.call.name_lc).into()
}
