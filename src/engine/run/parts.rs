//! Pieces the before phases (tool calls in `handle.rs`, model calls in `llm.rs`, a shared
//! store in `shared_state.rs`) are assembled from: the blank decision written into, the
//! decision on a call of an aborted run, the call as a decision reads it, and counting an
//! allowed call. Each is `#[inline]`: they sit on the decision path and would otherwise not
//! be inlined across codegen units.

use std::sync::Arc;

use crate::engine::decide::call::ToolCall;
use crate::engine::decide::decision::{Decision, DecisionCode};
use crate::engine::decide::evaluate::{CallView, DecisionCtx};
use crate::engine::decide::profile::ToolProfile;
use crate::engine::run::inner::EngineInner;
use crate::policy::{EffectType, Phase};
use crate::state::StateKey;

/// A decision to write a before decision into (see `before_sync`).
#[inline]
pub(crate) fn blank_decision() -> Decision {
    Decision::simple(
        Phase::Before,
        EffectType::Allow,
        DecisionCode::Allowed,
        None,
    )
}

/// The decision on a call of an aborted run.
#[inline]
pub(crate) fn aborted_decision() -> Decision {
    Decision::simple(
        Phase::Before,
        EffectType::Block,
        DecisionCode::BlockedRunAborted,
        Some(Arc::from(
            "the run was aborted by an earlier human-review request",
        )),
    )
}

/// The caller's subjects, for a decision to add to (no allocation when there are none).
#[inline]
pub(crate) fn clone_subjects(
    s: &[crate::engine::decide::call::SubjectRef],
) -> Vec<crate::engine::decide::call::SubjectRef> {
    if s.is_empty() { Vec::new() } else { s.to_vec() }
}

/// The call as a decision reads it (names and tags with the profile's lowercased forms).
#[inline]
pub(crate) fn call_view<'a>(
    call: &'a ToolCall,
    profile: &'a ToolProfile,
    duration_ms: Option<f64>,
) -> CallView<'a> {
    CallView {
        name: &call.name,
        name_lc: &profile.name_lc,
        tags: &call.tags,
        tags_lc: &profile.tags_lc,
        args: &call.args,
        duration_ms,
        output: None,
    }
}

/// Counts an allowed call in every maxCalls counter whose selector selects it and that the
/// decision did not already count.
#[inline]
pub(crate) fn count_allowed(
    engine: &EngineInner,
    ctx: &DecisionCtx<'_>,
    taken: &[(u32, StateKey, crate::state::Permit)],
) {
    for &c in ctx.profile.counters.iter() {
        if taken.iter().any(|(t, _, _)| *t == c) {
            continue;
        }
        if let Some(spec) = ctx.policies.counters.counters.get(c as usize) {
            engine.decide.state.add(
                &ctx.run.state_key(spec.slot, spec.scope),
                spec.window_seconds,
                ctx.now_ms(),
            );
        }
    }
}
