//! What toolgate asks a human before a call runs, and how it tells whether a client can be
//! asked in-band: shared by the `elicitation/create` path and the 2026-07-28 `input_required`
//! path.

use serde_json::{Value, json};

use super::frame::Frame;
use crate::engine::{Decision, ToolCall};

/// The key of toolgate's question among the input requests.
pub(crate) const APPROVAL_KEY: &str = "dev.toolgate/approval";

const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPS: &str = "io.modelcontextprotocol/clientCapabilities";

/// Whether a request speaks 2026-07-28 (its `_meta` says so).
pub(crate) fn is_modern(msg: &Frame) -> bool {
    msg.pointer("/params/_meta")
        .and_then(|m| m.get(META_VERSION))
        .and_then(Value::as_str)
        == Some("2026-07-28")
}

/// Whether a 2026-07-28 request declares the elicitation capability.
pub(crate) fn can_elicit(msg: &Frame) -> bool {
    msg.pointer("/params/_meta")
        .and_then(|m| m.get(META_CAPS))
        .and_then(|c| c.get("elicitation"))
        .is_some_and(|e| !e.is_null())
}

/// The question asking a human to approve a call.
pub(crate) fn question(call: &ToolCall, d: &Decision) -> String {
    format!(
        "toolgate: approve the call of tool \"{}\" with arguments {}?\nRule {}: {}",
        call.name,
        serde_json::to_string(&call.args).unwrap_or_default(),
        d.rule_id.as_deref().unwrap_or("-"),
        d.reason.as_deref().unwrap_or("needs human approval"),
    )
}

/// The schema of the answer: one boolean `approve`.
pub(crate) fn approve_schema(call: &ToolCall) -> Value {
    json!({
        "type": "object",
        "properties": {"approve": {
            "type": "boolean",
            "title": "Approve",
            "description": format!("Let tool \"{}\" run with these arguments", call.name),
        }},
        "required": ["approve"],
    })
}
