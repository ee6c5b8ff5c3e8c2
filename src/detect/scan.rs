//! Byte-level helpers shared by the detectors. Every detector works on the bytes of a `&str`
//! (the patterns are ASCII; a non-ASCII byte is a boundary), never copies the input, and
//! moves forward only: each byte is looked at a bounded number of times.

/// The scan limit by default: at most this many bytes of each string are scanned (1 MiB;
/// `EngineBuilder::sensitive_scan_limit` sets another).
pub(crate) const MAX_SCAN: usize = 1 << 20;

/// The first [`MAX_SCAN`] bytes of `s` (cut at a character boundary).
pub(crate) fn bounded(s: &str) -> &[u8] {
    bounded_to(s, MAX_SCAN).0
}

/// The first `limit` bytes of `s` (cut at a character boundary), and whether that cut
/// anything off.
pub(crate) fn bounded_to(s: &str, limit: usize) -> (&[u8], bool) {
    if s.len() <= limit {
        return (s.as_bytes(), false);
    }
    let mut end = limit;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s.as_bytes()[..end], true)
}

#[inline]
pub(crate) fn alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// Whether the byte before `i` (if any) is not a letter or digit.
#[inline]
pub(crate) fn left_boundary(s: &[u8], i: usize) -> bool {
    i == 0 || !alnum(s[i - 1])
}

/// Whether the byte at `i` (if any) is not a letter or digit.
#[inline]
pub(crate) fn right_boundary(s: &[u8], i: usize) -> bool {
    i >= s.len() || !alnum(s[i])
}

/// The end of the run of bytes from `i` on that satisfy `f`.
#[inline]
pub(crate) fn run_end(s: &[u8], mut i: usize, f: impl Fn(u8) -> bool) -> usize {
    while i < s.len() && f(s[i]) {
        i += 1;
    }
    i
}

/// The index of the first ASCII digit at or after `i` (`s.len()` when none), eight bytes at a
/// time: in prose digits are rare, so most of the input is skipped a word at once.
pub(crate) fn next_digit(s: &[u8], mut i: usize) -> usize {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    const LOW7: u64 = LO * 127;
    while i + 8 <= s.len() {
        let mut w = [0u8; 8];
        w.copy_from_slice(&s[i..i + 8]);
        let x = u64::from_le_bytes(w);
        // Bytes in 0x30..=0x39 (per byte, no carries: the operands stay below 256; bytes
        // >= 0x80 are excluded by `!x`).
        let t = ((LO * (127 + 0x3A)).wrapping_sub(x & LOW7))
            & !x
            & ((x & LOW7) + LO * (127 - 0x2F))
            & HI;
        if t != 0 {
            return i + (t.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < s.len() && !s[i].is_ascii_digit() {
        i += 1;
    }
    i
}

/// The bytes as a `&str` (the detectors only slice at ASCII bytes, so this never fails on
/// their slices; an empty string otherwise).
#[inline]
pub(crate) fn text(b: &[u8]) -> &str {
    std::str::from_utf8(b).unwrap_or("")
}

/// A valid DNS name: labels of letters, digits and inner hyphens (1–63 bytes), at least two
/// labels, and a last label (the TLD) of two or more letters.
pub(crate) fn valid_domain(d: &[u8]) -> bool {
    if d.is_empty() || d.len() > 253 {
        return false;
    }
    let mut labels = 0;
    let mut last: &[u8] = &[];
    for label in d.split(|&b| b == b'.') {
        if label.is_empty()
            || label.len() > 63
            || label[0] == b'-'
            || label[label.len() - 1] == b'-'
            || !label.iter().all(|&b| alnum(b) || b == b'-')
        {
            return false;
        }
        labels += 1;
        last = label;
    }
    labels >= 2 && last.len() >= 2 && last.iter().all(u8::is_ascii_alphabetic)
}

/// The last label of a domain.
pub(crate) fn tld(d: &str) -> &str {
    d.rsplit('.').next().unwrap_or(d)
}
