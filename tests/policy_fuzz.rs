//! Property tests: parsing arbitrary JSON values and arbitrary strings never panics; whatever
//! parses also compiles and round-trips. Deterministic (fixed seed) and bounded in size.

use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use serde_json::{Map, Value, json};
use toolgate::policy::*;

fn config(cases: u32) -> Config {
    Config {
        cases,
        rng_seed: RngSeed::Fixed(0x7001_6a7e),
        failure_persistence: None,
        max_shrink_iters: 2000,
        ..Config::default()
    }
}

/// Keys and strings of the policy language, so that generated values often get deep into
/// the parser instead of failing at the top.
const WORDS: &[&str] = &[
    "policy",
    "rules",
    "name",
    "id",
    "description",
    "priority",
    "enabled",
    "selector",
    "phase",
    "tool",
    "tagsAll",
    "tagsAny",
    "condition",
    "effect",
    "type",
    "reason",
    "onMissing",
    "mode",
    "combine",
    "onMissingDefault",
    "timezone",
    "version",
    "kind",
    "op",
    "value",
    "values",
    "tag",
    "tags",
    "path",
    "scope",
    "ms",
    "mustHaveCalled",
    "mustNotHaveCalled",
    "by",
    "patterns",
    "max",
    "windowSeconds",
    "per",
    "metric",
    "key",
    "aggregate",
    "filter",
    "toolName",
    "toolTag",
    "source",
    "fallback",
    "tz",
    "windows",
    "days",
    "start",
    "end",
    "subjectType",
    "idSystem",
    "role",
    "args",
    "from",
    "field",
    "all",
    "any",
    "not",
    "toolArg",
    "enduserTag",
    "executionTime",
    "sequence",
    "maxCalls",
    "metricWindow",
    "timeGate",
    "requireSubject",
    "signal",
    "and",
    "or",
    "tool.before",
    "tool.after",
    "allow",
    "hitl",
    "block",
    "enforce",
    "shadow",
    "off",
    "most_severe_wins",
    "priority_first",
    "eq",
    "neq",
    "lt",
    "lte",
    "gt",
    "gte",
    "contains",
    "startsWith",
    "endsWith",
    "glob",
    "in",
    "nin",
    "regex",
    "has",
    "hasValue",
    "hasValueAny",
    "anyOf",
    "allOf",
    "string",
    "number",
    "boolean",
    "total",
    "run",
    "agent",
    "agent_user",
    "inbuilt",
    "custom",
    "bytes_in",
    "bytes_out",
    "duration_ms",
    "records_in",
    "llm_cost_usd",
    "sum",
    "avg",
    "min",
    "count",
    "static",
    "org",
    "Europe/London",
    "UTC",
    "Mars/Olympus",
    "mon",
    "fri",
    "sun",
    "funday",
    "09:00",
    "17:30",
    "24:00",
    "25:00",
    "+9:00",
    "enduserId",
    "subject",
    "const",
    "id",
    "shell*",
    "[Z-a]",
    "{a,b}",
    "[a-",
    "a\\",
    "(abc",
    "^a.*$",
    "(?!x)",
    "a{99999}{99999}",
    "",
    "-",
    "[\"EU\",\"UK\"]",
    "true",
    "*",
];

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(WORDS).prop_map(str::to_string),
        1 => "\\PC{0,12}",
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-3i64..100).prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        (-10.0f64..10.0).prop_map(Value::from),
        word().prop_map(Value::from),
    ]
}

/// Arbitrary JSON, bounded: at most 6 levels, about 200 nodes.
fn json_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(6, 200, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((word(), inner.clone()), 0..8)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            // A condition-shaped object.
            (
                proptest::sample::select(CONDITION_KINDS),
                prop::collection::vec((word(), inner), 0..6)
            )
                .prop_map(|(kind, kv)| {
                    let mut m: Map<String, Value> = kv.into_iter().collect();
                    m.insert("kind".into(), kind.into());
                    Value::Object(m)
                }),
        ]
    })
}

/// The properties every input must satisfy: no panic; errors are non-empty and carry the file;
/// a policy that parses compiles and round-trips.
fn check_value(v: &Value) {
    let file = Path::new("fuzz/p.json");
    match parse_policy_value(v, Some(file)) {
        Ok(p) => {
            let again = parse_policy_value(&p.to_json(), Some(file))
                .unwrap_or_else(|e| panic!("serialized form does not parse: {e}\ninput: {v}"));
            assert_eq!(again, p, "round trip differs for input {v}");
            if let Err(e) = CompiledPolicies::compile(vec![p], &[Some(file)]) {
                panic!("parsed but does not compile: {e}\ninput: {v}");
            }
        }
        Err(e) => check_errors(&e),
    }
}

fn check_errors(e: &PolicyErrors) {
    assert!(!e.errors().is_empty());
    for err in e.errors() {
        assert_eq!(err.file.as_deref(), Some(Path::new("fuzz/p.json")));
        assert!(!err.message.is_empty());
        assert!(err.to_string().starts_with("fuzz/p.json: "));
    }
}

/// A small valid policy with most condition kinds, for mutation.
fn base_policy() -> Value {
    let r = |id: &str, c: Value| {
        json!({"id": id, "name": id, "priority": 1, "enabled": true,
            "selector": {"phase": "tool.before", "tool": {"name": ["a*", "b"], "tagsAny": ["t"]}},
            "condition": c, "effect": {"type": "block", "reason": "r"}})
    };
    json!({
        "policy": {"name": "base", "mode": "enforce", "combine": "priority_first", "onMissingDefault": "hitl", "timezone": "Europe/London"},
        "rules": [
            r("a", json!({"kind": "and", "all": [
                {"kind": "toolName", "op": "glob", "value": "crm_*"},
                {"kind": "or", "any": [
                    {"kind": "toolTag", "op": "anyOf", "tags": ["x", "y"]},
                    {"kind": "not", "not": {"kind": "enduserTag", "op": "hasValue", "tag": "role", "value": "admin"}}
                ]}
            ]})),
            r("b", json!({"kind": "toolArg", "type": "string", "op": "regex", "path": "cmd", "value": "^rm -r?f"})),
            r("c", json!({"kind": "toolArg", "type": "number", "op": "gt", "path": "amount", "value": 100})),
            r("d", json!({"kind": "executionTime", "scope": "total", "op": "gt", "ms": 1000})),
            r("e", json!({"kind": "sequence", "mustHaveCalled": ["run_tests", {"by": "toolTag", "tags": ["t"], "op": "allOf"}]})),
            r("f", json!({"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["shell"]}, "max": 3, "windowSeconds": 60, "per": "agent"})),
            r("g", json!({"kind": "metricWindow", "scope": "agent", "metric": {"kind": "inbuilt", "key": "bytes_out"},
                "aggregate": "sum", "windowSeconds": 60, "op": "gt", "value": 10, "filter": {"toolName": "a*", "toolTag": ["t"]}})),
            r("h", json!({"kind": "timeGate", "timezone": {"source": "enduserTag", "tag": "tz", "fallback": "org"},
                "windows": [{"days": ["mon", "fri"], "start": "09:00", "end": "17:00"}]})),
            r("i", json!({"kind": "timeGate", "timezone": {"source": "static", "tz": "UTC"},
                "windows": [{"days": ["sun"], "start": "22:00", "end": "02:00"}]})),
            r("j", json!({"kind": "requireSubject", "subjectType": "customer", "idSystem": "crm"})),
            r("k", json!({"kind": "signal", "key": "s", "args": {
                "u": {"from": "enduserId"}, "t": {"from": "enduserTag", "tag": "tier"}, "n": {"from": "toolName"},
                "g": {"from": "toolTag", "tag": "x"}, "p": {"from": "toolArg", "path": "a.b"},
                "s": {"from": "subject", "subjectType": "c", "role": "r", "field": "idSystem"},
                "c": {"from": "const", "value": [1, "2"]}
            }, "op": "in", "value": ["EU", "UK"], "onMissing": "block"}))
        ]
    })
}

/// Number of nodes of a JSON value (pre-order).
fn node_count(v: &Value) -> usize {
    1 + match v {
        Value::Array(a) => a.iter().map(node_count).sum(),
        Value::Object(m) => m.values().map(node_count).sum(),
        _ => 0,
    }
}

/// The node at pre-order index `i`.
fn node_mut(v: &mut Value, mut i: usize) -> &mut Value {
    fn go<'a>(v: &'a mut Value, i: &mut usize) -> Option<&'a mut Value> {
        if *i == 0 {
            return Some(v);
        }
        *i -= 1;
        match v {
            Value::Array(a) => a.iter_mut().find_map(|c| go(c, i)),
            Value::Object(m) => m.values_mut().find_map(|c| go(c, i)),
            _ => None,
        }
    }
    go(v, &mut i).expect("index in range")
}

#[derive(Debug, Clone)]
enum Mutation {
    Replace(Value),
    RemoveKey(prop::sample::Index),
    AddKey(String, Value),
    Duplicate,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => json_value().prop_map(Mutation::Replace),
        2 => any::<prop::sample::Index>().prop_map(Mutation::RemoveKey),
        1 => (word(), leaf()).prop_map(|(k, v)| Mutation::AddKey(k, v)),
        1 => Just(Mutation::Duplicate),
    ]
}

fn mutate(mut v: Value, muts: &[(prop::sample::Index, Mutation)]) -> Value {
    for (at, m) in muts {
        let n = node_count(&v);
        let node = node_mut(&mut v, at.index(n));
        match m {
            Mutation::Replace(r) => *node = r.clone(),
            Mutation::RemoveKey(k) => {
                if let Value::Object(map) = node
                    && !map.is_empty()
                {
                    let key = map.keys().nth(k.index(map.len())).unwrap().clone();
                    map.remove(&key);
                }
            }
            Mutation::AddKey(k, val) => {
                if let Value::Object(map) = node {
                    map.insert(k.clone(), val.clone());
                }
            }
            Mutation::Duplicate => {
                if let Value::Array(a) = node
                    && let Some(first) = a.first().cloned()
                {
                    a.push(first);
                }
            }
        }
    }
    v
}

#[test]
fn base_policy_is_valid() {
    let p = parse_policy_value(&base_policy(), None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.rules.len(), 11);
    check_value(&base_policy());
    // Mutating nothing keeps it valid.
    assert_eq!(mutate(base_policy(), &[]), base_policy());
}

proptest! {
    // Valid policies compile globs and regexes (slow in debug builds): fewer cases.
    #![proptest_config(config(160))]

    #[test]
    fn mutated_valid_policies_never_panic(
        muts in prop::collection::vec((any::<prop::sample::Index>(), mutation()), 1..4)
    ) {
        let v = mutate(base_policy(), &muts);
        check_value(&v);
        // The same through text.
        let text = v.to_string();
        match parse_policy(&text, Some(Path::new("fuzz/p.json"))) {
            Ok(_) => {}
            Err(e) => check_errors(&e),
        }
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn arbitrary_json_values_never_panic(v in json_value()) {
        check_value(&v);
        // Also as a rule list and as a condition of an otherwise valid rule.
        check_value(&json!([v.clone()]));
        check_value(&json!([{"name": "n", "selector": {"phase": "tool.before", "tool": {}},
            "condition": v.clone(), "effect": {"type": "block"}}]));
        check_value(&json!({"policy": v, "rules": []}));
    }

    #[test]
    fn arbitrary_strings_never_panic(s in "\\PC{0,200}") {
        if let Err(e) = parse_policy(&s, Some(Path::new("fuzz/p.json"))) {
            check_errors(&e);
        }
    }

    #[test]
    fn json_token_soup_never_panics(
        tokens in prop::collection::vec(
            prop_oneof![
                proptest::sample::select(&["{", "}", "[", "]", ",", ":", "\"", "null", "true", "1", "-1.5e3", " ", "\n"][..])
                    .prop_map(str::to_string),
                word().prop_map(|w| format!("\"{w}\"")),
            ],
            0..120
        )
    ) {
        let s = tokens.concat();
        if let Err(e) = parse_policy(&s, Some(Path::new("fuzz/p.json"))) {
            check_errors(&e);
        }
    }

    #[test]
    fn arbitrary_bytes_from_files_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let s = String::from_utf8_lossy(&bytes);
        if let Err(e) = parse_policy(&s, Some(Path::new("fuzz/p.json"))) {
            check_errors(&e);
        }
    }
}

/// Values built in code are not limited by serde_json's recursion limit: the parser must
/// stop by itself. (Built by hand: `json!` would deep-copy the value at every level. Leaked:
/// dropping it would recurse 10,000 levels.)
#[test]
fn absurdly_deep_values_are_rejected_without_recursing() {
    fn obj(pairs: Vec<(&str, Value)>) -> Value {
        Value::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }
    let wraps: [fn(Value) -> Value; 3] = [
        |c| obj(vec![("kind", "not".into()), ("not", c)]),
        |c| obj(vec![("kind", "and".into()), ("all", Value::Array(vec![c]))]),
        |c| {
            let tag = obj(vec![
                ("kind", "toolTag".into()),
                ("op", "has".into()),
                ("tag", "t".into()),
            ]);
            obj(vec![
                ("kind", "or".into()),
                ("any", Value::Array(vec![tag, c])),
            ])
        },
    ];
    for wrap in wraps {
        let mut c = json!({"kind": "toolName", "op": "eq", "value": "x"});
        for _ in 0..10_000 {
            c = wrap(c);
        }
        let rule = obj(vec![
            ("name", "deep".into()),
            ("selector", json!({"phase": "tool.before", "tool": {}})),
            ("effect", json!({"type": "block"})),
            ("condition", c),
        ]);
        let doc: &Value = Box::leak(Box::new(Value::Array(vec![rule])));
        let e = parse_policy_value(doc, Some(Path::new("fuzz/p.json"))).unwrap_err();
        // One error per branch that goes too deep (the `or` has two at the limit).
        assert!((1..=2).contains(&e.errors().len()), "{e}");
        for err in e.errors() {
            assert_eq!(err.message, "conditions nest deeper than 64 levels");
            assert!(err.path.starts_with("rules[0].condition."));
        }
    }
}
