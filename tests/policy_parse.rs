//! Parsing and validation of the policy language (issue 2): every condition kind, valid and
//! invalid, every validation error class with the full file + JSON path in its message, and
//! Handlebar compatibility.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};
use toolgate::policy::*;

const FILE: &str = "policies/x.json";

/// A valid rule around `condition`.
fn rule(id: &str, condition: Value) -> Value {
    json!({
        "id": id,
        "name": format!("rule {id}"),
        "priority": 1,
        "enabled": true,
        "selector": {"phase": "tool.before", "tool": {}},
        "condition": condition,
        "effect": {"type": "block"}
    })
}

/// A harmless valid condition.
fn ok_cond() -> Value {
    json!({"kind": "toolName", "op": "eq", "value": "noop"})
}

fn doc(rules: Vec<Value>) -> String {
    json!({"policy": {"name": "x"}, "rules": rules}).to_string()
}

fn parse(text: &str) -> Result<Policy, PolicyErrors> {
    parse_policy(text, Some(Path::new(FILE)))
}

/// Parses a one-rule policy and returns its condition.
fn cond(c: Value) -> Condition {
    match parse(&doc(vec![rule("r", c.clone())])) {
        Ok(p) => p.rules[0].condition.clone(),
        Err(e) => panic!("{c} should parse, got:\n{e}"),
    }
}

/// The error lines (with file) of a document that must fail.
fn errors(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(p) => panic!("should fail, parsed as {p:?}"),
        Err(e) => {
            assert!(!e.errors().is_empty());
            e.errors().iter().map(ToString::to_string).collect()
        }
    }
}

/// Asserts that some error line starts with `policies/x.json: {path}: ` and contains `msg`.
#[track_caller]
fn assert_error(errs: &[String], path: &str, msg: &str) {
    let prefix = if path.is_empty() {
        format!("{FILE}: ")
    } else {
        format!("{FILE}: {path}: ")
    };
    assert!(
        errs.iter()
            .any(|e| e.starts_with(&prefix) && e[prefix.len()..].contains(msg)),
        "expected an error `{prefix}...{msg}...`, got:\n{}",
        errs.join("\n")
    );
}

/// Puts `c` deep inside rule 1 of a two-rule policy, at
/// `rules[1].condition.all[0].any[2].not`, and returns the errors.
fn nested_errors(c: Value) -> Vec<String> {
    let deep = json!({"kind": "and", "all": [
        {"kind": "or", "any": [ok_cond(), ok_cond(), {"kind": "not", "not": c}]},
        ok_cond()
    ]});
    errors(&doc(vec![rule("a", ok_cond()), rule("b", deep)]))
}

const NESTED: &str = "rules[1].condition.all[0].any[2].not";

/// Asserts that the condition `c`, nested deep, fails at `NESTED{suffix}` with `msg`.
#[track_caller]
fn assert_nested(c: Value, suffix: &str, msg: &str) {
    let errs = nested_errors(c);
    assert_error(&errs, &format!("{NESTED}{suffix}"), msg);
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

// ------------------------------------------------------------------------------------------
// toolName

#[test]
fn tool_name_every_op() {
    let cases: Vec<(&str, Value, StringOp)> = vec![
        ("eq", json!("a"), StringOp::Eq("a".into())),
        ("neq", json!("a"), StringOp::Neq("a".into())),
        ("contains", json!("b"), StringOp::Contains("b".into())),
        (
            "startsWith",
            json!("crm_"),
            StringOp::StartsWith("crm_".into()),
        ),
        ("endsWith", json!("_x"), StringOp::EndsWith("_x".into())),
        ("glob", json!("crm_*"), StringOp::Glob("crm_*".into())),
        (
            "glob",
            json!("{a,b}?[xy]"),
            StringOp::Glob("{a,b}?[xy]".into()),
        ),
        (
            "in",
            json!(["git_push", "git_fetch"]),
            StringOp::In(strings(&["git_push", "git_fetch"])),
        ),
    ];
    for (op, value, want) in cases {
        let c = cond(json!({"kind": "toolName", "op": op, "value": value}));
        assert_eq!(c, Condition::ToolName(want));
        assert_eq!(c.kind(), "toolName");
    }
}

#[test]
fn tool_name_invalid() {
    assert_nested(
        json!({"kind": "toolName", "op": "in", "value": "git_push"}),
        ".value",
        r#"operator "in" needs an array of strings, found a string"#,
    );
    assert_nested(
        json!({"kind": "toolName", "op": "in", "value": ["a", 3]}),
        ".value[1]",
        "expected a string, found a number",
    );
    assert_nested(
        json!({"kind": "toolName", "op": "regex", "value": "a.*"}),
        ".op",
        r#""regex" is not one of "eq", "neq", "contains", "startsWith", "endsWith", "glob", "in""#,
    );
    assert_nested(
        json!({"kind": "toolName", "op": "eq", "value": 5}),
        ".value",
        "expected a string, found a number",
    );
    assert_nested(
        json!({"kind": "toolName", "op": "eq"}),
        "",
        r#"missing required key "value""#,
    );
    assert_nested(
        json!({"kind": "toolName", "op": "glob", "value": "crm_[a-"}),
        ".value",
        r#"invalid glob "crm_[a-": unclosed character class"#,
    );
}

// ------------------------------------------------------------------------------------------
// toolTag

#[test]
fn tool_tag_every_op() {
    assert_eq!(
        cond(json!({"kind": "toolTag", "op": "has", "tag": "pii"})),
        Condition::ToolTag(TagOp::Has("pii".into()))
    );
    assert_eq!(
        cond(json!({"kind": "toolTag", "op": "anyOf", "tags": ["network", "egress"]})),
        Condition::ToolTag(TagOp::AnyOf(strings(&["network", "egress"])))
    );
    assert_eq!(
        cond(json!({"kind": "toolTag", "op": "allOf", "tags": ["write", "prod"]})),
        Condition::ToolTag(TagOp::AllOf(strings(&["write", "prod"])))
    );
}

#[test]
fn tool_tag_invalid() {
    assert_nested(
        json!({"kind": "toolTag", "op": "has", "tags": ["pii"]}),
        ".tags",
        r#"unexpected key "tags": op "has" takes "tag""#,
    );
    assert_nested(
        json!({"kind": "toolTag", "op": "anyOf", "tag": "pii", "tags": ["x"]}),
        ".tag",
        r#"unexpected key "tag""#,
    );
    assert_nested(
        json!({"kind": "toolTag", "op": "allOf", "tags": []}),
        ".tags",
        "must not be empty",
    );
    assert_nested(
        json!({"kind": "toolTag", "op": "has", "tag": ""}),
        ".tag",
        "must not be empty",
    );
    assert_nested(
        json!({"kind": "toolTag", "op": "noneOf", "tags": ["a"]}),
        ".op",
        r#""noneOf" is not one of "has", "anyOf", "allOf""#,
    );
}

// ------------------------------------------------------------------------------------------
// toolArg

#[test]
fn tool_arg_string_every_op() {
    let cases: Vec<(&str, Value, StringOp)> = vec![
        ("eq", json!("a"), StringOp::Eq("a".into())),
        ("neq", json!("a"), StringOp::Neq("a".into())),
        ("contains", json!(".."), StringOp::Contains("..".into())),
        (
            "startsWith",
            json!("/workspace/"),
            StringOp::StartsWith("/workspace/".into()),
        ),
        ("endsWith", json!(".env"), StringOp::EndsWith(".env".into())),
        (
            "in",
            json!(["EU", "UK"]),
            StringOp::In(strings(&["EU", "UK"])),
        ),
        (
            "regex",
            json!(r"\brm\s+-rf\b"),
            StringOp::Regex(r"\brm\s+-rf\b".into()),
        ),
    ];
    for (op, value, want) in cases {
        let c = cond(
            json!({"kind": "toolArg", "type": "string", "op": op, "path": "a.b.0.c", "value": value}),
        );
        assert_eq!(
            c,
            Condition::ToolArg {
                path: Some("a.b.0.c".into()),
                test: ArgTest::String(want),
                on_missing: None
            }
        );
    }
}

#[test]
fn tool_arg_number_and_boolean() {
    let ops = [
        ("eq", CmpOp::Eq),
        ("neq", CmpOp::Neq),
        ("lt", CmpOp::Lt),
        ("lte", CmpOp::Lte),
        ("gt", CmpOp::Gt),
        ("gte", CmpOp::Gte),
    ];
    for (name, op) in ops {
        let c = cond(
            json!({"kind": "toolArg", "type": "number", "op": name, "path": "amount", "value": -12.5}),
        );
        assert_eq!(
            c,
            Condition::ToolArg {
                path: Some("amount".into()),
                test: ArgTest::Number(op, -12.5),
                on_missing: None
            }
        );
    }
    let c = cond(
        json!({"kind": "toolArg", "type": "boolean", "op": "eq", "path": "force", "value": true, "onMissing": "hitl"}),
    );
    assert_eq!(
        c,
        Condition::ToolArg {
            path: Some("force".into()),
            test: ArgTest::Boolean(true),
            on_missing: Some(EffectType::Hitl)
        }
    );
}

#[test]
fn tool_arg_invalid() {
    let arg = |ty: &str, op: &str, value: Value| json!({"kind": "toolArg", "type": ty, "op": op, "path": "p", "value": value});
    assert_nested(
        arg("number", "gt", json!("100")),
        ".value",
        "expected a number, found a string",
    );
    assert_nested(
        arg("boolean", "eq", json!("true")),
        ".value",
        "expected true or false, found a string",
    );
    assert_nested(
        arg("boolean", "neq", json!(true)),
        ".op",
        r#""neq" is not one of "eq""#,
    );
    assert_nested(
        arg("string", "gt", json!("a")),
        ".op",
        r#""gt" is not one of "eq", "neq", "contains""#,
    );
    assert_nested(
        arg("string", "glob", json!("a*")),
        ".op",
        r#""glob" is not one of"#,
    );
    assert_nested(
        arg("number", "contains", json!(1)),
        ".op",
        r#""contains" is not one of "eq", "neq", "lt""#,
    );
    assert_nested(
        arg("string", "in", json!("EU")),
        ".value",
        r#"operator "in" needs an array of strings, found a string"#,
    );
    assert_nested(
        arg("string", "regex", json!("(abc")),
        ".value",
        "invalid regex:",
    );
    assert_nested(
        arg("string", "regex", json!("a{99999}{99999}")),
        ".value",
        "invalid regex:",
    );
    assert_nested(
        arg("date", "eq", json!("x")),
        ".type",
        r#""date" is not one of "string", "number", "boolean""#,
    );
    // Without a path: scan mode (design §11), valid; exists/notExists need one.
    assert_nested(
        json!({"kind": "toolArg", "op": "exists"}),
        "",
        r#"missing required key "path""#,
    );
    assert_nested(
        json!({"kind": "toolArg", "type": "string", "op": "eq", "path": "", "value": "x"}),
        ".path",
        "must not be empty",
    );
    assert_nested(
        json!({"kind": "toolArg", "type": "string", "op": "eq", "path": "p", "value": "x", "onMissing": "deny"}),
        ".onMissing",
        r#""deny" is not one of "allow", "hitl", "block""#,
    );
}

// ------------------------------------------------------------------------------------------
// enduserTag

#[test]
fn enduser_tag_every_op() {
    assert_eq!(
        cond(json!({"kind": "enduserTag", "op": "has", "tag": "do_not_contact"})),
        Condition::EnduserTag(EnduserTagOp::Has {
            tag: "do_not_contact".into()
        })
    );
    assert_eq!(
        cond(json!({"kind": "enduserTag", "op": "hasValue", "tag": "role", "value": "approver"})),
        Condition::EnduserTag(EnduserTagOp::HasValue {
            tag: "role".into(),
            value: "approver".into()
        })
    );
    assert_eq!(
        cond(
            json!({"kind": "enduserTag", "op": "hasValueAny", "tag": "tier", "values": ["gold", "platinum"]})
        ),
        Condition::EnduserTag(EnduserTagOp::HasValueAny {
            tag: "tier".into(),
            values: strings(&["gold", "platinum"])
        })
    );
}

#[test]
fn enduser_tag_invalid() {
    assert_nested(
        json!({"kind": "enduserTag", "op": "hasValue", "tag": "role", "values": ["a"]}),
        ".values",
        r#"unexpected key "values": op "hasValue" takes "value""#,
    );
    assert_nested(
        json!({"kind": "enduserTag", "op": "hasValue", "tag": "role"}),
        "",
        r#"missing required key "value""#,
    );
    assert_nested(
        json!({"kind": "enduserTag", "op": "hasValueAny", "tag": "tier", "values": "gold"}),
        ".values",
        "expected an array of strings, found a string",
    );
    assert_nested(
        json!({"kind": "enduserTag", "op": "has", "tag": "t", "value": "x"}),
        ".value",
        r#"op "has" takes only "tag""#,
    );
    assert_nested(
        json!({"kind": "enduserTag", "op": "has"}),
        "",
        r#"missing required key "tag""#,
    );
    assert_nested(
        json!({"kind": "enduserTag", "op": "hasValue", "tag": "role", "value": 1}),
        ".value",
        "expected a string, found a number",
    );
}

// ------------------------------------------------------------------------------------------
// executionTime

#[test]
fn execution_time() {
    assert_eq!(
        cond(json!({"kind": "executionTime", "scope": "total", "op": "gt", "ms": 1800000})),
        Condition::ExecutionTime {
            scope: TimeScope::Total,
            op: CmpOp::Gt,
            ms: 1_800_000.0,
            on_missing: None
        }
    );
    assert_eq!(
        cond(
            json!({"kind": "executionTime", "scope": "tool", "op": "lte", "ms": 0.5, "onMissing": "allow"})
        ),
        Condition::ExecutionTime {
            scope: TimeScope::Tool,
            op: CmpOp::Lte,
            ms: 0.5,
            on_missing: Some(EffectType::Allow)
        }
    );
}

#[test]
fn execution_time_invalid() {
    assert_nested(
        json!({"kind": "executionTime", "scope": "run", "op": "gt", "ms": 1}),
        ".scope",
        r#""run" is not one of "tool", "total""#,
    );
    assert_nested(
        json!({"kind": "executionTime", "scope": "tool", "op": "gt", "ms": "100"}),
        ".ms",
        "expected a number, found a string",
    );
    assert_nested(
        json!({"kind": "executionTime", "scope": "tool", "op": "gt"}),
        "",
        r#"missing required key "ms""#,
    );
}

// ------------------------------------------------------------------------------------------
// sequence

#[test]
fn sequence_globs_and_tag_entries() {
    let c = cond(json!({
        "kind": "sequence",
        "mustHaveCalled": ["run_tests", "lint*", {"by": "toolTag", "tags": ["review"], "op": "allOf"}],
        "mustNotHaveCalled": [{"by": "toolTag", "tags": ["secrets", "creds"]}]
    }));
    assert_eq!(
        c,
        Condition::Sequence {
            must_have_called: Some(vec![
                SequenceEntry::Glob("run_tests".into()),
                SequenceEntry::Glob("lint*".into()),
                SequenceEntry::Tags {
                    tags: strings(&["review"]),
                    all: true
                },
            ]),
            must_not_have_called: Some(vec![SequenceEntry::Tags {
                tags: strings(&["secrets", "creds"]),
                all: false
            }]),
        }
    );
    assert_eq!(
        cond(json!({"kind": "sequence", "mustNotHaveCalled": ["delete_*"]})),
        Condition::Sequence {
            must_have_called: None,
            must_not_have_called: Some(vec![SequenceEntry::Glob("delete_*".into())])
        }
    );
}

#[test]
fn sequence_invalid() {
    assert_nested(
        json!({"kind": "sequence", "mustHaveCalled": [{"by": "toolArg", "tags": ["a"]}]}),
        ".mustHaveCalled[0].by",
        r#""toolArg" is not one of "toolName", "toolTag""#,
    );
    assert_nested(
        json!({"kind": "sequence", "mustHaveCalled": [{"by": "toolTag", "tags": ["a"], "op": "has"}]}),
        ".mustHaveCalled[0].op",
        r#""has" is not one of "anyOf", "allOf""#,
    );
    assert_nested(
        json!({"kind": "sequence", "mustNotHaveCalled": ["ok", 7]}),
        ".mustNotHaveCalled[1]",
        "expected a glob string or a {\"by\": \"toolTag\"} object, found a number",
    );
    assert_nested(
        json!({"kind": "sequence", "mustHaveCalled": []}),
        ".mustHaveCalled",
        "must not be empty",
    );
    assert_nested(
        json!({"kind": "sequence", "mustHaveCalled": "run_tests"}),
        ".mustHaveCalled",
        "expected an array of globs",
    );
    assert_nested(
        json!({"kind": "sequence", "mustHaveCalled": [{"by": "toolTag"}]}),
        ".mustHaveCalled[0]",
        r#"missing required key "tags""#,
    );
}

// ------------------------------------------------------------------------------------------
// maxCalls

#[test]
fn max_calls() {
    assert_eq!(
        cond(
            json!({"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["shell", "bash*"]}, "max": 8})
        ),
        Condition::MaxCalls {
            selector: CallSelector::ToolName(strings(&["shell", "bash*"])),
            max: 8,
            window_seconds: None,
            per: None,
            tag_filter: None
        }
    );
    assert_eq!(
        cond(
            json!({"kind": "maxCalls", "selector": {"by": "toolTag", "tags": ["money_movement"]}, "max": 0,
            "windowSeconds": 3600, "per": "agent_user"})
        ),
        Condition::MaxCalls {
            selector: CallSelector::ToolTag(strings(&["money_movement"])),
            max: 0,
            window_seconds: Some(3600),
            per: Some(Scope::AgentUser),
            tag_filter: None
        }
    );
    for (name, scope) in [("run", Scope::Run), ("agent", Scope::Agent)] {
        let c = cond(
            json!({"kind": "maxCalls", "selector": {"by": "toolTag", "tags": ["t"]}, "max": 1, "per": name}),
        );
        assert!(matches!(c, Condition::MaxCalls { per: Some(s), .. } if s == scope));
    }
}

#[test]
fn max_calls_invalid() {
    let sel = json!({"by": "toolName", "patterns": ["a"]});
    assert_nested(
        json!({"kind": "maxCalls", "selector": sel, "max": 1.5}),
        ".max",
        "expected a whole number, found 1.5",
    );
    assert_nested(
        json!({"kind": "maxCalls", "selector": sel, "max": 1, "windowSeconds": 0}),
        ".windowSeconds",
        "must be at least 1, found 0",
    );
    assert_nested(
        json!({"kind": "maxCalls", "selector": sel, "max": 1, "per": "user"}),
        ".per",
        r#""user" is not one of "run", "agent", "agent_user""#,
    );
    assert_nested(
        json!({"kind": "maxCalls", "selector": {"by": "toolName", "tags": ["a"]}, "max": 1}),
        ".selector.tags",
        r#"unexpected key "tags": `by: toolName` takes "patterns""#,
    );
    assert_nested(
        json!({"kind": "maxCalls", "selector": {"by": "toolTag", "patterns": ["a"], "tags": ["b"]}, "max": 1}),
        ".selector.patterns",
        r#"unexpected key "patterns": `by: toolTag` takes "tags""#,
    );
    assert_nested(
        json!({"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["ok", "bad{"]}, "max": 1}),
        ".selector.patterns[1]",
        r#"invalid glob "bad{""#,
    );
    assert_nested(
        json!({"kind": "maxCalls", "selector": sel}),
        "",
        r#"missing required key "max""#,
    );
}

// ------------------------------------------------------------------------------------------
// metricWindow

#[test]
fn metric_window_inbuilt_every_key() {
    for m in InbuiltMetric::ALL {
        let c = cond(
            json!({"kind": "metricWindow", "scope": "agent", "metric": {"kind": "inbuilt", "key": m.key()},
            "aggregate": "sum", "windowSeconds": 60, "op": "gt", "value": 10}),
        );
        assert_eq!(
            c,
            Condition::MetricWindow {
                scope: Scope::Agent,
                metric: MetricRef::Inbuilt(m),
                aggregate: Aggregate::Sum,
                window_seconds: Some(60),
                op: CmpOp::Gt,
                value: 10.0,
                filter: None,
                on_missing: None
            }
        );
    }
}

#[test]
fn metric_window_custom_with_filter() {
    let c = cond(json!({
        "kind": "metricWindow", "scope": "agent_user",
        "metric": {"kind": "custom", "key": "payment_usd"},
        "aggregate": "avg", "windowSeconds": 86400, "op": "gte", "value": 50000.25,
        "filter": {"toolName": "pay_*", "toolTag": ["money", "eu"]},
        "onMissing": "block"
    }));
    assert_eq!(
        c,
        Condition::MetricWindow {
            scope: Scope::AgentUser,
            metric: MetricRef::Custom("payment_usd".into()),
            aggregate: Aggregate::Avg,
            window_seconds: Some(86400),
            op: CmpOp::Gte,
            value: 50000.25,
            filter: Some(MetricFilter {
                tool_name: Some(strings(&["pay_*"])),
                tool_tag: Some(strings(&["money", "eu"]))
            }),
            on_missing: Some(EffectType::Block)
        }
    );
    for (name, agg) in [
        ("max", Aggregate::Max),
        ("min", Aggregate::Min),
        ("count", Aggregate::Count),
    ] {
        let c = cond(
            json!({"kind": "metricWindow", "scope": "run", "metric": {"kind": "custom", "key": "k"},
            "aggregate": name, "windowSeconds": 1, "op": "eq", "value": 0, "filter": {"toolName": ["a", "b*"]}}),
        );
        assert!(
            matches!(c, Condition::MetricWindow { aggregate, scope: Scope::Run, .. } if aggregate == agg)
        );
    }
}

#[test]
fn metric_window_invalid() {
    let mw = |patch: Value| {
        let mut c = json!({"kind": "metricWindow", "scope": "agent", "metric": {"kind": "inbuilt", "key": "bytes_out"},
            "aggregate": "sum", "windowSeconds": 60, "op": "gt", "value": 1});
        for (k, v) in patch.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    };
    assert_nested(
        mw(json!({"metric": {"kind": "inbuilt", "key": "bytes"}})),
        ".metric.key",
        r#""bytes" is not an inbuilt metric; one of bytes_in, bytes_out"#,
    );
    assert_nested(
        mw(json!({"metric": {"kind": "builtin", "key": "bytes_in"}})),
        ".metric.kind",
        r#""builtin" is not one of "inbuilt", "custom""#,
    );
    assert_nested(
        mw(json!({"aggregate": "median"})),
        ".aggregate",
        r#""median" is not one of "sum", "avg", "max", "min", "count""#,
    );
    assert_nested(
        mw(json!({"scope": "user"})),
        ".scope",
        r#""user" is not one of "run", "agent", "agent_user""#,
    );
    assert_nested(
        mw(json!({"filter": {"toolNames": ["a"]}})),
        ".filter.toolNames",
        r#"unknown key "toolNames" in a metric filter (did you mean "toolName"?)"#,
    );
    assert_nested(
        mw(json!({"filter": {"toolName": "a[b"}})),
        ".filter.toolName",
        r#"invalid glob "a[b""#,
    );
    assert_nested(
        mw(json!({"filter": {"toolName": ["ok", "a[b"]}})),
        ".filter.toolName[1]",
        r#"invalid glob "a[b""#,
    );
    assert_nested(
        mw(json!({"value": "10"})),
        ".value",
        "expected a number, found a string",
    );
    assert_nested(
        mw(json!({"windowSeconds": 1.5})),
        ".windowSeconds",
        "expected a whole number",
    );
}

// ------------------------------------------------------------------------------------------
// timeGate

#[test]
fn time_gate_enduser_tag_with_fallback() {
    let c = cond(json!({
        "kind": "timeGate",
        "timezone": {"source": "enduserTag", "tag": "tz", "fallback": "org"},
        "windows": [
            {"days": ["mon", "tue", "wed", "thu", "fri"], "start": "08:00", "end": "20:00"},
            {"days": ["fri"], "start": "23:00", "end": "01:00"},
            {"days": ["sat", "sun"], "start": "00:00", "end": "24:00"}
        ]
    }));
    use chrono::Weekday::*;
    assert_eq!(
        c,
        Condition::TimeGate {
            timezone: TimezoneSource::EnduserTag {
                tag: "tz".into(),
                fallback_org: true
            },
            windows: vec![
                TimeWindow {
                    days: vec![Mon, Tue, Wed, Thu, Fri],
                    start: TimeOfDay(8 * 60),
                    end: TimeOfDay(20 * 60)
                },
                TimeWindow {
                    days: vec![Fri],
                    start: TimeOfDay(23 * 60),
                    end: TimeOfDay(60)
                },
                TimeWindow {
                    days: vec![Sat, Sun],
                    start: TimeOfDay(0),
                    end: TimeOfDay(1440)
                },
            ],
            on_missing: None
        }
    );
    let c = cond(
        json!({"kind": "timeGate", "timezone": {"source": "enduserTag", "tag": "tz"},
        "windows": [{"days": ["mon"], "start": "09:00", "end": "17:30"}], "onMissing": "hitl"}),
    );
    assert!(matches!(
        c,
        Condition::TimeGate {
            timezone: TimezoneSource::EnduserTag {
                fallback_org: false,
                ..
            },
            on_missing: Some(EffectType::Hitl),
            ..
        }
    ));
}

#[test]
fn time_gate_static() {
    let c = cond(
        json!({"kind": "timeGate", "timezone": {"source": "static", "tz": "America/New_York"},
        "windows": [{"days": ["sat"], "start": "10:15", "end": "11:45"}]}),
    );
    assert_eq!(
        c,
        Condition::TimeGate {
            timezone: TimezoneSource::Static {
                tz: "America/New_York".into()
            },
            windows: vec![TimeWindow {
                days: vec![chrono::Weekday::Sat],
                start: TimeOfDay(615),
                end: TimeOfDay(705)
            }],
            on_missing: None
        }
    );
}

fn gate(tz: Value, window: Value) -> Value {
    json!({"kind": "timeGate", "timezone": tz, "windows": [window]})
}

#[test]
fn time_gate_invalid() {
    let tag = json!({"source": "enduserTag", "tag": "tz"});
    let win = |s: &str, e: &str| json!({"days": ["mon"], "start": s, "end": e});
    for bad in [
        "25:00",
        "9:00",
        "09:60",
        "+9:00",
        "09:+5",
        "0900",
        "09:00:00",
        "24:01",
        "",
        "ab:cd",
        "٠٩:٠٠",
    ] {
        assert_nested(
            gate(tag.clone(), win(bad, "10:00")),
            ".windows[0].start",
            &format!("{} is not HH:MM", Value::from(bad)),
        );
        assert_nested(
            gate(tag.clone(), win("10:00", bad)),
            ".windows[0].end",
            &format!("{} is not HH:MM", Value::from(bad)),
        );
    }
    assert_nested(
        gate(tag.clone(), win("24:00", "10:00")),
        ".windows[0].start",
        "a window cannot start at 24:00",
    );
    assert_nested(
        gate(tag.clone(), win("10:00", "10:00")),
        ".windows[0]",
        "window start and end are both 10:00: the window is empty",
    );
    assert_nested(
        gate(
            tag.clone(),
            json!({"days": ["monday"], "start": "09:00", "end": "10:00"}),
        ),
        ".windows[0].days[0]",
        r#""monday" is not a day; use mon, tue"#,
    );
    assert_nested(
        gate(
            tag.clone(),
            json!({"days": [], "start": "09:00", "end": "10:00"}),
        ),
        ".windows[0].days",
        "must not be empty",
    );
    assert_nested(
        json!({"kind": "timeGate", "timezone": tag.clone(), "windows": []}),
        ".windows",
        "must not be empty",
    );
    assert_nested(
        gate(
            json!({"source": "enduserTag", "tag": "tz", "fallback": "utc"}),
            win("09:00", "10:00"),
        ),
        ".timezone.fallback",
        r#""utc" is not one of "org""#,
    );
    assert_nested(
        gate(
            json!({"source": "static", "tz": "UTC", "tag": "tz"}),
            win("09:00", "10:00"),
        ),
        ".timezone.tag",
        r#"unexpected key "tag": source "static" takes "tz""#,
    );
    assert_nested(
        gate(
            json!({"source": "enduserTag", "tz": "UTC"}),
            win("09:00", "10:00"),
        ),
        ".timezone.tz",
        r#"unexpected key "tz""#,
    );
    assert_nested(
        gate(json!({"source": "header"}), win("09:00", "10:00")),
        ".timezone.source",
        r#""header" is not one of "enduserTag", "static""#,
    );
}

// ------------------------------------------------------------------------------------------
// requireSubject

#[test]
fn require_subject() {
    assert_eq!(
        cond(json!({"kind": "requireSubject", "subjectType": "customer"})),
        Condition::RequireSubject(SubjectTest {
            subject_type: "customer".into(),
            id_system: None,
            role: None
        })
    );
    assert_eq!(
        cond(
            json!({"kind": "requireSubject", "subjectType": "customer", "idSystem": "crm_contact_id", "role": "primary"})
        ),
        Condition::RequireSubject(SubjectTest {
            subject_type: "customer".into(),
            id_system: Some("crm_contact_id".into()),
            role: Some("primary".into())
        })
    );
}

#[test]
fn require_subject_invalid() {
    assert_nested(
        json!({"kind": "requireSubject"}),
        "",
        r#"missing required key "subjectType""#,
    );
    assert_nested(
        json!({"kind": "requireSubject", "subjectType": "c", "id_system": "x"}),
        ".id_system",
        r#"unknown key "id_system" in a requireSubject condition (did you mean "idSystem"?)"#,
    );
    assert_nested(
        json!({"kind": "requireSubject", "subjectType": "c", "role": 1}),
        ".role",
        "expected a string, found a number",
    );
}

// ------------------------------------------------------------------------------------------
// signal

#[test]
fn signal_every_binding_kind() {
    let c = cond(json!({
        "kind": "signal",
        "key": "compliance.sanctionsHit",
        "args": {
            "user": {"from": "enduserId"},
            "tier": {"from": "enduserTag", "tag": "tier"},
            "tool": {"from": "toolName"},
            "xb": {"from": "toolTag", "tag": "cross_border"},
            "country": {"from": "toolArg", "path": "beneficiary.country"},
            "bene": {"from": "subject", "subjectType": "counterparty", "role": "beneficiary", "field": "idSystem"},
            "subj": {"from": "subject", "subjectType": "customer"},
            "list": {"from": "const", "value": "OFAC-SDN"},
            "limits": {"from": "const", "value": {"max": [1, 2.5, null]}}
        },
        "op": "eq",
        "value": true,
        "onMissing": "block"
    }));
    let mut args = BTreeMap::new();
    args.insert("user".to_string(), SignalBinding::EnduserId);
    args.insert("tier".to_string(), SignalBinding::EnduserTag("tier".into()));
    args.insert("tool".to_string(), SignalBinding::ToolName);
    args.insert(
        "xb".to_string(),
        SignalBinding::ToolTag("cross_border".into()),
    );
    args.insert(
        "country".to_string(),
        SignalBinding::ToolArg("beneficiary.country".into()),
    );
    args.insert(
        "bene".to_string(),
        SignalBinding::Subject {
            subject_type: "counterparty".into(),
            role: Some("beneficiary".into()),
            field: SubjectField::IdSystem,
        },
    );
    args.insert(
        "subj".to_string(),
        SignalBinding::Subject {
            subject_type: "customer".into(),
            role: None,
            field: SubjectField::Id,
        },
    );
    args.insert("list".to_string(), SignalBinding::Const(json!("OFAC-SDN")));
    args.insert(
        "limits".to_string(),
        SignalBinding::Const(json!({"max": [1, 2.5, null]})),
    );
    assert_eq!(
        c,
        Condition::Signal {
            key: "compliance.sanctionsHit".into(),
            args,
            op: SignalOp::Eq,
            value: json!(true),
            on_missing: Some(EffectType::Block)
        }
    );
}

#[test]
fn signal_ops_and_values() {
    let ops = [
        ("eq", SignalOp::Eq, json!("x")),
        ("neq", SignalOp::Neq, json!({"a": 1})),
        ("gt", SignalOp::Gt, json!(5)),
        ("gte", SignalOp::Gte, json!(5.5)),
        ("lt", SignalOp::Lt, json!("5")),
        ("lte", SignalOp::Lte, json!(-1)),
        ("in", SignalOp::In, json!(["EU", "UK"])),
        ("nin", SignalOp::Nin, json!([1, 2])),
        // The seed's older form: a string holding JSON.
        ("in", SignalOp::In, json!("[\"EU\",\"UK\"]")),
        ("nin", SignalOp::Nin, json!("[]")),
    ];
    for (name, op, value) in ops {
        let c = cond(json!({"kind": "signal", "key": "k", "args": {}, "op": name, "value": value}));
        assert_eq!(
            c,
            Condition::Signal {
                key: "k".into(),
                args: BTreeMap::new(),
                op,
                value,
                on_missing: None
            }
        );
    }
    // `args` may be left out.
    assert!(matches!(
        cond(json!({"kind": "signal", "key": "k", "op": "eq", "value": null})),
        Condition::Signal { ref args, .. } if args.is_empty()
    ));
}

#[test]
fn signal_invalid() {
    let sig =
        |args: Value| json!({"kind": "signal", "key": "k", "args": args, "op": "eq", "value": 1});
    assert_nested(
        sig(json!({"a": {"from": "env"}})),
        ".args.a.from",
        r#""env" is not one of "enduserId", "enduserTag", "toolName", "toolTag", "toolArg", "subject", "const""#,
    );
    assert_nested(
        sig(json!({"a": {"from": "toolName", "tag": "x"}})),
        ".args.a.tag",
        r#"unexpected key "tag" for a binding from "toolName""#,
    );
    assert_nested(
        sig(json!({"a": {"from": "enduserId", "path": "x"}})),
        ".args.a.path",
        r#"unexpected key "path" for a binding from "enduserId""#,
    );
    assert_nested(
        sig(json!({"a": {"from": "const"}})),
        ".args.a",
        r#"missing required key "value""#,
    );
    assert_nested(
        sig(json!({"a": {"from": "toolArg"}})),
        ".args.a",
        r#"missing required key "path""#,
    );
    assert_nested(
        sig(json!({"a": {"from": "enduserTag"}})),
        ".args.a",
        r#"missing required key "tag""#,
    );
    assert_nested(
        sig(json!({"a": {"from": "toolTag", "tag": ""}})),
        ".args.a.tag",
        "must not be empty",
    );
    assert_nested(
        sig(json!({"a": {"from": "subject", "subjectType": "c", "field": "name"}})),
        ".args.a.field",
        r#""name" is not one of "id", "idSystem""#,
    );
    assert_nested(
        sig(json!({"a": {"from": "subject", "subjectType": "c", "value": 1}})),
        ".args.a.value",
        r#"unexpected key "value" for a binding from "subject""#,
    );
    assert_nested(
        sig(json!({"a": {"from": "toolArg", "path": "p", "paths": "q"}})),
        ".args.a.paths",
        r#"unknown key "paths" in a signal binding (did you mean "path"?)"#,
    );
    assert_nested(
        sig(json!({"a": "enduserId"})),
        ".args.a",
        "expected a signal binding (an object), found a string",
    );
    assert_nested(
        sig(json!(["enduserId"])),
        ".args",
        "expected an object of bindings, found an array",
    );
    assert_nested(
        json!({"kind": "signal", "key": "k", "op": "contains", "value": 1}),
        ".op",
        r#""contains" is not one of "eq", "neq", "gt", "gte", "lt", "lte", "in", "nin""#,
    );
    assert_nested(
        json!({"kind": "signal", "key": "", "op": "eq", "value": 1}),
        ".key",
        "must not be empty",
    );
    assert_nested(
        json!({"kind": "signal", "key": "k", "op": "eq"}),
        "",
        r#"missing required key "value""#,
    );
}

// ------------------------------------------------------------------------------------------
// and / or / not

#[test]
fn and_or_not_nested() {
    let c = cond(json!({
        "kind": "and",
        "all": [
            {"kind": "or", "any": [
                {"kind": "toolName", "op": "eq", "value": "a"},
                {"kind": "not", "not": {"kind": "toolTag", "op": "has", "tag": "t"}}
            ]},
            {"kind": "not", "not": {"kind": "not", "not": {"kind": "and", "all": [
                {"kind": "enduserTag", "op": "has", "tag": "vip"}
            ]}}}
        ]
    }));
    assert_eq!(
        c,
        Condition::And(vec![
            Condition::Or(vec![
                Condition::ToolName(StringOp::Eq("a".into())),
                Condition::Not(Box::new(Condition::ToolTag(TagOp::Has("t".into())))),
            ]),
            Condition::Not(Box::new(Condition::Not(Box::new(Condition::And(vec![
                Condition::EnduserTag(EnduserTagOp::Has { tag: "vip".into() })
            ]))))),
        ])
    );
    let mut kinds = Vec::new();
    c.walk(&mut |c| kinds.push(c.kind()));
    assert_eq!(
        kinds,
        [
            "and",
            "or",
            "toolName",
            "not",
            "toolTag",
            "not",
            "not",
            "and",
            "enduserTag"
        ]
    );
}

#[test]
fn nesting_up_to_the_limit_is_accepted() {
    let mut c = ok_cond();
    for _ in 0..MAX_CONDITION_DEPTH {
        c = json!({"kind": "not", "not": c});
    }
    let mut depth = 0;
    cond(c).walk(&mut |c| depth += usize::from(c.kind() == "not"));
    assert_eq!(depth, MAX_CONDITION_DEPTH);
}

#[test]
fn nesting_beyond_the_limit_is_an_error_with_its_path() {
    let mut c = ok_cond();
    for _ in 0..=MAX_CONDITION_DEPTH {
        c = json!({"kind": "not", "not": c});
    }
    let errs = errors(&doc(vec![rule("a", ok_cond()), rule("b", c)]));
    let path = format!(
        "rules[1].condition{}",
        ".not".repeat(MAX_CONDITION_DEPTH + 1)
    );
    assert_error(
        &errs,
        &path,
        &format!("conditions nest deeper than {MAX_CONDITION_DEPTH} levels"),
    );
    assert_eq!(errs.len(), 1);
}

#[test]
fn logic_invalid() {
    assert_nested(
        json!({"kind": "not", "not": [ok_cond()]}),
        ".not",
        "expected a condition (an object with \"kind\"), found an array",
    );
    assert_nested(json!({"kind": "not"}), "", r#"missing required key "not""#);
    assert_nested(
        json!({"kind": "and", "any": [ok_cond()]}),
        ".any",
        r#"unknown key "any" in a condition"#,
    );
    assert_nested(
        json!({"kind": "or", "any": ok_cond()}),
        ".any",
        "expected an array of conditions, found an object",
    );
    assert_nested(
        json!({"kind": "xor", "any": []}),
        ".kind",
        r#"unknown condition kind "xor"; one of toolName"#,
    );
    assert_nested(
        json!({"kind": "toolname", "op": "eq", "value": "a"}),
        ".kind",
        r#"unknown condition kind "toolname" (did you mean "toolName"?)"#,
    );
    assert_nested(
        json!({"op": "eq", "value": "a"}),
        "",
        r#"missing required key "kind"; one of toolName, toolTag"#,
    );
    assert_nested(
        json!({"kind": 3}),
        ".kind",
        "expected a string, found a number",
    );
    assert_nested(
        json!(null),
        "",
        "expected a condition (an object with \"kind\"), found null",
    );
}

// ------------------------------------------------------------------------------------------
// One test per validation error class of issue 2, each checking the full path.

#[test]
fn error_class_unknown_keys() {
    // In a condition, deep.
    assert_nested(
        json!({"kind": "toolArg", "type": "number", "op": "gt", "path": "amount", "value": 1, "vaule": 2}),
        ".vaule",
        r#"unknown key "vaule" in a toolArg condition (did you mean "value"?); allowed keys: kind, type, op, path, value, onMissing"#,
    );
    // Everywhere else: document, policy metadata, rule, selector, tool selector, effect, window.
    let mut bad = rule(
        "b",
        json!({"kind": "timeGate", "timezone": {"source": "static", "tz": "UTC"},
        "windows": [{"days": ["mon"], "start": "09:00", "end": "10:00", "tz": "UTC"}]}),
    );
    bad["prority"] = json!(3);
    bad["selector"]["phases"] = json!("tool.before");
    bad["selector"]["tool"]["tags"] = json!(["x"]);
    bad["effect"]["message"] = json!("no");
    let text = json!({
        "policy": {"name": "x", "onMissing": "block"},
        "rules": [rule("a", ok_cond()), bad],
        "version": 2
    })
    .to_string();
    let errs = errors(&text);
    assert_error(
        &errs,
        "version",
        r#"unknown key "version" in a policy document; allowed keys: policy, rules"#,
    );
    assert_error(
        &errs,
        "policy.onMissing",
        r#"unknown key "onMissing" in the policy metadata (did you mean "onMissingDefault"?)"#,
    );
    assert_error(
        &errs,
        "rules[1].prority",
        r#"unknown key "prority" in a rule (did you mean "priority"?)"#,
    );
    assert_error(
        &errs,
        "rules[1].selector.phases",
        r#"unknown key "phases" in a selector (did you mean "phase"?)"#,
    );
    assert_error(
        &errs,
        "rules[1].selector.tool.tags",
        r#"unknown key "tags" in a tool selector"#,
    );
    assert_error(
        &errs,
        "rules[1].effect.message",
        r#"unknown key "message" in an effect"#,
    );
    assert_error(
        &errs,
        "rules[1].condition.windows[0].tz",
        r#"unknown key "tz" in a time window"#,
    );
    assert_eq!(errs.len(), 7, "{errs:#?}");
}

#[test]
fn error_class_duplicate_rule_ids() {
    let mut named = rule("ignored", ok_cond());
    named.as_object_mut().unwrap().remove("id");
    named["name"] = json!("Refund Cap!");
    let text = doc(vec![
        rule("refund-cap", ok_cond()),
        rule("other", ok_cond()),
        rule("refund-cap", ok_cond()),
        named,
    ]);
    let errs = errors(&text);
    assert_error(
        &errs,
        "rules[2].id",
        r#"duplicate rule id "refund-cap" (first used by rules[0])"#,
    );
    // An id derived from the name collides too.
    assert_error(
        &errs,
        "rules[3].id",
        r#"duplicate rule id "refund-cap" (first used by rules[0])"#,
    );
    assert_eq!(errs.len(), 2);
}

#[test]
fn error_class_empty_and_or() {
    assert_nested(
        json!({"kind": "and", "all": []}),
        ".all",
        "`and` needs at least one condition",
    );
    assert_nested(
        json!({"kind": "or", "any": []}),
        ".any",
        "`or` needs at least one condition",
    );
    assert_nested(json!({"kind": "and"}), "", r#"missing required key "all""#);
}

#[test]
fn error_class_sequence_with_neither_list() {
    assert_nested(
        json!({"kind": "sequence"}),
        "",
        r#"a sequence needs "mustHaveCalled" or "mustNotHaveCalled" (or both)"#,
    );
}

#[test]
fn error_class_in_nin_with_non_array() {
    for op in ["in", "nin"] {
        for (value, found) in [
            (json!("EU"), "a string"),
            (json!("{\"a\": 1}"), "a string"),
            (json!(3), "a number"),
            (json!({"a": 1}), "an object"),
            (json!(null), "null"),
        ] {
            assert_nested(
                json!({"kind": "signal", "key": "k", "op": op, "value": value}),
                ".value",
                &format!(r#"operator "{op}" needs an array value, found {found}"#),
            );
        }
    }
    assert_nested(
        json!({"kind": "toolArg", "type": "string", "op": "in", "path": "p", "value": {"EU": true}}),
        ".value",
        r#"operator "in" needs an array of strings, found an object"#,
    );
}

#[test]
fn error_class_unknown_timezone() {
    assert_nested(
        gate(
            json!({"source": "static", "tz": "Europe/Londn"}),
            json!({"days": ["mon"], "start": "09:00", "end": "10:00"}),
        ),
        ".timezone.tz",
        r#""Europe/Londn" is not a known IANA timezone (e.g. "Europe/London")"#,
    );
    let text =
        json!({"policy": {"name": "x", "timezone": "Mars/Olympus"}, "rules": []}).to_string();
    assert_error(
        &errors(&text),
        "policy.timezone",
        r#""Mars/Olympus" is not a known IANA timezone"#,
    );
}

#[test]
fn error_class_invalid_glob() {
    // toolName glob, sequence entry, maxCalls pattern, metric filter: see their own tests.
    assert_nested(
        json!({"kind": "sequence", "mustHaveCalled": ["run_tests", "lint[", {"by": "toolTag", "tags": ["a"]}]}),
        ".mustHaveCalled[1]",
        r#"invalid glob "lint[": unclosed character class"#,
    );
    // Selector name, single and list form.
    let mut a = rule("a", ok_cond());
    a["selector"]["tool"] = json!({"name": "{shell"});
    let mut b = rule("b", ok_cond());
    b["selector"]["tool"] = json!({"name": ["shell", "bash[", "x"]});
    let errs = errors(&doc(vec![a, b]));
    assert_error(
        &errs,
        "rules[0].selector.tool.name",
        r#"invalid glob "{shell": unclosed alternate group"#,
    );
    assert_error(
        &errs,
        "rules[1].selector.tool.name[1]",
        r#"invalid glob "bash[""#,
    );
    assert_eq!(errs.len(), 2);
}

#[test]
fn glob_valid_as_written_but_not_lowercased_is_rejected() {
    // `[Z-a]` is a valid range, but globs match case-insensitively and compile lowercased,
    // where `[z-a]` is not. It must fail at parse time, not later at compile time.
    assert_nested(
        json!({"kind": "toolName", "op": "glob", "value": "x[Z-a]"}),
        ".value",
        r#"invalid glob "x[Z-a]""#,
    );
}

#[test]
fn error_class_invalid_regex() {
    assert_nested(
        json!({"kind": "toolArg", "type": "string", "op": "regex", "path": "command", "value": "rm (-rf"}),
        ".value",
        "invalid regex: ",
    );
    // Look-around is not supported by Rust's regex.
    assert_nested(
        json!({"kind": "toolArg", "type": "string", "op": "regex", "path": "command", "value": "(?!x)y"}),
        ".value",
        "invalid regex: ",
    );
}

#[test]
fn error_class_bad_hh_mm_exact_message_from_design() {
    // The exact example of the design: rules[3].condition.all[1].windows[0].start.
    let gate_bad = json!({"kind": "timeGate", "timezone": {"source": "enduserTag", "tag": "tz"},
        "windows": [{"days": ["mon"], "start": "25:00", "end": "26:00"}]});
    let text = doc(vec![
        rule("r0", ok_cond()),
        rule("r1", ok_cond()),
        rule("r2", ok_cond()),
        rule("r3", json!({"kind": "and", "all": [ok_cond(), gate_bad]})),
    ]);
    let errs = errors(&text);
    assert!(
        errs.iter().any(|e| e.starts_with(
            r#"policies/x.json: rules[3].condition.all[1].windows[0].start: "25:00" is not HH:MM"#
        )),
        "{errs:#?}"
    );
    assert_error(
        &errs,
        "rules[3].condition.all[1].windows[0].end",
        r#""26:00" is not HH:MM"#,
    );
    assert_eq!(errs.len(), 2);
}

#[test]
fn error_class_negative_numbers() {
    assert_nested(
        json!({"kind": "maxCalls", "selector": {"by": "toolTag", "tags": ["t"]}, "max": -1}),
        ".max",
        "must not be negative, found -1",
    );
    assert_nested(
        json!({"kind": "maxCalls", "selector": {"by": "toolTag", "tags": ["t"]}, "max": 1, "windowSeconds": -60}),
        ".windowSeconds",
        "must not be negative, found -60",
    );
    assert_nested(
        json!({"kind": "executionTime", "scope": "total", "op": "gt", "ms": -0.5}),
        ".ms",
        "must not be negative, found -0.5",
    );
    assert_nested(
        json!({"kind": "metricWindow", "scope": "agent", "metric": {"kind": "custom", "key": "k"},
            "aggregate": "sum", "windowSeconds": -3600, "op": "gt", "value": -5}),
        ".windowSeconds",
        "must not be negative, found -3600",
    );
    // Where a negative number makes sense it is fine: thresholds and priorities.
    let mut r = rule(
        "neg",
        json!({"kind": "metricWindow", "scope": "agent", "metric": {"kind": "custom", "key": "k"},
        "aggregate": "min", "windowSeconds": 60, "op": "lt", "value": -5}),
    );
    r["priority"] = json!(-10);
    let p = parse(&doc(vec![r])).unwrap();
    assert_eq!(p.rules[0].priority, -10);
}

#[test]
fn error_class_malformed_json_empty_file_absurd_nesting() {
    let errs = errors("");
    assert_eq!(
        errs,
        ["policies/x.json: the file is empty; expected a JSON policy"]
    );
    let errs = errors(" \n\t \n");
    assert_eq!(
        errs,
        ["policies/x.json: the file is empty; expected a JSON policy"]
    );
    for text in [
        "garbage",
        "{\"rules\": [",
        "{\"rules\": []}}",
        "{'rules': []}",
        "[1, 2,]",
        "\0\u{1}\u{2}",
    ] {
        let errs = errors(text);
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].starts_with("policies/x.json: not valid JSON: "),
            "{text:?}: {errs:?}"
        );
        assert!(errs[0].contains("line 1 column"), "{errs:?}");
    }
    let mut nots = String::new();
    for _ in 0..10_000 {
        nots.push_str(r#"{"kind": "not", "not": "#);
    }
    let absurd = [
        format!(
            r#"[{{"name": "n", "selector": {{"phase": "tool.before"}}, "effect": {{"type": "block"}}, "condition": {nots}"#
        ),
        "[".repeat(10_000),
        format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)),
        format!("{}1{}", "{\"a\":".repeat(10_000), "}".repeat(10_000)),
    ];
    for text in &absurd {
        let errs = errors(text);
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].starts_with("policies/x.json: nesting too deep (line 1, column "),
            "{errs:?}"
        );
    }
    // Well-formed JSON that is no policy.
    for (text, found) in [
        ("5", "a number"),
        ("\"x\"", "a string"),
        ("null", "null"),
        ("true", "a boolean"),
    ] {
        assert_error(
            &errors(text),
            "",
            &format!("or an array of rules, found {found}"),
        );
    }
    assert_error(&errors("{}"), "", r#"missing required key "rules""#);
    assert_error(
        &errors(r#"{"rules": {}}"#),
        "rules",
        "expected an array of rules, found an object",
    );
    assert_error(
        &errors("[1]"),
        "rules[0]",
        "expected a rule (an object), found a number",
    );
}

// ------------------------------------------------------------------------------------------
// Rules and the policy object

#[test]
fn rule_fields_and_defaults() {
    let p = parse(
        &json!({
            "policy": {"name": "p", "description": "d", "mode": "shadow", "combine": "priority_first",
                "onMissingDefault": "hitl", "timezone": "Europe/London", "version": 1},
            "rules": [
                {"name": "Block Big Refunds (EU)!", "selector": {"phase": "tool.after"},
                 "condition": ok_cond(), "effect": {"type": "hitl", "reason": "why"}},
                {"id": "x", "name": "n", "description": "dd", "priority": 7, "enabled": false,
                 "selector": {"phase": "tool.before", "tool": {"name": "a*", "tagsAll": ["t1"], "tagsAny": ["t2", "t3"]}},
                 "condition": ok_cond(), "effect": {"type": "allow"}, "onMissing": "block", "mode": "off"}
            ]
        })
        .to_string(),
    )
    .unwrap();
    assert_eq!(
        p.meta,
        PolicyMeta {
            name: "p".into(),
            description: Some("d".into()),
            mode: Mode::Shadow,
            combine: Combine::PriorityFirst,
            on_missing_default: EffectType::Hitl,
            timezone: Some("Europe/London".into()),
            redact_detected: true,
            enabled: true,
            agent_selector: None,
            review_ttl_seconds: None,
            on_expire: None,
        }
    );
    let r = &p.rules[0];
    assert_eq!(r.id, "block-big-refunds-eu");
    assert_eq!(
        (r.priority, r.enabled, r.on_missing, r.mode),
        (0, true, None, None)
    );
    assert_eq!(
        r.selector,
        Selector {
            phase: Phase::After,
            tool: None
        }
    );
    assert_eq!(
        r.effect,
        Effect {
            kind: EffectType::Hitl,
            reason: Some("why".into())
        }
    );
    let r = &p.rules[1];
    assert_eq!(r.id, "x");
    assert_eq!(r.description.as_deref(), Some("dd"));
    assert_eq!(
        (r.priority, r.enabled, r.on_missing, r.mode),
        (7, false, Some(EffectType::Block), Some(Mode::Off))
    );
    assert_eq!(
        r.selector.tool,
        Some(ToolSelector {
            name: Some(strings(&["a*"])),
            tags_all: Some(strings(&["t1"])),
            tags_any: Some(strings(&["t2", "t3"]))
        })
    );
}

#[test]
fn rule_invalid_fields() {
    let mut r = rule("a", ok_cond());
    r["priority"] = json!(1.5);
    r["enabled"] = json!("yes");
    r["effect"] = json!({"type": "blok"});
    r["selector"]["phase"] = json!("tool.during");
    r["mode"] = json!("dry-run");
    let mut no_name = rule("b", ok_cond());
    no_name.as_object_mut().unwrap().remove("name");
    let mut unsluggable = rule("c", ok_cond());
    unsluggable.as_object_mut().unwrap().remove("id");
    unsluggable["name"] = json!("!!!");
    let errs = errors(&doc(vec![r, no_name, unsluggable]));
    assert_error(
        &errs,
        "rules[0].priority",
        "expected a whole number, found 1.5",
    );
    assert_error(
        &errs,
        "rules[0].enabled",
        "expected true or false, found a string",
    );
    assert_error(
        &errs,
        "rules[0].effect.type",
        r#""blok" is not one of "allow", "hitl", "block""#,
    );
    assert_error(
        &errs,
        "rules[0].selector.phase",
        r#""tool.during" is not one of "tool.before", "tool.after""#,
    );
    assert_error(
        &errs,
        "rules[0].mode",
        r#""dry-run" is not one of "enforce", "shadow", "off""#,
    );
    assert_error(&errs, "rules[1]", r#"missing required key "name""#);
    assert_error(
        &errs,
        "rules[2].name",
        "cannot derive a rule id from this name",
    );
    assert_eq!(errs.len(), 7, "{errs:#?}");
}

#[test]
fn errors_without_a_file_have_no_file_prefix() {
    let e = parse_policy("[1]", None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "rules[0]: expected a rule (an object), found a number"
    );
    assert_eq!(e.errors()[0].file, None);
    assert_eq!(e.errors()[0].path, "rules[0]");
    let e = parse(&doc(vec![rule("a", json!({"kind": "and", "all": []}))])).unwrap_err();
    assert_eq!(e.errors()[0].file.as_deref(), Some(Path::new(FILE)));
    assert_eq!(e.errors()[0].path, "rules[0].condition.all");
    assert_eq!(e.errors()[0].message, "`and` needs at least one condition");
}

#[test]
fn every_error_in_a_document_is_reported() {
    let text = doc(vec![
        rule("a", json!({"kind": "and", "all": []})),
        rule("b", ok_cond()),
        rule(
            "c",
            json!({"kind": "or", "any": [
                {"kind": "maxCalls", "selector": {"by": "toolTag", "tags": ["t"]}, "max": -3},
                {"kind": "sequence"},
                {"kind": "executionTime", "scope": "total", "op": "gt", "ms": -1}
            ]}),
        ),
        rule(
            "b",
            json!({"kind": "toolArg", "type": "string", "op": "regex", "path": "p", "value": "("}),
        ),
        rule(
            "e",
            json!({"kind": "signal", "key": "k", "op": "in", "value": 1, "extra": true}),
        ),
    ]);
    let errs = errors(&text);
    assert_error(
        &errs,
        "rules[0].condition.all",
        "`and` needs at least one condition",
    );
    assert_error(
        &errs,
        "rules[2].condition.any[0].max",
        "must not be negative",
    );
    assert_error(&errs, "rules[2].condition.any[1]", "a sequence needs");
    assert_error(
        &errs,
        "rules[2].condition.any[2].ms",
        "must not be negative",
    );
    assert_error(&errs, "rules[3].condition.value", "invalid regex");
    assert_error(&errs, "rules[4].condition.extra", r#"unknown key "extra""#);
    assert_error(
        &errs,
        "rules[4].condition.value",
        r#"operator "in" needs an array value"#,
    );
    assert_eq!(errs.len(), 7, "{errs:#?}");
    // Display joins them one per line.
    let all = parse(&text).unwrap_err().to_string();
    assert_eq!(all.lines().count(), 7);
}

#[test]
fn duplicate_ids_are_reported_even_when_other_rules_fail() {
    let text = doc(vec![
        rule("same", ok_cond()),
        rule("bad", json!({"kind": "or", "any": []})),
        rule("same", ok_cond()),
    ]);
    let errs = errors(&text);
    assert_error(
        &errs,
        "rules[1].condition.any",
        "`or` needs at least one condition",
    );
    assert_error(&errs, "rules[2].id", r#"duplicate rule id "same""#);
}

// ------------------------------------------------------------------------------------------
// Handlebar compatibility

#[test]
fn bare_array_of_rules_loads() {
    let text = json!([rule("a", ok_cond()), rule("b", ok_cond())]).to_string();
    let p = parse_policy(&text, Some(Path::new("policies/support-rules.json"))).unwrap();
    assert_eq!(p.meta.name, "support-rules");
    assert_eq!(
        p.meta,
        PolicyMeta {
            name: "support-rules".into(),
            ..PolicyMeta::default()
        }
    );
    assert_eq!(p.rules.len(), 2);
    let p = parse_policy(&text, None).unwrap();
    assert_eq!(p.meta.name, "policy");
    let p = parse_policy("[]", None).unwrap();
    assert!(p.rules.is_empty());
    // Errors in a bare array are reported under `rules`.
    let errs = errors(
        &json!([
            rule("a", ok_cond()),
            rule("b", json!({"kind": "or", "any": []}))
        ])
        .to_string(),
    );
    assert_error(
        &errs,
        "rules[1].condition.any",
        "`or` needs at least one condition",
    );
}

/// Rules written exactly as the Handlebar spec (seed 004) shapes them: no `id`, `priority`
/// and `enabled` present, string-encoded JSON in signal `value` and `const` bindings.
#[test]
fn spec_shaped_rules_load_as_is() {
    let text = r#"[
      {
        "priority": 10,
        "enabled": true,
        "name": "Sanctioned beneficiaries",
        "selector": { "phase": "tool.before", "tool": { "name": ["pay_*", "transfer"], "tagsAll": ["money"], "tagsAny": ["eu", "us"] } },
        "condition": {
          "kind": "signal",
          "key": "compliance.region",
          "args": {
            "user": { "from": "enduserId" },
            "tier": { "from": "enduserTag", "tag": "tier" },
            "tool": { "from": "toolName" },
            "xb": { "from": "toolTag", "tag": "cross_border" },
            "country": { "from": "toolArg", "path": "beneficiary.country" },
            "bene": { "from": "subject", "subjectType": "counterparty", "role": "dest", "field": "id" },
            "list": { "from": "const", "value": "\"OFAC-SDN\"" }
          },
          "op": "in",
          "value": "[\"EU\",\"UK\"]"
        },
        "effect": { "type": "block", "reason": "Sanctioned region." }
      },
      {
        "priority": 5,
        "enabled": true,
        "name": "Office hours",
        "selector": { "phase": "tool.before", "tool": { "name": "send_email" } },
        "condition": { "kind": "not", "not": {
          "kind": "timeGate",
          "timezone": { "source": "enduserTag", "tag": "timezone", "fallback": "org" },
          "windows": [ { "days": ["mon", "tue", "wed", "thu", "fri"], "start": "09:00", "end": "17:00" } ]
        } },
        "effect": { "type": "hitl" }
      },
      {
        "priority": 4,
        "enabled": false,
        "name": "Egress budget",
        "selector": { "phase": "tool.before", "tool": { "tagsAny": ["egress"] } },
        "condition": { "kind": "and", "all": [
          { "kind": "metricWindow", "scope": "agent_user", "metric": { "kind": "inbuilt", "key": "bytes_out" },
            "aggregate": "sum", "windowSeconds": 3600, "op": "gt", "value": 1000000,
            "filter": { "toolName": "http_*", "toolTag": "egress" } },
          { "kind": "maxCalls", "selector": { "by": "toolName", "patterns": ["http_*"] }, "max": 100 },
          { "kind": "executionTime", "scope": "total", "op": "gte", "ms": 60000 },
          { "kind": "sequence", "mustHaveCalled": ["login"], "mustNotHaveCalled": ["logout"] },
          { "kind": "enduserTag", "op": "hasValueAny", "tag": "plan", "values": ["free"] }
        ] },
        "effect": { "type": "allow" }
      },
      {
        "priority": 1,
        "enabled": true,
        "name": "No selector tool",
        "selector": { "phase": "tool.before" },
        "condition": { "kind": "or", "any": [
          { "kind": "enduserTag", "op": "has", "tag": "blocked" },
          { "kind": "enduserTag", "op": "hasValue", "tag": "role", "value": "guest" }
        ] },
        "effect": { "type": "block" }
      }
    ]"#;
    let p = parse_policy(text, None).unwrap_or_else(|e| panic!("{e}"));
    let ids: Vec<&str> = p.rules.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "sanctioned-beneficiaries",
            "office-hours",
            "egress-budget",
            "no-selector-tool"
        ]
    );
    match &p.rules[0].condition {
        Condition::Signal {
            args, op, value, ..
        } => {
            assert_eq!(*op, SignalOp::In);
            assert_eq!(*value, json!("[\"EU\",\"UK\"]"));
            assert_eq!(args.len(), 7);
            assert_eq!(args["list"], SignalBinding::Const(json!("\"OFAC-SDN\"")));
        }
        other => panic!("{other:?}"),
    }
    assert!(!p.rules[2].enabled);
    assert_eq!(p.rules[3].selector.tool, None);
    // And it compiles.
    CompiledPolicies::compile(vec![p], &[None]).unwrap();
}

#[test]
fn mod_docs_example() {
    let err = parse_policy(
        r#"{"rules": [{"name": "x", "selector": {"phase": "tool.before"},
        "condition": {"kind": "toolName", "op": "eq", "value": "a"},
        "effect": {"type": "blok"}}]}"#,
        None,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"rules[0].effect.type: "blok" is not one of "allow", "hitl", "block""#
    );
}

#[test]
fn slug_examples() {
    assert_eq!(slug("Block big refunds (EU)!"), "block-big-refunds-eu");
    assert_eq!(slug("  --a__b--  "), "a-b");
    assert_eq!(slug("Ünïcödé Rule"), "ünïcödé-rule");
    assert_eq!(slug("!!!"), "");
}

#[test]
fn condition_kinds_constant_is_complete() {
    assert_eq!(CONDITION_KINDS.len(), 16);
    for k in CONDITION_KINDS {
        // Every listed kind is recognised: its error is about its fields, never "unknown kind".
        let errs = nested_errors(json!({"kind": k}));
        assert!(
            errs.iter().all(|e| !e.contains("unknown condition kind")),
            "{k}: {errs:?}"
        );
    }
}

#[test]
fn time_of_day() {
    assert_eq!(TimeOfDay::parse("00:00"), Some(TimeOfDay(0)));
    assert_eq!(TimeOfDay::parse("23:59"), Some(TimeOfDay(1439)));
    assert_eq!(TimeOfDay::parse("24:00"), Some(TimeOfDay(1440)));
    for bad in [
        "24:30",
        "+1:00",
        "-1:00",
        "1:000",
        "12:5",
        " 9:00",
        "09:0 ",
        "9h00",
        "١٢:٠٠",
    ] {
        assert_eq!(TimeOfDay::parse(bad), None, "{bad}");
    }
    assert_eq!(TimeOfDay(545).to_string(), "09:05");
}

#[test]
fn tool_arg_paths_must_not_have_empty_segments() {
    for bad in ["a..b", ".a", "a."] {
        let text = format!(
            r#"[{{"id": "r", "name": "r", "selector": {{"phase": "tool.before", "tool": {{}}}},
                "condition": {{"kind": "toolArg", "type": "string", "op": "eq", "path": "{bad}", "value": "x"}},
                "effect": {{"type": "block"}}}}]"#
        );
        let err = toolgate::policy::parse_policy(&text, None)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!(
                "rules[0].condition.path: \"{bad}\" is not a dot path"
            )),
            "{err}"
        );
    }
}
