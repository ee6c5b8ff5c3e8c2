//! The skip-aheads of `credit_card`, `secret_key` and IPv4 against plain scans (kept here as
//! references; the card reference checks every run of groups of every chain): the same answer on every input, matches at the very end and at
//! every offset around a skipped window, and near misses.

use proptest::prelude::*;

use super::{finance, network, secrets};

/// The scans as they were before the skip-aheads of this file's tests (same results, more
/// work): the references.
mod reference {
    use super::super::finance::{card_chain_byte, card_number};
    use super::super::network::ipv4_at;
    use super::super::scan::{alnum, next_digit, run_end};
    use super::super::secrets::{MIN_PREFIXED, secret_token, token_char};

    /// Every chain of digit groups (joined by single spaces or hyphens), every run of whole
    /// groups in it, checked one by one (quadratic: a reference, not a scanner).
    pub(super) fn credit_card(s: &[u8]) -> bool {
        let n = s.len();
        let mut i = 0;
        while i < n {
            if !s[i].is_ascii_digit() || (i > 0 && card_chain_byte(s, i - 1)) {
                i += 1;
                continue;
            }
            let mut groups = Vec::new();
            let mut p = i;
            loop {
                let e = run_end(s, p, |b| b.is_ascii_digit());
                groups.push((p, e));
                if e + 1 < n && matches!(s[e], b' ' | b'-') && s[e + 1].is_ascii_digit() {
                    p = e + 1;
                } else {
                    break;
                }
            }
            let before = i.checked_sub(1).map(|k| s[k]);
            let glued_left = before.is_some_and(alnum)
                || (before == Some(b'.') && i >= 2 && s[i - 2].is_ascii_digit());
            let plus = before == Some(b'+');
            let last_end = groups[groups.len() - 1].1;
            let glued_right = last_end < n
                && (alnum(s[last_end])
                    || (s[last_end] == b'.'
                        && last_end + 1 < n
                        && s[last_end + 1].is_ascii_digit()));
            let g = groups.len();
            for a in 0..g {
                for b in a..g {
                    let w = &groups[a..=b];
                    let lens: Vec<usize> = w.iter().map(|(x, y)| y - x).collect();
                    let digits: usize = lens.iter().sum();
                    if (a == 0 && glued_left)
                        || (b == g - 1 && glued_right)
                        || lens.iter().any(|&l| l > 19)
                        || !(13..=19).contains(&digits)
                    {
                        continue;
                    }
                    let whole = a == 0 && b == g - 1;
                    let layout = lens.len() == 1
                        || lens == [4, 6, 5]
                        || (lens[..lens.len() - 1].iter().all(|&l| l == 4)
                            && (1..=4).contains(&lens[lens.len() - 1]));
                    if !(whole || layout) || (plus && a == 0 && !(lens.len() == 1 && digits > 15)) {
                        continue;
                    }
                    let d: Vec<u8> = s[w[0].0..w[w.len() - 1].1]
                        .iter()
                        .filter(|b| b.is_ascii_digit())
                        .map(|b| b - b'0')
                        .collect();
                    if card_number(&d) {
                        return true;
                    }
                }
            }
            i = last_end;
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
    "Order 2024 4111 1111 1111 1111",
    "4111-1111-1111-1111-1228",
    "12/28 4111111111111111 1228",
    "+1 3782 822463 10005",
    "AWS_KEY=AKIAIOSFODNN7EXAMPLE",
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
    assert!(!finance::credit_card(b"1 4111 1111 1111 1112")); // Luhn, in a chain of 17 digits
    assert!(finance::credit_card(b"1 4111 1111 1111 1111")); // a card beside a number
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
