//! Strict JSON parsing for the files toolgate reads (policies, traces, policy test files,
//! evaluation configs): a duplicate key is an error naming its JSON path, a leading UTF-8
//! byte order mark is accepted, and nesting deeper than [`MAX_JSON_DEPTH`] is an error (before
//! anything deeper is read, so hostile input cannot exhaust the stack).

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Deepest nesting of arrays and objects accepted in a JSON file toolgate reads (policies,
/// trace lines, policy tests; the outermost array or object is level 1). The values inside
/// (a trace line's arguments) are held to [`MAX_VALUE_DEPTH`] by the engine.
pub const MAX_JSON_DEPTH: usize = 256;

/// serde_json's own nesting limit (it refuses the 128th level): what audit events are read
/// with (`verify`, `whatif`, the collector). Events wrap a value in at most a few levels, so
/// an event holding a value of [`MAX_VALUE_DEPTH`] stays well within it.
pub const MAX_EVENT_DEPTH: usize = 127;

/// Deepest nesting of a value handed to the engine (a call's arguments, a tool's result; the
/// outermost array or object is level 1): the one limit every reader and writer of such
/// values shares (the engine, its scanners, the bindings' conversions, the MCP gateway through
/// the engine). Deeper values are refused at the edge (the engine blocks the call with an
/// error saying so; the bindings raise), so that the event holding one stays within
/// [`MAX_EVENT_DEPTH`] (every reader's limit), and every level of it is scanned.
pub const MAX_VALUE_DEPTH: usize = 100;

/// Whether `v` nests arrays and objects deeper than `limit` levels (scalars are level 0; looks
/// no deeper than `limit + 1`).
pub fn deeper_than(v: &Value, limit: usize) -> bool {
    // Scalars are skipped without a call: most arguments are flat.
    let nested = |x: &Value| matches!(x, Value::Array(_) | Value::Object(_));
    match v {
        Value::Array(a) => limit == 0 || a.iter().any(|x| nested(x) && deeper_than(x, limit - 1)),
        Value::Object(m) => {
            limit == 0 || m.values().any(|x| nested(x) && deeper_than(x, limit - 1))
        }
        _ => false,
    }
}

/// What went wrong in [`parse_strict`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonErrorKind {
    /// Not JSON (syntax, trailing characters, number out of range, …).
    Syntax,
    /// An object has the same key twice.
    DuplicateKey,
    /// Arrays and objects nest deeper than [`MAX_JSON_DEPTH`].
    TooDeep,
}

/// An error of [`parse_strict`], with its position (1-based line and column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    /// The kind of problem.
    pub kind: JsonErrorKind,
    /// For a duplicate key: the JSON path of the key (`rules[0].enabled`); empty otherwise.
    pub path: String,
    /// Line of the problem (1-based).
    pub line: usize,
    /// Column of the problem (1-based).
    pub column: usize,
    detail: String,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            JsonErrorKind::Syntax => f.write_str(&self.detail),
            JsonErrorKind::DuplicateKey => write!(
                f,
                "duplicate key at {} (line {}, column {})",
                self.path, self.line, self.column
            ),
            JsonErrorKind::TooDeep => write!(
                f,
                "nesting too deep (line {}, column {}): JSON may nest at most {MAX_JSON_DEPTH} levels",
                self.line, self.column
            ),
        }
    }
}

impl std::error::Error for JsonError {}

/// Parses one JSON document strictly: duplicate keys and nesting deeper than
/// [`MAX_JSON_DEPTH`] are errors; a leading UTF-8 byte order mark is skipped.
///
/// ```
/// use toolgate::json::{parse_strict, JsonErrorKind};
/// assert!(parse_strict("\u{feff}{\"a\": 1}").is_ok());
/// let e = parse_strict(r#"{"rules": [{"enabled": true, "enabled": false}]}"#).unwrap_err();
/// assert_eq!(e.kind, JsonErrorKind::DuplicateKey);
/// assert_eq!(e.path, "rules[0].enabled");
/// ```
pub fn parse_strict(text: &str) -> Result<Value, JsonError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let fail = Cell::new(None);
    let mut de = serde_json::Deserializer::from_str(text);
    // Depth is limited by `Seed` below, before recursing.
    de.disable_recursion_limit();
    let seed = Seed {
        depth: 1,
        path: None,
        fail: &fail,
    };
    let result = seed.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    result.map_err(|e| {
        let (kind, path) = match fail.take() {
            Some((kind, path)) => (kind, path),
            None => (JsonErrorKind::Syntax, String::new()),
        };
        JsonError {
            kind,
            path,
            line: e.line(),
            column: e.column(),
            detail: e.to_string(),
        }
    })
}

/// Parses strictly into a typed value: the text is checked with [`parse_strict`] (duplicate
/// keys, nesting, a leading BOM), then decoded with `serde_json` so that type errors keep their
/// line and column.
pub fn from_str_strict<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    parse_strict(text).map_err(<serde_json::Error as serde::de::Error>::custom)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    let value = T::deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

struct Node<'a> {
    parent: Option<&'a Node<'a>>,
    seg: Seg<'a>,
}

fn render(mut node: Option<&Node<'_>>) -> String {
    let mut segs = Vec::new();
    while let Some(n) = node {
        segs.push(&n.seg);
        node = n.parent;
    }
    let mut out = String::new();
    for seg in segs.into_iter().rev() {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => {
                out.push('[');
                out.push_str(&i.to_string());
                out.push(']');
            }
        }
    }
    out
}

type Fail = Cell<Option<(JsonErrorKind, String)>>;

#[derive(Clone, Copy)]
struct Seed<'a> {
    depth: usize,
    path: Option<&'a Node<'a>>,
    fail: &'a Fail,
}

impl Seed<'_> {
    fn enter<E: serde::de::Error>(&self) -> Result<(), E> {
        if self.depth > MAX_JSON_DEPTH {
            self.fail.set(Some((JsonErrorKind::TooDeep, String::new())));
            return Err(E::custom("nesting too deep"));
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.enter()?;
        let mut out = Vec::new();
        loop {
            let node = Node {
                parent: self.path,
                seg: Seg::Index(out.len()),
            };
            let child = Seed {
                depth: self.depth + 1,
                path: Some(&node),
                fail: self.fail,
            };
            match seq.next_element_seed(child)? {
                Some(v) => out.push(v),
                None => return Ok(Value::Array(out)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.enter()?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = {
                let node = Node {
                    parent: self.path,
                    seg: Seg::Key(&key),
                };
                if out.contains_key(&key) {
                    self.fail
                        .set(Some((JsonErrorKind::DuplicateKey, render(Some(&node)))));
                    return Err(serde::de::Error::custom(format!("duplicate key \"{key}\"")));
                }
                map.next_value_seed(Seed {
                    depth: self.depth + 1,
                    path: Some(&node),
                    fail: self.fail,
                })?
            };
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_name_their_path() {
        let e = parse_strict(r#"{"rules": [], "rules": []}"#).unwrap_err();
        assert_eq!(e.kind, JsonErrorKind::DuplicateKey);
        assert_eq!(e.path, "rules");
        let e = parse_strict("[{\"a\": {\"b\": 1,\n \"b\": 2}}]").unwrap_err();
        assert_eq!(e.path, "[0].a.b");
        assert_eq!(e.line, 2);
        assert!(
            e.to_string()
                .starts_with("duplicate key at [0].a.b (line 2"),
            "{e}"
        );
    }

    #[test]
    fn a_bom_is_skipped() {
        assert_eq!(
            parse_strict("\u{feff}[1, 2]").unwrap(),
            serde_json::json!([1, 2])
        );
    }

    #[test]
    fn the_depth_limit_is_exact() {
        let ok = format!(
            "{}{}",
            "[".repeat(MAX_JSON_DEPTH),
            "]".repeat(MAX_JSON_DEPTH)
        );
        assert!(parse_strict(&ok).is_ok());
        let deep = format!("[{ok}]");
        let e = parse_strict(&deep).unwrap_err();
        assert_eq!(e.kind, JsonErrorKind::TooDeep);
        let open = "{\"a\":".repeat(1_000_000);
        assert_eq!(
            parse_strict(&open).unwrap_err().kind,
            JsonErrorKind::TooDeep
        );
    }

    #[test]
    fn syntax_errors_keep_serde_messages() {
        let e = parse_strict("{\"a\": }").unwrap_err();
        assert_eq!(e.kind, JsonErrorKind::Syntax);
        assert!(e.to_string().contains("line 1"), "{e}");
        assert_eq!(parse_strict("1 2").unwrap_err().kind, JsonErrorKind::Syntax);
    }
}
