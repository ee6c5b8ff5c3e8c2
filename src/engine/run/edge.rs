//! The engine's edge: values nested deeper than [`MAX_VALUE_DEPTH`] are refused before they
//! are decided or written (see `crate::json`): a call whose arguments nest deeper is blocked
//! with an error saying so, and its `tool.decision` event holds a stand-in for them; a tool
//! result nested deeper is replaced by the same stand-in (and the after decision blocks it).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::handle::{Run, ToolCall, obj};
use crate::audit::EventKind;
use crate::engine::decide::decision::{Decision, DecisionCode};
use crate::json::{MAX_VALUE_DEPTH, deeper_than};
use crate::policy::{EffectType, Phase};

/// What the audit trail holds instead of a value nested too deep.
pub(crate) fn too_deep_stand_in() -> Value {
    Value::String(format!(
        "[refused: nested deeper than {MAX_VALUE_DEPTH} levels]"
    ))
}

/// The error of a value nested too deep (`what`: "arguments", "result").
pub(crate) fn too_deep_message(what: &str) -> String {
    format!(
        "the call's {what} nest arrays and objects deeper than {MAX_VALUE_DEPTH} levels; \
         refused (toolgate's limit for any value it decides on or records)"
    )
}

impl Run {
    /// The decision on a call whose arguments nest too deep (blocked whatever the failure
    /// mode: not an engine fault), written to the trail with a stand-in for its arguments;
    /// `None` for any other call.
    ///
    /// Checked when the engine writes a trail (what it writes must verify); without one, a
    /// value nested too deep is never written, and a `sensitiveData` condition that meets it
    /// answers missing data (it cannot scan it), so a decision never rests on unscanned text.
    ///
    /// Inline, so that an engine without a trail pays one test per call, not a call.
    #[inline(always)]
    pub(crate) fn refuse_too_deep(&self, call: &ToolCall, now: DateTime<Utc>) -> Option<Decision> {
        if !self.engine.audit_enabled() {
            return None;
        }
        self.refuse_too_deep_audited(call, now)
    }

    #[inline(never)]
    fn refuse_too_deep_audited(&self, call: &ToolCall, now: DateTime<Utc>) -> Option<Decision> {
        if !deeper_than(&call.args, MAX_VALUE_DEPTH) {
            return None;
        }
        let msg = too_deep_message("arguments");
        let mut d = Decision::simple(
            Phase::Before,
            EffectType::Block,
            DecisionCode::BlockedFailure,
            Some(Arc::from(msg.as_str())),
        );
        d.error = Some(msg);
        self.emit(
            EventKind::ToolDecision,
            obj(json!({
                "phase": "tool.before",
                "callId": call.id,
                "tool": {"name": call.name, "tags": call.tags},
                "args": too_deep_stand_in(),
                "decision": d,
            })),
            now,
        );
        Some(d)
    }
}

/// The after decision on a result nested too deep: blocked (the stand-in must not reach the
/// model as its output), the rules' own decision kept otherwise.
pub(crate) fn too_deep_after(decision: Option<Decision>) -> Decision {
    let msg = too_deep_message("result");
    let mut d = decision.unwrap_or_else(|| {
        Decision::simple(Phase::After, EffectType::Allow, DecisionCode::Allowed, None)
    });
    if d.effect == EffectType::Allow {
        d.effect = EffectType::Block;
        d.code = DecisionCode::BlockedFailure;
        d.reason = Some(Arc::from(msg.as_str()));
    }
    d.error = Some(msg);
    d
}
