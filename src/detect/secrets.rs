//! Detectors for credentials: `jwt`, `private_key`, `secret_key`.

use std::sync::LazyLock;

use std::ops::Range;

use memchr::memmem::Finder;
use serde::Deserialize;

use super::scan::{alnum, run_end};

fn b64url(b: u8) -> bool {
    alnum(b) || b == b'_' || b == b'-'
}

/// A JSON Web Token: three base64url parts joined by dots (the third may be empty, as in an
/// unsecured token), not inside a longer such run, whose first part decodes (base64url, no
/// padding, at most 2048 characters) to a JSON object with a string member `alg`.
pub(crate) fn jwt(s: &[u8]) -> bool {
    // A JSON header starts with `{` and then a quote or whitespace: its base64url starts with
    // `ey` (`{"`, `{ "`) or `ew` (`{` and a newline, tab or carriage return).
    jwt_spans(s, |_| true)
}

/// Calls `f` with the byte range of each JWT in `s` (see [`jwt`]) until it returns true.
pub(crate) fn jwt_spans(s: &[u8], mut f: impl FnMut(Range<usize>) -> bool) -> bool {
    static EY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"ey"));
    static EW: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"ew"));
    jwt_from(s, &EY, &mut f) || jwt_from(s, &EW, &mut f)
}

fn jwt_from(s: &[u8], finder: &Finder<'_>, f: &mut impl FnMut(Range<usize>) -> bool) -> bool {
    let mut i = 0;
    while let Some(off) = finder.find(&s[i..]) {
        let start = i + off;
        i = start + 1;
        if start > 0 && (b64url(s[start - 1]) || s[start - 1] == b'.') {
            continue;
        }
        let e1 = run_end(s, start, b64url);
        if e1 >= s.len() || s[e1] != b'.' {
            i = e1.max(i);
            continue;
        }
        let e2 = run_end(s, e1 + 1, b64url);
        if e2 == e1 + 1 || e2 >= s.len() || s[e2] != b'.' {
            i = e2.max(i);
            continue;
        }
        let e3 = run_end(s, e2 + 1, b64url);
        i = e3.max(i);
        if e3 < s.len() && s[e3] == b'.' && e3 + 1 < s.len() && b64url(s[e3 + 1]) {
            continue;
        }
        if header_has_alg(&s[start..e1]) && f(start..e3) {
            return true;
        }
    }
    false
}

/// Whether a JWT starts at `start` (its first part begins with `ey` or `ew`, as [`jwt`]
/// requires): not inside a longer run of base64url parts, three parts, a header with `alg`.
pub(super) fn jwt_at(s: &[u8], start: usize) -> bool {
    if !matches!(s.get(start..start + 2), Some(b"ey" | b"ew")) {
        return false;
    }
    if start > 0 && (b64url(s[start - 1]) || s[start - 1] == b'.') {
        return false;
    }
    let e1 = run_end(s, start, b64url);
    if e1 >= s.len() || s[e1] != b'.' {
        return false;
    }
    let e2 = run_end(s, e1 + 1, b64url);
    if e2 == e1 + 1 || e2 >= s.len() || s[e2] != b'.' {
        return false;
    }
    let e3 = run_end(s, e2 + 1, b64url);
    if e3 < s.len() && s[e3] == b'.' && e3 + 1 < s.len() && b64url(s[e3 + 1]) {
        return false;
    }
    header_has_alg(&s[start..e1])
}

/// The shortest first part of a JWT: `{"alg":"x"}` (11 bytes) is 15 base64url characters.
pub(super) const MIN_JWT_HEADER: usize = 15;

fn b64_value(b: u8) -> Option<u32> {
    Some(u32::from(match b {
        b'A'..=b'Z' => b - b'A',
        b'a'..=b'z' => b - b'a' + 26,
        b'0'..=b'9' => b - b'0' + 52,
        b'-' => 62,
        b'_' => 63,
        _ => return None,
    }))
}

#[derive(Deserialize)]
struct Header<'a> {
    #[serde(borrow)]
    alg: std::borrow::Cow<'a, str>,
}

fn header_has_alg(part: &[u8]) -> bool {
    if part.len() > 2048 || part.len() % 4 == 1 {
        return false;
    }
    let mut out = [0u8; 1536];
    let mut n = 0;
    let mut acc = 0u32;
    let mut bits = 0;
    for &b in part {
        let Some(v) = b64_value(b) else {
            return false;
        };
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out[n] = (acc >> bits) as u8;
            n += 1;
            acc &= (1 << bits) - 1;
        }
    }
    serde_json::from_slice::<Header<'_>>(&out[..n]).is_ok_and(|h| !h.alg.is_empty())
}

/// A PEM private key: a `-----BEGIN <label>-----` line whose label (capital letters, digits
/// and spaces) ends in `PRIVATE KEY` (`RSA PRIVATE KEY`, `EC PRIVATE KEY`, `OPENSSH PRIVATE
/// KEY`, `ENCRYPTED PRIVATE KEY`, `PRIVATE KEY`, …), followed by a body: at least 16 base64
/// characters (whitespace ignored, and so are the escapes `\n`, `\r`, `\t` of a key written
/// inside JSON or a `.env` file, with any number of backslashes) or a legacy `Proc-Type:`
/// header. The `END` line is not required (a truncated key still leaks).
pub(crate) fn private_key(s: &[u8]) -> bool {
    private_key_spans(s, |_| true)
}

/// The end of the whitespace and escaped line breaks (`\n`, `\\n`, `\r`, `\t`) from `p` on.
fn skip_breaks(s: &[u8], p: usize) -> usize {
    skip(s, p, true)
}

/// The end of the line breaks, escaped or not (`\n`, `\\n`, …), from `p` on; with
/// `whitespace`, of any whitespace too.
fn skip(s: &[u8], mut p: usize, whitespace: bool) -> usize {
    loop {
        if whitespace && p < s.len() && s[p].is_ascii_whitespace() {
            p += 1;
            continue;
        }
        if !whitespace && p < s.len() && matches!(s[p], b'\r' | b'\n') {
            p += 1;
            continue;
        }
        let q = run_end(s, p, |b| b == b'\\');
        if q > p && q < s.len() && matches!(s[q], b'n' | b'r' | b't') {
            p = q + 1;
            continue;
        }
        return p;
    }
}

/// Calls `f` with the byte range of each PEM private key in `s` (see [`private_key`]) until
/// it returns true: from `-----BEGIN` to the end of the next `-----END …-----` line, or
/// without one, to the end of the body.
pub(crate) fn private_key_spans(s: &[u8], mut f: impl FnMut(Range<usize>) -> bool) -> bool {
    // Built once (a searcher costs about a thousand instructions to set up).
    static BEGIN: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"-----BEGIN "));
    static END: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"-----END "));
    // The next END line at or after a position, remembered (keys are found in order).
    let mut next_end: Option<(usize, Option<usize>)> = None;
    let mut found_end = 0;
    for at in BEGIN.find_iter(s) {
        if at < found_end {
            continue;
        }
        let l = at + 11;
        let le = run_end(s, l, |b| {
            b.is_ascii_uppercase() || b.is_ascii_digit() || b == b' '
        });
        if !s[l..le].ends_with(b"PRIVATE KEY") || !s[le..].starts_with(b"-----") {
            continue;
        }
        let mut p = skip_breaks(s, le + 5);
        let mut body = 0;
        let mut last = p;
        let legacy = s[p..].starts_with(b"Proc-Type:");
        if !legacy {
            while p < s.len() && body < 16 {
                if !(alnum(s[p]) || matches!(s[p], b'+' | b'/' | b'=')) {
                    break;
                }
                body += 1;
                last = p + 1;
                p = skip_breaks(s, p + 1);
            }
            if body < 16 {
                continue;
            }
        }
        // The body's end: the END line if one follows, else the run of body bytes.
        let from = le + 5;
        let end_at = match next_end {
            Some((q, e)) if q <= from && e.is_none_or(|e| e >= from) => e,
            _ => {
                let e = END.find(&s[from..]).map(|k| from + k);
                next_end = Some((from, e));
                e
            }
        };
        let end = match end_at {
            Some(e) => {
                let close = memchr::memmem::find(&s[e + 9..], b"-----").map(|k| e + 9 + k + 5);
                close.unwrap_or(s.len())
            }
            None => {
                // Body bytes and line breaks (escaped or not), up to a space or other byte.
                let (mut q, mut end) = (last, last);
                loop {
                    let r = run_end(s, q, |b| {
                        alnum(b) || matches!(b, b'+' | b'/' | b'=' | b':' | b',' | b'-')
                    });
                    // A line break (escaped or not) continues the body; a space ends it.
                    let w = skip(s, r, false);
                    if w == q {
                        break end;
                    }
                    end = w;
                    q = w;
                }
            }
        };
        found_end = end;
        if f(at..end) {
            return true;
        }
    }
    false
}

/// Known key prefixes (case-sensitive) and how many key characters must follow.
const PREFIXES: &[(&[u8], usize)] = &[
    (b"sk-ant-", 20),
    (b"sk-proj-", 20),
    (b"sk-", 20),
    (b"sk_live_", 16),
    (b"sk_test_", 16),
    (b"rk_live_", 16),
    (b"rk_test_", 16),
    (b"ghp_", 30),
    (b"gho_", 30),
    (b"ghu_", 30),
    (b"ghs_", 30),
    (b"ghr_", 30),
    (b"github_pat_", 20),
    (b"xoxb-", 10),
    (b"xoxp-", 10),
    (b"xoxa-", 10),
    (b"xoxs-", 10),
    (b"AKIA", 16),
    (b"ASIA", 16),
    (b"AIza", 30),
    (b"glpat-", 20),
    (b"npm_", 30),
    (b"hf_", 30),
];

/// Bytes of `[A-Za-z0-9_\-+/=]`, as a table (one load per byte).
static TOKEN: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'+' | b'/' | b'=');
        b += 1;
    }
    t
};

#[inline(always)]
pub(super) fn token_char(b: u8) -> bool {
    TOKEN[usize::from(b)]
}

/// The shortest token a known prefix can match (`xoxb-` and 10 key characters).
pub(super) const MIN_PREFIXED: usize = 15;

/// A secret key: in a token (a maximal run of `[A-Za-z0-9_\-+/=]`), either a known prefix
/// followed by enough key characters — at the token's start, or inside it right after a
/// `_`, `-`, `+`, `/` or `=` (`AWS_ACCESS_KEY_ID=AKIA…`, `x-AKIA…`; there the key characters
/// must mix letters and digits, as generated keys do and words do not) — or ≥ 24 characters
/// mixing letters and digits whose Shannon entropy per character is at least
/// min(4.3, log2(length) − 0.5) bits. UUIDs and hex strings never reach that (≤ 4 bits per
/// character).
///
/// Decisions find these tokens with the shared first pass (`first_pass.rs`, a word at a
/// time); this byte-probing scan is its reference in the tests and finds the spans to redact.
#[cfg(test)]
pub(crate) fn secret_key(s: &[u8]) -> bool {
    secret_spans(s, |_| true)
}

/// Calls `f` with the byte range of each secret key in `s` (see [`secret_key`]) until it
/// returns true: the prefixed key, or the whole high-entropy token.
pub(crate) fn secret_spans(s: &[u8], mut f: impl FnMut(Range<usize>) -> bool) -> bool {
    // Only tokens of MIN_PREFIXED or more bytes can match. Invariant: `i` is 0 or follows a
    // byte that is not a token byte. A token that long starting in i..=i+14 covers i+14: when
    // that byte is not a token byte the whole window is skipped with one look.
    let mut i = 0;
    while i + MIN_PREFIXED <= s.len() {
        let probe = i + MIN_PREFIXED - 1;
        if !token_char(s[probe]) {
            i = probe + 1;
            continue;
        }
        let mut start = probe;
        while start > i && token_char(s[start - 1]) {
            start -= 1;
        }
        let end = run_end(s, probe, token_char);
        if let Some(r) = secret_in_token(&s[start..end])
            && f(start + r.start..start + r.end)
        {
            return true;
        }
        i = end + 1;
    }
    false
}

pub(super) fn secret_token(t: &[u8]) -> bool {
    secret_in_token(t).is_some()
}

/// The first byte of every known prefix.
fn prefix_start(b: u8) -> bool {
    matches!(b, b's' | b'r' | b'g' | b'x' | b'A' | b'n' | b'h')
}

/// The known-prefix key starting at `k` in the token `t`, if any.
fn prefixed_at(t: &[u8], k: usize) -> Option<Range<usize>> {
    let (p, min) = PREFIXES.iter().find(|(p, _)| t[k..].starts_with(p))?;
    let rest = &t[k + p.len()..];
    let key = run_end(rest, 0, |b| alnum(b) || b == b'_' || b == b'-');
    let key_bytes = &rest[..key];
    // Inside a token, the key must look generated: letters and digits mixed, or an AWS
    // access key id's exact shape (16 capitals and digits).
    let generated = || {
        (key_bytes.iter().any(u8::is_ascii_digit) && key_bytes.iter().any(u8::is_ascii_alphabetic))
            || (matches!(*p, b"AKIA" | b"ASIA")
                && key == 16
                && key_bytes
                    .iter()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()))
    };
    (key >= *min && (k == 0 || generated())).then(|| k..k + p.len() + key)
}

/// Where the secret in the token `t` lies, if it holds one (see [`secret_key`]).
pub(super) fn secret_in_token(t: &[u8]) -> Option<Range<usize>> {
    // Most tokens are words: too short for any rule.
    if t.len() < MIN_PREFIXED {
        return None;
    }
    for k in 0..=t.len() - MIN_PREFIXED {
        if prefix_start(t[k])
            && (k == 0 || matches!(t[k - 1], b'_' | b'-' | b'+' | b'/' | b'='))
            && let Some(r) = prefixed_at(t, k)
        {
            return Some(r);
        }
    }
    if t.len() < 24 {
        return None;
    }
    let mut letters = false;
    let mut digits = false;
    let mut counts = [0u32; 128];
    for &b in t {
        letters |= b.is_ascii_alphabetic();
        digits |= b.is_ascii_digit();
        counts[usize::from(b & 0x7f)] += 1;
    }
    if !(letters && digits) {
        return None;
    }
    let n = t.len() as f64;
    let h: f64 = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum();
    (h >= entropy_threshold(t.len())).then_some(0..t.len())
}

/// The entropy (bits per character) a token of `len` characters needs to count as a secret.
pub(crate) fn entropy_threshold(len: usize) -> f64 {
    (len as f64).log2().min(4.8) - 0.5
}
