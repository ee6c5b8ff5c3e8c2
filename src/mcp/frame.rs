//! A relayed JSON-RPC message: its parsed form, for toolgate to look at, and the exact text it
//! came in, written out again as it came unless toolgate changed the message. The gateway
//! rewrites ids ([`Frame::with_id`]) by splicing the text of the top-level `id` member, so the
//! rest of a message still reaches the other side byte for byte.

use std::borrow::Cow;
use std::fmt;
use std::ops::Deref;

use std::cell::Cell;

use serde::de::{Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// One JSON-RPC message in transit.
///
/// A frame read from a peer keeps its original text; writing it writes that text again, so key
/// order, number spelling, string escapes and unknown fields reach the other side byte for
/// byte. A frame toolgate builds or changes ([`Frame::msg_mut`]) is written from its value.
#[derive(Debug, Clone)]
pub(crate) struct Frame {
    msg: Value,
    raw: Option<Box<str>>,
    /// Byte range of the top-level `id` member's value in `raw`.
    id_span: Option<(usize, usize)>,
    /// An object of the message, at any depth, names a member twice (peers could read it
    /// differently: toolgate's parser keeps the last value, some keep the first).
    dup_keys: bool,
    /// The top-level object names a member twice.
    dup_top: bool,
}

/// A message parsed in one pass: its value, the span of its top-level `id`, and whether a
/// top-level key repeats.
struct Parsed {
    msg: Value,
    id: Option<(usize, usize)>,
    /// A key repeats in some object.
    dup: bool,
    /// A key of the top-level object repeats.
    dup_top: bool,
}

struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_string())))
            }
        }
        d.deserialize_str(V)
    }
}

/// A JSON value, as `Value` deserializes it (a later member of a repeated key replaces the
/// earlier one), noting in `dup` whether any object in it names a member twice. Its depth is
/// bounded by serde_json's recursion limit, as `Value`'s is.
struct Checked<'c>(&'c Cell<bool>);

impl<'de> DeserializeSeed<'de> for Checked<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Checked<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::from(n))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::from(n))
    }
    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_string()))
    }
    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Checked(self.0))? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut m = Map::new();
        while let Some(k) = map.next_key::<Key<'de>>()? {
            let v = map.next_value_seed(Checked(self.0))?;
            if m.insert(k.0.into_owned(), v).is_some() {
                self.0.set(true);
            }
        }
        Ok(Value::Object(m))
    }
}

/// Parses `text`: an object member by member (noting the `id` member's span and repeated
/// keys, as a later value of a key replaces an earlier one just as in a `Value`), anything else
/// as a `Value`.
fn parse_top(text: &str) -> serde_json::Result<Parsed> {
    struct V<'t>(&'t str);
    impl<'de: 't, 't> Visitor<'de> for V<'t> {
        type Value = Parsed;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON-RPC message")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parsed, A::Error> {
            let mut m = Map::new();
            let mut id = None;
            let dup = Cell::new(false);
            let mut dup_top = false;
            while let Some(k) = map.next_key::<Key<'de>>()? {
                let v = if k.0 == "id" {
                    let raw: &'de RawValue = map.next_value()?;
                    let start = raw.get().as_ptr() as usize - self.0.as_ptr() as usize;
                    id = Some((start, start + raw.get().len()));
                    serde_json::from_str(raw.get()).map_err(serde::de::Error::custom)?
                } else {
                    map.next_value_seed(Checked(&dup))?
                };
                dup_top |= m.insert(k.0.into_owned(), v).is_some();
            }
            Ok(Parsed {
                msg: Value::Object(m),
                id,
                dup: dup_top || dup.get(),
                dup_top,
            })
        }
    }
    if !text.starts_with('{') {
        return Ok(Parsed {
            msg: serde_json::from_str(text)?,
            id: None,
            dup: false,
            dup_top: false,
        });
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let p = serde::Deserializer::deserialize_map(&mut de, V(text))?;
    de.end()?;
    Ok(p)
}

impl Frame {
    /// A frame from its original text (one message). Text that spans lines (whitespace between
    /// tokens, e.g. pretty-printed JSON from an HTTP server) cannot go on a line-framed stream
    /// as it is: such a frame is written from its value.
    pub(crate) fn parse(text: &str) -> serde_json::Result<Frame> {
        let text = text.trim_matches(|c: char| c.is_ascii_whitespace());
        let s = parse_top(text)?;
        let msg = s.msg;
        let one_line = !text.contains(['\n', '\r']);
        Ok(Frame {
            msg,
            raw: one_line.then(|| text.into()),
            id_span: s.id.filter(|_| one_line),
            dup_keys: s.dup,
            dup_top: s.dup_top,
        })
    }

    /// A frame from a raw JSON value.
    #[cfg(feature = "http")]
    pub(crate) fn from_raw(raw: &RawValue) -> serde_json::Result<Frame> {
        Frame::parse(raw.get())
    }

    /// The message, to change it: the original text is dropped, the frame is written from the
    /// changed value.
    pub(crate) fn msg_mut(&mut self) -> &mut Value {
        self.raw = None;
        self.id_span = None;
        &mut self.msg
    }

    /// The message.
    pub(crate) fn into_value(self) -> Value {
        self.msg
    }

    /// Whether an object of the message, at any depth, names a member twice (what a client
    /// sends is refused then: toolgate decides on the last value, an upstream parser that keeps
    /// the first would run something else).
    pub(crate) fn dup_keys(&self) -> bool {
        self.dup_keys
    }

    /// Whether the top-level object names a member twice.
    pub(crate) fn dup_top_keys(&self) -> bool {
        self.dup_top
    }

    /// The text of the top-level `id` as it came (or as its value writes).
    pub(crate) fn id_text(&self) -> Option<Cow<'_, str>> {
        match (&self.raw, self.id_span) {
            (Some(raw), Some((a, b))) => raw.get(a..b).map(Cow::Borrowed),
            _ => self.msg.get("id").map(|v| Cow::Owned(v.to_string())),
        }
    }

    /// The same message with `id` (JSON text) as its top-level id: spliced into the original
    /// text when there is one, so nothing else changes.
    pub(crate) fn with_id(mut self, id: &str) -> Frame {
        if let (Some(raw), Some((a, b))) = (&self.raw, self.id_span)
            && let (Some(head), Some(tail)) = (raw.get(..a), raw.get(b..))
        {
            let mut text = String::with_capacity(raw.len() + id.len());
            text.push_str(head);
            text.push_str(id);
            text.push_str(tail);
            if let (Ok(v), Some(m)) = (serde_json::from_str::<Value>(id), self.msg.as_object_mut())
            {
                m.insert("id".into(), v);
            }
            self.id_span = Some((a, a + id.len()));
            self.raw = Some(text.into());
            return self;
        }
        // No id member in the text (or no text): written from the value.
        let v = serde_json::from_str::<Value>(id).unwrap_or(Value::Null);
        if let Some(m) = self.msg_mut().as_object_mut() {
            m.insert("id".into(), v);
        }
        self
    }

    /// Appends the frame's text (original or from its value) to `out`.
    pub(crate) fn write_to(&self, out: &mut Vec<u8>) {
        match &self.raw {
            Some(raw) => out.extend_from_slice(raw.as_bytes()),
            None => {
                let _ = serde_json::to_writer(&mut *out, &self.msg);
            }
        }
    }

    /// About how many bytes the frame takes (its text's length).
    pub(crate) fn weight(&self) -> usize {
        match &self.raw {
            Some(r) => r.len(),
            None => self.to_bytes().len(),
        }
    }

    /// The frame's text as bytes.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.raw.as_ref().map_or(256, |r| r.len()));
        self.write_to(&mut v);
        v
    }

    /// The original text, if the frame is unchanged since it was read.
    #[cfg(test)]
    pub(crate) fn raw(&self) -> Option<&str> {
        self.raw.as_deref()
    }
}

impl From<Value> for Frame {
    fn from(msg: Value) -> Frame {
        Frame {
            msg,
            raw: None,
            id_span: None,
            dup_keys: false,
            dup_top: false,
        }
    }
}

impl Deref for Frame {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.msg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unchanged_frames_keep_their_text() {
        let text = r#"{"z":1,"a":{"_meta":{"y":true,"b":null}},"n":1.0e3,"s":"\u00e9"}"#;
        let f = Frame::parse(&format!("  {text} ")).unwrap();
        assert_eq!(f.raw(), Some(text));
        assert_eq!(f["n"], 1000.0);
        assert_eq!(f.to_bytes(), text.as_bytes());

        let mut changed = f.clone();
        changed.msg_mut()["z"] = Value::from(2);
        let out = String::from_utf8(changed.to_bytes()).unwrap();
        assert!(out.contains(r#""z":2"#) && !out.contains("1.0e3"), "{out}");

        let lines = Frame::parse("{\"b\":\n 1,\r\n\"a\": 2}").unwrap();
        assert_eq!(lines.raw(), None);
        assert_eq!(lines.to_bytes(), br#"{"a":2,"b":1}"#);

        let built = Frame::from(serde_json::json!({"b": 1, "a": 2}));
        assert_eq!(built.to_bytes(), br#"{"a":2,"b":1}"#);
    }

    #[test]
    fn ids_are_spliced() {
        let f = Frame::parse(r#"{"jsonrpc":"2.0", "id" : 7e0,"method":"x","params":{"id":1}}"#)
            .unwrap();
        assert_eq!(f.id_text().as_deref(), Some("7e0"));
        let g = f.with_id("42");
        assert_eq!(
            g.raw(),
            Some(r#"{"jsonrpc":"2.0", "id" : 42,"method":"x","params":{"id":1}}"#)
        );
        assert_eq!(g["id"], 42);
        let h = g.with_id(r#""a\"b""#);
        assert_eq!(h["id"], "a\"b");
        assert_eq!(h.id_text().as_deref(), Some(r#""a\"b""#));
        // An escaped key is the same key.
        let e = Frame::parse(r#"{"\u0069d":"x","method":"m"}"#).unwrap();
        assert_eq!(e.id_text().as_deref(), Some(r#""x""#));
        assert!(!e.dup_keys());
        let d = Frame::parse(r#"{"method":"ping","method":"tools/call","id":1}"#).unwrap();
        assert!(d.dup_keys());
        assert!(Frame::parse(r#"{"id":1,"\u0069d":2}"#).unwrap().dup_keys());
        // At any depth: a tool's name or argument named twice reads differently to a parser
        // that keeps the first value.
        let nested =
            r#"{"id":1,"method":"tools/call","params":{"name":"delete_all","name":"read"}}"#;
        assert!(Frame::parse(nested).unwrap().dup_keys());
        let deep = r#"{"id":1,"params":{"arguments":{"a":[{"p":"/etc","p":"/tmp"}]}}}"#;
        assert!(Frame::parse(deep).unwrap().dup_keys());
        let same_text_elsewhere = r#"{"id":1,"params":{"a":{"p":1},"b":{"p":2}}}"#;
        assert!(!Frame::parse(same_text_elsewhere).unwrap().dup_keys());
        let text = r#"{"a":[1,{"b":2.5e0}],"id":null,"c":"\u00e9","a2":{}}"#;
        assert_eq!(
            *Frame::parse(text).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
        assert!(Frame::parse(r#"{"a":1} x"#).is_err());
        assert!(Frame::parse("[1,2]").unwrap().is_array());
        let none = Frame::parse(r#"{"method":"n"}"#).unwrap().with_id("3");
        assert_eq!(none["id"], 3);
    }
}
