//! A relayed JSON-RPC message: its parsed form, for toolgate to look at, and the exact text it
//! came in, written out again as it came unless toolgate changed the message.

use std::ops::Deref;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// One JSON-RPC message in transit.
///
/// A frame read from a peer keeps its original text; serializing it writes that text again, so
/// key order, number spelling, string escapes and unknown fields reach the other side byte for
/// byte. A frame toolgate builds or changes ([`Frame::msg_mut`]) is serialized from its value.
#[derive(Debug, Clone)]
pub(crate) struct Frame {
    msg: Value,
    raw: Option<Box<RawValue>>,
}

impl Frame {
    /// A frame from its original text (parsed once more for toolgate to look at). Text that
    /// spans lines (whitespace between tokens, e.g. pretty-printed JSON from an HTTP server)
    /// cannot go on a line-framed stream as it is: such a frame is written from its value.
    pub(crate) fn from_raw(raw: Box<RawValue>) -> serde_json::Result<Frame> {
        let msg = serde_json::from_str(raw.get())?;
        let one_line = !raw.get().contains(['\n', '\r']);
        Ok(Frame {
            msg,
            raw: one_line.then_some(raw),
        })
    }

    /// The message, to change it: the original text is dropped, the frame is written from the
    /// changed value.
    pub(crate) fn msg_mut(&mut self) -> &mut Value {
        self.raw = None;
        &mut self.msg
    }

    /// The message.
    pub(crate) fn into_value(self) -> Value {
        self.msg
    }

    /// The original text, if the frame is unchanged since it was read.
    #[cfg(test)]
    pub(crate) fn raw(&self) -> Option<&str> {
        self.raw.as_deref().map(RawValue::get)
    }
}

impl From<Value> for Frame {
    fn from(msg: Value) -> Frame {
        Frame { msg, raw: None }
    }
}

impl Deref for Frame {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.msg
    }
}

impl Serialize for Frame {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.raw {
            Some(raw) => raw.serialize(s),
            None => self.msg.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Frame {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Frame, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        Frame::from_raw(raw).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unchanged_frames_keep_their_text() {
        let text = r#"{"z":1,"a":{"_meta":{"y":true,"b":null}},"n":1.0e3,"s":"\u00e9"}"#;
        let f: Frame = serde_json::from_str(&format!("  {text} ")).unwrap();
        assert_eq!(f.raw(), Some(text));
        assert_eq!(f["n"], 1000.0);
        assert_eq!(serde_json::to_string(&f).unwrap(), text);

        let mut changed = f.clone();
        changed.msg_mut()["z"] = Value::from(2);
        let out = serde_json::to_string(&changed).unwrap();
        assert!(out.contains(r#""z":2"#) && !out.contains("1.0e3"), "{out}");

        let lines: Frame = serde_json::from_str("{\"b\":\n 1,\r\n\"a\": 2}").unwrap();
        assert_eq!(lines.raw(), None);
        assert_eq!(serde_json::to_string(&lines).unwrap(), r#"{"a":2,"b":1}"#);

        let built = Frame::from(serde_json::json!({"b": 1, "a": 2}));
        assert_eq!(serde_json::to_string(&built).unwrap(), r#"{"a":2,"b":1}"#);
    }
}
