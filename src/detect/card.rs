//! `credit_card`: card numbers in chains of digit groups, with the separators and digits a
//! person (or a tool that normalises text) reads as such.

use std::ops::Range;

use super::scan::alnum;

/// A card number: 13–19 digits with a Visa (4; 13, 16 or 19 digits), Mastercard (51–55 or
/// 2221–2720; 16), Amex (34, 37; 15) or Discover (6011, 644–649, 65; 16–19) prefix and a valid
/// Luhn check digit, found in a *chain*: digit groups joined by one separator character each
/// (see [`sep_at`]: ASCII space, hyphen, dot, underscore or tab, and the Unicode spaces,
/// dashes, minus and invisible joiners a text can hold). Digits are ASCII, or the full-width,
/// Arabic-Indic, Devanagari and mathematical digits that NFKC or a `\d` reads as digits
/// ([`digit_at`]). A card is either the whole chain (any grouping), or a run of whole groups
/// inside a longer chain laid out as cards are printed (one group of 13–19 digits, groups of
/// four with a shorter last group, or Amex's 4-6-5), so that `12/28 4111111111111111`, `Order
/// 2024 4111 1111 1111 1111` and `4111-1111-1111-1111-1228` are found while dates, amounts and
/// phone numbers (other layouts) are not. A group glued to an ASCII letter or digit is never
/// part of a card; nor is a group joined by a `.` to a group when either has 7 digits or more
/// (a decimal number, such as a float's `0.4532015112830366`: the dot ends the chain there);
/// nor, when the chain follows a `+` (a phone number), is its first group, unless that group
/// alone is a card longer than 15 digits (longer than any phone number).
pub(crate) fn credit_card(s: &[u8]) -> bool {
    card_spans(s, |_| true)
}

/// A group of a chain: where its digits start, and how many digits it holds.
#[derive(Clone, Copy)]
struct Group {
    start: usize,
    digits: usize,
}

/// What [`chain_byte`] knows from a byte alone: 0 never in a chain, 1 an ASCII digit, 2 maybe
/// (an ASCII separator, or a byte of a non-ASCII character).
const CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = if b >= b'0' as usize && b <= b'9' as usize {
            1
        } else if b >= 0x80
            || b == b' ' as usize
            || b == b'-' as usize
            || b == b'.' as usize
            || b == b'_' as usize
            || b == b'\t' as usize
        {
            2
        } else {
            0
        };
        b += 1;
    }
    t
};

/// The value and byte length of the digit at `p`, if one starts there: ASCII `0`–`9`, and
/// the digits of other forms a tool may read as these (Python's `int()`, a `\d`, NFKC):
/// full-width (U+FF10–FF19), Arabic-Indic (U+0660–0669, U+06F0–06F9), Devanagari
/// (U+0966–096F) and mathematical (U+1D7CE–1D7FF).
#[inline(always)]
pub(super) fn digit_at(s: &[u8], p: usize) -> Option<(u8, usize)> {
    match s.get(p) {
        Some(&b) if b.is_ascii_digit() => Some((b - b'0', 1)),
        Some(&b) if b >= 0x80 => digit_wide(s, p),
        _ => None,
    }
}

#[inline(never)]
fn digit_wide(s: &[u8], p: usize) -> Option<(u8, usize)> {
    let at = |k: usize| s.get(p + k).copied().unwrap_or(0);
    let (c1, c2, c3) = (at(1), at(2), at(3));
    match s[p] {
        0xD9 if (0xA0..=0xA9).contains(&c1) => Some((c1 - 0xA0, 2)),
        0xDB if (0xB0..=0xB9).contains(&c1) => Some((c1 - 0xB0, 2)),
        0xE0 if c1 == 0xA5 && (0xA6..=0xAF).contains(&c2) => Some((c2 - 0xA6, 3)),
        0xEF if c1 == 0xBC && (0x90..=0x99).contains(&c2) => Some((c2 - 0x90, 3)),
        0xF0 if c1 == 0x9D && c2 == 0x9F && (0x8E..=0xBF).contains(&c3) => {
            Some(((c3 - 0x8E) % 10, 4))
        }
        _ => None,
    }
}

/// The byte length of the separator character at `p` (0 when none): ASCII space, hyphen, dot,
/// underscore, tab; no-break, Unicode (U+1680, U+2000–200A, U+202F, U+205F, U+3000) and
/// zero-width spaces and joiners (U+200B–200D, U+2060, U+FEFF); the soft hyphen (U+00AD);
/// dashes (U+2010–2015, U+FE58, U+FE63, U+FF0D) and the minus sign (U+2212).
#[inline(always)]
pub(super) fn sep_at(s: &[u8], p: usize) -> usize {
    match s.get(p) {
        Some(b' ' | b'-' | b'.' | b'_' | b'\t') => 1,
        Some(&b) if b >= 0x80 => sep_wide(s, p),
        _ => 0,
    }
}

#[inline(never)]
fn sep_wide(s: &[u8], p: usize) -> usize {
    let at = |k: usize| s.get(p + k).copied().unwrap_or(0);
    let (c1, c2) = (at(1), at(2));
    match (s[p], c1, c2) {
        (0xC2, 0xA0 | 0xAD, _) => 2,
        (0xE1, 0x9A, 0x80)
        | (0xE2, 0x80, 0x80..=0x8D | 0x90..=0x95 | 0xAF)
        | (0xE2, 0x81, 0x9F | 0xA0)
        | (0xE2, 0x88, 0x92)
        | (0xE3, 0x80, 0x80)
        | (0xEF, 0xBB, 0xBF)
        | (0xEF, 0xB9, 0x98 | 0xA3)
        | (0xEF, 0xBC, 0x8D) => 3,
        _ => 0,
    }
}

/// Whether a digit ([`digit_at`]) ends right before `c`.
fn digit_before(s: &[u8], c: usize) -> bool {
    (1..=4.min(c)).any(|l| digit_at(s, c - l).is_some_and(|(_, n)| n == l))
}

/// Whether `s[p]` belongs to a chain: a byte of a digit, or of a separator with a digit right
/// before and right after it.
#[inline(always)]
pub(super) fn chain_byte(s: &[u8], p: usize) -> bool {
    let b = s[p];
    match CLASS[usize::from(b)] {
        0 => false,
        1 => true,
        _ if b < 0x80 => {
            p > 0
                && match s[p - 1] {
                    x if x.is_ascii_digit() => true,
                    x if x < 0x80 => false,
                    _ => digit_before(s, p),
                }
                && digit_at(s, p + 1).is_some()
        }
        _ => chain_byte_wide(s, p),
    }
}

#[inline(never)]
fn chain_byte_wide(s: &[u8], p: usize) -> bool {
    // The start of `p`'s character (UTF-8: at most 3 continuation bytes before it).
    let mut c = p;
    while c > 0 && p - c < 3 && (0x80..0xC0).contains(&s[c]) {
        c -= 1;
    }
    if digit_at(s, c).is_some_and(|(_, l)| c + l > p) {
        return true;
    }
    let l = sep_at(s, c);
    l > 0 && c + l > p && digit_before(s, c) && digit_at(s, c + l).is_some()
}

/// Calls `f` with the byte range of each card number in `s` (see [`credit_card`]) until it
/// returns true; returns whether it did. Ranges may overlap (two windows of one chain).
pub(crate) fn card_spans(s: &[u8], mut f: impl FnMut(Range<usize>) -> bool) -> bool {
    let n = s.len();
    let mut i = 0;
    // Invariant: `i` is 0 or follows a byte that is not part of a chain, and every card
    // starting before `i` has been reported.
    loop {
        // A card spans at least 13 chain bytes (13 digits, each of one byte or more): when the
        // byte 12 ahead is not part of a chain, no card starts in `i..=i + 12`, and the search
        // resumes after it. Most bytes of prose are settled by one table look.
        while i + 12 < n && CLASS[usize::from(s[i + 12])] == 0 {
            i += 13;
        }
        if i + 12 >= n {
            return false;
        }
        let p = i + 12;
        if !chain_byte(s, p) {
            i = p + 1;
            continue;
        }
        // A chain of 13 bytes or more holding `p` holds `p - 6` or `p + 6`: when neither is in
        // a chain, no card starts in `i..=p + 6` (one starting after `p` would hold `p + 6`).
        let near = (p + 6 < n && chain_byte(s, p + 6)) || chain_byte(s, p - 6);
        if !near {
            i = p + 7;
            continue;
        }
        // The chain holding `p` starts at or after `i` (the byte before `i` is not in one).
        let mut c = p;
        while c > i && chain_byte(s, c - 1) {
            c -= 1;
        }
        // A card in this chain covers `c + 12` (every byte up to `p` is in it).
        if c + 12 >= n {
            return false;
        }
        if !chain_byte(s, c + 12) {
            i = c + 13;
            continue;
        }
        let (end, stop) = chain(s, c, &mut f);
        if stop {
            return true;
        }
        i = end;
    }
}

/// Whether a card may be laid out as these groups inside a longer chain.
fn card_layout(groups: &[Group]) -> bool {
    match groups {
        [one] => (13..=19).contains(&one.digits),
        [a, b, c] if (a.digits, b.digits, c.digits) == (4, 6, 5) => true,
        [init @ .., last] => init.iter().all(|g| g.digits == 4) && (1..=4).contains(&last.digits),
        [] => false,
    }
}

/// The end of the run of digits from `p`, and how many digits it holds.
fn digit_run(s: &[u8], mut p: usize) -> (usize, usize) {
    let mut count = 0;
    loop {
        match s.get(p) {
            Some(b) if b.is_ascii_digit() => p += 1,
            Some(&b) if b >= 0x80 => match digit_wide(s, p) {
                Some((_, l)) => p += l,
                None => return (p, count),
            },
            _ => return (p, count),
        }
        count += 1;
    }
}

/// Whether at least `k` digits follow from `p` on.
fn digits_ahead(s: &[u8], mut p: usize, k: usize) -> bool {
    for _ in 0..k {
        match digit_at(s, p) {
            Some((_, l)) => p += l,
            None => return false,
        }
    }
    true
}

/// Whether the separator joining two groups is a decimal point: a `.` next to a group of 7
/// digits or more.
pub(super) fn decimal_point(s: &[u8], at: usize, left_digits: usize) -> bool {
    s[at] == b'.' && (left_digits >= 7 || digits_ahead(s, at + 1, 7))
}

/// Reads the chain starting at `start`, calling `f` with each card in it; returns where the
/// chain ends and whether `f` asked to stop.
fn chain(s: &[u8], start: usize, f: &mut impl FnMut(Range<usize>) -> bool) -> (usize, bool) {
    let before = start.checked_sub(1).map(|k| s[k]);
    let mut glued_left = before.is_some_and(alnum);
    let mut plus = before == Some(b'+');
    // Where the part of the chain being read starts (a decimal point starts a new part).
    let mut part = start;
    // The groups a card ending at the current group may start from: at most 19 digits.
    let mut win = [Group {
        start: 0,
        digits: 0,
    }; 19];
    let mut n = 0usize;
    let mut p = start;
    let mut first = true;
    loop {
        let (end, digits) = digit_run(s, p);
        let g = Group { start: p, digits };
        let sep = sep_at(s, end);
        let next = sep > 0 && digit_at(s, end + sep).is_some();
        let decimal = next && decimal_point(s, end, digits);
        let glued_right = decimal || (!next && end < s.len() && alnum(s[end]));
        if (first && glued_left) || glued_right || digits > 19 {
            n = 0;
        } else {
            // Keep the groups that, with this one, hold at most 19 digits.
            let mut total = digits;
            let mut keep = 0;
            while keep < n && total + win[n - 1 - keep].digits <= 19 {
                total += win[n - 1 - keep].digits;
                keep += 1;
            }
            win.copy_within(n - keep..n, 0);
            n = keep;
            win[n] = g;
            n += 1;
            // Each window ending at this group, shortest first.
            let mut sum = 0;
            for k in (0..n).rev() {
                sum += win[k].digits;
                if sum < 13 {
                    continue;
                }
                let from_first = win[k].start == part;
                let whole = from_first && !next;
                let shaped = whole || card_layout(&win[k..n]);
                let after_plus_ok = !(plus && from_first) || (n - k == 1 && sum > 15);
                if shaped
                    && after_plus_ok
                    && window_is_card(s, win[k].start, end, sum)
                    && f(win[k].start..end)
                {
                    return (end, true);
                }
            }
        }
        if !next {
            return (end, false);
        }
        p = end + sep;
        if decimal {
            // A new part: its first group is a decimal's other side.
            first = true;
            glued_left = true;
            plus = false;
            part = p;
            n = 0;
        } else {
            first = false;
        }
    }
}

/// Whether the digits of `s[from..to]` (separators skipped; `digits` of them) are a card.
fn window_is_card(s: &[u8], from: usize, to: usize, digits: usize) -> bool {
    let mut buf = [0u8; 19];
    let mut n = 0;
    let mut p = from;
    while p < to && n < buf.len() {
        match digit_at(s, p) {
            Some((v, l)) => {
                buf[n] = v;
                n += 1;
                p += l;
            }
            None => p += sep_at(s, p).max(1),
        }
    }
    n == digits && card_number(&buf[..n])
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
