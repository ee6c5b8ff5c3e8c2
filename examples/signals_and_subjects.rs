//! Signals and subjects: rules that ask your code for facts the tool call does not carry.
//!
//! - A **subject extractor** (registered for every tool) reads the customer id from the call's
//!   arguments and reports it as a `customer` subject in the `crm_contact_id` id system.
//! - A **signal provider** `crm.isDifficultCustomer` (async, here a fake CRM lookup) answers
//!   whether a customer has an open complaint.
//!
//! The inline policy uses both: PII tools need an identified customer (`requireSubject`), and
//! goodwill credits are refused for difficult customers (a `signal` whose `customerId` argument
//! is bound to the extracted subject). When the CRM cannot answer, or the call names no
//! customer id (the binding resolves to nothing), the condition-level
//! `onMissing: "block"` refuses the credit.
//!
//! ```sh
//! cargo run --example signals_and_subjects
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use toolgate::engine::{
    Decision, GovernanceEngine, ManualClock, RunContext, SubjectInput, SubjectRef, ToolCall,
};
use toolgate::policy::parse_policy;

const POLICY: &str = r#"{
  "policy": { "name": "support-credits", "combine": "most_severe_wins", "onMissingDefault": "allow" },
  "rules": [
    {
      "id": "pii-needs-identified-customer",
      "name": "PII tools need an identified customer",
      "priority": 100,
      "enabled": true,
      "selector": { "phase": "tool.before", "tool": { "tagsAny": ["pii"] } },
      "condition": { "kind": "not", "not": { "kind": "requireSubject", "subjectType": "customer", "idSystem": "crm_contact_id" } },
      "effect": { "type": "block", "reason": "PII access needs a customer identified by CRM contact id." }
    },
    {
      "id": "no-credit-for-difficult-customers",
      "name": "No goodwill credits for customers with an open complaint",
      "priority": 90,
      "enabled": true,
      "selector": { "phase": "tool.before", "tool": { "name": "issue_credit" } },
      "condition": {
        "kind": "signal",
        "key": "crm.isDifficultCustomer",
        "args": {
          "customerId": { "from": "subject", "subjectType": "customer", "field": "id" },
          "channel": { "from": "const", "value": "chat" }
        },
        "op": "eq",
        "value": true,
        "onMissing": "block"
      },
      "effect": { "type": "block", "reason": "Credits for customers with an open complaint, or whom the CRM cannot vouch for, go through a team lead." }
    }
  ]
}"#;

/// A fake CRM: customer id -> has an open complaint.
fn crm() -> HashMap<&'static str, bool> {
    HashMap::from([("C-1001", false), ("C-2002", true)])
}

fn print_decision(d: &Decision) {
    println!(
        "     effect={} code={} rule={} reason={}",
        d.effect.as_str(),
        d.code,
        d.rule_id.as_deref().unwrap_or("-"),
        d.reason
            .as_deref()
            .map_or("-".to_string(), |r| format!("\"{r}\""))
    );
    for e in &d.evaluated {
        let missing = if e.missing.is_empty() {
            String::new()
        } else {
            format!(" missing={:?}", e.missing)
        };
        println!(
            "     evaluated: {} triggered={}{missing}",
            e.rule_id, e.triggered
        );
    }
    for s in &d.signals {
        // The provider's duration (`duration_us`) is left out to keep the output deterministic.
        let outcome = match (&s.value, &s.error) {
            (Some(v), _) => format!("value={v}"),
            (_, Some(e)) => format!("error=\"{e}\""),
            _ => "no value".to_string(),
        };
        println!("     signal: {} args={} {outcome}", s.key, s.args);
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let clock = ManualClock::new("2026-01-05T15:00:00Z".parse().expect("valid time"));
    let engine = GovernanceEngine::builder()
        .policy(parse_policy(POLICY, None).expect("the policy parses"))
        .clock(Arc::new(clock))
        .signal_timeout(Duration::from_millis(500))
        .build()
        .expect("the policy compiles");

    // Signal provider: an async CRM lookup. An `Err` is missing data for the rule.
    let directory = Arc::new(crm());
    engine.register_signal(
        "crm.isDifficultCustomer",
        move |args: Map<String, Value>| {
            let directory = directory.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(2)).await; // the CRM is remote
                let id = args
                    .get("customerId")
                    .and_then(Value::as_str)
                    .ok_or("no customerId")?;
                match directory.get(id) {
                    Some(flag) => Ok(json!(flag)),
                    None => Err(format!("unknown customer {id}")),
                }
            }
        },
    );

    // Subject extractor: the customer a call is about, from its `customerId` argument. Calls
    // that only name a customer by e-mail address yield no subject.
    engine
        .register_subject_extractor("*", |input: SubjectInput| async move {
            Ok(input
                .args
                .get("customerId")
                .and_then(Value::as_str)
                .map(|id| SubjectRef {
                    subject_type: "customer".to_string(),
                    value: id.to_string(),
                    role: Some("primary".to_string()),
                    id_system: Some("crm_contact_id".to_string()),
                })
                .into_iter()
                .collect())
        })
        .expect("a valid glob");

    let run = engine.start_run(RunContext::new("run-1", "support-bot"));
    let calls = [
        (
            "crm_get_customer",
            vec!["crm", "pii"],
            json!({"customerId": "C-1001"}),
        ),
        (
            "crm_get_customer",
            vec!["crm", "pii"],
            json!({"email": "ann@example.com"}),
        ),
        (
            "issue_credit",
            vec!["billing"],
            json!({"customerId": "C-1001", "amountUsd": 20}),
        ),
        (
            "issue_credit",
            vec!["billing"],
            json!({"customerId": "C-2002", "amountUsd": 20}),
        ),
        (
            "issue_credit",
            vec!["billing"],
            json!({"customerId": "C-9999", "amountUsd": 20}),
        ),
        (
            "issue_credit",
            vec!["billing"],
            json!({"email": "ann@example.com", "amountUsd": 20}),
        ),
    ];
    for (i, (tool, tags, args)) in calls.into_iter().enumerate() {
        println!("[{}] {tool} {args}", i + 1);
        let call = ToolCall::new(format!("call-{}", i + 1), tool, args).with_tags(tags);
        let d = run.before_tool(call).await;
        print_decision(&d);
    }
    run.end("success", None).await;
}
