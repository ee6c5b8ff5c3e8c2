//! Detectors for financial and identity numbers: `credit_card` (Luhn), `iban` (mod 97),
//! `uk_nino`.

use super::scan::{alnum, left_boundary, next_digit, right_boundary, run_end};

/// A card number: 13–19 digits, single spaces or hyphens allowed between groups, not preceded
/// or followed by a letter or digit, with a Visa (4; 13, 16 or 19 digits), Mastercard (51–55
/// or 2221–2720; 16), Amex (34, 37; 15) or Discover (6011, 644–649, 65; 16–19) prefix, and a
/// valid Luhn check digit.
pub(crate) fn credit_card(s: &[u8]) -> bool {
    let mut i = 0;
    loop {
        // A card spans at least 13 bytes of digits and single separators between digits: when
        // the byte 12 ahead is not part of such a chain, no card starts in `i..=i + 12` and no
        // candidate there reaches past it, so the search resumes after it unchanged.
        while i + 12 < s.len() && !card_chain_byte(s, i + 12) {
            i += 13;
        }
        i = next_digit(s, i);
        if i >= s.len() {
            break;
        }
        if !left_boundary(s, i) || (i > 0 && matches!(s[i - 1], b'.' | b'-' | b'+')) {
            // No card starts inside this run of digits: skip it whole.
            i = run_end(s, i, |b| b.is_ascii_digit());
            continue;
        }
        // A card from `i` spans at least 13 chain bytes, so `i + 6` and `i + 12` are in its
        // chain: when either is not a chain byte, the chain from `i` is too short, and so is
        // every chain starting inside it (they end where it ends). The next digit is looked
        // at as before.
        if i + 12 >= s.len() {
            break;
        }
        if !card_chain_byte(s, i + 12) || !card_chain_byte(s, i + 6) {
            i += 1;
            continue;
        }
        let mut buf = [0u8; 19];
        let mut n = 0usize;
        let mut p = i;
        let mut too_long = false;
        loop {
            if p < s.len() && s[p].is_ascii_digit() {
                if n < buf.len() {
                    buf[n] = s[p] - b'0';
                } else {
                    too_long = true;
                }
                n += 1;
                p += 1;
            } else if p + 1 < s.len()
                && matches!(s[p], b' ' | b'-')
                && s[p + 1].is_ascii_digit()
                && p > i
                && s[p - 1].is_ascii_digit()
            {
                p += 1;
            } else {
                break;
            }
        }
        let decimal = p + 1 < s.len() && s[p] == b'.' && s[p + 1].is_ascii_digit();
        if !too_long && right_boundary(s, p) && !decimal && card_number(&buf[..n]) {
            return true;
        }
        i = p.max(i + 1);
    }
    false
}

/// Whether `s[p]` is a digit or a space or hyphen between two digits.
#[inline(always)]
pub(super) fn card_chain_byte(s: &[u8], p: usize) -> bool {
    let b = s[p];
    b.is_ascii_digit()
        || (matches!(b, b' ' | b'-')
            && p > 0
            && s[p - 1].is_ascii_digit()
            && s.get(p + 1).is_some_and(u8::is_ascii_digit))
}

pub(super) fn card_number(d: &[u8]) -> bool {
    let n = d.len();
    if !(13..=19).contains(&n) {
        return false;
    }
    let p2 = u32::from(d[0]) * 10 + u32::from(d[1]);
    let p3 = p2 * 10 + u32::from(d[2]);
    let p4 = p3 * 10 + u32::from(d[3]);
    let brand = match d[0] {
        4 => matches!(n, 13 | 16 | 19),
        _ if (51..=55).contains(&p2) || (2221..=2720).contains(&p4) => n == 16,
        _ if p2 == 34 || p2 == 37 => n == 15,
        _ if p4 == 6011 || p2 == 65 || (644..=649).contains(&p3) => (16..=19).contains(&n),
        _ => false,
    };
    brand && luhn(d)
}

/// The Luhn check over digits (0–9 values).
pub(crate) fn luhn(d: &[u8]) -> bool {
    let mut sum = 0u32;
    for (k, &x) in d.iter().rev().enumerate() {
        let mut v = u32::from(x);
        if k % 2 == 1 {
            v *= 2;
            if v > 9 {
                v -= 9;
            }
        }
        sum += v;
    }
    sum.is_multiple_of(10)
}

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

#[inline(always)]
fn upper_digit_space(b: u8) -> bool {
    b.is_ascii_uppercase() || b.is_ascii_digit() || b == b' '
}

fn upper_alnum(b: u8) -> bool {
    b.is_ascii_uppercase() || b.is_ascii_digit()
}

/// An IBAN: a country code of the registry, two check digits, then the country's length of
/// uppercase letters and digits (single spaces allowed between characters, as in the usual
/// groups of four), not preceded or followed by a letter or digit, whose mod-97 check
/// (ISO 13616) equals 1.
pub(crate) fn iban(s: &[u8]) -> bool {
    if s.len() < 15 {
        return false;
    }
    let mut i = 0;
    while i < s.len() - 3 {
        // An IBAN spans at least 15 bytes of uppercase letters, digits and spaces: when the
        // byte 14 ahead is none of these, no IBAN starts in `i..=i + 14`.
        if i + 14 < s.len() && !upper_digit_space(s[i + 14]) {
            i += 15;
            continue;
        }
        i += 1;
        let i = i - 1;
        if !(s[i].is_ascii_uppercase()
            && s[i + 1].is_ascii_uppercase()
            && s[i + 2].is_ascii_digit()
            && s[i + 3].is_ascii_digit()
            && left_boundary(s, i))
        {
            continue;
        }
        let Some(len) = IBAN_LENGTHS
            .iter()
            .find(|(c, _)| c[..] == s[i..i + 2])
            .map(|(_, l)| *l as usize)
        else {
            continue;
        };
        let mut buf = [0u8; 34];
        let mut n = 0;
        let mut p = i;
        while n < len && p < s.len() {
            if upper_alnum(s[p]) {
                buf[n] = s[p];
                n += 1;
                p += 1;
            } else if s[p] == b' ' && p + 1 < s.len() && upper_alnum(s[p + 1]) && n > 0 {
                p += 1;
            } else {
                break;
            }
        }
        if n == len && right_boundary(s, p) && mod97(&buf[..n]) == 1 {
            return true;
        }
    }
    false
}

/// ISO 7064 mod 97-10 over an IBAN (first four characters moved to the end, letters as 10–35).
pub(crate) fn mod97(iban: &[u8]) -> u32 {
    let mut r = 0u32;
    for &c in iban[4..].iter().chain(&iban[..4]) {
        r = if c.is_ascii_digit() {
            (r * 10 + u32::from(c - b'0')) % 97
        } else {
            (r * 100 + u32::from(c - b'A') + 10) % 97
        };
    }
    r
}

/// A UK National Insurance number: two prefix letters (first not D F I Q U V, second not
/// D F I O Q U V, and not BG GB KN NK NT TN ZZ), six digits (optionally in pairs separated by
/// single spaces, and a space after the prefix), and a suffix letter A–D. Uppercase; not
/// preceded or followed by a letter or digit.
pub(crate) fn uk_nino(s: &[u8]) -> bool {
    if s.len() < 9 {
        return false;
    }
    let mut i = 0;
    while i < s.len() - 8 {
        // A number spans at least 9 bytes of uppercase letters, digits and spaces: when the
        // byte 8 ahead is none of these, no number starts in `i..=i + 8`.
        if !upper_digit_space(s[i + 8]) {
            i += 9;
            continue;
        }
        i += 1;
        let i = i - 1;
        let (a, b) = (s[i], s[i + 1]);
        if !a.is_ascii_uppercase() || !b.is_ascii_uppercase() || !left_boundary(s, i) {
            continue;
        }
        if b"DFIQUV".contains(&a)
            || b"DFIOQUV".contains(&b)
            || [b"BG", b"GB", b"KN", b"NK", b"NT", b"TN", b"ZZ"]
                .iter()
                .any(|p| p[..] == [a, b])
        {
            continue;
        }
        if let Some(end) = nino_rest(s, i + 2)
            && right_boundary(s, end)
        {
            return true;
        }
    }
    false
}

fn nino_rest(s: &[u8], mut p: usize) -> Option<usize> {
    let spaced = s.get(p) == Some(&b' ');
    if spaced {
        p += 1;
    }
    for pair in 0..3 {
        if pair > 0 && spaced {
            if s.get(p) != Some(&b' ') {
                return None;
            }
            p += 1;
        }
        let d = s.get(p..p + 2)?;
        if !d.iter().all(u8::is_ascii_digit) {
            return None;
        }
        p += 2;
    }
    if spaced && s.get(p) == Some(&b' ') {
        p += 1;
    }
    let suffix = *s.get(p)?;
    (matches!(suffix, b'A'..=b'D') && !(p + 1 < s.len() && alnum(s[p + 1]))).then_some(p + 1)
}
