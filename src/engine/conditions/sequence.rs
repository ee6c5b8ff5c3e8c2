//! `sequence`: over the run's history of allowed calls whose result was recorded.
use super::Tri;
use crate::engine::evaluate::DecisionCtx;
use crate::engine::run::HistoryEntry;
use crate::policy::CSeqEntry;

fn matches(e: &CSeqEntry, h: &HistoryEntry) -> bool {
    match e {
        CSeqEntry::Glob(g) => g.is_match(h.name_lc.as_str()),
        CSeqEntry::Tags { tags, all: true } => tags.iter().all(|t| h.tags_lc.contains(t)),
        CSeqEntry::Tags { tags, all: false } => tags.iter().any(|t| h.tags_lc.contains(t)),
    }
}

pub(crate) fn eval(must: &[CSeqEntry], must_not: &[CSeqEntry], ctx: &mut DecisionCtx<'_>) -> Tri {
    let history = ctx.run.history.lock();
    let missing_required = must.iter().any(|e| !history.iter().any(|h| matches(e, h)));
    let forbidden_seen = must_not
        .iter()
        .any(|e| history.iter().any(|h| matches(e, h)));
    (missing_required || forbidden_seen).into()
}
