//! Property: for JSON without fractional numbers, the canonical form is exactly serde_json's
//! compact output (sorted keys, same escapes), and an event always re-verifies after a round
//! trip through its text.

use proptest::prelude::*;
use serde_json::{Map, Value};
use toolgate::audit::{AuditEvent, EventKind, RunChain, canonical_json};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        "[\\x00-\\x1f\"\\\\a-z\u{e9}\u{1F600}]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn canonical_equals_sorted_compact_json_for_integers(v in json_value()) {
        prop_assert_eq!(canonical_json(&v), serde_json::to_string(&v).unwrap());
    }

    #[test]
    fn sealed_events_verify_after_a_text_round_trip(body in prop::collection::btree_map("[a-z]{1,8}", json_value(), 0..5)) {
        let mut chain = RunChain::new("r", "agent", None);
        let body: Map<String, Value> = body.into_iter().collect();
        let event = chain.seal(EventKind::ToolResult, chrono::Utc::now(), body);
        let text = event.to_canonical_json();
        let back = AuditEvent::from_value(serde_json::from_str(&text).unwrap()).unwrap();
        prop_assert!(back.hash_is_valid());
        prop_assert_eq!(back.hash(), event.hash());
    }
}
