//! The skip-aheads of `credit_card`, `secret_key` and IPv4 against plain scans (kept here as
//! references; the card reference checks every run of groups of every chain): the same answer on every input, matches at the very end and at
//! every offset around a skipped window, and near misses.

use proptest::prelude::*;

use super::{card, network, secrets};

/// The scans as they were before the skip-aheads of this file's tests (same results, more
/// work): the references.
mod reference {
    use super::super::card::{card_number, decimal_point, digit_at, sep_at};
    use super::super::network::ipv4_at;
    use super::super::scan::{alnum, next_digit, run_end};
    use super::super::secrets::{MIN_PREFIXED, secret_token, token_char};

    /// Every chain of digit groups (joined by one separator character each), split at its
    /// decimal points, every run of whole groups in each part, checked one by one (quadratic:
    /// a reference, not a scanner).
    pub(super) fn credit_card(s: &[u8]) -> bool {
        let n = s.len();
        let mut i = 0;
        while i < n {
            if digit_at(s, i).is_none() {
                i += 1;
                continue;
            }
            // The groups (start, end, digits) of the chain from `i`, in parts split at
            // decimal points.
            let mut parts: Vec<Vec<(usize, usize, usize)>> = vec![Vec::new()];
            let mut p = i;
            let last_end = loop {
                let (mut e, mut c) = (p, 0);
                while let Some((_, l)) = digit_at(s, e) {
                    e += l;
                    c += 1;
                }
                parts.last_mut().unwrap().push((p, e, c));
                let l = sep_at(s, e);
                if l == 0 || digit_at(s, e + l).is_none() {
                    break e;
                }
                if decimal_point(s, e, c) {
                    parts.push(Vec::new());
                }
                p = e + l;
            };
            let before = i.checked_sub(1).map(|k| s[k]);
            let nparts = parts.len();
            for (pi, groups) in parts.iter().enumerate() {
                let glued_left = if pi == 0 {
                    before.is_some_and(alnum)
                } else {
                    true
                };
                let plus = pi == 0 && before == Some(b'+');
                let glued_right = if pi + 1 < nparts {
                    true
                } else {
                    last_end < n && alnum(s[last_end])
                };
                let g = groups.len();
                for a in 0..g {
                    for b in a..g {
                        let w = &groups[a..=b];
                        let lens: Vec<usize> = w.iter().map(|x| x.2).collect();
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
                        if !(whole || layout)
                            || (plus && a == 0 && !(lens.len() == 1 && digits > 15))
                        {
                            continue;
                        }
                        let mut d = Vec::new();
                        let mut q = w[0].0;
                        while q < w[w.len() - 1].1 {
                            match digit_at(s, q) {
                                Some((v, l)) => {
                                    d.push(v);
                                    q += l;
                                }
                                None => q += sep_at(s, q).max(1),
                            }
                        }
                        if card_number(&d) {
                            return true;
                        }
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
    "\u{a0}",
    "\u{2013}",
    "\u{200b}",
    "\t",
    "\u{ff14}",
    "\u{664}",
    "0.4532015112830366",
    "é",
    "日本",
];

/// Strings made of filler, digits, dots, separators and token bytes, so that near misses of
/// every pattern are frequent.
fn noisy() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            3 => prop::sample::select(FILL).prop_map(str::to_string),
            2 => "[0-9]{1,5}",
            2 => "[0-9 .-]{1,20}",
            2 => "[0-9 ._\t\u{a0}\u{2010}-\u{2015}\u{2212}\u{200b}\u{ff10}-\u{ff19}\u{660}-\u{669}\u{1d7ce}-\u{1d7d7}]{1,24}",
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
    "4111.1111.1111.1111",
    "4111_1111_1111_1111",
    "4111\t1111\t1111\t1111",
    "4111\u{a0}1111\u{a0}1111\u{a0}1111",
    "4111\u{2013}1111\u{2014}1111\u{2212}1111",
    "4111\u{200b}1111\u{2060}1111\u{feff}1111",
    "\u{ff14}\u{ff11}\u{ff11}\u{ff11}\u{3000}\u{ff11}\u{ff11}\u{ff11}\u{ff11}\u{3000}1111 1111",
    "\u{1d7d2}111111111111111",
    "\u{664}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}",
];

/// The detectors under test, new and reference, on `s`.
fn both(s: &[u8]) -> [(bool, bool); 3] {
    [
        (card::credit_card(s), reference::credit_card(s)),
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
            for filler in [
                "a",
                " ",
                "x y",
                "1 ",
                ".",
                "-",
                "\u{a0}",
                "\u{ff11}\u{2013}",
                "9_",
            ] {
                let lead: String = filler.repeat(pad).chars().take(pad).collect();
                same(&format!("{lead}{hit}"));
                same(&format!("{lead}{hit} and more text"));
                let mut short = hit.chars();
                short.next_back();
                same(&format!("{lead}{}", short.as_str()));
                let mut short = hit.chars();
                short.next();
                same(&format!("{lead}{} tail", short.as_str()));
            }
        }
    }
}

#[test]
fn exact_cases() {
    // Found, at the very end and at the start.
    assert!(card::credit_card(b"pay with 4111 1111 1111 1111"));
    assert!(card::credit_card(b"4111111111111111"));
    assert!(network::ipv4(b"host 10.1.2.3"));
    assert!(network::ipv4(b"10.1.2.3 is up"));
    assert!(secrets::secret_key(
        b"token: ghp_16C7e42F292c6912E7710c838347Ae178B4a"
    ));
    assert!(secrets::secret_key(b"9fQ2x7LmP4vR8sT1wZ6yB3nK5hJ0"));
    // Near misses.
    assert!(!card::credit_card(b"order 4111 1111 1111 1112")); // Luhn
    assert!(!card::credit_card(b"1 4111 1111 1111 1112")); // Luhn, in a chain of 17 digits
    assert!(card::credit_card(b"1 4111 1111 1111 1111")); // a card beside a number
    assert!(!card::credit_card(b"4111 1111 1111")); // 12 digits
    // Other separators and digits (a hostile model's spellings of a card).
    for hit in [
        "4111.1111.1111.1111",
        "4111_1111_1111_1111",
        "4111\t1111\t1111\t1111",
        "4111\u{a0}1111\u{202f}1111\u{3000}1111",
        "4111\u{2010}1111\u{2011}1111\u{2012}1111",
        "4111\u{2013}1111\u{2014}1111\u{2015}1111",
        "4111\u{2212}1111\u{fe63}1111\u{ff0d}1111",
        "4111\u{200b}1111\u{200d}1111\u{ad}1111",
        "\u{ff14}\u{ff11}\u{ff11}\u{ff11}\u{ff11}\u{ff11}\u{ff11}\u{ff11}1111 1111",
        "\u{664}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}",
        "\u{1d7d2}\u{1d7cf}\u{1d7cf}\u{1d7cf} 1111 1111 1111",
        "Total 12.50 4111 1111 1111 1111",
        "4111 1111 1111 1111.00",
    ] {
        assert!(card::credit_card(hit.as_bytes()), "{hit:?}");
    }
    for miss in [
        "0.4532015112830366",
        "4532015112830366.5",
        "[0.4532015112830366, 0.1]",
        "4111..1111..1111..1111",
        "4111  1111  1111  1111x",
        "4111\u{2022}1111\u{2022}1111\u{2022}1111",
        "4111.1111.1111.1112",
    ] {
        assert!(!card::credit_card(miss.as_bytes()), "{miss:?}");
    }
    assert!(!network::ipv4(b"999.1.1.1"));
    assert!(!network::ipv4(b"1.2.3.4.5"));
    assert!(!network::ipv4(b"v1.2.3.4"));
    assert!(!network::ipv4(b"1234.1.1.1"));
    assert!(!network::ipv4(b"01.2.3.4"));
    assert!(!secrets::secret_key(b"ghp_16C7e42F292")); // too few key characters
    assert!(!secrets::secret_key(b"an ordinary sentence with words"));
    assert!(!secrets::secret_key(b"abcdefghijklmn 0123456789abcd")); // 14 + 14
}
