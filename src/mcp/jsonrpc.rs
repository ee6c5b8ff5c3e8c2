//! Raw JSON-RPC frames: classification, ids, and the answers toolgate writes itself.

use serde_json::{Value, json};

use crate::engine::Decision;

/// JSON-RPC "invalid params": the answer to a call of an unknown (or hidden) tool.
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC "internal error": the answer to requests pending when the upstream server exits.
pub const INTERNAL_ERROR: i64 = -32603;
/// JSON-RPC "invalid request": batches, ids in flight, ids that are not a string or number.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC "parse error": a line that is not JSON.
pub const PARSE_ERROR: i64 = -32700;

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind<'a> {
    /// A request: `method` and `id`.
    Request(&'a str),
    /// A notification: `method`, no `id`.
    Notification(&'a str),
    /// A response (result or error) to a request with this id.
    Response,
    /// Anything else (passed on as it came).
    Other,
}

/// Classifies a frame.
pub fn kind(m: &Value) -> Kind<'_> {
    match (m.get("method").and_then(Value::as_str), m.get("id")) {
        (Some(method), Some(_)) => Kind::Request(method),
        (Some(method), None) => Kind::Notification(method),
        (None, Some(_)) if m.get("result").is_some() || m.get("error").is_some() => Kind::Response,
        _ => Kind::Other,
    }
}

/// The id as a tool call id: the string itself, or the number's text.
pub fn call_id(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A JSON-RPC error response.
pub fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// A JSON-RPC error response to the id written as `id` (JSON text, kept as it came).
pub(crate) fn error_to(id: &str, code: i64, message: &str) -> super::frame::Frame {
    let e = json!({"code": code, "message": message});
    let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{e}}}"#);
    super::frame::Frame::parse(&text).unwrap_or_else(|_| error(&Value::Null, code, message).into())
}

/// A JSON-RPC result response to the id written as `id` (JSON text, kept as it came).
pub(crate) fn result_to(id: &str, result: &Value) -> super::frame::Frame {
    let text = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#);
    super::frame::Frame::parse(&text)
        .unwrap_or_else(|_| json!({"jsonrpc": "2.0", "id": null, "result": result}).into())
}

/// The result the client gets for a blocked call: an `isError` tool result the model can read,
/// with the decision in `_meta.toolgate`. `extra` is appended to the text.
pub fn blocked_result(
    code: &str,
    reason: Option<&str>,
    rule_id: Option<&str>,
    review_id: Option<&str>,
    extra: Option<&str>,
) -> Value {
    let mut text = format!(
        "toolgate blocked this call: {} [{code}",
        reason.unwrap_or("no reason given")
    );
    if let Some(r) = rule_id {
        text.push_str(", rule ");
        text.push_str(r);
    }
    text.push(']');
    if let Some(e) = extra {
        text.push(' ');
        text.push_str(e);
    }
    let mut meta = json!({"effect": "block", "code": code, "ruleId": rule_id});
    if let (Some(r), Some(m)) = (review_id, meta.as_object_mut()) {
        m.insert("reviewId".into(), Value::String(r.to_string()));
    }
    json!({
        "content": [{"type": "text", "text": text}],
        "isError": true,
        "_meta": {"toolgate": meta},
    })
}

/// The blocked result for an engine decision.
pub fn blocked_by(d: &Decision, extra: Option<&str>) -> Value {
    blocked_result(
        d.code.as_str(),
        d.reason.as_deref(),
        d.rule_id.as_deref(),
        d.hitl.as_ref().map(|h| h.review_id.as_str()),
        extra,
    )
}

/// The tool's output and error as the engine records them: output = `structuredContent` if
/// present else `content`; error = the text of an `isError` result, or a JSON-RPC error's message.
pub fn outcome_of(response: &Value) -> (Option<Value>, Option<String>) {
    if let Some(e) = response.get("error") {
        let msg = e
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("JSON-RPC error");
        let code = e.get("code").map(Value::to_string).unwrap_or_default();
        return (None, Some(format!("{msg} (JSON-RPC {code})")));
    }
    let r = response.get("result").unwrap_or(&Value::Null);
    if r.get("isError").and_then(Value::as_bool) == Some(true) {
        let text: Vec<&str> = r
            .get("content")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|c| c.get("text").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
        let msg = if text.is_empty() {
            "the tool reported an error".to_string()
        } else {
            text.join("\n")
        };
        return (None, Some(msg));
    }
    let out = match (r.get("structuredContent"), r.get("content")) {
        // Both reach the client: both are decided on (a `toolOutput` condition scans what the
        // model would read), unless the content is the structured content's JSON text.
        (Some(s), Some(c)) if !is_json_text_of(c, s) => {
            serde_json::json!({"content": c, "structuredContent": s})
        }
        (Some(s), _) => s.clone(),
        (None, Some(c)) => c.clone(),
        (None, None) => Value::Null,
    };
    (Some(out), None)
}

/// Whether `content` adds nothing to `structured`: empty, or one text block holding it as
/// JSON (what the MCP spec asks servers to send beside structured content).
fn is_json_text_of(content: &Value, structured: &Value) -> bool {
    match content.as_array().map(Vec::as_slice) {
        Some([]) => true,
        Some([one]) => one
            .get("text")
            .and_then(Value::as_str)
            .and_then(|t| serde_json::from_str::<Value>(t).ok())
            .is_some_and(|v| &v == structured),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        assert_eq!(
            kind(&json!({"id": 1, "method": "tools/call"})),
            Kind::Request("tools/call")
        );
        assert_eq!(
            kind(&json!({"method": "notifications/x"})),
            Kind::Notification("notifications/x")
        );
        assert_eq!(kind(&json!({"id": 1, "result": {}})), Kind::Response);
        assert_eq!(kind(&json!({"id": 1})), Kind::Other);
        assert_eq!(call_id(&json!("a")), "a");
        assert_eq!(call_id(&json!(7)), "7");
    }

    #[test]
    fn blocked_result_shape() {
        let r = blocked_result("BLOCKED_RULE", Some("no"), Some("r1"), None, None);
        assert_eq!(
            r["content"][0]["text"],
            "toolgate blocked this call: no [BLOCKED_RULE, rule r1]"
        );
        assert_eq!(r["isError"], true);
        assert_eq!(r["_meta"]["toolgate"]["code"], "BLOCKED_RULE");
        assert!(r["_meta"]["toolgate"].get("reviewId").is_none());
    }

    #[test]
    fn outcomes() {
        let ok = json!({"result": {"content": [{"type": "text", "text": "x"}]}});
        assert_eq!(outcome_of(&ok).0.unwrap()[0]["text"], "x");
        let structured = json!({"result": {"content": [], "structuredContent": {"a": 1}}});
        assert_eq!(outcome_of(&structured).0.unwrap(), json!({"a": 1}));
        let same = json!({"result": {"content": [{"type": "text", "text": "{\"a\": 1}"}],
            "structuredContent": {"a": 1}}});
        assert_eq!(outcome_of(&same).0.unwrap(), json!({"a": 1}));
        // A text beside a structured content that is not its JSON is decided on too.
        let beside = json!({"result": {"content": [{"type": "text", "text": "key AKIA…"}],
            "structuredContent": {"a": 1}}});
        let out = outcome_of(&beside).0.unwrap();
        assert_eq!(out["content"][0]["text"], "key AKIA…");
        assert_eq!(out["structuredContent"], json!({"a": 1}));
        let failed =
            json!({"result": {"isError": true, "content": [{"type": "text", "text": "boom"}]}});
        assert_eq!(outcome_of(&failed).1.unwrap(), "boom");
        let rpc = json!({"error": {"code": -32000, "message": "bad"}});
        assert_eq!(outcome_of(&rpc).1.unwrap(), "bad (JSON-RPC -32000)");
    }
}
