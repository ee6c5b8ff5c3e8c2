//! Detectors for contact data: `email` / `email_domain`, `url`, `phone`.

use std::ops::Range;

use super::scan::{alnum, left_boundary, right_boundary, run_end, text, valid_domain};

/// A byte of an unquoted local part: RFC 5322 `atext` and dots, without `/` (which keeps a
/// URL's path out of an address found in it).
fn local_char(b: u8) -> bool {
    alnum(b)
        || matches!(
            b,
            b'.' | b'_'
                | b'%'
                | b'+'
                | b'-'
                | b'!'
                | b'#'
                | b'$'
                | b'&'
                | b'\''
                | b'*'
                | b'='
                | b'?'
                | b'^'
                | b'`'
                | b'{'
                | b'|'
                | b'}'
                | b'~'
        )
}

fn host_char(b: u8) -> bool {
    alnum(b) || matches!(b, b'.' | b'-')
}

/// Calls `f` with the domain of each e-mail address (see [`email_spans`]) until it returns
/// true.
pub(crate) fn emails(s: &[u8], f: &mut dyn FnMut(&str) -> bool) -> bool {
    email_spans(s, |domain, _| f(domain))
}

/// The longest quoted local part (RFC 5321: 64 octets, the quotes included).
const MAX_QUOTED_LOCAL: usize = 64;

/// Where the quoted local part that ends with the quote at `q` starts (its opening quote), if
/// there is one within [`MAX_QUOTED_LOCAL`] bytes: `"john doe"@example.com`.
fn quoted_local(s: &[u8], q: usize) -> Option<usize> {
    let floor = q.saturating_sub(MAX_QUOTED_LOCAL);
    let mut k = q;
    while k > floor {
        k -= 1;
        match s[k] {
            b'\r' | b'\n' => return None,
            b'"' => {
                // Escaped (an odd number of backslashes before it) or the opening quote.
                let mut b = k;
                while b > floor && s[b - 1] == b'\\' {
                    b -= 1;
                }
                if (k - b).is_multiple_of(2) {
                    return Some(k);
                }
            }
            _ => {}
        }
    }
    None
}

/// The end of an address literal `[192.0.2.1]` or `[IPv6:2001:db8::1]` whose `[` is at `b`.
fn address_literal(s: &[u8], b: usize) -> Option<usize> {
    let end = b + 1 + memchr::memchr(b']', s.get(b + 1..(b + 48).min(s.len()))?)?;
    let inner = text(&s[b + 1..end]);
    let ok = match inner.get(..5) {
        Some(tag) if tag.eq_ignore_ascii_case("ipv6:") => {
            inner[5..].parse::<std::net::Ipv6Addr>().is_ok()
        }
        _ => inner.parse::<std::net::Ipv4Addr>().is_ok(),
    };
    ok.then_some(end + 1)
}

/// Calls `f` with the domain and the byte range of each e-mail address until it returns true.
/// An address is `local@domain`: the local part is letters, digits and ``!#$%&'*+-=?^_`{|}~.``
/// or a quoted string (`"x y"@`, up to 64 bytes); the domain a valid DNS name with an
/// alphabetic TLD, or an address literal (`[192.0.2.1]`, `[IPv6:…]`, passed to `f` with its
/// brackets). Each `@` looks left no further than the previous one (or 64 bytes for a quoted
/// local part): linear.
pub(crate) fn email_spans(s: &[u8], mut f: impl FnMut(&str, Range<usize>) -> bool) -> bool {
    let mut floor = 0;
    for at in memchr::memchr_iter(b'@', s) {
        let quoted = if at >= 2 && s[at - 1] == b'"' {
            quoted_local(s, at - 1)
        } else {
            None
        };
        let mut l = at;
        while l > floor && local_char(s[l - 1]) {
            l -= 1;
        }
        floor = at + 1;
        while l < at && s[l] == b'.' {
            l += 1;
        }
        let l = match quoted {
            Some(q) => q,
            None if l == at => continue,
            None => l,
        };
        if s.get(at + 1) == Some(&b'[') {
            if let Some(end) = address_literal(s, at + 1)
                && f(text(&s[at + 1..end]), l..end)
            {
                return true;
            }
            continue;
        }
        let end = run_end(s, at + 1, host_char);
        let mut r = end;
        while r > at + 1 && matches!(s[r - 1], b'.' | b'-') {
            r -= 1;
        }
        let domain = &s[at + 1..r];
        if valid_domain(domain) && f(text(domain), l..r) {
            return true;
        }
    }
    false
}

/// Calls `f` with the scheme (`http`/`https`) and host of each URL until it returns true.
pub(crate) fn urls(s: &[u8], f: &mut dyn FnMut(&str, &str) -> bool) -> bool {
    url_spans(s, |scheme, host, _| f(scheme, host))
}

/// Bytes that end a URL in running text (the linkifier's reading): whitespace, controls,
/// quotes and angle brackets.
fn ends_url(b: u8) -> bool {
    b <= 0x20 || matches!(b, b'"' | b'<' | b'>' | b'`' | 0x7f)
}

/// Like [`ends_url`], but a tab or line break does not end the URL: WHATWG parsers delete
/// them wherever they are (`https://corp.exam\nple` is `https://corp.example`).
fn ends_url_browser(b: u8) -> bool {
    ends_url(b) && !matches!(b, b'\t' | b'\n' | b'\r')
}

/// Bytes that end the authority of an `http(s)` URL (WHATWG: `\` counts as `/`).
fn ends_authority(b: u8) -> bool {
    matches!(b, b'/' | b'?' | b'#' | b'\\')
}

/// The host WHATWG finds in `candidate` (scheme and authority only): lowercased, IDNA
/// applied, percent-decoded, IPv4 forms normalised, IPv6 in brackets, trailing dots removed.
/// `Some("")` when the URL does not parse (an unknown host: it still is a URL).
fn whatwg_host(candidate: &str) -> Option<(bool, String)> {
    match url::Url::parse(candidate) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {
            let host = u.host_str().unwrap_or("").trim_end_matches('.');
            Some((u.scheme() == "https", host.to_string()))
        }
        Ok(_) => None,
        Err(_) => {
            let https = candidate
                .as_bytes()
                .get(4)
                .is_some_and(|b| b.eq_ignore_ascii_case(&b's'));
            Some((https, String::new()))
        }
    }
}

/// The first byte at or after a position that satisfies a test, remembered: asked again from a
/// position in `from..=at`, the answer is the same.
#[derive(Default)]
struct NextMatch {
    from: usize,
    at: usize,
}

impl NextMatch {
    fn get(&mut self, s: &[u8], pos: usize, hit: impl Fn(u8) -> bool) -> usize {
        if pos < self.from || pos > self.at || (self.from == 0 && self.at == 0) {
            self.from = pos;
            self.at = run_end(s, pos, |b| !hit(b));
        }
        self.at
    }
}

/// Calls `f` with the scheme (`http`/`https`), the host and the byte range of each URL until it
/// returns true. URLs are read as browsers read them (WHATWG, the `url` crate): a URL starts
/// with `http:` or `https:` (any case, not preceded by a letter, digit, `+`, `-` or `.`),
/// with or without slashes (`https:evil.example`, `https:\\evil.example`); its host is what
/// follows any userinfo (`https://corp.example@evil.example` is `evil.example`),
/// percent-decoded and IDNA-mapped (`%65vil.example`, full-width letters), IPv4 forms
/// normalised (`0x7f.1` is `127.0.0.1`), IPv6 literals in brackets; a trailing dot is
/// dropped. In running text a URL ends at whitespace, a quote or an angle bracket; where a
/// browser given the rest of the string would read another host — a tab or line break (which
/// WHATWG deletes) or a space before an `@` of the same authority (it becomes userinfo) —
/// that host is reported too. A URL that does not parse is reported with an empty host
/// (a URL to an unknown host: not on any allowlist). Linear: hosts are parsed from the
/// authority only, within a budget of a few times the input (past it, hosts are unknown).
pub(crate) fn url_spans(s: &[u8], mut f: impl FnMut(&str, &str, Range<usize>) -> bool) -> bool {
    let mut budget = 4 * s.len() + (64 << 10);
    // The searches forward are cached: candidates move forward, so each byte is searched a
    // bounded number of times.
    let mut next: [NextMatch; 7] = Default::default();
    // `st..auth`: scheme and authority (parsed for the host); `st..end`: the whole URL.
    let mut report = |st: usize, auth: usize, end: usize, budget: &mut usize| -> bool {
        let piece = text(&s[st..auth]);
        let (https, host) = if piece.len() <= *budget {
            *budget -= piece.len();
            match whatwg_host(piece) {
                Some(h) => h,
                None => return false,
            }
        } else {
            let https = s.get(st + 4).is_some_and(|b| b.eq_ignore_ascii_case(&b's'));
            (https, String::new())
        };
        // Trailing punctuation of the sentence is not part of the URL.
        let mut end = end;
        while end > auth
            && matches!(
                s[end - 1],
                b'.' | b',' | b';' | b':' | b'!' | b'?' | b')' | b']' | b'}' | b'\''
            )
        {
            end -= 1;
        }
        f(if https { "https" } else { "http" }, &host, st..end)
    };
    for c in memchr::memchr_iter(b':', s) {
        let st = if c >= 5 && s[c - 5..c].eq_ignore_ascii_case(b"https") {
            c - 5
        } else if c >= 4 && s[c - 4..c].eq_ignore_ascii_case(b"http") {
            c - 4
        } else {
            continue;
        };
        if st > 0 && (alnum(s[st - 1]) || matches!(s[st - 1], b'+' | b'-' | b'.')) {
            continue;
        }
        // After the scheme, any slashes or backslashes (WHATWG skips them), then the
        // authority.
        let auth = run_end(s, c + 1, |b| b == b'/' || b == b'\\');
        let [n1, n1_end, n2, n2_end, n3, n3_end, n_at] = &mut next;
        let e1 = n1.get(s, auth, |b| ends_url(b) || ends_authority(b));
        if e1 == auth {
            continue; // `https://` alone, `http: is`: no host.
        }
        if report(st, e1, n1_end.get(s, e1, ends_url), &mut budget) {
            return true;
        }
        if e1 >= s.len() || ends_authority(s[e1]) {
            continue;
        }
        // A tab or line break: deleted by a browser, the URL goes on.
        if matches!(s[e1], b'\t' | b'\n' | b'\r') {
            let e2 = n2.get(s, e1, |b| ends_url_browser(b) || ends_authority(b));
            if e2 > e1 && report(st, e2, n2_end.get(s, e2, ends_url_browser), &mut budget) {
                return true;
            }
        }
        // A later `@` in the same authority (past a space or quote): userinfo to a browser.
        let e3 = n3.get(s, e1, ends_authority);
        if n_at.get(s, e1, |b| b == b'@') < e3
            && report(st, e3, n3_end.get(s, e3, ends_url), &mut budget)
        {
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
    phone_spans(s, |_| true)
}

/// Calls `f` with the byte range of each phone number in `s` (see [`phone`]) until it returns
/// true.
pub(crate) fn phone_spans(s: &[u8], mut f: impl FnMut(Range<usize>) -> bool) -> bool {
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
            // Without a separator it read ahead of a group that did not follow.
            let mut e = end;
            while e > i && matches!(s[e - 1], b' ' | b'-' | b'.') {
                e -= 1;
            }
            if f(i..e) {
                return true;
            }
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
