//! Why a closed run refuses a call ([`RunClosed`]) and the decision it answers with: a block
//! whose `error` says why, with nothing written into the run's chain (see `closed.rs` for how
//! a run closes).

use std::fmt;
use std::sync::Arc;

use crate::engine::decide::decision::{Decision, DecisionCode};
use crate::policy::{EffectType, Phase};

/// Why a run decides nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunClosed {
    /// [`Run::end`](crate::engine::Run::end) (or [`Run::leave`](crate::engine::Run::leave)) was called.
    Ended,
    /// The engine was shut down ([`crate::engine::GovernanceEngine::shutdown`]).
    EngineShutDown,
}

impl RunClosed {
    /// What it means, for people and for the refused decision's `error`.
    pub fn message(self) -> &'static str {
        match self {
            RunClosed::Ended => "the run has ended: it decides no more calls (start a new run)",
            RunClosed::EngineShutDown => {
                "the engine has shut down: it decides no more calls (create a new engine)"
            }
        }
    }
}

impl fmt::Display for RunClosed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for RunClosed {}

/// The decision on a call of a closed run: block, `BLOCKED_FAILURE`, with the reason as its
/// `error` (whatever the failure mode: the engine knows the answer, and an allowed call
/// could not be audited).
pub(crate) fn closed_decision(phase: Phase, why: RunClosed) -> Decision {
    let mut d = Decision::simple(
        phase,
        EffectType::Block,
        DecisionCode::BlockedFailure,
        Some(Arc::from(why.message())),
    );
    d.error = Some(why.message().to_string());
    d
}
