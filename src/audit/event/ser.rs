//! A `serde::Serializer` that writes any `Serialize` value straight to canonical JSON text —
//! the same text as `canonical_json(&serde_json::to_value(v)?)`, without building the `Value`.
//!
//! Objects (structs and maps) are buffered member by member, then written sorted by key bytes;
//! a key written twice keeps its last value, as `serde_json::Map::insert` does. Anything
//! `serde_json::to_value` would treat specially or reject (a `RawValue`, a non-string map key
//! other than an integer or char, a 128-bit integer out of the 64-bit range) is an error here,
//! so the caller falls back to the `Value` path and the bytes never differ.

use std::fmt;
use std::ops::Range;

use serde::ser::{self, Serialize};

use super::canonical::{write_es_number, write_int, write_string};

/// Why a value could not be written directly (the caller falls back to `serde_json::Value`).
#[derive(Debug)]
pub(crate) struct CanonError(String);

impl fmt::Display for CanonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CanonError {}

impl ser::Error for CanonError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        CanonError(msg.to_string())
    }
}

fn unsupported(what: &str) -> CanonError {
    CanonError(format!("{what} is not written directly"))
}

/// Appends the canonical JSON text of `value` to `out`. On error `out` may hold a partial
/// text: the caller truncates it.
pub(crate) fn to_canonical<T: Serialize + ?Sized>(
    value: &T,
    out: &mut String,
) -> Result<(), CanonError> {
    value.serialize(Canon { out })
}

/// The serializer: writes into `out`.
pub(crate) struct Canon<'a> {
    out: &'a mut String,
}

fn push_display(out: &mut String, v: impl fmt::Display) {
    use std::fmt::Write as _;
    let _ = write!(out, "{v}");
}

impl<'a> ser::Serializer for Canon<'a> {
    type Ok = ();
    type Error = CanonError;
    type SerializeSeq = Seq<'a>;
    type SerializeTuple = Seq<'a>;
    type SerializeTupleStruct = Seq<'a>;
    type SerializeTupleVariant = Variant<Seq<'a>>;
    type SerializeMap = Object<'a>;
    type SerializeStruct = Object<'a>;
    type SerializeStructVariant = Variant<Object<'a>>;

    fn serialize_bool(self, v: bool) -> Result<(), CanonError> {
        self.out.push_str(if v { "true" } else { "false" });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Result<(), CanonError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i16(self, v: i16) -> Result<(), CanonError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i32(self, v: i32) -> Result<(), CanonError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i64(self, v: i64) -> Result<(), CanonError> {
        write_int(v, self.out);
        Ok(())
    }
    fn serialize_i128(self, v: i128) -> Result<(), CanonError> {
        if let Ok(u) = u64::try_from(v) {
            self.serialize_u64(u)
        } else if let Ok(i) = i64::try_from(v) {
            self.serialize_i64(i)
        } else {
            Err(unsupported("a 128-bit integer out of the 64-bit range"))
        }
    }
    fn serialize_u8(self, v: u8) -> Result<(), CanonError> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u16(self, v: u16) -> Result<(), CanonError> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u32(self, v: u32) -> Result<(), CanonError> {
        self.serialize_u64(u64::from(v))
    }
    fn serialize_u64(self, v: u64) -> Result<(), CanonError> {
        write_int(v, self.out);
        Ok(())
    }
    fn serialize_u128(self, v: u128) -> Result<(), CanonError> {
        match u64::try_from(v) {
            Ok(u) => self.serialize_u64(u),
            Err(_) => Err(unsupported("a 128-bit integer out of the 64-bit range")),
        }
    }
    fn serialize_f32(self, v: f32) -> Result<(), CanonError> {
        self.serialize_f64(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), CanonError> {
        // serde_json::to_value turns a non-finite float into null; write_es_number does too.
        write_es_number(v, self.out);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), CanonError> {
        let mut buf = [0u8; 4];
        write_string(v.encode_utf8(&mut buf), self.out);
        Ok(())
    }
    fn serialize_str(self, v: &str) -> Result<(), CanonError> {
        write_string(v, self.out);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), CanonError> {
        // serde_json::to_value: an array of numbers.
        self.out.push('[');
        for (i, b) in v.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            write_int(*b, self.out);
        }
        self.out.push(']');
        Ok(())
    }
    fn serialize_none(self) -> Result<(), CanonError> {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), CanonError> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), CanonError> {
        self.out.push_str("null");
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), CanonError> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), CanonError> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<(), CanonError> {
        if name.starts_with("$serde_json::private::") {
            return Err(unsupported(name));
        }
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), CanonError> {
        self.out.push('{');
        write_string(variant, self.out);
        self.out.push(':');
        value.serialize(Canon {
            out: &mut *self.out,
        })?;
        self.out.push('}');
        Ok(())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Seq<'a>, CanonError> {
        self.out.push('[');
        Ok(Seq {
            out: self.out,
            first: true,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Seq<'a>, CanonError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<Seq<'a>, CanonError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Variant<Seq<'a>>, CanonError> {
        self.out.push('{');
        write_string(variant, self.out);
        self.out.push_str(":[");
        Ok(Variant(Seq {
            out: self.out,
            first: true,
        }))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Object<'a>, CanonError> {
        Ok(Object::new(self.out))
    }
    fn serialize_struct(self, name: &'static str, _len: usize) -> Result<Object<'a>, CanonError> {
        if name.starts_with("$serde_json::private::") {
            return Err(unsupported(name));
        }
        Ok(Object::new(self.out))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Variant<Object<'a>>, CanonError> {
        self.out.push('{');
        write_string(variant, self.out);
        self.out.push(':');
        Ok(Variant(Object::new(self.out)))
    }
}

/// An array being written.
pub(crate) struct Seq<'a> {
    out: &'a mut String,
    first: bool,
}

impl Seq<'_> {
    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CanonError> {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        value.serialize(Canon {
            out: &mut *self.out,
        })
    }
    fn close(self) {
        self.out.push(']');
    }
}

impl ser::SerializeSeq for Seq<'_> {
    type Ok = ();
    type Error = CanonError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CanonError> {
        self.element(value)
    }
    fn end(self) -> Result<(), CanonError> {
        self.close();
        Ok(())
    }
}

impl ser::SerializeTuple for Seq<'_> {
    type Ok = ();
    type Error = CanonError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CanonError> {
        self.element(value)
    }
    fn end(self) -> Result<(), CanonError> {
        self.close();
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Seq<'_> {
    type Ok = ();
    type Error = CanonError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CanonError> {
        self.element(value)
    }
    fn end(self) -> Result<(), CanonError> {
        self.close();
        Ok(())
    }
}

/// A variant's content (`{"Variant":…}`): closes the wrapping object after the content.
pub(crate) struct Variant<S>(S);

impl ser::SerializeTupleVariant for Variant<Seq<'_>> {
    type Ok = ();
    type Error = CanonError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CanonError> {
        self.0.element(value)
    }
    fn end(self) -> Result<(), CanonError> {
        self.0.out.push_str("]}");
        Ok(())
    }
}

impl ser::SerializeStructVariant for Variant<Object<'_>> {
    type Ok = ();
    type Error = CanonError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), CanonError> {
        self.0.member(key, value)
    }
    fn end(self) -> Result<(), CanonError> {
        let out = self.0.finish();
        out.push('}');
        Ok(())
    }
}

/// An object being written: keys and values are buffered, then written sorted by key bytes.
pub(crate) struct Object<'a> {
    out: &'a mut String,
    /// Keys, one after another (raw, not escaped).
    keys: String,
    /// Values, one after another, in canonical form.
    values: String,
    /// Each member's key and value ranges.
    members: Vec<(Range<usize>, Range<usize>)>,
    /// The key range of a map entry whose value is still to come.
    pending_key: Option<Range<usize>>,
}

impl<'a> Object<'a> {
    fn new(out: &'a mut String) -> Object<'a> {
        Object {
            out,
            keys: String::new(),
            values: String::new(),
            members: Vec::new(),
            pending_key: None,
        }
    }

    fn member<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), CanonError> {
        let k = self.keys.len()..self.keys.len() + key.len();
        self.keys.push_str(key);
        self.value(k, value)
    }

    fn value<T: Serialize + ?Sized>(
        &mut self,
        key: Range<usize>,
        value: &T,
    ) -> Result<(), CanonError> {
        let start = self.values.len();
        value.serialize(Canon {
            out: &mut self.values,
        })?;
        self.members.push((key, start..self.values.len()));
        Ok(())
    }

    /// Writes the sorted object to `out` and hands `out` back.
    fn finish(mut self) -> &'a mut String {
        let keys = &self.keys;
        // Stable: of two members with one key, the later stays later, and is the one kept.
        self.members
            .sort_by(|a, b| keys.as_bytes()[a.0.clone()].cmp(&keys.as_bytes()[b.0.clone()]));
        self.out.push('{');
        let mut first = true;
        for (i, (k, v)) in self.members.iter().enumerate() {
            let key = &keys[k.clone()];
            if self
                .members
                .get(i + 1)
                .is_some_and(|(next, _)| &keys[next.clone()] == key)
            {
                continue;
            }
            if !first {
                self.out.push(',');
            }
            first = false;
            write_string(key, self.out);
            self.out.push(':');
            self.out.push_str(&self.values[v.clone()]);
        }
        self.out.push('}');
        self.out
    }
}

impl ser::SerializeMap for Object<'_> {
    type Ok = ();
    type Error = CanonError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), CanonError> {
        let start = self.keys.len();
        key.serialize(MapKey {
            out: &mut self.keys,
        })?;
        self.pending_key = Some(start..self.keys.len());
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CanonError> {
        match self.pending_key.take() {
            Some(k) => self.value(k, value),
            None => Err(CanonError("a map value without a key".into())),
        }
    }
    fn end(self) -> Result<(), CanonError> {
        self.finish();
        Ok(())
    }
}

impl ser::SerializeStruct for Object<'_> {
    type Ok = ();
    type Error = CanonError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), CanonError> {
        self.member(key, value)
    }
    fn end(self) -> Result<(), CanonError> {
        self.finish();
        Ok(())
    }
}

/// Writes a map key's raw text (strings, chars and integers, as serde_json's `to_value` takes
/// them); anything else is an error.
struct MapKey<'a> {
    out: &'a mut String,
}

macro_rules! key_display {
    ($($f:ident: $t:ty),*) => {
        $(fn $f(self, v: $t) -> Result<(), CanonError> {
            push_display(self.out, v);
            Ok(())
        })*
    };
}

macro_rules! key_unsupported {
    ($($f:ident $(: $t:ty)?),*) => {
        $(fn $f(self $(, _v: $t)?) -> Result<(), CanonError> {
            Err(unsupported("this map key"))
        })*
    };
}

impl ser::Serializer for MapKey<'_> {
    type Ok = ();
    type Error = CanonError;
    type SerializeSeq = ser::Impossible<(), CanonError>;
    type SerializeTuple = ser::Impossible<(), CanonError>;
    type SerializeTupleStruct = ser::Impossible<(), CanonError>;
    type SerializeTupleVariant = ser::Impossible<(), CanonError>;
    type SerializeMap = ser::Impossible<(), CanonError>;
    type SerializeStruct = ser::Impossible<(), CanonError>;
    type SerializeStructVariant = ser::Impossible<(), CanonError>;

    key_display!(serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
        serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64,
        serialize_char: char, serialize_str: &str);
    key_unsupported!(serialize_bool: bool, serialize_f32: f32, serialize_f64: f64,
        serialize_i128: i128, serialize_u128: u128, serialize_bytes: &[u8], serialize_none,
        serialize_unit);

    fn serialize_some<T: Serialize + ?Sized>(self, _v: &T) -> Result<(), CanonError> {
        Err(unsupported("an optional map key"))
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), CanonError> {
        Err(unsupported("a unit struct map key"))
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), CanonError> {
        self.out.push_str(variant);
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), CanonError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<(), CanonError> {
        Err(unsupported("a newtype variant map key"))
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, CanonError> {
        Err(unsupported("a sequence map key"))
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, CanonError> {
        Err(unsupported("a tuple map key"))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, CanonError> {
        Err(unsupported("a tuple map key"))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, CanonError> {
        Err(unsupported("a tuple variant map key"))
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, CanonError> {
        Err(unsupported("a map map key"))
    }
    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, CanonError> {
        Err(unsupported("a struct map key"))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, CanonError> {
        Err(unsupported("a struct variant map key"))
    }
}
