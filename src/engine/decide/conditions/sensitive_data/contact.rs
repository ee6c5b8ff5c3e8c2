//! Detectors for contact data: `email` / `email_domain`, `url`, `phone`.

use super::scan::{alnum, left_boundary, right_boundary, run_end, text, valid_domain};

fn local_char(b: u8) -> bool {
    alnum(b) || matches!(b, b'.' | b'_' | b'%' | b'+' | b'-')
}

fn host_char(b: u8) -> bool {
    alnum(b) || matches!(b, b'.' | b'-')
}

/// Calls `f` with the domain of each e-mail address (`local@domain`, the local part of
/// letters, digits and `._%+-`, the domain a valid DNS name with an alphabetic TLD) until it
/// returns true. Each `@` looks left no further than the previous one: linear.
pub(crate) fn emails(s: &[u8], f: &mut dyn FnMut(&str) -> bool) -> bool {
    let mut floor = 0;
    for at in memchr::memchr_iter(b'@', s) {
        let mut l = at;
        while l > floor && local_char(s[l - 1]) {
            l -= 1;
        }
        floor = at + 1;
        while l < at && s[l] == b'.' {
            l += 1;
        }
        if l == at {
            continue;
        }
        let end = run_end(s, at + 1, host_char);
        let mut r = end;
        while r > at + 1 && matches!(s[r - 1], b'.' | b'-') {
            r -= 1;
        }
        let domain = &s[at + 1..r];
        if valid_domain(domain) && f(text(domain)) {
            return true;
        }
    }
    false
}

/// Calls `f` with the scheme (`http`/`https`, lowercased) and host of each URL until it returns
/// true. A URL is `http://` or `https://` (any case, not preceded by a letter or digit)
/// followed by a host of letters, digits, dots and hyphens (an optional `user@` is skipped).
pub(crate) fn urls(s: &[u8], f: &mut dyn FnMut(&str, &str) -> bool) -> bool {
    for sep in memchr::memmem::find_iter(s, b"://") {
        let scheme = if sep >= 5 && s[sep - 5..sep].eq_ignore_ascii_case(b"https") {
            &s[sep - 5..sep]
        } else if sep >= 4 && s[sep - 4..sep].eq_ignore_ascii_case(b"http") {
            &s[sep - 4..sep]
        } else {
            continue;
        };
        let start = sep - scheme.len();
        if !left_boundary(s, start) {
            continue;
        }
        let mut h = sep + 3;
        // Userinfo: `user:pass@host`.
        let ui_end = run_end(s, h, |b| local_char(b) || b == b':');
        if ui_end < s.len() && s[ui_end] == b'@' {
            h = ui_end + 1;
        }
        let mut e = run_end(s, h, host_char);
        while e > h && matches!(s[e - 1], b'.' | b'-') {
            e -= 1;
        }
        if e == h {
            continue;
        }
        let host = text(&s[h..e]);
        let scheme = if scheme.len() == 5 { "https" } else { "http" };
        if f(scheme, host) {
            return true;
        }
    }
    false
}

/// A phone number: E.164 (`+` then 8–15 digits, first 1–9, single spaces, dots or hyphens
/// allowed between digit groups, a `(…)` group allowed) or a national form of 10–11 digits in
/// groups: `(415) 555-2671` (a parenthesised first group), `415-555-2671` (3-3-4 with one
/// kind of separator, first digit 2–9) or `020 7946 0958` (first group starts with `0`, every
/// group of 3 or more digits). Not preceded or followed by a letter or digit.
pub(crate) fn phone(s: &[u8]) -> bool {
    let mut i = 0;
    while i < s.len() {
        // A phone number spans at least 9 bytes of digits, `+`, parentheses, spaces, hyphens
        // and dots, and so does everything a candidate reads: when the byte 8 ahead is none of
        // these, nothing in `i..=i + 8` matches and no candidate there reads past it.
        if i + 8 < s.len()
            && !matches!(
                s[i + 8],
                b'0'..=b'9' | b'+' | b'(' | b')' | b' ' | b'-' | b'.'
            )
        {
            i += 9;
            continue;
        }
        let b = s[i];
        let starts = (b == b'+' || b == b'(' || b.is_ascii_digit())
            && left_boundary(s, i)
            && !(i > 0 && matches!(s[i - 1], b'+' | b'.' | b'-' | b'/' | b','));
        if !starts {
            i += 1;
            continue;
        }
        let (end, ok) = phone_at(s, i);
        if ok {
            return true;
        }
        i = end.max(i + 1);
    }
    false
}

/// Reads a phone candidate from `i`; returns where it ended and whether it is a phone.
fn phone_at(s: &[u8], i: usize) -> (usize, bool) {
    let plus = s[i] == b'+';
    let mut p = if plus { i + 1 } else { i };
    let mut groups: [u8; 8] = [0; 8];
    let mut n_groups = 0usize;
    let mut digits = 0usize;
    let mut first_paren = false;
    let mut seps: [u8; 8] = [0; 8];
    let mut first_digit = 0u8;
    loop {
        // One group: `(digits)` or digits.
        let paren = p < s.len() && s[p] == b'(';
        let ds = if paren { p + 1 } else { p };
        let de = run_end(s, ds, |b| b.is_ascii_digit());
        if de == ds || (paren && (de >= s.len() || s[de] != b')')) {
            break;
        }
        if n_groups == 0 {
            first_paren = paren;
            first_digit = s[ds];
        }
        if n_groups < groups.len() {
            groups[n_groups] = (de - ds).min(255) as u8;
        }
        n_groups += 1;
        digits += de - ds;
        p = if paren { de + 1 } else { de };
        if digits > 15 {
            return (
                run_end(s, p, |b| {
                    b.is_ascii_digit() || matches!(b, b' ' | b'-' | b'.')
                }),
                false,
            );
        }
        // A single separator followed by a digit or `(` continues the number.
        let sep_ok = p + 1 < s.len()
            && matches!(s[p], b' ' | b'-' | b'.')
            && (s[p + 1].is_ascii_digit() || s[p + 1] == b'(');
        let adjacent = p < s.len() && (s[p].is_ascii_digit() || s[p] == b'(') && paren;
        if sep_ok {
            if n_groups <= seps.len() {
                seps[n_groups - 1] = s[p];
            }
            p += 1;
        } else if !adjacent {
            break;
        }
    }
    if n_groups == 0 || !right_boundary(s, p) {
        return (p, false);
    }
    if plus {
        return (p, (8..=15).contains(&digits) && first_digit != b'0');
    }
    if !(10..=11).contains(&digits) || n_groups < 2 {
        return (p, false);
    }
    let g = &groups[..n_groups.min(groups.len())];
    let ok = if first_paren {
        (2..=5).contains(&g[0])
    } else if g == [3, 3, 4] {
        first_digit >= b'2' && seps[0] == seps[1]
    } else {
        first_digit == b'0' && g.iter().all(|&n| n >= 3)
    };
    (p, ok)
}
