//! Tests of the event module.

use super::canonical::write_string;
use super::*;
use chrono::{DateTime, Utc};
use serde_json::json;

fn body(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

#[test]
fn canonical_form_sorts_keys_by_bytes_and_has_no_whitespace() {
    let v = json!({"b": 1, "a": [1, 2.5, {"z": null, "Z": true}], "é": "x", "aa": "q\"\n\u{1}/é"});
    assert_eq!(
        canonical_json(&v),
        r#"{"a":[1,2.5,{"Z":true,"z":null}],"aa":"q\"\n\u0001/é","b":1,"é":"x"}"#
    );
}

#[test]
fn string_escaping_matches_serde_json() {
    let mut all: String = (0u32..0x80).filter_map(char::from_u32).collect();
    all.push_str("é\u{2028}\u{1F600}");
    let mut mine = String::new();
    write_string(&all, &mut mine);
    assert_eq!(mine, serde_json::to_string(&all).unwrap());
}

#[test]
fn canonical_numbers() {
    let v = json!([
        1.0,
        100.0,
        0.001,
        1e-7,
        1e16,
        1e21,
        -0.0,
        12345678901234567890u64,
        -5,
        1.5,
        0.000001,
        1.5e-7,
        5e-324,
        1.7976931348623157e308,
        123456789012345680000.0,
        -2.5e-3,
        0.1
    ]);
    assert_eq!(
        canonical_json(&v),
        "[1,100,0.001,1e-7,10000000000000000,1e+21,0,12345678901234567890,-5,1.5,\
         0.000001,1.5e-7,5e-324,1.7976931348623157e+308,123456789012345680000,-0.0025,0.1]"
    );
    // Canonical text re-parses to the same canonical text.
    let text = canonical_json(&v);
    let back: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(canonical_json(&back), text);
}

#[test]
fn seal_chains_and_roundtrips() {
    let mut chain = RunChain::new("r1", "agent", Some("u1".into()));
    let ts = DateTime::parse_from_rfc3339("2026-01-05T09:00:00.123Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap();
    let e0 = chain.seal(EventKind::RunStarted, ts, body(json!({"runContext": {}})));
    let e1 = chain.seal(
        EventKind::ToolDecision,
        ts,
        body(json!({"callId": "c1", "seq": 99})),
    );
    assert_eq!(e0.seq(), 0);
    assert_eq!(e0.prev_hash(), None);
    assert_eq!(e1.seq(), 1);
    assert_eq!(e1.prev_hash(), Some(e0.hash()));
    assert!(!e1.body().contains_key("seq"));
    assert_eq!(e0.id().get_version_num(), 7);
    assert!(e0.hash_is_valid() && e1.hash_is_valid());
    let v = e1.to_json();
    assert_eq!(v["ts"], "2026-01-05T09:00:00.123Z");
    assert_eq!(expected_hash(&v).as_deref(), Some(e1.hash()));
    let text = e1.to_canonical_json();
    assert_eq!(text, canonical_json(&e1.to_json()));
    let back: AuditEvent = serde_json::from_str(&text).unwrap();
    assert_eq!(back, e1);
    assert_eq!(back.to_canonical_json(), text);
    let mut edited = v.clone();
    edited["callId"] = json!("c2");
    let parsed = AuditEvent::from_value(edited).unwrap();
    assert!(!parsed.hash_is_valid());
}

#[test]
fn rejects_bad_envelopes() {
    for bad in [
        json!(1),
        json!({"schema": "x"}),
        json!({"schema": SCHEMA, "id": "nope"}),
    ] {
        assert!(AuditEvent::from_value(bad).is_err());
    }
}

proptest::proptest! {
    /// The string writer (which skips 8 bytes at a time) escapes as serde_json does, wherever
    /// the bytes that need an escape fall.
    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them(
        s in proptest::string::string_regex("([a-zé€\"\\\\\\x00-\\x1f\\x7f]|\\PC){0,40}").expect("a regex")
    ) {
        let mut out = String::new();
        write_string(&s, &mut out);
        proptest::prop_assert_eq!(out, serde_json::to_string(&s).expect("a string"));
    }
}

#[test]
fn sha256_hex_writes_the_standard_lowercase_digest() {
    use sha2::{Digest, Sha256};
    // FIPS 180-2 test vectors, then inputs whose digests cover every byte value's digits.
    assert_eq!(
        canonical::sha256_hex(""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(
        canonical::sha256_hex("abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    for i in 0..2_000u32 {
        let text = format!("event {i}");
        let digest = Sha256::digest(text.as_bytes());
        assert_eq!(canonical::sha256_hex(&text), hex::encode(digest));
    }
}
