//! Missing data (condition → rule → policy onMissing, three-valued logic), signal providers
//! (panicking, failing, hanging, caching), signal value semantics and bindings, subject
//! extractors, registering providers while runs are live, and policy reload.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use serde_json::{Map, Value, json};
use tokio::sync::Notify;
use toolgate::engine::{
    Decision, DecisionCode, EngineError, GovernanceEngine, Run, RunContext, SignalProvider,
    SubjectInput, SubjectRef, ToolOutcome,
};
use toolgate::policy::EffectType;

type Args = Map<String, Value>;

/// A policy of rules each in play only for the tool named like the rule (before phase), plus
/// extra rule fields per rule.
fn probes(meta: &str, rules: &[(&str, &str, &str)]) -> String {
    let rules: Vec<String> = rules
        .iter()
        .map(|(id, cond, extra)| {
            format!(
                r#"{{"id": "{id}", "name": "{id}", "priority": 1, "enabled": true,
                    "selector": {{"phase": "tool.before", "tool": {{"name": "{id}"}}}},
                    "condition": {cond}, "effect": {{"type": "block", "reason": "{id}"}}{extra}}}"#
            )
        })
        .collect();
    format!(
        r#"{{"policy": {{"name": "p"{meta}}}, "rules": [{}]}}"#,
        rules.join(",")
    )
}

/// Decides a probe call in a fresh run (hitl aborts runs).
async fn probe(engine: &GovernanceEngine, id: &str) -> Decision {
    let run = engine.start_run(ctx_user(
        &format!("run-{id}"),
        "a",
        "u1",
        &[("tier", "gold")],
    ));
    tokio::time::timeout(
        Duration::from_secs(10),
        run.before_tool(call("c", id, json!({"n": 1}))),
    )
    .await
    .expect("a decision never waits past the signal timeout")
}

fn sig(key: &str, extra: &str) -> String {
    format!(
        r#"{{"kind": "signal", "key": "{key}", "args": {{"user": {{"from": "enduserId"}}}}, "op": "eq", "value": true{extra}}}"#
    )
}

// ---------------------------------------------------------------------------------------------
// Missing data resolution

#[tokio::test]
async fn missing_data_resolves_condition_then_rule_then_policy() {
    let clock = clock();
    let absent = sig("absent", "");
    let json = probes(
        r#", "onMissingDefault": "hitl""#,
        &[
            (
                "cond-block",
                &sig("absent", r#", "onMissing": "block""#),
                r#", "onMissing": "allow""#,
            ),
            ("cond-hitl", &sig("absent", r#", "onMissing": "hitl""#), ""),
            (
                "cond-allow",
                &sig("absent", r#", "onMissing": "allow""#),
                r#", "onMissing": "block""#,
            ),
            ("rule-block", &absent, r#", "onMissing": "block""#),
            ("rule-allow", &absent, r#", "onMissing": "allow""#),
            ("policy", &absent, ""),
            // and: any false → false
            (
                "and-false",
                &format!(
                    r#"{{"kind": "and", "all": [{absent}, {{"kind": "toolName", "op": "eq", "value": "zzz"}}]}}"#
                ),
                "",
            ),
            // or: any true → true (rule's own effect, block)
            (
                "or-true",
                &format!(
                    r#"{{"kind": "or", "any": [{absent}, {{"kind": "toolName", "op": "eq", "value": "or-true"}}]}}"#
                ),
                "",
            ),
            // not unknown = unknown → policy default
            (
                "not-unknown",
                &format!(r#"{{"kind": "not", "not": {absent}}}"#),
                "",
            ),
        ],
    );
    let engine = engine(&json, &clock);
    let expect = [
        ("cond-block", EffectType::Block, true),
        ("cond-hitl", EffectType::Hitl, true),
        ("cond-allow", EffectType::Allow, false),
        ("rule-block", EffectType::Block, true),
        ("rule-allow", EffectType::Allow, false),
        ("policy", EffectType::Hitl, true),
        ("and-false", EffectType::Allow, false),
        ("or-true", EffectType::Block, true),
        ("not-unknown", EffectType::Hitl, true),
    ];
    for (id, effect, triggered) in expect {
        let d = probe(&engine, id).await;
        assert_eq!(
            (d.effect, d.evaluated[0].triggered),
            (effect, triggered),
            "{id}: {d:?}"
        );
        if id != "and-false" && id != "or-true" {
            assert!(
                !d.evaluated[0].missing.is_empty(),
                "{id} records what was missing: {d:?}"
            );
        }
        if triggered {
            assert_eq!(d.rule_id.as_deref(), Some(id));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Faulty providers

async fn panics(_: Args) -> Result<Value, String> {
    panic!("provider panicked on purpose")
}

/// A provider that panics before it even returns a future.
struct PanicsEagerly;

impl SignalProvider for PanicsEagerly {
    fn call(&self, _: Args) -> Pin<Box<dyn Future<Output = Result<Value, String>> + Send>> {
        panic!("provider panicked eagerly on purpose")
    }
}

fn faulty_engine(on_missing: &str) -> GovernanceEngine {
    let clock = clock();
    let extra = format!(r#", "onMissing": "{on_missing}""#);
    let json = probes(
        "",
        &[
            ("panics", &sig("panics", ""), &extra),
            ("eager", &sig("eager", ""), &extra),
            ("fails", &sig("fails", ""), &extra),
            ("hangs", &sig("hangs", ""), &extra),
        ],
    );
    let engine = builder(&json, &clock)
        .signal_timeout(Duration::from_millis(20))
        .build()
        .unwrap();
    engine.register_signal("panics", panics);
    engine.register_signal("eager", PanicsEagerly);
    engine.register_signal("fails", |_: Args| async {
        Err::<Value, String>("CRM is down".into())
    });
    engine.register_signal("hangs", |_: Args| {
        futures::future::pending::<Result<Value, String>>()
    });
    engine
}

#[tokio::test]
async fn faulty_providers_are_missing_data() {
    for (on_missing, effect) in [("allow", EffectType::Allow), ("block", EffectType::Block)] {
        let engine = faulty_engine(on_missing);
        for id in ["panics", "eager", "fails", "hangs"] {
            let d = probe(&engine, id).await;
            assert_eq!(d.effect, effect, "{id} with onMissing {on_missing}: {d:?}");
            assert_ne!(
                d.code,
                DecisionCode::BlockedFailure,
                "{id}: a provider fault is not an engine fault"
            );
            assert!(d.error.is_none(), "{id}: {d:?}");
            assert!(!d.evaluated[0].missing.is_empty(), "{id}: {d:?}");
            assert_eq!(d.signals.len(), 1, "{id}: {d:?}");
            assert!(
                d.signals[0].value.is_none() && d.signals[0].error.is_some(),
                "{id}: {d:?}"
            );
        }
        // The engine is still fine afterwards.
        let run = engine.start_run(RunContext::new("after", "a"));
        assert!(
            run.before_tool(call("c", "other", json!({})))
                .await
                .is_allowed()
        );
    }
}

#[tokio::test]
async fn faulty_providers_in_the_after_phase_are_missing_data() {
    let clock = clock();
    let mut rules = Vec::new();
    for key in ["panics", "eager", "fails", "hangs"] {
        rules.push(format!(
            r#"{{"id": "{key}", "name": "{key}", "priority": 1, "enabled": true, "onMissing": "block",
                "selector": {{"phase": "tool.after", "tool": {{"name": "{key}"}}}},
                "condition": {}, "effect": {{"type": "block"}}}}"#,
            sig(key, "")
        ));
    }
    let json = format!("[{}]", rules.join(","));
    let engine = builder(&json, &clock)
        .signal_timeout(Duration::from_millis(20))
        .build()
        .unwrap();
    engine.register_signal("panics", panics);
    engine.register_signal("eager", PanicsEagerly);
    engine.register_signal("fails", |_: Args| async {
        Err::<Value, String>("CRM is down".into())
    });
    engine.register_signal("hangs", |_: Args| {
        futures::future::pending::<Result<Value, String>>()
    });
    let run = engine.start_run(ctx_user("r", "a", "u", &[]));
    for key in ["panics", "eager", "fails", "hangs"] {
        assert!(
            run.before_tool(call(key, key, json!({})))
                .await
                .is_allowed()
        );
        let after = run.after_tool(key, ToolOutcome::ok(json!(1), Duration::from_millis(1)));
        let d = tokio::time::timeout(Duration::from_secs(10), after)
            .await
            .unwrap()
            .expect("after rule in play");
        assert_eq!(
            (d.effect, d.code),
            (EffectType::Block, DecisionCode::BlockedRule),
            "{key}: {d:?}"
        );
        assert!(!d.evaluated[0].missing.is_empty(), "{key}: {d:?}");
    }
}

#[tokio::test]
async fn signal_results_are_cached_per_decision_by_key_and_args() {
    let clock = clock();
    let same = r#"{"kind": "signal", "key": "count", "args": {"x": {"from": "toolArg", "path": "n"}}, "op": "eq", "value": 1}"#;
    let other_args = r#"{"kind": "signal", "key": "count", "args": {"x": {"from": "const", "value": 2}}, "op": "eq", "value": 1}"#;
    let json = format!(
        r#"[
        {{"id": "r1", "name": "r1", "priority": 2, "enabled": true,
          "selector": {{"phase": "tool.before", "tool": {{"name": "t"}}}},
          "condition": {{"kind": "and", "all": [{same}, {same}]}}, "effect": {{"type": "allow"}}}},
        {{"id": "r2", "name": "r2", "priority": 1, "enabled": true,
          "selector": {{"phase": "tool.before", "tool": {{"name": "t"}}}},
          "condition": {{"kind": "or", "any": [{{"kind": "not", "not": {same}}}, {other_args}]}}, "effect": {{"type": "allow"}}}}
      ]"#
    );
    let engine = engine(&json, &clock);
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    engine.register_signal("count", move |args: Args| {
        c.fetch_add(1, Ordering::SeqCst);
        async move { Ok(args["x"].clone()) }
    });
    let run = engine.start_run(RunContext::new("r", "a"));
    let d = run.before_tool(call("c1", "t", json!({"n": 1}))).await;
    // Three evaluations with x = 1 (two in r1, one in r2), one with x = 2.
    assert_eq!(calls.load(Ordering::SeqCst), 2, "{d:?}");
    assert_eq!(d.signals.len(), 2);
    // A new decision asks again.
    run.before_tool(call("c2", "t", json!({"n": 1}))).await;
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}

// ---------------------------------------------------------------------------------------------
// Value semantics and bindings

#[tokio::test]
async fn signal_value_semantics() {
    let clock = clock();
    // The provider echoes its `v` argument (a const binding); each rule compares it.
    let cases: Vec<(&str, &str, &str, &str, bool)> = vec![
        // id, const v, op, value, triggered
        ("num-by-value", "1", "eq", "1.0", true),
        (
            "deep",
            r#"{"a": [1, 2.0]}"#,
            "eq",
            r#"{"a": [1.0, 2]}"#,
            true,
        ),
        (
            "deep-neq",
            r#"{"a": [1, 2]}"#,
            "neq",
            r#"{"a": [2, 1]}"#,
            true,
        ),
        ("neq-same", "1", "neq", "1", false),
        ("gt-num", "5", "gt", "4.5", true),
        ("gt-string", r#""x5""#, "gt", "1", false),
        ("gt-bool", "true", "gt", "0", false),
        ("gte-str-value", "5", "gte", r#""5""#, true),
        ("lt-null", "null", "lt", "1", false),
        ("lte", "-1", "lte", "-1", true),
        ("str-true-vs-bool", "true", "eq", r#""true""#, true),
        ("str-vs-str", r#""true""#, "eq", r#""true""#, true),
        ("str-kept-string", r#""x""#, "eq", r#""\"x\"""#, false),
        ("in-array", r#""EU""#, "in", r#"["EU", "UK"]"#, true),
        (
            "in-json-string",
            r#""EU""#,
            "in",
            r#""[\"EU\",\"UK\"]""#,
            true,
        ),
        ("in-numbers", "2", "in", "[1.0, 2.0]", true),
        ("nin", r#""US""#, "nin", r#"["EU", "UK"]"#, true),
        ("nin-member", r#""UK""#, "nin", r#"["EU", "UK"]"#, false),
        ("in-deep", r#"{"a": 1}"#, "in", r#"[{"a": 1.0}]"#, true),
        // const strings holding JSON are passed parsed, others as the string
        ("const-json-number", r#""42""#, "eq", "42", true),
        ("const-json-array", r#""[1,2]""#, "eq", "[1, 2]", true),
        ("const-plain-string", r#""hello""#, "eq", r#""hello""#, true),
        ("const-bool-string", r#""false""#, "eq", "false", true),
    ];
    let rules: Vec<(String, String)> = cases
        .iter()
        .map(|(id, v, op, value, _)| {
            let cond = format!(
                r#"{{"kind": "signal", "key": "echo", "args": {{"v": {{"from": "const", "value": {v}}}}}, "op": "{op}", "value": {value}}}"#
            );
            (id.to_string(), cond)
        })
        .collect();
    let refs: Vec<(&str, &str, &str)> = rules
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str(), ""))
        .collect();
    let engine = engine(&probes("", &refs), &clock);
    engine.register_signal("echo", |args: Args| async move { Ok(args["v"].clone()) });
    for (id, v, op, value, expect) in &cases {
        let d = probe(&engine, id).await;
        assert_eq!(
            d.evaluated[0].triggered, *expect,
            "{id}: {v} {op} {value}: {d:?}"
        );
        assert!(d.evaluated[0].missing.is_empty(), "{id}: {d:?}");
    }
}

#[tokio::test]
async fn signal_bindings() {
    let clock = clock();
    let json = probes(
        r#", "onMissingDefault": "block""#,
        &[
            (
                "all",
                r#"{"kind": "signal", "key": "echo", "op": "eq", "value": {"id": "u1", "tier": "gold", "name": "all", "tag": true, "notag": false, "arg": 1, "subj": "7", "sys": "crm"},
                    "args": {"id": {"from": "enduserId"}, "tier": {"from": "enduserTag", "tag": "tier"}, "name": {"from": "toolName"},
                             "tag": {"from": "toolTag", "tag": "PII"}, "notag": {"from": "toolTag", "tag": "other"},
                             "arg": {"from": "toolArg", "path": "n"},
                             "subj": {"from": "subject", "subjectType": "customer"},
                             "sys": {"from": "subject", "subjectType": "customer", "role": "primary", "field": "idSystem"}}}"#,
                "",
            ),
            (
                "absent-tag",
                r#"{"kind": "signal", "key": "echo", "op": "eq", "value": 1, "args": {"t": {"from": "enduserTag", "tag": "nope"}}}"#,
                "",
            ),
            (
                "absent-arg",
                r#"{"kind": "signal", "key": "echo", "op": "eq", "value": 1, "args": {"t": {"from": "toolArg", "path": "a.b.0"}}}"#,
                "",
            ),
            (
                "absent-subject",
                r#"{"kind": "signal", "key": "echo", "op": "eq", "value": 1, "args": {"t": {"from": "subject", "subjectType": "account"}}}"#,
                "",
            ),
        ],
    );
    let engine = engine(&json, &clock);
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    engine.register_signal("echo", move |args: Args| {
        c.fetch_add(1, Ordering::SeqCst);
        async move { Ok(Value::Object(args)) }
    });
    let run = engine.start_run(ctx_user("r", "a", "u1", &[("tier", "gold")]));
    let mut c = call("c", "all", json!({"n": 1})).with_tags(["pii"]);
    c.subjects = vec![SubjectRef {
        subject_type: "customer".into(),
        value: "7".into(),
        role: Some("primary".into()),
        id_system: Some("crm".into()),
    }];
    let d = run.before_tool(c).await;
    assert!(
        d.evaluated[0].triggered && d.evaluated[0].missing.is_empty(),
        "{d:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // A binding that resolves to nothing: the provider is not called; missing data.
    for id in ["absent-tag", "absent-arg", "absent-subject"] {
        let d = probe(&engine, id).await;
        assert!(
            d.evaluated[0].triggered && !d.evaluated[0].missing.is_empty(),
            "{id}: {d:?}"
        );
        assert_eq!(d.effect, EffectType::Block);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------------------------------------
// Subject extractors

/// An extractor that panics before it even returns a future.
struct ExtractorPanicsEagerly;

impl toolgate::engine::SubjectExtractor for ExtractorPanicsEagerly {
    fn extract(
        &self,
        _: SubjectInput,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<SubjectRef>, String>> + Send>> {
        panic!("extractor panicked eagerly on purpose")
    }
}

fn customer(id: &str) -> SubjectRef {
    SubjectRef {
        subject_type: "customer".into(),
        value: id.into(),
        role: None,
        id_system: Some("crm".into()),
    }
}

#[tokio::test]
async fn subject_extractors_by_glob_and_failing_ones() {
    let clock = clock();
    let need = r#"{"kind": "not", "not": {"kind": "requireSubject", "subjectType": "customer", "idSystem": "crm"}}"#;
    let json = format!(
        r#"[{{"id": "need-customer", "name": "n", "priority": 1, "enabled": true,
             "selector": {{"phase": "tool.before", "tool": {{"tagsAny": ["pii"]}}}},
             "condition": {need}, "effect": {{"type": "block"}}}}]"#
    );
    let engine = engine(&json, &clock);
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    engine
        .register_subject_extractor("CRM_*", move |input: SubjectInput| {
            r.fetch_add(1, Ordering::SeqCst);
            async move {
                match input.args.get("id").and_then(Value::as_str) {
                    Some(id) => Ok(vec![customer(id)]),
                    None => Err("no id in the args".to_string()),
                }
            }
        })
        .unwrap();
    engine
        .register_subject_extractor("boom_*", |_: SubjectInput| async {
            panic!("extractor panicked on purpose")
        })
        .unwrap();
    engine
        .register_subject_extractor("slow_*", |_: SubjectInput| {
            futures::future::pending::<Result<Vec<SubjectRef>, String>>()
        })
        .unwrap();
    engine
        .register_subject_extractor("eager_*", ExtractorPanicsEagerly)
        .unwrap();
    assert!(matches!(
        engine.register_subject_extractor("[", |_: SubjectInput| async { Ok(vec![]) }),
        Err(EngineError::Glob { .. })
    ));
    let run = engine.start_run(RunContext::new("r", "a"));
    let pii = |id: &str, name: &str, args: Value| call(id, name, args).with_tags(["pii"]);
    assert!(
        run.before_tool(pii("c1", "crm_get", json!({"id": "7"})))
            .await
            .is_allowed()
    );
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    // The extractor fails: no subjects (not missing data), the failure is recorded.
    let d = run.before_tool(pii("c2", "crm_get", json!({}))).await;
    assert_eq!(
        (d.effect, d.code),
        (EffectType::Block, DecisionCode::BlockedRule)
    );
    assert!(!d.evaluated[0].missing.is_empty(), "{d:?}");
    // A tool no extractor matches: no subjects unless the call brings them.
    assert!(
        !run.before_tool(pii("c3", "files_get", json!({"id": "7"})))
            .await
            .is_allowed()
    );
    let mut with = pii("c4", "files_get", json!({}));
    with.subjects = vec![customer("9")];
    assert!(run.before_tool(with).await.is_allowed());
    // A panicking (eagerly or not) or hanging extractor: no subjects, not an engine failure.
    for name in ["boom_x", "slow_x", "eager_x"] {
        let fut = run.before_tool(pii("c5", name, json!({"id": "7"})));
        let d = tokio::time::timeout(Duration::from_secs(10), fut)
            .await
            .unwrap();
        assert_eq!(
            (d.effect, d.code),
            (EffectType::Block, DecisionCode::BlockedRule),
            "{name}: {d:?}"
        );
    }
    // Extractors only run when a rule in play needs subjects.
    assert!(
        run.before_tool(call("c6", "crm_list", json!({})))
            .await
            .is_allowed()
    );
    assert_eq!(ran.load(Ordering::SeqCst), 2);
}

// ---------------------------------------------------------------------------------------------
// Registration and reload while runs are live

#[tokio::test]
async fn register_signal_while_runs_are_live() {
    let clock = clock();
    let engine = engine(&probes("", &[("flag", &sig("flag", ""), "")]), &clock);
    let run = engine.start_run(ctx_user("r", "a", "u1", &[]));
    let flag = |id: &str| call(id, "flag", json!({}));
    let d = run.before_tool(flag("c1")).await;
    assert!(d.is_allowed() && !d.evaluated[0].missing.is_empty());
    engine.register_signal("flag", |_: Args| async { Ok(json!(true)) });
    assert!(!run.before_tool(flag("c2")).await.is_allowed());
    engine.register_signal("flag", |_: Args| async { Ok(json!(false)) });
    let d = run.before_tool(flag("c3")).await;
    assert!(d.is_allowed() && d.evaluated[0].missing.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_swaps_atomically_and_a_failed_reload_keeps_the_old_policies() {
    let clock = clock();
    let old = rule(
        "old-rule",
        "tool.before",
        r#"{"name": "x"}"#,
        &sig("gate", ""),
        "block",
    );
    let new = rule(
        "new-rule",
        "tool.before",
        r#"{"name": "y"}"#,
        r#"{"kind": "toolName", "op": "eq", "value": "y"}"#,
        "block",
    );
    let engine = builder(&old, &clock)
        .signal_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let entered = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let (e, r) = (entered.clone(), release.clone());
    engine.register_signal("gate", move |_: Args| {
        let (e, r) = (e.clone(), r.clone());
        async move {
            e.notify_one();
            r.notified().await;
            Ok(json!(true))
        }
    });
    let run = engine.start_run(ctx_user("r", "a", "u1", &[]));
    // A decision in flight on the old policies...
    let inflight = tokio::spawn({
        let run = run.clone();
        async move { run.before_tool(call("c1", "x", json!({}))).await }
    });
    entered.notified().await;
    engine.reload(vec![policy(&new)]).unwrap();
    release.notify_one();
    let d = inflight.await.unwrap();
    // ...finishes on them.
    assert_eq!(d.rule_id.as_deref(), Some("old-rule"));
    // Later decisions of the same run use the new ones.
    assert!(
        run.before_tool(call("c2", "x", json!({})))
            .await
            .is_allowed()
    );
    assert_eq!(
        run.before_tool(call("c3", "y", json!({})))
            .await
            .rule_id
            .as_deref(),
        Some("new-rule")
    );

    // A reload that fails leaves the new policies in place.
    // (duplicate rule ids across two policies)
    assert!(engine.reload(vec![policy(&new), policy(&new)]).is_err());
    let missing = std::path::PathBuf::from("/nonexistent/toolgate/policy.json");
    assert!(engine.reload_paths(&[missing]).is_err());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("broken.json");
    std::fs::write(&file, r#"[{"id": "z", "nmae": "typo"}]"#).unwrap();
    assert!(engine.reload_paths(&[file]).is_err());
    assert_eq!(
        run.before_tool(call("c4", "y", json!({})))
            .await
            .rule_id
            .as_deref(),
        Some("new-rule")
    );
    assert!(
        run.before_tool(call("c5", "x", json!({})))
            .await
            .is_allowed()
    );
    assert_eq!(engine.policies().active_rules(), 1);
}

#[allow(dead_code)]
fn run_is_send(r: Run) -> impl Send + Sync {
    r
}
