//! The skip-aheads of `credit_card`, `secret_key` and IPv4 against the scans they replaced
//! (kept here as references): the same answer on every input, matches at the very end and at
//! every offset around a skipped window, and near misses.

use proptest::prelude::*;

use super::{finance, network, secrets};

/// The scans as they were before the skip-aheads of this file's tests (same results, more
/// work): the references.
mod reference {
    use super::super::finance::{card_chain_byte, card_number};
    use super::super::network::ipv4_at;
    use super::super::scan::{alnum, left_boundary, next_digit, right_boundary, run_end};
    use super::super::secrets::{MIN_PREFIXED, secret_token, token_char};

    pub(super) fn credit_card(s: &[u8]) -> bool {
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

    pub(super) fn ipv4(s: &[u8]) -> bool {
        let mut i = 0;
        loop {
            i = next_digit(s, i);
            if i >= s.len() {
                break;
            }
            if i > 0 && (alnum(s[i - 1]) || s[i - 1] == b'.') {
                // No address starts inside this run of digits: skip it whole.
                while i < s.len() && s[i].is_ascii_digit() {
                    i += 1;
                }
                continue;
            }
            let (end, ok) = ipv4_at(s, i);
            if ok {
                return true;
            }
            i = end.max(i + 1);
        }
        false
    }

    pub(super) fn secret_key(s: &[u8]) -> bool {
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
            if secret_token(&s[start..end]) {
                return true;
            }
            i = end + 1;
        }
        false
    }
}

/// Filler that is none of the patterns: words, spaces, punctuation, short numbers.
const FILL: &[&str] = &[
    "a",
    "the",
    "order",
    "12",
    "7",
    "2026-03-02",
    "$45.90",
    "#4412",
    " ",
    " ",
    ".",
    "-",
    "_",
    "1.2",
    "10.0.0",
    "x9",
    "key",
    "sk",
    "AKIA",
    "4111",
    "\n",
    ",",
    "ab-cd",
    "999",
    "255.",
];

/// Strings made of filler, digits, dots, separators and token bytes, so that near misses of
/// every pattern are frequent.
fn noisy() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            3 => prop::sample::select(FILL).prop_map(str::to_string),
            2 => "[0-9]{1,5}",
            2 => "[0-9 .-]{1,20}",
            2 => "[A-Za-z0-9_+/=-]{1,30}",
            1 => "[ .,;:()]{1,3}",
        ],
        0..24,
    )
    .prop_map(|parts| parts.concat())
}

/// A real match of each kind, to place anywhere in the noise.
const HITS: &[&str] = &[
    "4111111111111111",
    "4111 1111 1111 1111",
    "5500-0000-0000-0004",
    "378282246310005",
    "192.168.0.1",
    "8.8.8.8",
    "255.255.255.255",
    "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    "sk-abcdefghijklmnopqrstuvwx",
    "AKIAIOSFODNN7EXAMPLE",
    "9fQ2x7LmP4vR8sT1wZ6yB3nK5hJ0",
];

/// The detectors under test, new and reference, on `s`.
fn both(s: &[u8]) -> [(bool, bool); 3] {
    [
        (finance::credit_card(s), reference::credit_card(s)),
        (network::ipv4(s), reference::ipv4(s)),
        (secrets::secret_key(s), reference::secret_key(s)),
    ]
}

fn same(s: &str) {
    for (k, (new, old)) in both(s.as_bytes()).into_iter().enumerate() {
        assert_eq!(
            new,
            old,
            "{} differs on {s:?}",
            ["credit_card", "ipv4", "secret_key"][k]
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn the_skips_answer_as_the_full_scans_did(s in noisy()) {
        same(&s);
    }

    #[test]
    fn a_match_anywhere_in_noise_is_found_as_before(
        a in noisy(),
        hit in prop::sample::select(HITS),
        b in noisy(),
        sep in prop::sample::select(&[" ", "", ".", "-", "x", "\n", "1"][..]),
    ) {
        same(&format!("{a}{sep}{hit}{sep}{b}"));
        same(&format!("{a}{sep}{hit}"));
        same(&format!("{hit}{sep}{b}"));
    }
}

/// Each hit at every offset 0..40 after filler (covering every phase of the 13- and 15-byte
/// windows), at the very end, and cut short by one byte (a near miss) at the same offsets.
#[test]
fn hits_at_every_window_offset_and_at_the_end() {
    for hit in HITS {
        for pad in 0..40 {
            for filler in ["a", " ", "x y", "1 ", ".", "-"] {
                let lead: String = filler.repeat(pad).chars().take(pad).collect();
                same(&format!("{lead}{hit}"));
                same(&format!("{lead}{hit} and more text"));
                same(&format!("{lead}{}", &hit[..hit.len() - 1]));
                same(&format!("{lead}{} tail", &hit[1..]));
            }
        }
    }
}

#[test]
fn exact_cases() {
    // Found, at the very end and at the start.
    assert!(finance::credit_card(b"pay with 4111 1111 1111 1111"));
    assert!(finance::credit_card(b"4111111111111111"));
    assert!(network::ipv4(b"host 10.1.2.3"));
    assert!(network::ipv4(b"10.1.2.3 is up"));
    assert!(secrets::secret_key(
        b"token: ghp_16C7e42F292c6912E7710c838347Ae178B4a"
    ));
    assert!(secrets::secret_key(b"9fQ2x7LmP4vR8sT1wZ6yB3nK5hJ0"));
    // Near misses.
    assert!(!finance::credit_card(b"order 4111 1111 1111 1112")); // Luhn
    assert!(!finance::credit_card(b"1 4111 1111 1111 1111")); // one chain of 17 digits
    assert!(!finance::credit_card(b"4111 1111 1111")); // 12 digits
    assert!(!network::ipv4(b"999.1.1.1"));
    assert!(!network::ipv4(b"1.2.3.4.5"));
    assert!(!network::ipv4(b"v1.2.3.4"));
    assert!(!network::ipv4(b"1234.1.1.1"));
    assert!(!network::ipv4(b"01.2.3.4"));
    assert!(!secrets::secret_key(b"ghp_16C7e42F292")); // too few key characters
    assert!(!secrets::secret_key(b"an ordinary sentence with words"));
    assert!(!secrets::secret_key(b"abcdefghijklmn 0123456789abcd")); // 14 + 14
}
