//! 2026-07-28's request metadata headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`),
//! checked against the body: a mismatch is a `HeaderMismatch` (−32020, HTTP 400), so nothing
//! routing on the headers sees another request than the one toolgate decides.

use axum::http::HeaderMap;
use serde_json::Value;

use super::super::frame::Frame;

/// Checks the headers of a 2026-07-28 request against its body.
pub(crate) fn check(h: &HeaderMap, msg: &Frame) -> Result<(), String> {
    let header = |name: &str| -> Result<Option<String>, String> {
        if h.get_all(name).iter().nth(1).is_some() {
            return Err(format!(
                "HeaderMismatch: header {name} given more than once"
            ));
        }
        match h.get(name) {
            None => Ok(None),
            Some(v) => v
                .to_str()
                .map(|s| Some(s.to_string()))
                .map_err(|_| format!("header {name}: not visible ASCII")),
        }
    };
    let meta_version = msg
        .pointer("/params/_meta")
        .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .and_then(Value::as_str);
    if let (Some(hv), Some(mv)) = (header("mcp-protocol-version")?, meta_version)
        && hv != mv
    {
        return Err(format!(
            "HeaderMismatch: MCP-Protocol-Version {hv:?} but _meta says {mv:?}"
        ));
    }
    let Some(method) = msg.get("method").and_then(Value::as_str) else {
        return Ok(());
    };
    if msg.get("id").is_none() {
        // Notifications: header requirements are not defined by this revision.
        return Ok(());
    }
    match header("mcp-method")? {
        Some(m) if m == method => {}
        Some(m) => {
            return Err(format!(
                "HeaderMismatch: Mcp-Method {m:?} but the body's method is {method:?}"
            ));
        }
        None => return Err("HeaderMismatch: the Mcp-Method header is missing".into()),
    }
    let body_name = match method {
        "tools/call" | "prompts/get" => msg.pointer("/params/name").and_then(Value::as_str),
        "resources/read" => msg.pointer("/params/uri").and_then(Value::as_str),
        _ => return Ok(()),
    };
    let Some(body_name) = body_name else {
        return Ok(());
    };
    match header("mcp-name")? {
        None => Err("HeaderMismatch: the Mcp-Name header is missing".into()),
        Some(n) => {
            let decoded = decode_value(&n)
                .ok_or_else(|| "HeaderMismatch: Mcp-Name is not valid Base64".to_string())?;
            if decoded == body_name {
                Ok(())
            } else {
                Err(format!(
                    "HeaderMismatch: Mcp-Name {decoded:?} but the body names {body_name:?}"
                ))
            }
        }
    }
}

/// A header value: plain, or `=?base64?…?=` (UTF-8 in standard Base64).
pub(crate) fn decode_value(v: &str) -> Option<String> {
    match v
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(b64) => String::from_utf8(base64_decode(b64)?).ok(),
        None => Some(v.to_string()),
    }
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_values_are_decoded() {
        assert_eq!(
            decode_value("=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(),
            Some("Hello, 世界")
        );
        assert_eq!(decode_value("us-west1").as_deref(), Some("us-west1"));
        assert_eq!(
            decode_value("=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=").as_deref(),
            Some("=?base64?literal?=")
        );
        assert!(decode_value("=?base64?***?=").is_none());
    }
}
