//! Property: whatever the tool name, tags, args and output, `before_tool` / `after_tool` never
//! panic and always give a well-formed decision, against a policy using every condition kind;
//! and `before_tool_now` decides every call as `before_tool` does.

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use common::*;
use proptest::prelude::*;
use serde_json::{Map, Value};
use toolgate::engine::{
    Decision, DecisionCode, GovernanceEngine, ManualClock, RunContext, SubjectInput, SubjectRef,
    ToolCall, ToolOutcome,
};
use toolgate::policy::EffectType;

const EVERY: &str = r#"
{"policy": {"name": "every-kind", "timezone": "Europe/Paris", "onMissingDefault": "block"},
 "rules": [
  {"id": "names", "name": "names", "priority": 90, "enabled": true,
   "selector": {"phase": "tool.before", "tool": {"name": ["*", "[a-z]*", "{x,y}?*"]}},
   "condition": {"kind": "or", "any": [
     {"kind": "toolName", "op": "contains", "value": "rm"},
     {"kind": "toolName", "op": "startsWith", "value": "del"},
     {"kind": "toolName", "op": "endsWith", "value": "ß"},
     {"kind": "toolName", "op": "glob", "value": "*[!a]?"},
     {"kind": "toolName", "op": "in", "value": ["a", "é", "z"]},
     {"kind": "toolName", "op": "neq", "value": "x"}]},
   "effect": {"type": "allow"}},
  {"id": "tags", "name": "tags", "priority": 80, "enabled": true,
   "selector": {"phase": "tool.before", "tool": {"tagsAny": ["pii", "net", "İ"]}},
   "condition": {"kind": "and", "all": [
     {"kind": "toolTag", "op": "has", "tag": "pii"},
     {"kind": "toolTag", "op": "anyOf", "tags": ["a", "b"]},
     {"kind": "not", "not": {"kind": "toolTag", "op": "allOf", "tags": ["x", "y"]}}]},
   "effect": {"type": "block"}},
  {"id": "args", "name": "args", "priority": 70, "enabled": true, "onMissing": "allow",
   "selector": {"phase": "tool.before", "tool": {}},
   "condition": {"kind": "or", "any": [
     {"kind": "toolArg", "type": "string", "op": "regex", "path": "a.b.0.c", "value": "^(?i)rm\\s+-rf"},
     {"kind": "toolArg", "type": "string", "op": "in", "path": "s", "value": ["x", "y"]},
     {"kind": "toolArg", "type": "number", "op": "gte", "path": "0", "value": 1e6},
     {"kind": "toolArg", "type": "boolean", "op": "eq", "path": "force", "value": true, "onMissing": "hitl"}]},
   "effect": {"type": "hitl"}},
  {"id": "user", "name": "user", "priority": 60, "enabled": true,
   "selector": {"phase": "tool.before", "tool": {"name": "*"}},
   "condition": {"kind": "and", "all": [
     {"kind": "enduserTag", "op": "has", "tag": "vip"},
     {"kind": "enduserTag", "op": "hasValue", "tag": "role", "value": "x"},
     {"kind": "enduserTag", "op": "hasValueAny", "tag": "tier", "values": ["a", "b"]}]},
   "effect": {"type": "block"}},
  {"id": "time", "name": "time", "priority": 50, "enabled": true,
   "selector": {"phase": "tool.before", "tool": {"name": "*"}},
   "condition": {"kind": "or", "any": [
     {"kind": "executionTime", "scope": "total", "op": "gt", "ms": 1e12},
     {"kind": "executionTime", "scope": "tool", "op": "gt", "ms": 5},
     {"kind": "timeGate", "timezone": {"source": "enduserTag", "tag": "tz", "fallback": "org"},
      "windows": [{"days": ["sat", "sun"], "start": "22:00", "end": "06:00"}, {"days": ["mon"], "start": "00:00", "end": "24:00"}]},
     {"kind": "timeGate", "timezone": {"source": "static", "tz": "Asia/Kolkata"}, "windows": [{"days": ["tue"], "start": "09:30", "end": "09:31"}]}]},
   "effect": {"type": "block"}},
  {"id": "history", "name": "history", "priority": 40, "enabled": true,
   "selector": {"phase": "tool.before", "tool": {"name": "*"}},
   "condition": {"kind": "sequence", "mustHaveCalled": ["*", {"by": "toolTag", "tags": ["pii"], "op": "allOf"}],
                 "mustNotHaveCalled": ["zz*", {"by": "toolTag", "tags": ["net"]}]},
   "effect": {"type": "allow"}},
  {"id": "caps", "name": "caps", "priority": 30, "enabled": true,
   "selector": {"phase": "tool.before", "tool": {"name": "*"}},
   "condition": {"kind": "or", "any": [
     {"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["*"]}, "max": 50, "windowSeconds": 60, "per": "agent"},
     {"kind": "maxCalls", "selector": {"by": "toolTag", "tags": ["pii"]}, "max": 3, "per": "agent_user"},
     {"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["a*"]}, "max": 0}]},
   "effect": {"type": "block"}},
  {"id": "metrics", "name": "metrics", "priority": 20, "enabled": true,
   "selector": {"phase": "tool.before", "tool": {"name": "*"}},
   "condition": {"kind": "or", "any": [
     {"kind": "metricWindow", "scope": "run", "metric": {"kind": "inbuilt", "key": "bytes_out"}, "aggregate": "avg", "windowSeconds": 60, "op": "gt", "value": 1000},
     {"kind": "metricWindow", "scope": "agent", "metric": {"kind": "inbuilt", "key": "records_in"}, "aggregate": "max", "windowSeconds": 60, "op": "gt", "value": 5, "filter": {"toolName": "*", "toolTag": "pii"}},
     {"kind": "metricWindow", "scope": "agent_user", "metric": {"kind": "custom", "key": "usd"}, "aggregate": "sum", "windowSeconds": 3600, "op": "gt", "value": 10},
     {"kind": "metricWindow", "scope": "run", "metric": {"kind": "inbuilt", "key": "duration_ms"}, "aggregate": "min", "windowSeconds": 60, "op": "lt", "value": 0, "onMissing": "allow"}]},
   "effect": {"type": "hitl"}},
  {"id": "subjects", "name": "subjects", "priority": 10, "enabled": true, "mode": "shadow",
   "selector": {"phase": "tool.before", "tool": {"name": "*"}},
   "condition": {"kind": "not", "not": {"kind": "requireSubject", "subjectType": "customer", "idSystem": "crm", "role": "primary"}},
   "effect": {"type": "block"}},
  {"id": "signals", "name": "signals", "priority": 5, "enabled": true,
   "selector": {"phase": "tool.before", "tool": {"name": "*"}},
   "condition": {"kind": "or", "any": [
     {"kind": "signal", "key": "echo", "op": "eq", "value": "true",
      "args": {"a": {"from": "toolArg", "path": "a"}, "n": {"from": "toolName"}, "t": {"from": "toolTag", "tag": "pii"},
               "c": {"from": "const", "value": "[1,2]"}, "s": {"from": "subject", "subjectType": "customer", "field": "idSystem"}}},
     {"kind": "signal", "key": "echo", "op": "in", "value": [1, "x", null], "args": {"u": {"from": "enduserId"}}, "onMissing": "allow"},
     {"kind": "signal", "key": "missing", "op": "gt", "value": 1, "args": {}, "onMissing": "hitl"}]},
   "effect": {"type": "block"}},
  {"id": "after", "name": "after", "priority": 1, "enabled": true,
   "selector": {"phase": "tool.after", "tool": {"name": "*"}},
   "condition": {"kind": "or", "any": [
     {"kind": "executionTime", "scope": "tool", "op": "gte", "ms": 100},
     {"kind": "sequence", "mustNotHaveCalled": ["*"]},
     {"kind": "metricWindow", "scope": "run", "metric": {"kind": "inbuilt", "key": "bytes_in"}, "aggregate": "count", "windowSeconds": 10, "op": "gt", "value": 3},
     {"kind": "signal", "key": "echo", "op": "neq", "value": {"x": 1}, "args": {"a": {"from": "toolArg", "path": "0"}}}]},
   "effect": {"type": "block"}}
 ]}"#;

fn engine() -> &'static (GovernanceEngine, ManualClock) {
    static E: OnceLock<(GovernanceEngine, ManualClock)> = OnceLock::new();
    E.get_or_init(|| build_engine(Duration::from_millis(50), true))
}

/// An engine of [`EVERY`], on a clock of its own; with `callbacks`, its signal provider and
/// subject extractor, else none (the signal is missing data).
fn build_engine(signal_timeout: Duration, callbacks: bool) -> (GovernanceEngine, ManualClock) {
    {
        let clock = clock();
        let engine = builder(EVERY, &clock)
            .signal_timeout(signal_timeout)
            .build()
            .expect("policy compiles");
        if !callbacks {
            return (engine, clock);
        }
        engine.register_signal("echo", |args: Map<String, Value>| async move {
            match args.get("a") {
                Some(Value::String(s)) if s.starts_with('!') => Err("provider refused".to_string()),
                _ => Ok(Value::Object(args)),
            }
        });
        engine
            .register_subject_extractor("*", |input: SubjectInput| async move {
                match &input.args {
                    Value::Object(m) if m.contains_key("customer") => Ok(vec![SubjectRef {
                        subject_type: "customer".into(),
                        value: m["customer"].to_string(),
                        role: Some("primary".into()),
                        id_system: Some("crm".into()),
                    }]),
                    Value::Array(_) => Err("no subjects in an array".to_string()),
                    _ => Ok(vec![]),
                }
            })
            .expect("glob");
        (engine, clock)
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    })
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        ".{0,12}".prop_map(Value::String),
        prop_oneof![Just("rm -rf /"), Just("x"), Just("!no"), Just("true")]
            .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(5, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        ".{0,8}",
                        Just("a".to_string()),
                        Just("b".to_string()),
                        Just("0".to_string()),
                        Just("customer".to_string()),
                        Just("force".to_string())
                    ],
                    inner
                ),
                0..8
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn arb_name() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,16}",
        "\\PC{100,600}",
        "[a-z_]{1,12}",
        Just("rm".to_string()),
        Just("zz_net".to_string()),
        Just(String::new()),
        Just("*".to_string()),
        Just("[".to_string()),
    ]
}

fn arb_tags() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        prop_oneof![
            ".{0,8}",
            Just("pii".to_string()),
            Just("NET".to_string()),
            Just("i̇".to_string()),
            Just("a".to_string())
        ],
        0..5,
    )
}

#[derive(Debug, Clone)]
struct Step {
    name: String,
    tags: Vec<String>,
    args: Value,
    output: Option<Value>,
    duration_ms: u64,
    advance_ms: i64,
}

fn arb_step() -> impl Strategy<Value = Step> {
    (
        arb_name(),
        arb_tags(),
        arb_json(),
        prop::option::of(arb_json()),
        0u64..500,
        -1_000i64..100_000,
    )
        .prop_map(|(name, tags, args, output, duration_ms, advance_ms)| Step {
            name,
            tags,
            args,
            output,
            duration_ms,
            advance_ms,
        })
}

fn check(d: &Decision) -> Result<(), TestCaseError> {
    let ok = match d.effect {
        EffectType::Allow => matches!(
            d.code,
            DecisionCode::Allowed | DecisionCode::AllowedHitlApproved
        ),
        EffectType::Block => matches!(
            d.code,
            DecisionCode::BlockedRule
                | DecisionCode::BlockedHitlDenied
                | DecisionCode::BlockedRunAborted
        ),
        EffectType::Hitl => matches!(
            d.code,
            DecisionCode::BlockedHitlRequested | DecisionCode::BlockedHitlPending
        ),
    };
    prop_assert!(ok, "effect and code disagree: {:?}", d);
    prop_assert!(d.error.is_none(), "engine fault: {:?}", d);
    let j = serde_json::to_value(d).expect("a decision serializes");
    prop_assert!(
        matches!(j["effect"].as_str(), Some("allow" | "block" | "hitl")),
        "{}",
        j
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn decisions_never_panic_and_are_well_formed(
        user in prop::option::of((".{0,8}", prop::collection::btree_map(prop_oneof![Just("tz".to_string()), Just("vip".to_string()), Just("tier".to_string()), ".{0,4}".prop_map(String::from)], ".{0,24}", 0..4))),
        steps in prop::collection::vec(arb_step(), 1..5),
        metric in any::<f64>(),
    ) {
        let (engine, clock) = engine();
        let mut ctx = RunContext::new(format!("run-{}", steps.len()), "agent");
        if let Some((id, tags)) = user {
            ctx = ctx.with_enduser(id, tags);
        }
        runtime().block_on(async {
            let run = engine.start_run(ctx);
            run.record_metric("usd", metric);
            run.record_llm(1, 2, metric);
            for (i, s) in steps.iter().enumerate() {
                clock.advance(chrono::Duration::milliseconds(s.advance_ms));
                let id = format!("c{i}");
                let mut c = ToolCall::new(&id, &s.name, s.args.clone()).with_tags(s.tags.clone());
                if i % 2 == 1 {
                    c.subjects = vec![SubjectRef { subject_type: s.name.clone(), value: String::new(), role: None, id_system: None }];
                }
                let d = run.before_tool(c).await;
                check(&d)?;
                let outcome = match &s.output {
                    Some(v) => ToolOutcome::ok(v.clone(), Duration::from_millis(s.duration_ms)),
                    None => ToolOutcome::err("failed", Duration::from_millis(s.duration_ms)),
                };
                let after = run.after_tool(&id, outcome).await;
                prop_assert_eq!(after.is_some(), d.is_allowed(), "after phase only for allowed calls");
                if let Some(a) = after {
                    check(&a)?;
                }
            }
            run.end("success", None).await;
            Ok(())
        })?;
    }

    /// `before_tool_now` (awaiting the rest when it hands one back) decides every call as
    /// `before_tool` does: two engines of the same policy on clocks moved alike, one run each.
    #[test]
    fn before_tool_now_decides_as_before_tool(
        steps in prop::collection::vec(arb_step(), 1..6),
        callbacks in any::<bool>(),
    ) {
        let (a, clock_a) = build_engine(Duration::from_secs(10), callbacks);
        let (b, clock_b) = build_engine(Duration::from_secs(10), callbacks);
        runtime().block_on(async {
            let ctx = || RunContext::new("run", "agent").with_enduser("u", [("tier".to_string(), "gold".to_string())]);
            let (ra, rb) = (a.start_run(ctx()), b.start_run(ctx()));
            for (i, s) in steps.iter().enumerate() {
                clock_a.advance(chrono::Duration::milliseconds(s.advance_ms));
                clock_b.advance(chrono::Duration::milliseconds(s.advance_ms));
                let id = format!("c{i}");
                let call = || ToolCall::new(&id, &s.name, s.args.clone()).with_tags(s.tags.clone());
                let awaited = ra.before_tool(call()).await;
                let now = match rb.before_tool_now(call()) {
                    Ok(d) => d,
                    Err(rest) => rest.await,
                };
                prop_assert_eq!(said(&awaited), said(&now), "call {}", i);
                if awaited.is_allowed() {
                    let outcome = || match &s.output {
                        Some(v) => ToolOutcome::ok(v.clone(), Duration::from_millis(s.duration_ms)),
                        None => ToolOutcome::err("failed", Duration::from_millis(s.duration_ms)),
                    };
                    let (x, y) = (ra.after_tool(&id, outcome()).await, rb.after_tool(&id, outcome()).await);
                    prop_assert_eq!(x.as_ref().map(said), y.as_ref().map(said));
                }
            }
            ra.end("success", None).await;
            rb.end("success", None).await;
            Ok(())
        })?;
    }
}
