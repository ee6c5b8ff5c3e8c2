//! Detectors for financial and identity numbers: `iban` (mod 97), `uk_nino` (`credit_card`
//! is in `card.rs`).

use std::ops::Range;

use super::scan::{alnum, left_boundary, next_digit, right_boundary, run_end};

/// IBAN lengths by country (the SWIFT IBAN registry).
const IBAN_LENGTHS: &[(&[u8; 2], u8)] = &[
    (b"AD", 24),
    (b"AE", 23),
    (b"AL", 28),
    (b"AT", 20),
    (b"AZ", 28),
    (b"BA", 20),
    (b"BE", 16),
    (b"BG", 22),
    (b"BH", 22),
    (b"BR", 29),
    (b"BY", 28),
    (b"CH", 21),
    (b"CR", 22),
    (b"CY", 28),
    (b"CZ", 24),
    (b"DE", 22),
    (b"DK", 18),
    (b"DO", 28),
    (b"EE", 20),
    (b"EG", 29),
    (b"ES", 24),
    (b"FI", 18),
    (b"FO", 18),
    (b"FR", 27),
    (b"GB", 22),
    (b"GE", 22),
    (b"GI", 23),
    (b"GL", 18),
    (b"GR", 27),
    (b"GT", 28),
    (b"HR", 21),
    (b"HU", 28),
    (b"IE", 22),
    (b"IL", 23),
    (b"IQ", 23),
    (b"IS", 26),
    (b"IT", 27),
    (b"JO", 30),
    (b"KW", 30),
    (b"KZ", 20),
    (b"LB", 28),
    (b"LC", 32),
    (b"LI", 21),
    (b"LT", 20),
    (b"LU", 20),
    (b"LV", 21),
    (b"MC", 27),
    (b"MD", 24),
    (b"ME", 22),
    (b"MK", 19),
    (b"MR", 27),
    (b"MT", 31),
    (b"MU", 30),
    (b"NL", 18),
    (b"NO", 15),
    (b"PK", 24),
    (b"PL", 28),
    (b"PS", 29),
    (b"PT", 25),
    (b"QA", 29),
    (b"RO", 24),
    (b"RS", 22),
    (b"SA", 24),
    (b"SC", 31),
    (b"SE", 24),
    (b"SI", 19),
    (b"SK", 24),
    (b"SM", 27),
    (b"ST", 25),
    (b"SV", 28),
    (b"TL", 23),
    (b"TN", 24),
    (b"TR", 26),
    (b"UA", 29),
    (b"VA", 22),
    (b"VG", 24),
    (b"XK", 20),
];

/// An IBAN: a country code of the registry, two check digits, then the country's length of
/// letters and digits (either case; single spaces or hyphens allowed between characters, as
/// in the usual groups of four), not preceded or followed by a letter or digit, whose mod-97
/// check (ISO 13616, letters read as capitals) equals 1.
pub(crate) fn iban(s: &[u8]) -> bool {
    iban_spans(s, |_| true)
}

/// Calls `f` with the byte range of each IBAN in `s` (see [`iban`]) until it returns true.
pub(crate) fn iban_spans(s: &[u8], mut f: impl FnMut(Range<usize>) -> bool) -> bool {
    if s.len() < 15 {
        return false;
    }
    // The check digits are the first digits after the two letters: an IBAN starts two bytes
    // before the start of a run of digits (in prose digits are rare: found a word at a time).
    let mut d = 0;
    loop {
        d = next_digit(s, d);
        if d >= s.len() {
            return false;
        }
        let run = run_end(s, d, |b| b.is_ascii_digit());
        let at = d;
        d = run;
        if at < 2 || at + 1 >= s.len() || !s[at + 1].is_ascii_digit() {
            continue;
        }
        let i = at - 2;
        if !(s[i].is_ascii_alphabetic() && s[i + 1].is_ascii_alphabetic() && left_boundary(s, i)) {
            continue;
        }
        let cc = [s[i].to_ascii_uppercase(), s[i + 1].to_ascii_uppercase()];
        let Some(len) = IBAN_LENGTHS
            .iter()
            .find(|(c, _)| **c == cc)
            .map(|(_, l)| *l as usize)
        else {
            continue;
        };
        let mut buf = [0u8; 34];
        let mut n = 0;
        let mut p = i;
        while n < len && p < s.len() {
            if alnum(s[p]) {
                buf[n] = s[p].to_ascii_uppercase();
                n += 1;
                p += 1;
            } else if matches!(s[p], b' ' | b'-') && p + 1 < s.len() && alnum(s[p + 1]) && n > 0 {
                p += 1;
            } else {
                break;
            }
        }
        if n == len && right_boundary(s, p) && mod97(&buf[..n]) == 1 && f(i..p) {
            return true;
        }
    }
}

/// ISO 7064 mod 97-10 over an IBAN (first four characters moved to the end, letters as 10–35).
pub(crate) fn mod97(iban: &[u8]) -> u32 {
    let mut r = 0u32;
    for &c in iban[4..].iter().chain(&iban[..4]) {
        r = if c.is_ascii_digit() {
            (r * 10 + u32::from(c - b'0')) % 97
        } else {
            (r * 100 + u32::from(c.to_ascii_uppercase() - b'A') + 10) % 97
        };
    }
    r
}

/// A UK National Insurance number: two prefix letters (first not D F I Q U V, second not
/// D F I O Q U V, and not BG GB KN NK NT TN ZZ), six digits, and a suffix letter A–D, in
/// either case; a single space (or hyphen) is allowed after the prefix, between the digit
/// pairs and before the suffix (`AB123456C`, `AB 12 34 56 C`, `AB123456 C`, `AB 123456 C`).
/// Not preceded or followed by a letter or digit.
pub(crate) fn uk_nino(s: &[u8]) -> bool {
    nino_spans(s, |_| true)
}

/// Calls `f` with the byte range of each UK NINO in `s` (see [`uk_nino`]) until it returns
/// true.
pub(crate) fn nino_spans(s: &[u8], mut f: impl FnMut(Range<usize>) -> bool) -> bool {
    if s.len() < 9 {
        return false;
    }
    // The six digits start a run of digits two bytes after the prefix, or three (a
    // separator between): candidates are found from the runs of digits.
    let mut d = 0;
    loop {
        d = next_digit(s, d);
        if d >= s.len() {
            return false;
        }
        let at = d;
        d = run_end(s, d, |b| b.is_ascii_digit());
        for back in [2, 3] {
            if at < back || (back == 3 && !matches!(s[at - 1], b' ' | b'-')) {
                continue;
            }
            let i = at - back;
            if let Some(end) = nino_at(s, i)
                && f(i..end)
            {
                return true;
            }
        }
    }
}

/// The end of the NINO starting at `i`, if one does.
fn nino_at(s: &[u8], i: usize) -> Option<usize> {
    {
        let (a, b) = (s[i].to_ascii_uppercase(), s[i + 1].to_ascii_uppercase());
        if !a.is_ascii_uppercase() || !b.is_ascii_uppercase() || !left_boundary(s, i) {
            return None;
        }
        if b"DFIQUV".contains(&a)
            || b"DFIOQUV".contains(&b)
            || [b"BG", b"GB", b"KN", b"NK", b"NT", b"TN", b"ZZ"]
                .iter()
                .any(|p| p[..] == [a, b])
        {
            return None;
        }
    }
    nino_rest(s, i + 2).filter(|&end| right_boundary(s, end))
}

/// One optional separator (a space or a hyphen) at `p`.
fn opt_sep(s: &[u8], p: usize) -> usize {
    if matches!(s.get(p), Some(b' ' | b'-')) {
        p + 1
    } else {
        p
    }
}

fn nino_rest(s: &[u8], mut p: usize) -> Option<usize> {
    for _ in 0..3 {
        p = opt_sep(s, p);
        let d = s.get(p..p + 2)?;
        if !d.iter().all(u8::is_ascii_digit) {
            return None;
        }
        p += 2;
    }
    p = opt_sep(s, p);
    let suffix = s.get(p)?.to_ascii_uppercase();
    (matches!(suffix, b'A'..=b'D') && !(p + 1 < s.len() && alnum(s[p + 1]))).then_some(p + 1)
}
