//! Spans and span redaction: each detector reports where it matched; redaction replaces
//! exactly those bytes, keeps the rest byte for byte, and leaves nothing any detector finds.

use proptest::prelude::*;

use super::spans::{detector_spans, redact_spans};
use super::{contact, scan};
use crate::policy::Detector;

const ALL: [Detector; 10] = [
    Detector::Email,
    Detector::Phone,
    Detector::CreditCard,
    Detector::Iban,
    Detector::UkNino,
    Detector::IpAddress,
    Detector::Url,
    Detector::Jwt,
    Detector::PrivateKey,
    Detector::SecretKey,
];

fn spans(d: Detector, s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    detector_spans(d, s.as_bytes(), |r| {
        out.push(&s[r]);
        false
    });
    out
}

fn hosts(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    contact::url_spans(s.as_bytes(), |_, h, _| {
        out.push(h.to_string());
        false
    });
    out
}

#[test]
fn each_detector_reports_the_matched_bytes() {
    let cases: &[(Detector, &str, &[&str])] = &[
        (
            Detector::CreditCard,
            "pay 4111 1111 1111 1111 12/28 ok",
            &["4111 1111 1111 1111"],
        ),
        (
            Detector::CreditCard,
            "Order 2024 4111-1111-1111-1111-1228",
            &["4111-1111-1111-1111"],
        ),
        (
            Detector::CreditCard,
            "4111 1111 1111 1111 5555 5555 5555 4444",
            &["4111 1111 1111 1111", "5555 5555 5555 4444"],
        ),
        (
            Detector::Email,
            "to \"j d\"@evil.example, x@[192.0.2.1].",
            &["\"j d\"@evil.example", "x@[192.0.2.1]"],
        ),
        (
            Detector::Iban,
            "iban: gb82 west 1234 5698 7654 32.",
            &["gb82 west 1234 5698 7654 32"],
        ),
        (Detector::UkNino, "NI AB 123456 C ok", &["AB 123456 C"]),
        (
            Detector::IpAddress,
            "from 10.0.0.1: and ::1",
            &["10.0.0.1", "::1"],
        ),
        (
            Detector::SecretKey,
            "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE",
            &["AKIAIOSFODNN7EXAMPLE"],
        ),
        (
            Detector::SecretKey,
            "x-AKIAIOSFODNN7EXAMPLE y",
            &["AKIAIOSFODNN7EXAMPLE"],
        ),
        (
            Detector::PrivateKey,
            "k=-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n-----END PRIVATE KEY-----\\n rest",
            &[
                "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n-----END PRIVATE KEY-----",
            ],
        ),
        (
            Detector::Url,
            "see https://a.example/x?y=1, now",
            &["https://a.example/x?y=1"],
        ),
        (
            Detector::Phone,
            "call (415) 555-2671 today",
            &["(415) 555-2671"],
        ),
    ];
    for (d, s, want) in cases {
        assert_eq!(spans(*d, s), *want, "{d:?} on {s:?}");
    }
}

#[test]
fn urls_are_read_as_browsers_read_them() {
    assert_eq!(
        hosts("https://a@corp.example@evil.example/x"),
        ["evil.example"]
    );
    assert_eq!(hosts("https:evil.example"), ["evil.example"]);
    assert_eq!(hosts("https:\\\\evil.example\\x"), ["evil.example"]);
    assert_eq!(hosts("https://%65vil.example/"), ["evil.example"]);
    assert_eq!(hosts("https://ＥＶＩＬ.example/"), ["evil.example"]);
    assert_eq!(hosts("http://[::1]:8080/"), ["[::1]"]);
    assert_eq!(hosts("http://0x7f.1/"), ["127.0.0.1"]);
    assert_eq!(hosts("http://corp.example./"), ["corp.example"]);
    // Running text: the linkifier's reading, and the browser's when they differ.
    assert_eq!(
        hosts("go https://corp.example @evil.example/x"),
        ["corp.example", "evil.example"]
    );
    assert_eq!(
        hosts("https://corp.exam\nple/"),
        ["corp.exam", "corp.example"]
    );
    assert_eq!(
        hosts("see https://corp.example/a and x@y.example"),
        ["corp.example"]
    );
    // Unparseable: a URL with an unknown host.
    assert_eq!(hosts("https://[oops/"), [""]);
    assert!(hosts("http: is fine, https:// too").is_empty());
}

#[test]
fn redaction_keeps_the_rest_of_the_string() {
    let s = "curl -d 4111 1111 1111 1111 -H 'k: sk_live_4eC39HqLyjWDarjtT1zdp7dc' mail jane@corp.example";
    assert_eq!(
        redact_spans(s, &ALL).unwrap(),
        "curl -d [redacted:credit_card] -H 'k: [redacted:secret_key]' mail [redacted:email]"
    );
    assert_eq!(redact_spans("nothing here", &ALL), None);
    assert_eq!(redact_spans("[redacted:credit_card]", &ALL), None);
    // Overlapping spans of two detectors become one stand-in.
    assert_eq!(
        redact_spans(
            "https://u:4111111111111111@evil.example/x",
            &[Detector::CreditCard, Detector::Url]
        )
        .unwrap(),
        "[redacted:url]"
    );
    // Past the decision's scan limit too.
    let mut long = "a ".repeat(scan::MAX_SCAN);
    long.push_str("4111111111111111");
    assert!(
        redact_spans(&long, &[Detector::CreditCard])
            .unwrap()
            .ends_with(" [redacted:credit_card]")
    );
}

/// Text none of the detectors can match: lowercase words and punctuation, no digits, `@`
/// or `:`.
fn plain() -> impl Strategy<Value = String> {
    "[a-z ,.!?()'\n-]{0,40}"
}

const HITS: &[(&str, Detector)] = &[
    ("4111 1111 1111 1111", Detector::CreditCard),
    ("5555-5555-5555-4444", Detector::CreditCard),
    ("378282246310005", Detector::CreditCard),
    ("jane.doe+x@example.co.uk", Detector::Email),
    ("\"x y\"@evil.example", Detector::Email),
    ("GB82 WEST 1234 5698 7654 32", Detector::Iban),
    ("de89370400440532013000", Detector::Iban),
    ("AB 123456 C", Detector::UkNino),
    ("192.168.0.1", Detector::IpAddress),
    ("2001:db8::1", Detector::IpAddress),
    ("https://a@corp.example@evil.example/x", Detector::Url),
    ("+44 20 7946 0958", Detector::Phone),
    ("eyJhbGciOiJub25lIn0.eyJ4IjoxfQ.", Detector::Jwt),
    ("AKIAIOSFODNN7EXAMPLE", Detector::SecretKey),
    (
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        Detector::SecretKey,
    ),
    (
        "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n",
        Detector::PrivateKey,
    ),
];

/// Noise near every pattern: digits, separators, token bytes, `@`, `:`, dots, brackets.
fn noisy() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            3 => prop::sample::select(HITS).prop_map(|(h, _)| h.to_string()),
            2 => "[0-9 .:-]{1,24}",
            2 => "[A-Za-z0-9_+/=@.-]{1,30}",
            1 => "[ \"@\\[\\]:/\\\\\n]{1,4}",
            1 => prop::sample::select(&["https:", "http://", "-----BEGIN ", "\\n", "ey", "+", "sk-"][..])
                .prop_map(str::to_string),
        ],
        0..16,
    )
    .prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    /// A value between plain text is replaced by its stand-in; the text around it is kept
    /// byte for byte.
    #[test]
    fn span_redaction_keeps_the_text_around_byte_for_byte(
        a in plain(),
        hit in prop::sample::select(HITS),
        b in plain(),
    ) {
        let (h, d) = hit;
        let s = format!("{a} {h} {b}");
        let want = format!("{a} [redacted:{}] {b}", d.as_str());
        prop_assert_eq!(redact_spans(&s, &ALL), Some(want));
    }

    /// Whatever the input, what redaction leaves holds nothing any detector finds.
    #[test]
    fn a_redacted_string_holds_no_detectable_value(s in noisy()) {
        if let Some(r) = redact_spans(&s, &ALL) {
            for d in ALL {
                let left = spans(d, &r);
                prop_assert!(left.is_empty(), "{:?} still finds {:?} in {:?} (from {:?})", d, left, r, s);
            }
        } else {
            for d in ALL {
                prop_assert!(spans(d, &s).is_empty());
            }
        }
    }
}
