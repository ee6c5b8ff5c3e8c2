//! Strict verify: every stored line must be byte for byte the canonical JSON of its content.
//!
//! A line is compared with [`canonical_json`] of the value it parses to. Anything a writer or
//! an editor could vary without changing the parsed content shows up as a difference:
//! whitespace, key order, escapes (`\u006c` for `l`, `\/`), number forms (`1e2`, `100.0` for
//! `100`), and duplicate keys (the parsed object keeps one of them, so the canonical text is
//! shorter than the line).

use serde_json::Value;

use crate::audit::canonical_json;

/// Why `line` (without its line terminator) is not the canonical form of `value`, the value
/// it parses to; `None` when it is.
pub(super) fn not_canonical(line: &[u8], value: &Value) -> Option<String> {
    let canonical = canonical_json(value);
    let canonical = canonical.as_bytes();
    if line == canonical {
        return None;
    }
    let at = line
        .iter()
        .zip(canonical)
        .position(|(a, b)| a != b)
        .unwrap_or(line.len().min(canonical.len()));
    Some(format!(
        "not canonical: byte {} is {}, the canonical form has {}",
        at + 1,
        excerpt(line, at),
        excerpt(canonical, at)
    ))
}

/// Up to 16 bytes from `at`, quoted for a message.
fn excerpt(bytes: &[u8], at: usize) -> String {
    match bytes.get(at..) {
        Some(rest) if !rest.is_empty() => {
            let end = rest.len().min(16);
            format!("{:?}", String::from_utf8_lossy(&rest[..end]))
        }
        _ => "the end of the line".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(line: &str) -> Option<String> {
        let v: Value = serde_json::from_str(line).unwrap();
        not_canonical(line.as_bytes(), &v)
    }

    #[test]
    fn canonical_lines_pass_and_variants_fail() {
        assert_eq!(check(r#"{"a":1,"b":"l"}"#), None);
        for bad in [
            r#"{"a": 1,"b":"l"}"#,
            r#"{"b":"l","a":1}"#,
            r#"{"a":1,"b":"\u006c"}"#,
            r#"{"a":1e0,"b":"l"}"#,
            r#"{"a":1,"a":1,"b":"l"}"#,
            r#"{"a":1,"b":"l"} "#,
        ] {
            let msg = check(bad).unwrap_or_default();
            assert!(msg.starts_with("not canonical: byte "), "{bad}: {msg}");
        }
        assert_eq!(
            check(r#"{"a":1,"b":"l"}  "#).as_deref(),
            Some("not canonical: byte 16 is \"  \", the canonical form has the end of the line")
        );
    }
}
