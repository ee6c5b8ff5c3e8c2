//! `requireSubject`: true when an extracted subject matches.
use super::Tri;
use crate::engine::decide::ctx::DecisionCtx;
use crate::policy::SubjectTest;

pub(crate) fn eval(t: &SubjectTest, ctx: &mut DecisionCtx<'_>) -> Tri {
    ctx.subjects
        .iter()
        .any(|s| {
            s.subject_type == t.subject_type
                && t.id_system
                    .as_ref()
                    .is_none_or(|i| s.id_system.as_ref() == Some(i))
                && t.role.as_ref().is_none_or(|r| s.role.as_ref() == Some(r))
        })
        .into()
}
