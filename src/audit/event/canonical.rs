//! The canonical JSON form event hashes are computed over: [`canonical_json`] for a
//! `serde_json::Value`, and [`write_members`] for an event written straight from its fields.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The canonical JSON text of a value, the form event hashes are computed over:
///
/// * no whitespace anywhere outside strings;
/// * object members sorted by key, comparing the keys' UTF-8 bytes (no duplicate keys);
/// * strings as serde_json writes them: `"` and `\` escaped as `\"` and `\\`; U+0008, U+0009,
///   U+000A, U+000C, U+000D as `\b`, `\t`, `\n`, `\f`, `\r`; every other code point below
///   U+0020 as `\u00xx` (lowercase hex); everything else, non-ASCII included, as raw UTF-8;
/// * numbers that serde_json holds as integers (no fraction or exponent in the source text,
///   within `i64`/`u64`) in plain decimal; every other number as ECMAScript's
///   `Number.prototype.toString` writes it (shortest round-trip digits; `1`, `0.5`, `1e+21`,
///   `1.5e-7`; `-0` as `0`), as in RFC 8785.
pub fn canonical_json(v: &Value) -> String {
    let mut out = String::with_capacity(256);
    write_canonical(v, &mut out);
    out
}

pub(crate) fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // serde_json's map is a BTreeMap, already in byte order of the keys; but a crate in
            // the build may turn on serde_json's `preserve_order` (insertion order), so check,
            // and sort only when needed.
            let sorted = map
                .keys()
                .zip(map.keys().skip(1))
                .all(|(a, b)| a.as_bytes() < b.as_bytes());
            out.push('{');
            if sorted {
                write_value_members(map.iter(), out);
            } else {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                write_value_members(entries.into_iter(), out);
            }
            out.push('}');
        }
    }
}

fn write_value_members<'a>(
    members: impl Iterator<Item = (&'a String, &'a Value)>,
    out: &mut String,
) {
    for (i, (k, item)) in members.enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(k, out);
        out.push(':');
        write_canonical(item, out);
    }
}

/// Writes a number: integers held as `i64`/`u64` in decimal, every other number as ECMAScript's
/// `Number.prototype.toString` writes it (the form RFC 8785 uses).
fn write_number(n: &serde_json::Number, out: &mut String) {
    if let Some(u) = n.as_u64() {
        write_int(u, out);
    } else if let Some(i) = n.as_i64() {
        write_int(i, out);
    } else if let Some(f) = n.as_f64() {
        write_es_number(f, out);
    } else {
        out.push_str("null");
    }
}

/// Writes an integer in decimal.
#[inline]
pub(crate) fn write_int(n: impl itoa::Integer, out: &mut String) {
    out.push_str(itoa::Buffer::new().format(n));
}

/// ECMAScript `Number::toString(x)` (radix 10), built on Rust's shortest round-trip digits.
/// Not finite: `null` (serde_json holds no such number).
pub(crate) fn write_es_number(x: f64, out: &mut String) {
    if x == 0.0 {
        out.push('0');
        return;
    }
    if !x.is_finite() {
        out.push_str("null");
        return;
    }
    if x < 0.0 {
        out.push('-');
    }
    // "d.ddddde[-]x": shortest digits that round-trip.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let k = digits.len() as i64;
    // x = 0.d1d2...dk * 10^n
    let n = exp.parse::<i64>().unwrap_or(0) + 1;
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if n > 0 { '+' } else { '-' });
        out.push_str(&(n - 1).abs().to_string());
    }
}

/// Writes a JSON string literal with serde_json's escaping (documented on [`canonical_json`]).
#[inline]
pub(crate) fn write_string(s: &str, out: &mut String) {
    if needs_no_escape(s.as_bytes()) {
        write_plain(s, out);
    } else {
        write_escaped(s, out);
    }
}

/// Writes `s` in quotes as is: for text known to need no escape (hex, UUIDs, timestamps,
/// identifiers written by toolgate itself).
#[inline]
pub(crate) fn write_plain(s: &str, out: &mut String) {
    debug_assert!(needs_no_escape(s.as_bytes()), "{s:?} needs escaping");
    out.reserve(s.len() + 2);
    out.push('"');
    out.push_str(s);
    out.push('"');
}

/// Whether no byte of `bytes` needs an escape in a string literal: looked at 8 bytes at a
/// time, the last (partial) word read as overlapping loads, so a short string costs a few
/// instructions and no loop.
#[inline]
fn needs_no_escape(bytes: &[u8]) -> bool {
    let (words, tail) = bytes.as_chunks::<8>();
    if words.iter().any(|w| needs_escape(u64::from_le_bytes(*w))) {
        return false;
    }
    !needs_escape(tail_word(tail))
}

/// The (fewer than 8) bytes of `tail` as one word, padded with a byte that needs no escape.
/// Overlapping loads put some bytes in twice; only whether any needs an escape matters.
#[inline]
fn tail_word(tail: &[u8]) -> u64 {
    /// 8 bytes of `a`: none needs an escape.
    const SAFE: u64 = 0x6161_6161_6161_6161;
    let n = tail.len();
    let u16_at = |i: usize| u64::from(u16::from_le_bytes([tail[i], tail[i + 1]]));
    if n >= 4 {
        let lo = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
        let hi = u64::from(u32::from_le_bytes([
            tail[n - 4],
            tail[n - 3],
            tail[n - 2],
            tail[n - 1],
        ]));
        lo | hi << 32
    } else if n >= 2 {
        u16_at(0) | u16_at(n - 2) << 16 | (SAFE << 32)
    } else if n == 1 {
        u64::from(tail[0]) | (SAFE << 8)
    } else {
        SAFE
    }
}

/// The escape of byte `b` inside a string literal (`Some("")` for the `\u00xx` form), or
/// `None` when it is written as is.
#[inline]
fn escape_of(b: u8) -> Option<&'static str> {
    match b {
        b'"' => Some("\\\""),
        b'\\' => Some("\\\\"),
        0x08 => Some("\\b"),
        b'\t' => Some("\\t"),
        b'\n' => Some("\\n"),
        0x0c => Some("\\f"),
        b'\r' => Some("\\r"),
        0x00..=0x1f => Some(""),
        _ => None,
    }
}

/// Writes `s` in quotes, escaped byte by byte.
#[cold]
fn write_escaped(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len() + 8);
    out.push('"');
    let mut start = 0;
    for (j, &b) in s.as_bytes().iter().enumerate() {
        let Some(escape) = escape_of(b) else {
            continue;
        };
        // Every byte that needs an escape is ASCII, so `j` is on a char boundary.
        out.push_str(&s[start..j]);
        if escape.is_empty() {
            out.push_str("\\u00");
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 0xf)] as char);
        } else {
            out.push_str(escape);
        }
        start = j + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Whether any of the 8 bytes of `w` is below 0x20, a `"` or a `\\` (may say yes for a
/// byte of 0x80 or more next to one of them: the caller then looks byte by byte).
#[inline]
fn needs_escape(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // A byte is zero in `x` exactly where `w` has the byte looked for; the classic test sets
    // its high bit (and may set others only above a true hit).
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let below_space = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    let quote = has_zero(w ^ (ONES * u64::from(b'"')));
    let backslash = has_zero(w ^ (ONES * u64::from(b'\\')));
    (below_space | quote | backslash) != 0
}

/// SHA-256 of `text`'s UTF-8 bytes, lowercase hex.
pub fn sha256_hex(text: &str) -> String {
    let mut buf = [0u8; 64];
    sha256_hex_into(text.as_bytes(), &mut buf).to_string()
}

/// SHA-256 of `bytes`, lowercase hex, written into `buf` (no allocation).
pub(crate) fn sha256_hex_into<'b>(bytes: &[u8], buf: &'b mut [u8; 64]) -> &'b str {
    let digest = Sha256::digest(bytes);
    // Two digits per byte from a table (a quarter of the instructions of a digit at a time).
    for (pair, b) in buf.as_chunks_mut::<2>().0.iter_mut().zip(digest.iter()) {
        *pair = HEX_PAIRS[usize::from(*b)];
    }
    std::str::from_utf8(buf).unwrap_or("")
}

/// The two lowercase hex digits of every byte value.
const HEX_PAIRS: [[u8; 2]; 256] = {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut table = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = [DIGITS[i >> 4], DIGITS[i & 0xf]];
        i += 1;
    }
    table
};

/// The hash an event's JSON ought to carry: SHA-256 of the canonical JSON of `event` without
/// its `hash` member. `None` if `event` is not an object.
pub fn expected_hash(event: &Value) -> Option<String> {
    let map = event.as_object()?;
    let mut text = String::with_capacity(512);
    // Same as canonical_json over the map minus "hash", without cloning it.
    write_canonical_members(map.iter().filter(|(k, _)| *k != "hash"), &mut text);
    Some(sha256_hex(&text))
}

/// Writes the canonical JSON object made of `members` (sorted here by key bytes).
pub(crate) fn write_canonical_members<'a>(
    members: impl Iterator<Item = (&'a String, &'a Value)>,
    out: &mut String,
) {
    let mut entries: Vec<(&String, &Value)> = members.collect();
    entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out.push('{');
    write_value_members(entries.into_iter(), out);
    out.push('}');
}

/// The value of one member of an object written by [`write_members`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Member<'a> {
    /// A string.
    Str(&'a str),
    /// An unsigned integer.
    U64(u64),
    /// `null`.
    Null,
    /// A JSON value, written in canonical form.
    Json(&'a Value),
    /// Text already in canonical form (written by [`super::ser::to_canonical`]).
    Raw(&'a str),
    /// A string known to need no escape (hex, a UUID, a timestamp, a name toolgate chose).
    Plain(&'a str),
}

/// Writes the canonical object of `members` (sorted here by key bytes; keys must be distinct).
/// Returns the offset in `out` of the first member whose key sorts after `mark` (where a
/// member named `mark` would go), or `None` if there is none.
pub(crate) fn write_members(
    members: &mut [(&str, Member<'_>)],
    mark: &str,
    out: &mut String,
) -> Option<usize> {
    if !members.is_sorted_by(|a, b| key_le(a.0, b.0)) {
        members.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    }
    write_sorted_members(members.iter().copied(), mark, Keys::Escape, out)
}

/// Whether key `a` sorts before or equal to key `b` (byte order); most keys differ in their
/// first byte, which settles it without a `memcmp`.
#[inline]
pub(crate) fn key_le(a: &str, b: &str) -> bool {
    match (a.as_bytes().first(), b.as_bytes().first()) {
        (Some(x), Some(y)) if x != y => x < y,
        _ => a.as_bytes() <= b.as_bytes(),
    }
}

/// The members of two lists, each in key order, merged into one in key order.
pub(crate) fn merged<'a>(
    a: &'a [(&'a str, Member<'a>)],
    b: &'a [(&'a str, Member<'a>)],
) -> impl Iterator<Item = (&'a str, Member<'a>)> {
    let (mut i, mut j) = (0, 0);
    std::iter::from_fn(move || {
        let next = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if key_le(x.0, y.0) => {
                i += 1;
                x
            }
            (_, Some(y)) => {
                j += 1;
                y
            }
            (Some(x), None) => {
                i += 1;
                x
            }
            (None, None) => return None,
        };
        Some(*next)
    })
}

/// How [`write_sorted_members`] writes keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keys {
    /// Escaped as any string (keys from a JSON map).
    Escape,
    /// As they are: toolgate's own names, which need no escape.
    Plain,
}

/// [`write_members`] for members already in byte order of their keys.
pub(crate) fn write_sorted_members<'a>(
    members: impl IntoIterator<Item = (&'a str, Member<'a>)>,
    mark: &str,
    keys: Keys,
    out: &mut String,
) -> Option<usize> {
    let mut at = None;
    let mut prev: Option<&str> = None;
    out.push('{');
    for (k, v) in members {
        if let Some(p) = prev {
            debug_assert!(p.as_bytes() < k.as_bytes(), "{p:?} before {k:?}");
            out.push(',');
        }
        prev = Some(k);
        if at.is_none() && !key_le(k, mark) {
            at = Some(out.len());
        }
        match keys {
            Keys::Plain => write_plain(k, out),
            Keys::Escape => write_string(k, out),
        }
        out.push(':');
        write_value(v, out);
    }
    out.push('}');
    at
}

/// Writes a member's value in canonical form.
#[inline]
pub(crate) fn write_value(v: Member<'_>, out: &mut String) {
    match v {
        Member::Str(s) => write_string(s, out),
        Member::Plain(s) => write_plain(s, out),
        Member::U64(n) => write_int(n, out),
        Member::Null => out.push_str("null"),
        Member::Json(v) => write_canonical(v, out),
        Member::Raw(text) => out.push_str(text),
    }
}
