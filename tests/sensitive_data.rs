//! `sensitiveData`: every detector matches its data and not the near misses; scan-all over
//! nested arrays and objects, a path, anyOf/allOf, sub-conditions; detections are named (never
//! quoted) in `evaluated` and redacted in the audit trail; big inputs are decided in bounded
//! time; it never panics and allocates little.

mod common;
#[path = "common/counting_alloc.rs"]
mod counting_alloc;

use std::sync::Arc;

use common::*;
use proptest::prelude::*;
use serde_json::{Value, json};
use toolgate::audit::{EventKind, MemorySink, verify_events};
use toolgate::engine::{GovernanceEngine, RunContext, ToolOutcome};
use toolgate::policy::EffectType;

fn sd(detectors: &str) -> String {
    format!(r#"{{"kind": "sensitiveData", "target": "toolArg", "detectors": {detectors}}}"#)
}

fn one(d: &str) -> String {
    sd(&format!(r#"[{{"detector": "{d}"}}]"#))
}

const DETECTORS: [&str; 11] = [
    "email",
    "email_domain",
    "phone",
    "credit_card",
    "iban",
    "uk_nino",
    "ip_address",
    "url",
    "jwt",
    "private_key",
    "secret_key",
];

/// An engine with one probe rule per detector (rule id = detector name, tool = same).
fn detector_engine() -> GovernanceEngine {
    let rules: Vec<(String, String)> = DETECTORS
        .iter()
        .map(|d| (d.to_string(), one(d)))
        .chain([
            (
                "email_corp".to_string(),
                sd(r#"[{"detector": "email_domain", "subCondition": {"check": "domain", "op": "endsWith", "value": "example.com"}}]"#),
            ),
            (
                "email_not_gov".to_string(),
                sd(r#"[{"detector": "email_domain", "subCondition": {"check": "tld", "op": "neq", "value": "gov"}}]"#),
            ),
            (
                "url_http".to_string(),
                sd(r#"[{"detector": "url", "subCondition": {"check": "scheme", "op": "eq", "value": "HTTP"}}]"#),
            ),
            (
                "url_hosts".to_string(),
                sd(r#"[{"detector": "url", "subCondition": {"check": "domain", "op": "in", "value": ["pastebin.com", "evil.io"]}}]"#),
            ),
        ])
        .collect();
    let refs: Vec<(&str, &str)> = rules
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    engine(&probes("", &refs), &clock())
}

async fn detects(engine: &GovernanceEngine, probe: &str, text: &str) -> bool {
    let run = engine.start_run(RunContext::new("r", "a"));
    let d = run
        .before_tool(call("c", probe, json!({"body": text})))
        .await;
    d.effect == EffectType::Block
}

/// (detector, texts it must detect, near misses it must not).
fn cases() -> Vec<(&'static str, Vec<&'static str>, Vec<&'static str>)> {
    vec![
        (
            "email",
            vec!["mail jane.doe+x@example.co.uk now", "<a@b.io>"],
            vec![
                "jane.doe@example",
                "@example.com",
                "a@b.c1",
                "user at example dot com",
            ],
        ),
        (
            "email_domain",
            vec!["ops@corp.example.org"],
            vec!["ops@localhost"],
        ),
        (
            "email_corp",
            vec!["x@mail.EXAMPLE.com"],
            vec!["x@example.org", "x@example.com.evil.io"],
        ),
        ("email_not_gov", vec!["x@example.com"], vec!["x@irs.gov"]),
        (
            "phone",
            vec![
                "+44 20 7946 0958",
                "call +14155552671",
                "(415) 555-2671",
                "415-555-2671",
                "020 7946 0958",
            ],
            vec![
                "order 2024-01-15 10:30",
                "12345678901",
                "ref 415-555-26711",
                "v1.2.3.4",
                "+0 20 7946 0958",
                "415-555.2671",
            ],
        ),
        (
            "credit_card",
            vec![
                "card 4111 1111 1111 1111 exp 12/29",
                "4111-1111-1111-1111",
                "5555555555554444",
                "amex 378282246310005",
                "6011111111111117",
                "2223003122003222",
            ],
            vec![
                "4111 1111 1111 1112",
                "order 1234567812345678",
                "4111111111111111111111",
                "x4111111111111111",
                "3530111333300000",
                "4111111111111111.5",
            ],
        ),
        (
            "iban",
            vec![
                "GB82 WEST 1234 5698 7654 32",
                "iban: DE89370400440532013000.",
                "gb82 west 1234 5698 7654 32",
            ],
            vec![
                "GB82 WEST 1234 5698 7654 33",
                "DE89370400440532013001",
                "XX89370400440532013000",
                "GB82 WEST 1234 5698 7654 3",
            ],
        ),
        (
            "uk_nino",
            vec!["NI AB 12 34 56 C", "AB123456D"],
            vec![
                "BG 12 34 56 C",
                "AB123456E",
                "QQ123456C",
                "AB1234567C",
                "XAB123456C",
            ],
        ),
        (
            "ip_address",
            vec![
                "from 10.0.0.1:",
                "host 2001:db8::1 up",
                "::1",
                "fe80::1ff:fe23:4567:890a",
            ],
            vec![
                "999.1.1.1",
                "1.2.3",
                "1.2.3.4.5",
                "01.2.3.4",
                "at 12:30:45",
                "std::fmt",
                "::",
            ],
        ),
        (
            "url",
            vec!["see https://docs.example.com/a?b=1", "HTTP://intranet/x"],
            vec![
                "ftp://files.example.com",
                "xhttps://a.com",
                "https://",
                "example.com/path",
            ],
        ),
        (
            "url_http",
            vec!["http://a.example.com"],
            vec!["https://a.example.com"],
        ),
        (
            "url_hosts",
            vec!["paste to https://PASTEBIN.com/raw/1"],
            vec!["https://pastebin.com.evil.net/"],
        ),
        (
            "jwt",
            vec![
                "Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk",
                "eyJhbGciOiJub25lIn0.eyJ4IjoxfQ.",
            ],
            vec![
                "eyJmb28iOiJiYXIifQ.eyJ4IjoxfQ.sig",
                "version 1.2.3",
                "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJ4IjoxfQ",
                "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9..sig",
            ],
        ),
        (
            "private_key",
            vec![
                "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx8Gm1Vv0Zz+abc\n",
                "-----BEGIN OPENSSH PRIVATE KEY-----\r\nb3BlbnNzaC1rZXktdjEAAAAA",
                "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----",
            ],
            vec![
                "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A\n",
                "-----BEGIN RSA PRIVATE KEY-----\n...\n",
                "the private key goes in -----BEGIN PRIVATE KEY-----",
            ],
        ),
        (
            "secret_key",
            vec![
                "key=sk_live_4eC39HqLyjWDarjtT1zdp7dc",
                "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",
                "AKIAIOSFODNN7EXAMPLE",
                "token Zx9kQ2mV7pL4rT8wN3bY6cH1jF5dS0aG",
                "sk-proj-AbCdEf0123456789xyzXYZ",
            ],
            vec![
                "a task-based approach with sk-learn",
                "id 550e8400-e29b-41d4-a716-446655440000",
                "sha1 da39a3ee5e6b4b0d3255bfef95601890afd80709",
                "customer_order_2024_11_25_final",
                "release-2024-11-25-build-1234567",
                "sk_live_short",
                "AKIAshort",
            ],
        ),
    ]
}

#[tokio::test]
async fn every_detector_matches_its_data_and_not_the_near_misses() {
    let engine = detector_engine();
    let mut wrong = Vec::new();
    for (probe, hits, misses) in cases() {
        for t in hits {
            if !detects(&engine, probe, t).await {
                wrong.push(format!("{probe} missed {t:?}"));
            }
        }
        for t in misses {
            if detects(&engine, probe, t).await {
                wrong.push(format!("{probe} wrongly matched {t:?}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

const CARD: &str = "4111 1111 1111 1111";
const KEY: &str = "sk_live_4eC39HqLyjWDarjtT1zdp7dc";

fn card_or_secret(extra: &str) -> String {
    rule(
        "no-leaks",
        "tool.before",
        r#"{"name": "send_*"}"#,
        &sd(&format!(
            r#"[{{"detector": "credit_card"}}, {{"detector": "secret_key"}}]{extra}"#
        )),
        "block",
    )
}

#[tokio::test]
async fn scan_all_walks_nested_arrays_and_objects_and_names_paths_not_text() {
    let engine = engine(&card_or_secret(""), &clock());
    let run = engine.start_run(RunContext::new("r", "a"));
    let args = json!({
        "to": "a@b.com",
        "attachments": [{"name": "x", "notes": ["fine", {"deep": format!("pay with {CARD}")}]}],
        "headers": {"auth": KEY},
        CARD: "keys are scanned too (issue 32)",
        "n": 4111111111111111u64,
    });
    let d = run.before_tool(call("c", "send_email", args)).await;
    assert_eq!(d.effect, EffectType::Block);
    let text = serde_json::to_string(&d).unwrap();
    assert!(!text.contains("4111") && !text.contains("4eC39"), "{text}");
    let detected = &serde_json::to_value(&d).unwrap()["evaluated"][0]["detected"];
    assert_eq!(
        detected,
        &json!([
            {"detector": "credit_card", "path": "[redacted:credit_card]"},
            {"detector": "credit_card", "path": "attachments.0.notes.1.deep"},
            {"detector": "secret_key", "path": "headers.auth"},
            {"detector": "credit_card", "path": "n"},
        ])
    );
    let d = run
        .before_tool(call(
            "c2",
            "send_email",
            json!({"body": ["nothing", {"here": 1}]}),
        ))
        .await;
    assert_eq!(d.effect, EffectType::Allow);
    assert!(d.evaluated[0].detected.is_none());
}

#[tokio::test]
async fn a_path_scans_only_that_value_and_an_absent_path_is_false() {
    let policy = rule(
        "body-card",
        "tool.before",
        r#"{"name": "*"}"#,
        r#"{"kind": "sensitiveData", "target": "toolArg", "path": "mail.body", "detectors": [{"detector": "credit_card"}]}"#,
        "block",
    );
    let engine = engine(&policy, &clock());
    let run = engine.start_run(RunContext::new("r", "a"));
    let cases = [
        (json!({"mail": {"body": CARD}}), EffectType::Block),
        (json!({"mail": {"body": ["ok", [CARD]]}}), EffectType::Block),
        (json!({"mail": {"subject": CARD}}), EffectType::Allow),
        (json!({"other": CARD}), EffectType::Allow),
        (json!({}), EffectType::Allow),
    ];
    for (i, (args, want)) in cases.into_iter().enumerate() {
        let d = run
            .before_tool(call(&format!("c{i}"), "t", args.clone()))
            .await;
        assert_eq!(d.effect, want, "{args}");
        assert!(d.evaluated[0].missing.is_empty(), "never missing data");
    }
}

#[tokio::test]
async fn all_of_needs_every_detector_somewhere_any_of_one() {
    let engine = engine(&card_or_secret(r#", "op": "allOf""#), &clock());
    let run = engine.start_run(RunContext::new("r", "a"));
    let only_card = run
        .before_tool(call("c1", "send_x", json!({"a": CARD})))
        .await;
    assert_eq!(only_card.effect, EffectType::Allow);
    let both_apart = run
        .before_tool(call("c2", "send_x", json!({"a": CARD, "b": [KEY]})))
        .await;
    assert_eq!(both_apart.effect, EffectType::Block);
    let engine = GovernanceEngine::builder()
        .policy(policy(&card_or_secret(r#", "op": "anyOf""#)))
        .build()
        .unwrap();
    let run = engine.start_run(RunContext::new("r", "a"));
    let d = run
        .before_tool(call("c1", "send_x", json!({"a": KEY})))
        .await;
    assert_eq!(d.effect, EffectType::Block);
}

fn audited(policy_json: &str) -> (GovernanceEngine, Arc<MemorySink>) {
    let sink = Arc::new(MemorySink::new());
    let engine = GovernanceEngine::builder()
        .policy(policy(policy_json))
        .audit_sink(sink.clone())
        .build()
        .unwrap();
    (engine, sink)
}

async fn leak_and_echo(engine: &GovernanceEngine) {
    let run = engine.start_run(RunContext::new("r", "a"));
    let args = json!({"to": "x@y.com", "body": format!("card {CARD}"), "k": [KEY], "n": 3});
    // A shadow-free allow rule in play: the call proceeds, its output echoes the secret.
    let d = run.before_tool(call("c1", "send_email", args)).await;
    assert!(d.is_allowed());
    run.after_tool(
        "c1",
        ToolOutcome::ok(
            json!({"echo": format!("sent {CARD}"), "id": 7}),
            std::time::Duration::from_millis(3),
        ),
    )
    .await;
    run.end("success", None).await;
}

fn shadow(redact: &str) -> String {
    format!(
        r#"{{"policy": {{"name": "p", "mode": "shadow"{redact}}}, "rules": [{{"id": "no-leaks", "name": "no leaks",
          "priority": 1, "enabled": true, "selector": {{"phase": "tool.before", "tool": {{"name": "send_*"}}}},
          "condition": {}, "effect": {{"type": "block"}}}}]}}"#,
        sd(r#"[{"detector": "credit_card"}, {"detector": "secret_key"}]"#)
    )
}

#[tokio::test]
async fn detected_strings_are_redacted_in_the_trail_which_still_verifies() {
    let (engine, sink) = audited(&shadow(""));
    leak_and_echo(&engine).await;
    let events = sink.events();
    let report = verify_events(events.iter().map(|e| &**e));
    assert!(report.breaks.is_empty(), "{:?}", report.breaks);
    let all: String = events
        .iter()
        .map(|e| serde_json::to_string(&**e).unwrap())
        .collect();
    assert!(!all.contains("4111") && !all.contains("4eC39"), "{all}");
    let decision = events
        .iter()
        .find(|e| e.kind() == EventKind::ToolDecision)
        .unwrap();
    assert_eq!(
        decision.body()["args"],
        json!({"to": "x@y.com", "body": "card [redacted:credit_card]", "k": ["[redacted:secret_key]"], "n": 3})
    );
    let result = events
        .iter()
        .find(|e| e.kind() == EventKind::ToolResult)
        .unwrap();
    assert_eq!(
        result.body()["output"],
        json!({"echo": "sent [redacted:credit_card]", "id": 7})
    );
}

#[tokio::test]
async fn redact_detected_false_keeps_the_text() {
    let (engine, sink) = audited(&shadow(r#", "redactDetected": false"#));
    leak_and_echo(&engine).await;
    let all: String = sink
        .events()
        .iter()
        .map(|e| serde_json::to_string(&**e).unwrap())
        .collect();
    assert!(all.contains(CARD) && all.contains(KEY));
}

#[tokio::test]
async fn a_five_megabyte_argument_is_decided_in_bounded_time() {
    let engine = engine(&card_or_secret(""), &clock());
    let run = engine.start_run(RunContext::new("r", "a"));
    // Worst cases for the scanners: long digit runs, many token characters, '@' and ':'.
    let mut big = String::with_capacity(5 << 20);
    let unit = "4111 1111 1111 1112 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1 @@@ ::: -----BEGIN ";
    while big.len() < 5 << 20 {
        big.push_str(unit);
    }
    let started = std::time::Instant::now();
    let d = run
        .before_tool(call("c", "send_x", json!({"body": big})))
        .await;
    // Only the first MiB is scanned: the rest is missing data, which blocks (issue 32).
    assert_eq!(d.effect, EffectType::Block);
    assert!(d.evaluated[0].missing[0].contains("scan limit"), "{d:?}");
    let mut tail = "x".repeat((1 << 20) + 10);
    tail.push_str(CARD);
    let d = run
        .before_tool(call("c2", "send_x", json!({"body": tail})))
        .await;
    assert_eq!(d.effect, EffectType::Block);
    // A generous bound that a backtracking scanner (quadratic on this input) would miss.
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

fn all_detectors_policy() -> String {
    let entries: Vec<String> = DETECTORS
        .iter()
        .map(|d| format!(r#"{{"detector": "{d}"}}"#))
        .collect();
    rule(
        "all",
        "tool.before",
        r#"{"name": "*"}"#,
        &sd(&format!("[{}]", entries.join(","))),
        "block",
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn never_panics_and_allocates_a_small_multiple_of_its_input(
        s in "[ -~\\n\\u{e9}\\u{1F600}]{0,400}",
        frag in prop::sample::select(vec![
            "4111 1111 1111 1111", "@", "://", "+44 ", "eyJ", "-----BEGIN ", "::", "GB82 ",
            "sk_live_", ".", "(", "AB 12 ",
        ]),
        reps in 0usize..40,
    ) {
        let engine = GovernanceEngine::builder().policy(policy(&all_detectors_policy())).build().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let head: String = s.chars().take(3).collect();
        let mut text = s.clone();
        for _ in 0..reps { text.push_str(frag); text.push_str(&head); }
        let len = text.len();
        let args = json!({"a": text, "b": [s.clone(), {"c": frag}]});
        let run = engine.start_run(RunContext::new("r", "a"));
        // Warm up (the tool's profile is cached on its first decision).
        rt.block_on(run.before_tool(call("w", "t", args.clone())));
        let c = call("c", "t", args);
        let (d, bytes) = counting_alloc::allocated_by(|| rt.block_on(run.before_tool(c)));
        prop_assert!(matches!(d.effect, EffectType::Allow | EffectType::Block));
        // The scanners copy nothing: what is allocated is the decision's own bookkeeping.
        prop_assert!(bytes <= 2 * len + 64 * 1024, "{bytes} bytes for {len} bytes of input");
        let _: Value = serde_json::to_value(&d).unwrap();
    }
}
