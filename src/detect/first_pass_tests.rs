//! The shared first pass against each detector's own scan (and the references the skips of
//! `skip_tests.rs` were checked against): the same answers for every subset of the four
//! detectors, on noise, on real matches at every offset and at the very end, and near misses.

use proptest::prelude::*;

use super::first_pass::{JWT, SECRET, first_pass};
use super::secrets;

/// Each detector's own scan, as a mask of the first pass's bits.
fn own(s: &[u8]) -> u8 {
    let mut m = 0;
    if secrets::secret_key(s) {
        m |= SECRET;
    }
    if secrets::jwt(s) {
        m |= JWT;
    }
    m
}

fn same(s: &str) {
    let b = s.as_bytes();
    let expected = own(b);
    for want in 1..4u8 {
        assert_eq!(
            first_pass(b, want),
            expected & want,
            "first pass (want {want:#06b}) differs on {s:?}"
        );
    }
}

/// Filler near every pattern: words, digits and separators, token bytes, dashes and capitals.
const FILL: &[&str] = &[
    "a",
    "the",
    "customer",
    "12",
    "2026-03-02",
    "$45.90",
    " ",
    "  ",
    ".",
    "-",
    "-----",
    "_",
    "+",
    "/",
    "=",
    "\n",
    ",",
    "ey",
    "ew",
    "eyJ",
    "BEGIN",
    "-----BEGIN ",
    "PRIVATE KEY",
    "KEY-----",
    "4111",
    "sk-",
    "AKIA",
    "ghp_",
    "é",
];

fn noisy() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            4 => prop::sample::select(FILL).prop_map(str::to_string),
            2 => "[0-9]{1,6}",
            2 => "[0-9 -]{1,24}",
            2 => "[A-Za-z0-9_+/=-]{1,40}",
            1 => "[A-Z0-9 -]{1,40}",
            1 => "[A-Za-z0-9_-]{1,20}\\.[A-Za-z0-9_-]{0,20}",
            1 => "[ .,;:()\t]{1,3}",
        ],
        0..24,
    )
    .prop_map(|parts| parts.concat())
}

/// Matches (and near misses) of the four detectors.
const HITS: &[&str] = &[
    "4111111111111111",
    "4111 1111 1111 1111",
    "5500-0000-0000-0004",
    "378282246310005",
    "4222222222222",
    "4111 1111 1111 1112",
    "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    "sk-abcdefghijklmnopqrstuvwx",
    "AKIAIOSFODNN7EXAMPLE",
    "9fQ2x7LmP4vR8sT1wZ6yB3nK5hJ0",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk",
    "eyJhbGciOiJub25lIn0.eyJ4IjoxfQ.",
    "eyJmb28iOiJiYXIifQ.eyJ4IjoxfQ.sig",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9..sig",
    "ewogImFsZyI6ICJub25lIgp9.eyJ4IjoxfQ.s",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx8Gm1Vv0Zz+abc\n",
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n",
    "-----BEGIN EC PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n",
    "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A\n",
    "-----BEGIN RSA PRIVATE KEY-----\n...\n",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn the_first_pass_answers_as_the_detectors_own_scans(s in noisy()) {
        same(&s);
    }

    #[test]
    fn a_match_anywhere_in_noise_is_found_as_before(
        a in noisy(),
        hit in prop::sample::select(HITS),
        b in noisy(),
        sep in prop::sample::select(&[" ", "", ".", "-", "+", "x", "\n", "1", "A"][..]),
    ) {
        same(&format!("{a}{sep}{hit}{sep}{b}"));
        same(&format!("{a}{sep}{hit}"));
        same(&format!("{hit}{sep}{b}"));
    }

    #[test]
    fn any_bytes_answer_as_before(s in "[ -~\n]{0,80}") {
        same(&s);
    }
}

/// Each hit at every offset 0..40 after filler (every phase of the 4- and 8-byte windows), at
/// the very end, cut short by a byte, and two hits in one string.
#[test]
fn hits_at_every_window_offset_and_at_the_end() {
    for hit in HITS {
        for pad in 0..40 {
            for filler in ["a", " ", "x y", "1 ", ".", "-", "A", "+"] {
                let lead: String = filler.repeat(pad).chars().take(pad).collect();
                same(&format!("{lead}{hit}"));
                same(&format!("{lead}{hit} and more text"));
                same(&format!("{lead}{}", &hit[..hit.len() - 1]));
                same(&format!("{lead}{} tail", &hit[1..]));
                if pad < 9 && matches!(filler, "a" | " ") {
                    for other in HITS {
                        same(&format!("{lead}{hit} {other}"));
                    }
                }
            }
        }
    }
}

#[test]
fn exact_cases() {
    assert_eq!(
        first_pass(b"Bearer eyJhbGciOiJub25lIn0.eyJ4IjoxfQ.", 3),
        JWT
    );
    assert_eq!(
        first_pass(b"token ghp_16C7e42F292c6912E7710c838347Ae178B4a", 3),
        SECRET
    );
    assert_eq!(first_pass(b"order 4111 1111 1111 1112", 3), 0);
    assert_eq!(first_pass(b"1 4111 1111 1111 1111", 3), 0);
    assert_eq!(first_pass(b"an ordinary sentence with words", 3), 0);
    assert_eq!(first_pass(b"", 3), 0);
    assert_eq!(
        first_pass(b"-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0B", 3),
        0
    );
}
