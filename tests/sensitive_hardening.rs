//! `sensitiveData` weaknesses found after issue 32's points were done: a domain `endsWith`
//! that matched inside a label, cards spelled with other separators and digits, and hitl
//! approvals that covered calls differing only inside a redacted span.

mod common;

use std::sync::Arc;

use common::*;
use serde_json::json;
use toolgate::audit::{MemorySink, verify_events};
use toolgate::engine::{GovernanceEngine, RunContext};
use toolgate::policy::EffectType;

fn sd(detectors: &str) -> String {
    format!(r#"{{"kind": "sensitiveData", "target": "toolArg", "detectors": {detectors}}}"#)
}

fn engine_for(rules: &[(&str, String)]) -> GovernanceEngine {
    let refs: Vec<(&str, &str)> = rules.iter().map(|(a, b)| (*a, b.as_str())).collect();
    engine(&probes("", &refs), &clock())
}

async fn blocks(engine: &GovernanceEngine, probe: &str, text: &str) -> bool {
    let run = engine.start_run(RunContext::new("r", "a"));
    let d = run
        .before_tool(call("c", probe, json!({"body": text})))
        .await;
    d.effect == EffectType::Block
}

async fn wrong(engine: &GovernanceEngine, cases: &[(&str, &str, bool)]) -> Vec<String> {
    let mut out = Vec::new();
    for (probe, text, want) in cases {
        if blocks(engine, probe, text).await != *want {
            out.push(format!(
                "{probe} {} {text:?}",
                if *want { "missed" } else { "wrongly matched" }
            ));
        }
    }
    out
}

#[tokio::test]
async fn domain_ends_with_matches_on_a_label_boundary() {
    let sub = |d: &str, v: &str| {
        sd(&format!(
            r#"[{{"detector": "{d}", "subCondition": {{"check": "domain", "op": "endsWith", "value": "{v}"}}}}]"#
        ))
    };
    let engine = engine_for(&[
        ("url_corp", sub("url", "corp.example")),
        ("url_subs", sub("url", ".corp.example")),
        ("mail_corp", sub("email_domain", "corp.example")),
    ]);
    let cases = [
        ("url_corp", "https://corp.example/x", true),
        ("url_corp", "https://a.corp.example/x", true),
        ("url_corp", "https://A.CORP.example/x", true),
        ("url_corp", "https://evilcorp.example/x", false),
        ("url_corp", "https://notcorp.example/x", false),
        ("url_corp", "https://corp.example.evil.example/x", false),
        ("url_subs", "https://a.corp.example/x", true),
        ("url_subs", "https://corp.example/x", false),
        ("url_subs", "https://evilcorp.example/x", false),
        ("mail_corp", "ops@corp.example", true),
        ("mail_corp", "ops@eu.corp.example", true),
        ("mail_corp", "ops@evilcorp.example", false),
    ];
    let w = wrong(&engine, &cases).await;
    assert!(w.is_empty(), "{w:#?}");
}

#[tokio::test]
async fn cards_with_other_separators_and_digits_are_found() {
    let engine = engine_for(&[("card", sd(r#"[{"detector": "credit_card"}]"#))]);
    let mut cases = Vec::new();
    for hit in [
        "pay 4111.1111.1111.1111 now",
        "4111_1111_1111_1111",
        "4111\t1111\t1111\t1111",
        "card 4111\u{a0}1111\u{a0}1111\u{a0}1111",
        "4111\u{2009}1111\u{2009}1111\u{2009}1111",
        "4111\u{202f}1111\u{202f}1111\u{202f}1111",
        "4111\u{3000}1111\u{3000}1111\u{3000}1111",
        "4111\u{2010}1111\u{2011}1111\u{2012}1111",
        "4111\u{2013}1111\u{2014}1111\u{2015}1111",
        "4111\u{2212}1111\u{2212}1111\u{2212}1111",
        "4111\u{200b}1111\u{200b}1111\u{200b}1111",
        "4111\u{ad}1111\u{ad}1111\u{ad}1111",
        "\u{ff14}\u{ff11}\u{ff11}\u{ff11} \u{ff11}\u{ff11}\u{ff11}\u{ff11} 1111 1111",
        "\u{664}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}\u{661}",
        "5555.5555.5555.4444 exp 12.28",
        "3782.822463.10005",
    ] {
        cases.push(("card", hit, true));
    }
    for miss in [
        // Floats, version strings, bullets, a failed Luhn check: no card.
        "0.4532015112830366",
        "[0.4532015112830366, 0.7312]",
        "4532015112830366.5",
        "4111.1111.1111.1112",
        "4111\u{2022}1111\u{2022}1111\u{2022}1111",
        "v1.2.3.4 build 2026.11.28",
        "4111..1111..1111..1111",
    ] {
        cases.push(("card", miss, false));
    }
    let w = wrong(&engine, &cases).await;
    assert!(w.is_empty(), "{w:#?}");
}

/// A hitl rule on `pay` under a policy whose card rule redacts.
fn pay_review_policy() -> String {
    format!(
        r#"[{{"id": "cards", "name": "cards", "priority": 2, "enabled": true, "mode": "shadow",
              "selector": {{"phase": "tool.before", "tool": {{"name": "*"}}}},
              "condition": {}, "effect": {{"type": "block"}}}},
            {{"id": "review", "name": "review", "priority": 1, "enabled": true,
              "selector": {{"phase": "tool.before", "tool": {{"name": "pay"}}}},
              "condition": {{"kind": "toolName", "op": "eq", "value": "pay"}},
              "effect": {{"type": "hitl"}}}}]"#,
        sd(r#"[{"detector": "credit_card"}]"#)
    )
}

fn trail_text(sink: &MemorySink) -> String {
    sink.events()
        .iter()
        .map(|e| serde_json::to_string(&**e).unwrap() + "\n")
        .collect()
}

#[tokio::test]
async fn an_approval_does_not_cover_a_call_differing_only_in_a_redacted_span() {
    let sink = Arc::new(MemorySink::new());
    let engine = builder(&pay_review_policy(), &clock())
        .audit_sink(sink.clone())
        .build()
        .unwrap();
    let card_a = "4111 1111 1111 1111";
    let card_b = "5555 5555 5555 4444";
    let args = |card: &str| json!({"card": card, "amount": 10});
    let run = engine.start_run(RunContext::new("r1", "a"));
    let d = run.before_tool(call("c1", "pay", args(card_a))).await;
    assert_eq!(d.effect, EffectType::Hitl, "{d:?}");
    let review = d.hitl.as_ref().unwrap().review_id.clone();
    let fp_a = d.hitl.as_ref().unwrap().fingerprint.clone();
    engine.reviews().approve(&review).unwrap();
    // The approved call again: allowed.
    let run = engine.start_run(RunContext::new("r2", "a"));
    let d = run.before_tool(call("c2", "pay", args(card_a))).await;
    assert_eq!(d.effect, EffectType::Allow, "{d:?}");
    // Another card, the same call up to the redacted span: a review of its own.
    let run = engine.start_run(RunContext::new("r3", "a"));
    let d = run.before_tool(call("c3", "pay", args(card_b))).await;
    assert_eq!(d.effect, EffectType::Hitl, "{d:?}");
    let fp_b = d.hitl.as_ref().unwrap().fingerprint.clone();
    assert_ne!(fp_a, fp_b);
    assert_ne!(d.hitl.as_ref().unwrap().review_id, review);
    // The review store and the trail hold neither card, and the fingerprint is neither the
    // plain one of the real arguments nor that of the redacted ones.
    for r in engine.reviews().list() {
        let text = serde_json::to_string(&r.args).unwrap();
        assert!(!text.contains("4111") && !text.contains("5555"), "{text}");
    }
    engine.flush().await.unwrap();
    let text = trail_text(&sink);
    for card in [card_a, card_b, "4111111111111111", "5555555555554444"] {
        assert!(!text.contains(card), "{text}");
    }
    assert!(text.contains(&fp_a));
    let real = toolgate::engine::fingerprint("a", "review", "pay", &args(card_a), None);
    let redacted = toolgate::engine::fingerprint(
        "a",
        "review",
        "pay",
        &json!({"card": "[redacted:credit_card]", "amount": 10}),
        None,
    );
    assert_ne!(fp_a, real);
    assert_ne!(fp_a, redacted);
    let events = sink.events();
    let report = verify_events(events.iter().map(|e| &**e));
    assert!(report.breaks.is_empty(), "{:?}", report.breaks);
}

#[tokio::test]
async fn engines_sharing_a_fingerprint_key_share_reviews_of_redacted_calls() {
    let store: Arc<dyn toolgate::engine::ReviewStore> =
        Arc::new(toolgate::engine::MemoryReviewStore::new());
    let make = |key: Option<&[u8]>| {
        let mut b = builder(&pay_review_policy(), &clock()).review_store(store.clone());
        if let Some(k) = key {
            b = b.hitl_fingerprint_key(k);
        }
        b.build().unwrap()
    };
    let key = [7u8; 32];
    let (one, two, other) = (make(Some(&key)), make(Some(&key)), make(None));
    let args = json!({"card": "4111 1111 1111 1111"});
    let d = one
        .start_run(RunContext::new("r1", "a"))
        .before_tool(call("c1", "pay", args.clone()))
        .await;
    one.reviews()
        .approve(&d.hitl.as_ref().unwrap().review_id)
        .unwrap();
    let d = two
        .start_run(RunContext::new("r2", "a"))
        .before_tool(call("c2", "pay", args.clone()))
        .await;
    assert_eq!(d.effect, EffectType::Allow, "{d:?}");
    // An engine with another key asks again (never a wrong approval).
    let d = other
        .start_run(RunContext::new("r3", "a"))
        .before_tool(call("c3", "pay", args))
        .await;
    assert_eq!(d.effect, EffectType::Hitl, "{d:?}");
}
