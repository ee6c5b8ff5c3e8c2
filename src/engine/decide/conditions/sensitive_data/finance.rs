//! Detectors for financial and identity numbers: `credit_card` (Luhn), `iban` (mod 97),
//! `uk_nino`.

use std::ops::Range;

use super::scan::{alnum, left_boundary, next_digit, right_boundary, run_end};

/// A card number: 13–19 digits with a Visa (4; 13, 16 or 19 digits), Mastercard (51–55 or
/// 2221–2720; 16), Amex (34, 37; 15) or Discover (6011, 644–649, 65; 16–19) prefix and a valid
/// Luhn check digit, found in a *chain*: digit groups joined by single spaces or hyphens.
/// A card is either the whole chain (any grouping), or a run of whole groups inside a longer
/// chain laid out as cards are printed (one group of 13–19 digits, groups of four with a
/// shorter last group, or Amex's 4-6-5), so that `12/28 4111111111111111`, `Order 2024 4111
/// 1111 1111 1111` and `4111-1111-1111-1111-1228` are found while dates, amounts and phone
/// numbers (other layouts) are not. A group glued to a letter or digit, or that is the fraction
/// or integer part of a decimal number, is never part of a card; nor, when the chain follows a
/// `+` (a phone number), is its first group, unless that group alone is a card longer than 15
/// digits (longer than any phone number).
pub(crate) fn credit_card(s: &[u8]) -> bool {
    card_spans(s, |_| true)
}

/// A group of a chain: where its digits start and end.
#[derive(Clone, Copy)]
struct Group {
    start: usize,
    end: usize,
}

/// Calls `f` with the byte range of each card number in `s` (see [`credit_card`]) until it
/// returns true; returns whether it did. Ranges may overlap (two windows of one chain).
pub(crate) fn card_spans(s: &[u8], mut f: impl FnMut(Range<usize>) -> bool) -> bool {
    let mut i = 0;
    loop {
        // A card spans at least 13 bytes of digits and single separators between digits: when
        // the byte 12 ahead is not part of such a chain, no card starts in `i..=i + 12` and no
        // chain there reaches past it, so the search resumes after it unchanged. Invariant:
        // `i` is 0 or follows a byte that is not part of a chain.
        while i + 12 < s.len() && !card_chain_byte(s, i + 12) {
            i += 13;
        }
        i = next_digit(s, i);
        if i >= s.len() {
            break;
        }
        // `i` starts a chain. A card from `i` spans at least 13 chain bytes, so `i + 6` and
        // `i + 12` are in it when the chain is long enough; otherwise skip the chain whole.
        if i + 12 >= s.len() || !card_chain_byte(s, i + 12) || !card_chain_byte(s, i + 6) {
            i = chain_end(s, i);
            continue;
        }
        let (end, stop) = chain(s, i, &mut f);
        if stop {
            return true;
        }
        i = end;
    }
    false
}

/// The end of the chain that starts at `i`.
fn chain_end(s: &[u8], mut p: usize) -> usize {
    loop {
        p = run_end(s, p, |b| b.is_ascii_digit());
        if p + 1 < s.len() && matches!(s[p], b' ' | b'-') && s[p + 1].is_ascii_digit() {
            p += 1;
        } else {
            return p;
        }
    }
}

/// Whether a card may be laid out as these group lengths inside a longer chain.
fn card_layout(lens: &[usize]) -> bool {
    match lens {
        [one] => (13..=19).contains(one),
        [4, 6, 5] => true,
        [init @ .., last] => init.iter().all(|&n| n == 4) && (1..=4).contains(last),
        [] => false,
    }
}

/// Reads the chain starting at `start`, calling `f` with each card in it; returns where the
/// chain ends and whether `f` asked to stop.
fn chain(s: &[u8], start: usize, f: &mut impl FnMut(Range<usize>) -> bool) -> (usize, bool) {
    let before = start.checked_sub(1).map(|k| s[k]);
    let decimal_before = before == Some(b'.') && start >= 2 && s[start - 2].is_ascii_digit();
    let glued_left = before.is_some_and(alnum) || decimal_before;
    let plus = before == Some(b'+');
    // The groups a card ending at the current group may start from: at most 19 digits.
    let mut win = [Group { start: 0, end: 0 }; 19];
    let mut n = 0usize;
    let mut p = start;
    let mut first = true;
    loop {
        let g = Group {
            start: p,
            end: run_end(s, p, |b| b.is_ascii_digit()),
        };
        let next =
            g.end + 1 < s.len() && matches!(s[g.end], b' ' | b'-') && s[g.end + 1].is_ascii_digit();
        let glued_right = !next
            && g.end < s.len()
            && (alnum(s[g.end])
                || (s[g.end] == b'.' && g.end + 1 < s.len() && s[g.end + 1].is_ascii_digit()));
        let len = g.end - g.start;
        if (first && glued_left) || glued_right || len > 19 {
            n = 0;
        } else {
            // Keep the groups that, with this one, hold at most 19 digits.
            let mut total = len;
            let mut keep = 0;
            while keep < n && total + (win[n - 1 - keep].end - win[n - 1 - keep].start) <= 19 {
                total += win[n - 1 - keep].end - win[n - 1 - keep].start;
                keep += 1;
            }
            win.copy_within(n - keep..n, 0);
            n = keep;
            win[n] = g;
            n += 1;
            // Each window ending at this group, shortest first.
            let mut digits = 0;
            for k in (0..n).rev() {
                digits += win[k].end - win[k].start;
                if digits < 13 {
                    continue;
                }
                let from_first = win[k].start == start;
                let whole = from_first && !next;
                let mut lens = [0usize; 19];
                for (l, w) in lens.iter_mut().zip(&win[k..n]) {
                    *l = w.end - w.start;
                }
                let lens = &lens[..n - k];
                let shaped = whole || card_layout(lens);
                let after_plus_ok = !(plus && from_first) || (lens.len() == 1 && digits > 15);
                if shaped
                    && after_plus_ok
                    && window_is_card(s, win[k].start, g.end, digits)
                    && f(win[k].start..g.end)
                {
                    return (g.end, true);
                }
            }
        }
        first = false;
        if !next {
            return (g.end, false);
        }
        p = g.end + 1;
    }
}

/// Whether the digits of `s[from..to]` (separators skipped; `digits` of them) are a card.
fn window_is_card(s: &[u8], from: usize, to: usize, digits: usize) -> bool {
    let mut buf = [0u8; 19];
    let mut n = 0;
    for &b in &s[from..to] {
        if b.is_ascii_digit() && n < buf.len() {
            buf[n] = b - b'0';
            n += 1;
        }
    }
    n == digits && card_number(&buf[..n])
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
