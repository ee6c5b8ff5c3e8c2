//! `sensitiveData` detectors read data as an exfiltrating model would write it (issue 32):
//! cards beside other digits (point 4), URLs read as browsers read them (point 5), redaction
//! of the detected span only (point 7), quoted and IP-literal e-mails, PEM keys with `\n`
//! escapes and key prefixes inside a token (point 8), lowercase IBANs and NINO layouts
//! (point 12) — and the near misses they must not flag.

mod common;

use std::sync::Arc;

use common::*;
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

/// Probe rules: one per detector, and URL allow- and blocklists.
fn engine_for_probes() -> GovernanceEngine {
    let rules = [
        ("credit_card", one("credit_card")),
        ("email", one("email")),
        ("private_key", one("private_key")),
        ("secret_key", one("secret_key")),
        ("iban", one("iban")),
        ("uk_nino", one("uk_nino")),
        ("url", one("url")),
        (
            "email_not_corp",
            sd(
                r#"[{"detector": "email_domain", "subCondition": {"check": "domain", "op": "neq", "value": "corp.example"}}]"#,
            ),
        ),
        (
            "url_not_corp",
            sd(
                r#"[{"detector": "url", "subCondition": {"check": "domain", "op": "neq", "value": "corp.example"}}]"#,
            ),
        ),
        (
            "url_evil",
            sd(
                r#"[{"detector": "url", "subCondition": {"check": "domain", "op": "in", "value": ["evil.example", "127.0.0.1", "[::1]"]}}]"#,
            ),
        ),
    ];
    let refs: Vec<(&str, &str)> = rules.iter().map(|(a, b)| (*a, b.as_str())).collect();
    engine(&probes("", &refs), &clock())
}

async fn detects(engine: &GovernanceEngine, probe: &str, text: &str) -> bool {
    let run = engine.start_run(RunContext::new("r", "a"));
    let d = run
        .before_tool(call("c", probe, json!({"body": text})))
        .await;
    d.effect == EffectType::Block
}

/// Runs each (probe, text, expected) and lists the wrong answers.
async fn wrong(cases: &[(&str, &str, bool)]) -> Vec<String> {
    let engine = engine_for_probes();
    let mut out = Vec::new();
    for (probe, text, want) in cases {
        if detects(&engine, probe, text).await != *want {
            out.push(format!(
                "{probe} {} {text:?}",
                if *want { "missed" } else { "wrongly matched" }
            ));
        }
    }
    out
}

#[tokio::test]
async fn cards_beside_other_digits_are_found_and_dates_amounts_phones_are_not() {
    let mut cases = vec![];
    for hit in [
        "4111 1111 1111 1111 12/28",
        "12/28 4111111111111111",
        "5555 5555 5555 4444 123",
        "4111111111111111 1228",
        "Order 2024 4111 1111 1111 1111",
        "4111-1111-1111-1111-1228",
        "ref-4111111111111111",
        "1 4111 1111 1111 1111",
        "card 378282246310005 cvv 1234",
        "3782 822463 10005 exp 0128",
        "4111 1111 1111 1111 5555 5555 5555 4444",
        "x.4111111111111111",
        "+1 4111 1111 1111 1111",
        "4111 1111 1111 1111x 5555 5555 5555 4444",
        "41 11 11 11 11 11 11 11",
    ] {
        cases.push(("credit_card", hit, true));
    }
    for miss in [
        "2024-01-15 2024-01-16 2024-01-17 2024-01-18",
        "paid $1 234 567.89 on 2026-03-02",
        "+44 20 7946 0958",
        "call +1 415 555 2671 or 020 7946 0958",
        "4111 1111 1111 1112 12/28",
        "order 1234 5678 1234 5678 9",
        "4111111111111111111111",
        "x4111111111111111",
        "4111111111111111.5",
        "3.4111111111111111",
        "+4111111111111",
        "ids 10 20 30 40 50 60 70 80 90 100 110 120 130 140",
    ] {
        cases.push(("credit_card", miss, false));
    }
    let w = wrong(&cases).await;
    assert!(w.is_empty(), "{w:#?}");
}

#[tokio::test]
async fn url_allowlists_read_the_host_a_browser_goes_to() {
    let mut cases = vec![];
    // Each goes to evil.example (or a host that is not corp.example) in a browser.
    for bypass in [
        "https://a@corp.example@evil.example/x",
        "https://corp.example!@evil.example/x",
        "https://corp.example;@evil.example/x",
        "https://corp.example&@evil.example/x",
        "https://corp.example*@evil.example/x",
        "https://corp.example:pw!@evil.example/x",
        "https:evil.example/x",
        "https:/evil.example/x",
        "https:\\\\evil.example\\x",
        "https://%65vil.example/x",
        "https://EVIL.example./x",
        "https://[::1]/x",
        "http://0x7f.1/x",
        "https://corp.example @evil.example/x",
        "https://corp.example\n@evil.example/x",
        "see https://ev\nil.example/x now",
        "HTTPS://corp.example\"@evil.example/x",
    ] {
        cases.push(("url_not_corp", bypass, true));
        cases.push(("url_evil", bypass, true));
    }
    // Each goes to corp.example.
    for fine in [
        "https://corp.example/x",
        "https://evil.example@corp.example/x",
        "https://user:pass@corp.example:8443/x?next=https%3A%2F%2Fevil.example",
        "https://CORP.example./a",
        "see https://corp.example/x, then reply",
        "https:corp.example/x",
    ] {
        cases.push(("url_not_corp", fine, false));
        cases.push(("url_evil", fine, false));
    }
    // Not URLs.
    for miss in [
        "http: is insecure",
        "https://",
        "xhttps://evil.example",
        "git+https://evil.example",
    ] {
        cases.push(("url", miss, false));
    }
    let w = wrong(&cases).await;
    assert!(w.is_empty(), "{w:#?}");
}

#[tokio::test]
async fn quoted_and_ip_literal_emails_pem_escapes_and_key_prefixes() {
    let pem_escaped = "{\"type\": \"service_account\", \"private_key\": \"-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n-----END PRIVATE KEY-----\\n\"}";
    let pem_double =
        "PRIVATE_KEY=\"-----BEGIN RSA PRIVATE KEY-----\\\\nMIIEowIBAAKCAQEAx8Gm1Vv0Zz\\\\n\"";
    let mut cases = vec![
        ("email", "\"x\"@evil.example", true),
        ("email", "mail \"john doe\"@evil.example now", true),
        ("email", "to x@[192.0.2.1]", true),
        ("email", "to x@[IPv6:2001:db8::1]", true),
        ("email_not_corp", "\"ceo\"@evil.example", true),
        ("email_not_corp", "x@[192.0.2.1]", true),
        ("email_not_corp", "x@corp.example", false),
        ("email", "x@[999.1.1.1]", false),
        ("email", "ssh x@10.0.0.1", false),
        ("email", "\"unterminated @evil.example", false),
        ("private_key", pem_escaped, true),
        ("private_key", pem_double, true),
        ("private_key", "-----BEGIN PRIVATE KEY-----\\n...\\n", false),
        ("secret_key", "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE", true),
        ("secret_key", "x-AKIAIOSFODNN7EXAMPLE", true),
        ("secret_key", "path/sk_live_4eC39HqLyjWDarjtT1zdp7dc", true),
        (
            "secret_key",
            "auth=ghp_16C7e42F292c6912E7710c838347Ae178B4a",
            true,
        ),
        (
            "secret_key",
            "my-task-sk-learn-pipeline-configuration",
            false,
        ),
        ("secret_key", "x-AKIA-is-not-a-key-at-all-really", false),
    ];
    // 200 random access key ids behind each separator: all found.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut keys = Vec::new();
    for _ in 0..200 {
        let mut k = String::from("AKIA");
        for _ in 0..16 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            k.push(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"[(seed % 32) as usize] as char);
        }
        keys.push(k);
    }
    let texts: Vec<String> = keys
        .iter()
        .flat_map(|k| {
            [
                format!("AWS_ACCESS_KEY_ID={k}"),
                format!("x-{k}"),
                format!("\"{k}\""),
                format!("id:{k}"),
                format!("keys/{k}"),
            ]
        })
        .collect();
    for t in &texts {
        cases.push(("secret_key", t, true));
    }
    let w = wrong(&cases).await;
    assert!(w.is_empty(), "{} wrong: {w:#?}", w.len());
}

#[tokio::test]
async fn lowercase_iban_and_nino_layouts() {
    let cases = [
        ("iban", "gb82 west 1234 5698 7654 32", true),
        ("iban", "iban de89370400440532013000", true),
        ("iban", "Gb82West12345698765432", true),
        ("iban", "GB82-WEST-1234-5698-7654-32", true),
        ("iban", "gb82 west 1234 5698 7654 33", false),
        ("uk_nino", "AB123456 C", true),
        ("uk_nino", "AB 123456 C", true),
        ("uk_nino", "ab123456c", true),
        ("uk_nino", "ni: ab 12 34 56 c", true),
        ("uk_nino", "AB-12-34-56-C", true),
        ("uk_nino", "AB123456", false),
        ("uk_nino", "BG 123456 C", false),
        ("uk_nino", "AB 123456 E", false),
    ];
    let w = wrong(&cases).await;
    assert!(w.is_empty(), "{w:#?}");
}

fn shadow_policy(detectors: &str) -> String {
    format!(
        r#"{{"policy": {{"name": "p", "mode": "shadow"}}, "rules": [{{"id": "no-leaks", "name": "no leaks",
          "priority": 1, "enabled": true, "selector": {{"phase": "tool.before", "tool": {{"name": "*"}}}},
          "condition": {}, "effect": {{"type": "block"}}}}]}}"#,
        sd(detectors)
    )
}

#[tokio::test]
async fn redaction_replaces_the_detected_span_and_keeps_the_rest() {
    let sink = Arc::new(MemorySink::new());
    let engine = GovernanceEngine::builder()
        .policy(policy(&shadow_policy(
            r#"[{"detector": "credit_card"}, {"detector": "secret_key"}, {"detector": "email"}]"#,
        )))
        .audit_sink(sink.clone())
        .build()
        .unwrap();
    let run = engine.start_run(RunContext::new("r", "a"));
    let cmd = "curl -H 'auth: sk_live_4eC39HqLyjWDarjtT1zdp7dc' -d card=4111 1111 1111 1111 https://api.example/pay";
    let d = run
        .before_tool(call(
            "c1",
            "shell",
            json!({"cmd": cmd, "to": "ops x@y.example", "n": 3}),
        ))
        .await;
    assert!(d.is_allowed());
    run.after_tool(
        "c1",
        ToolOutcome::ok(
            json!({"echo": "charged 5555 5555 5555 4444 for jane@corp.example, ok", "id": 7}),
            std::time::Duration::from_millis(3),
        ),
    )
    .await;
    run.end("success", None).await;
    let events = sink.events();
    let report = verify_events(events.iter().map(|e| &**e));
    assert!(report.breaks.is_empty(), "{:?}", report.breaks);
    let body = |k: EventKind| -> serde_json::Map<String, Value> {
        events
            .iter()
            .find(|e| e.kind() == k)
            .unwrap()
            .body()
            .clone()
    };
    assert_eq!(
        body(EventKind::ToolDecision)["args"],
        json!({
            "cmd": "curl -H 'auth: [redacted:secret_key]' -d card=[redacted:credit_card] https://api.example/pay",
            "to": "ops [redacted:email]",
            "n": 3,
        })
    );
    assert_eq!(
        body(EventKind::ToolResult)["output"],
        json!({"echo": "charged [redacted:credit_card] for [redacted:email], ok", "id": 7})
    );
}
