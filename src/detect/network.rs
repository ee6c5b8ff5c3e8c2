//! The `ip_address` detector: IPv4 and IPv6.

use std::ops::Range;

use super::scan::{alnum, text};

/// An IPv4 address (four decimal octets 0–255 joined by dots, no leading zeros, not part of a
/// longer dotted number or word) or an IPv6 address (a run of hex digits, colons and dots
/// with at least two colons and one hex digit that `std::net::Ipv6Addr` parses, and that is
/// not `::`).
pub(crate) fn ip_address(s: &[u8]) -> bool {
    ipv4(s) || ipv6(s)
}

/// Calls `f` with the byte range of each IP address in `s` (IPv4 first, then IPv6) until it
/// returns true.
pub(crate) fn ip_spans(s: &[u8], mut f: impl FnMut(Range<usize>) -> bool) -> bool {
    ipv4_spans(s, &mut f) || ipv6_spans(s, &mut f)
}

pub(super) fn ipv4(s: &[u8]) -> bool {
    ipv4_spans(s, |_| true)
}

fn ipv4_spans(s: &[u8], mut f: impl FnMut(Range<usize>) -> bool) -> bool {
    // Every address has a dot right after its first octet, with a digit on each side: only
    // such dots are looked at (in text most digits are not next to a dot). The first octet is
    // the run of digits that ends at the dot; an address never starts inside a run of digits.
    for d in memchr::memchr_iter(b'.', s) {
        if d == 0 || d + 1 >= s.len() || !s[d - 1].is_ascii_digit() || !s[d + 1].is_ascii_digit() {
            continue;
        }
        let mut i = d - 1;
        while i > 0 && d - i < 4 && s[i - 1].is_ascii_digit() {
            i -= 1;
        }
        // Four digits or more: the first octet is too long, from wherever the run starts.
        if d - i > 3 || (i > 0 && (alnum(s[i - 1]) || s[i - 1] == b'.')) {
            continue;
        }
        let (end, ok) = ipv4_at(s, i);
        if ok && f(i..end) {
            return true;
        }
    }
    false
}

/// Reads four octets from `i`; returns where reading stopped and whether they form an address.
pub(super) fn ipv4_at(s: &[u8], mut p: usize) -> (usize, bool) {
    for octet in 0..4 {
        if octet > 0 {
            if p + 1 >= s.len() || s[p] != b'.' || !s[p + 1].is_ascii_digit() {
                return (p, false);
            }
            p += 1;
        }
        let start = p;
        let mut v = 0u32;
        while p < s.len() && s[p].is_ascii_digit() && p - start < 4 {
            v = v * 10 + u32::from(s[p] - b'0');
            p += 1;
        }
        let len = p - start;
        if len > 3 || v > 255 || (len > 1 && s[start] == b'0') {
            return (p, false);
        }
    }
    let longer = p < s.len()
        && (alnum(s[p]) || (s[p] == b'.' && p + 1 < s.len() && s[p + 1].is_ascii_digit()));
    (p, !longer)
}

fn v6_char(b: u8) -> bool {
    b.is_ascii_hexdigit() || b == b':' || b == b'.'
}

fn ipv6(s: &[u8]) -> bool {
    ipv6_spans(s, |_| true)
}

fn ipv6_spans(s: &[u8], mut f: impl FnMut(Range<usize>) -> bool) -> bool {
    let mut from = 0;
    while let Some(off) = memchr::memchr(b':', &s[from..]) {
        let c = from + off;
        let mut a = c;
        while a > from && v6_char(s[a - 1]) {
            a -= 1;
        }
        let mut b = c;
        while b < s.len() && v6_char(s[b]) {
            b += 1;
        }
        from = b.max(c + 1);
        let mut end = b;
        while end > a && s[end - 1] == b'.' {
            end -= 1;
        }
        let run = &s[a..end];
        let bounded = (a == 0 || !alnum(s[a - 1])) && (b >= s.len() || !alnum(s[b]));
        if !bounded
            || memchr::memchr_iter(b':', run).count() < 2
            || !run.iter().any(u8::is_ascii_hexdigit)
        {
            continue;
        }
        if let Ok(ip) = text(run).parse::<std::net::Ipv6Addr>()
            && !ip.is_unspecified()
            && f(a..end)
        {
            return true;
        }
    }
    false
}
