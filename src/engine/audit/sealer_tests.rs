//! The typed path (straight to canonical text) writes the same bytes as the JSON path.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use serde::Serialize;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::{Body, seal_body};
use crate::audit::event::ser::to_canonical;
use crate::audit::{
    AuditEvent, EventKind, RedactAction, RedactionConfig, RedactionRule, Redactor, RunChain,
    RunSigner, canonical_json,
};
use crate::engine::audit::body::CallRecord;
use crate::engine::audit::body::RunEndedBody;
use crate::engine::decide::call::RunContext;
use crate::engine::decide::call::SubjectRef;
use crate::engine::decide::decision::{
    Decision, DecisionCode, Evaluated, EvaluatedRule, HitlInfo, ReviewStatus, SignalRecord,
};
use crate::policy::{EffectType, InbuiltMetric, Phase};

fn ts(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .unwrap()
}

/// Numbers and strings that stress the canonical form.
fn tricky_args(i: usize) -> Value {
    json!({
        "big": 1e300, "negZero": -0.0, "tiny": 1e-7, "over53": 9_007_199_254_740_993u64,
        "max": u64::MAX, "min": i64::MIN, "denormal": 5e-324, "tenth": 0.1, "int": 2.0,
        "e21": 1e21, "neg": -2.5e-3,
        "text": format!("q\"\\\n\t\r\u{8}\u{c}\u{1}\u{1f}/é\u{2028}😀 {i}"),
        "nested": {"z": [1, 2.5, null, true, {"B": 1, "a": "x"}], "é": "", "A": false},
        "keys": {"\u{1}": 1, "\"": 2, "zz": 3, "Z": 4, "é": 5, "e": 6},
    })
}

fn decisions() -> Vec<Decision> {
    let mut allow = Decision::simple(
        Phase::Before,
        EffectType::Allow,
        DecisionCode::Allowed,
        None,
    );
    allow.latency_ns = 1234;
    let mut block = Decision::simple(
        Phase::Before,
        EffectType::Block,
        DecisionCode::BlockedRule,
        Some(Arc::from("refunds over $500 need a \"manager\"\n— ok? ✓")),
    );
    block.rule_id = Some(Arc::from("refund-cap"));
    block.policy_id = Some(Arc::from("p-1"));
    block.evaluated = Evaluated::from(vec![
        EvaluatedRule {
            rule_id: Arc::from("refund-cap"),
            triggered: true,
            effect: EffectType::Block,
            shadow: false,
            missing: Vec::new(),
            error: None,
            detected: Some(Box::new([crate::engine::decide::decision::Detection {
                detector: crate::policy::Detector::CreditCard,
                path: "card.\"no\"".into(),
                segs: Vec::new(),
                redact: true,
                in_output: false,
            }])),
            detected_more: 3,
        },
        EvaluatedRule {
            rule_id: Arc::from("shadowed"),
            triggered: false,
            effect: EffectType::Hitl,
            shadow: true,
            missing: vec!["signal:risk".into()],
            error: Some("timeout\u{0}".into()),
            detected: None,
            detected_more: 0,
        },
    ]);
    block.signals = vec![SignalRecord {
        key: Arc::from("risk"),
        args: tricky_args(7),
        value: Some(json!(0.875)),
        error: None,
        duration_us: 17,
    }];
    block.shadow = true;
    block.shadow_effect = Some(EffectType::Hitl);
    block.abort_run = true;
    block.latency_ns = u64::MAX;
    block.error = Some("é".into());
    let mut hitl = Decision::simple(
        Phase::Before,
        EffectType::Hitl,
        DecisionCode::BlockedHitlRequested,
        Some(Arc::from("")),
    );
    hitl.hitl = Some(HitlInfo {
        review_id: "rv-1".into(),
        status: ReviewStatus::Pending,
        fingerprint: "ab".repeat(32),
    });
    vec![allow, block, hitl]
}

fn subjects(i: usize) -> Vec<SubjectRef> {
    (0..i % 3)
        .map(|k| SubjectRef {
            subject_type: "customer".into(),
            value: format!("C-{k}\u{7f}"),
            role: (k == 1).then(|| "primary".into()),
            id_system: (k == 2).then(|| "crm".into()),
        })
        .collect()
}

fn record(i: usize) -> Arc<CallRecord> {
    Arc::new(CallRecord {
        id: format!("c{i}\u{1}"),
        name: if i.is_multiple_of(2) {
            "issue_refund".into()
        } else {
            "kb\"search".into()
        },
        tags: (0..i % 3).map(|k| format!("tag{k}é")).collect(),
        args: if i % 4 == 3 {
            Value::Null
        } else {
            tricky_args(i)
        },
        redaction: None,
    })
}

fn before(i: usize, decision: Decision) -> Body {
    Body::BeforeDecision {
        call: record(i),
        subjects: subjects(i),
        decision,
    }
}

fn result(i: usize) -> Body {
    let all = [
        (InbuiltMetric::BytesIn, 38.0),
        (InbuiltMetric::BytesOut, 1e21),
        (InbuiltMetric::DurationMs, 2.5),
        (InbuiltMetric::RecordsIn, 0.0),
        (InbuiltMetric::RecordsOut, 7.0),
    ];
    Body::ToolResult {
        call: record(i),
        duration_ms: [3.0, 0.125, 1e-7, 12345.678][i % 4],
        metrics: all.iter().copied().skip(i % 3).collect(),
        outcome: if i % 5 == 4 {
            Err(format!("failed \"{i}\"\n"))
        } else {
            Ok(tricky_args(i + 1))
        },
        evaluation: (i % 2 == 1).then(|| json!({"passed": true, "score": 0.5, "z": [i]})),
    }
}

fn ended(i: usize) -> Body {
    Body::RunEnded(RunEndedBody {
        status: ["success", "dropped", "err\"or\n"][i % 3].into(),
        calls: i as u64,
        allowed: u64::MAX,
        blocked: 0,
        hitl: 3,
        tokens_in: 1_000_000,
        tokens_out: 7,
        cost_usd: [0.0, 0.125, 1e-7, 12.5][i % 4],
        duration_ms: [0, -5, 1_234_567, i64::MIN][i % 4],
        aborted: i % 2 == 1,
        final_response: (i % 3 == 1).then(|| format!("done é {i}\u{1}")),
        evaluation: (i % 4 == 2).then(|| json!({"passed": false, "score": 0.25})),
    })
}

fn clone_body(b: &Body) -> Body {
    match b {
        Body::RunEnded(e) => Body::RunEnded(RunEndedBody {
            status: e.status.clone(),
            final_response: e.final_response.clone(),
            evaluation: e.evaluation.clone(),
            ..*e
        }),
        Body::Json(m) => Body::Json(m.clone()),
        Body::Taken => Body::Taken,
        Body::RunStarted(c) => Body::RunStarted(c.clone()),
        Body::BeforeDecision {
            call,
            subjects,
            decision,
        } => Body::BeforeDecision {
            call: call.clone(),
            subjects: subjects.clone(),
            decision: decision.clone(),
        },
        Body::ToolResult {
            call,
            duration_ms,
            metrics,
            outcome,
            evaluation,
        } => Body::ToolResult {
            call: call.clone(),
            duration_ms: *duration_ms,
            metrics: metrics.clone(),
            outcome: outcome.clone(),
            evaluation: evaluation.clone(),
        },
    }
}

/// Seals `bodies` on two chains, typed and through JSON, and checks every line is the same;
/// once on a run with an end user, once on one without.
fn both_ways(bodies: Vec<(EventKind, Body)>, signer: Option<Arc<RunSigner>>) -> usize {
    let copies = bodies.iter().map(|(k, b)| (*k, clone_body(b))).collect();
    let n = both_ways_for(copies, signer.clone(), None);
    assert_eq!(both_ways_for(bodies, signer, Some("u\"1")), n);
    n
}

fn both_ways_for(
    bodies: Vec<(EventKind, Body)>,
    signer: Option<Arc<RunSigner>>,
    enduser: Option<&str>,
) -> usize {
    let redactor = Redactor::default();
    let enduser = enduser.map(String::from);
    let mut typed =
        RunChain::new("r-1", "agent\u{1}é", enduser.clone()).with_signer(signer.clone());
    let mut json = RunChain::new("r-1", "agent\u{1}é", enduser).with_signer(signer);
    let mut scratch = String::new();
    let at = ts("2026-01-05T09:00:00.123456Z");
    let mut n = 0;
    for (i, (kind, body)) in bodies.into_iter().enumerate() {
        let at = at + chrono::Duration::milliseconds(i as i64);
        let id = Uuid::now_v7();
        let copy = clone_body(&body);
        let mut body = body;
        let a = seal_body(&mut typed, &redactor, kind, at, id, &mut body, &mut scratch);
        let b = json.seal_with_id(kind, at, id, copy.into_map());
        assert_eq!(
            a.canonical_line().as_bytes(),
            b.canonical_line().as_bytes(),
            "event {i}"
        );
        assert_eq!(a.hash(), b.hash());
        // The line is the canonical form of the event, and its hash checks.
        assert_eq!(**a.canonical_line(), canonical_json(&b.to_json()));
        assert!(a.hash_is_valid() && b.hash_is_valid());
        // A typed event's body is parsed from its line (so an integral float reads back as
        // an integer): it equals the event read back from the JSON path's line. An event of a
        // JSON body keeps its map, as the JSON path's does.
        let back: AuditEvent = serde_json::from_str(b.canonical_line()).unwrap();
        assert!(a == back || a == b, "event {i}: {a:?}");
        n += 1;
    }
    n
}

#[test]
fn typed_before_decisions_seal_to_the_same_bytes_as_json() {
    let mut bodies = Vec::new();
    for i in 0..12 {
        for d in decisions() {
            bodies.push((EventKind::ToolDecision, before(i, d)));
        }
        let mut m = Map::new();
        m.insert("callId".into(), json!(format!("c{i}")));
        m.insert("output".into(), tricky_args(i));
        bodies.push((EventKind::ToolResult, Body::Json(m)));
        bodies.push((EventKind::ToolResult, result(i)));
    }
    let mut ctx = RunContext::new("r-1\u{2}", "agent é");
    bodies.push((
        EventKind::RunStarted,
        Body::RunStarted(Arc::new(ctx.clone())),
    ));
    ctx.session_id = Some("s\"1".into());
    ctx = ctx.with_enduser(
        "u-1",
        [
            ("tz".into(), "Europe/Paris".into()),
            ("a".into(), "\n".into()),
        ],
    );
    bodies.push((EventKind::RunStarted, Body::RunStarted(Arc::new(ctx))));
    bodies.push((EventKind::RunEnded, Body::Json(Map::new())));
    for i in 0..8 {
        bodies.push((EventKind::RunEnded, ended(i)));
    }
    assert_eq!(both_ways(bodies, None), 12 * 5 + 3 + 8);
}

#[test]
fn typed_path_matches_on_a_signed_chain() {
    let signer = Arc::new(RunSigner::from_seed(&[7u8; 32]));
    let mut bodies: Vec<(EventKind, Body)> = decisions()
        .into_iter()
        .enumerate()
        .map(|(i, d)| (EventKind::ToolDecision, before(i, d)))
        .collect();
    bodies.push((EventKind::RunEnded, Body::Json(Map::new())));
    bodies.push((EventKind::Checkpoint, Body::Json(Map::new())));
    bodies.push((EventKind::ToolResult, result(1)));
    bodies.push((EventKind::RunEnded, ended(1)));
    bodies.push((EventKind::RunEnded, ended(2)));
    assert_eq!(both_ways(bodies, Some(signer)), 8);
}

#[test]
fn a_redaction_rule_on_decisions_takes_the_json_path() {
    let redactor = Redactor::new(&RedactionConfig {
        rules: vec![RedactionRule {
            path: "args.text".into(),
            action: RedactAction::Hash,
            tools: None,
            kinds: Some(vec![EventKind::ToolDecision]),
        }],
        salt: None,
    })
    .unwrap();
    assert!(redactor.applies_to(EventKind::ToolDecision));
    assert!(!redactor.applies_to(EventKind::ToolResult));
    let mut chain = RunChain::new("r", "a", None);
    let d = decisions().remove(0);
    let e = seal_body(
        &mut chain,
        &redactor,
        EventKind::ToolDecision,
        ts("2026-01-05T09:00:00Z"),
        Uuid::now_v7(),
        &mut before(0, d),
        &mut String::new(),
    );
    let text = &e.body()["args"]["text"];
    assert!(
        text.as_str().is_some_and(|t| t.starts_with("sha256:")),
        "{text}"
    );
}

/// Any JSON value: strings with escapes and non-ASCII, every kind of number.
fn any_value() -> impl Strategy<Value = Value> {
    let string = "[\\x00-\\x1f\"\\\\/a-zé\u{2028}😀\u{7f}]{0,8}";
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop_oneof![
            Just(1e300),
            Just(-0.0),
            Just(1e-7),
            Just(9_007_199_254_740_993.0),
            Just(1e21),
            Just(123456789012345680000.0)
        ]
        .prop_map(Value::from),
        string.prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(string, inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A typed value with the same kinds of fields, serialized both ways.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Typed {
    text: String,
    float: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    maybe: Option<f32>,
    big: u64,
    neg: i64,
    flag: bool,
    list: Vec<Value>,
    map: std::collections::HashMap<String, f64>,
    unit: (),
    kind: EventKind,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn serializer_writes_what_canonical_json_writes(v in any_value()) {
        let mut direct = String::new();
        to_canonical(&v, &mut direct).unwrap();
        prop_assert_eq!(&direct, &canonical_json(&v));
        // And it re-parses to the same canonical text.
        let back: Value = serde_json::from_str(&direct).unwrap();
        prop_assert_eq!(canonical_json(&back), direct);
    }

    #[test]
    fn typed_structs_match_the_value_path(
        text in "[\\x00-\\x1f\"\\\\a-zé😀]{0,12}",
        float in any::<f64>(),
        maybe in proptest::option::of(any::<f32>()),
        big in any::<u64>(),
        neg in any::<i64>(),
        flag in any::<bool>(),
        list in prop::collection::vec(any_value(), 0..3),
        map in prop::collection::hash_map("[a-zA-Z\"é]{0,4}", any::<f64>(), 0..5),
    ) {
        let t = Typed { text, float, maybe, big, neg, flag, list, map, unit: (), kind: EventKind::ToolResult };
        let mut direct = String::new();
        to_canonical(&t, &mut direct).unwrap();
        prop_assert_eq!(direct, canonical_json(&serde_json::to_value(&t).unwrap()));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// `run.started`'s typed writer gives the bytes serde's canonical writer gives.
    #[test]
    fn run_context_writer_matches_the_serde_path(
        run_id in "[\\x00-\\x1f\"\\\\a-zé😀\u{2028}]{0,12}",
        agent_id in "[\\x00-\\x1f\"\\\\a-zé😀]{0,12}",
        session_id in proptest::option::of("[a-z\"é]{0,6}"),
        enduser in proptest::option::of((
            "[\\x00-\\x1f\"a-zé]{0,8}",
            prop::collection::btree_map("[\\x00-\\x1f\"\\\\a-zA-Zé😀~]{0,5}", "[\\x00\"a-zé]{0,5}", 0..6),
        )),
    ) {
        let ctx = RunContext {
            run_id,
            agent_tags: agent_id.chars().take(3).map(|c| format!("t{c}\"")).collect(),
            agent_id,
            session_id,
            enduser: enduser.map(|(id, tags)| crate::engine::decide::call::Enduser { id, tags }),
        };
        let mut typed = String::new();
        super::super::body::write_run_context(&ctx, &mut typed);
        let mut serde = String::new();
        to_canonical(&ctx, &mut serde).unwrap();
        prop_assert_eq!(typed, serde);
    }
}

#[test]
fn the_typed_writers_schema_is_the_envelopes() {
    assert!(
        super::super::body::SCHEMA_MEMBER
            .contains(&format!("\"schema\":\"{}\"", crate::audit::SCHEMA))
    );
}
