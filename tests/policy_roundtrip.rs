//! parse → serialize → parse gives the same `Policy`: for every example policy in
//! `policies/`, and for a policy that uses every condition kind and variant.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use toolgate::policy::*;

/// Asserts the round trip through `to_json` (as a value and as text, compact and pretty),
/// through `Serialize`, and that serializing is a fixed point. Returns the re-parsed policy.
#[track_caller]
fn assert_round_trip(p: &Policy, file: Option<&Path>) -> Policy {
    let json = p.to_json();
    let again = parse_policy_value(&json, file)
        .unwrap_or_else(|e| panic!("to_json output does not parse:\n{e}\n{json:#}"));
    assert_eq!(&again, p, "parse(to_json(p)) != p");
    for text in [
        json.to_string(),
        serde_json::to_string_pretty(&json).unwrap(),
    ] {
        let from_text = parse_policy(&text, file).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&from_text, p, "parse(text(to_json(p))) != p");
    }
    // The Serialize impl is the same JSON.
    assert_eq!(serde_json::to_value(p).unwrap(), json);
    assert_eq!(
        serde_json::to_value(&p.rules[..]).unwrap(),
        Value::Array(p.rules.iter().map(Rule::to_json).collect())
    );
    // Serializing the re-parsed policy gives the same JSON.
    assert_eq!(again.to_json(), json);
    // Every rule on its own, as a bare array of rules.
    for r in &p.rules {
        let bare = parse_policy_value(&json!([r.to_json()]), None).unwrap();
        assert_eq!(&bare.rules[0], r);
        let c = serde_json::to_value(&r.condition).unwrap();
        assert_eq!(c, r.condition.to_json());
    }
    again
}

fn example_policies() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            name.ends_with(".json") && !name.ends_with(".tests.json")
        })
        .collect();
    files.sort();
    files
}

#[test]
fn every_example_policy_round_trips() {
    let files = example_policies();
    assert!(
        files.len() >= 3,
        "expected the example policies in policies/, found {files:?}"
    );
    // policy_files() picks the same files.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    assert_eq!(policy_files(&[dir]).unwrap(), files);
    for f in &files {
        let p = load_policy_file(f).unwrap_or_else(|e| panic!("{}:\n{e}", f.display()));
        assert!(!p.rules.is_empty(), "{}", f.display());
        assert_round_trip(&p, Some(f));
        // Nothing in the file is lost: every key of the original is in the serialized form
        // with the same value (serializing only adds defaults).
        let original: Value = serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        assert_json_included(&original, &p.to_json(), &f.display().to_string());
    }
}

/// Every key and value of `small` is in `big` (arrays element-wise, numbers by value, a single
/// string equal to a one-element array of it, as selector and filter globs are normalised).
fn assert_json_included(small: &Value, big: &Value, at: &str) {
    match (small, big) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let Some(bv) = b.get(k) else {
                    panic!("{at}.{k} lost in serialization")
                };
                assert_json_included(v, bv, &format!("{at}.{k}"));
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.len(), b.len(), "{at}: array length");
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert_json_included(x, y, &format!("{at}[{i}]"));
            }
        }
        (Value::String(s), Value::Array(b)) if b.len() == 1 => {
            assert_eq!(b[0], Value::String(s.clone()), "{at}")
        }
        (Value::Number(a), Value::Number(b)) => assert_eq!(a.as_f64(), b.as_f64(), "{at}"),
        (a, b) => assert_eq!(a, b, "{at}"),
    }
}

#[test]
fn example_policies_compile_together() {
    let files = example_policies();
    let compiled = load_policies(&files).unwrap_or_else(|e| panic!("{e}"));
    drop(compiled);
}

/// A policy with every condition kind and every variant of each.
fn every_kind() -> Value {
    let c = |v: Value| v;
    let conditions = vec![
        c(json!({"kind": "toolName", "op": "eq", "value": "a"})),
        c(json!({"kind": "toolName", "op": "neq", "value": "a"})),
        c(json!({"kind": "toolName", "op": "contains", "value": "b"})),
        c(json!({"kind": "toolName", "op": "startsWith", "value": "crm_"})),
        c(json!({"kind": "toolName", "op": "endsWith", "value": "_v2"})),
        c(json!({"kind": "toolName", "op": "glob", "value": "{crm,erp}_*[0-9]?"})),
        c(json!({"kind": "toolName", "op": "in", "value": ["git_push", "git_fetch"]})),
        c(json!({"kind": "toolName", "op": "in", "value": []})),
        c(json!({"kind": "toolTag", "op": "has", "tag": "pii"})),
        c(json!({"kind": "toolTag", "op": "anyOf", "tags": ["network", "egress"]})),
        c(json!({"kind": "toolTag", "op": "allOf", "tags": ["write", "prod"]})),
        c(json!({"kind": "toolArg", "type": "string", "op": "eq", "path": "a", "value": "x"})),
        c(json!({"kind": "toolArg", "type": "string", "op": "neq", "path": "a.b", "value": "v"})),
        c(
            json!({"kind": "toolArg", "type": "string", "op": "contains", "path": "a.0", "value": "..", "onMissing": "block"}),
        ),
        c(
            json!({"kind": "toolArg", "type": "string", "op": "startsWith", "path": "p", "value": "/workspace/"}),
        ),
        c(
            json!({"kind": "toolArg", "type": "string", "op": "endsWith", "path": "p", "value": ".env"}),
        ),
        c(
            json!({"kind": "toolArg", "type": "string", "op": "in", "path": "c", "value": ["EU", "UK"]}),
        ),
        c(
            json!({"kind": "toolArg", "type": "string", "op": "regex", "path": "cmd", "value": "(^|[\\s;&|(])rm\\s+-rf\\b"}),
        ),
        c(json!({"kind": "toolArg", "type": "number", "op": "eq", "path": "n", "value": 0})),
        c(json!({"kind": "toolArg", "type": "number", "op": "neq", "path": "n", "value": -0.0})),
        c(json!({"kind": "toolArg", "type": "number", "op": "lt", "path": "n", "value": 0.1})),
        c(json!({"kind": "toolArg", "type": "number", "op": "lte", "path": "n", "value": -1e300})),
        c(
            json!({"kind": "toolArg", "type": "number", "op": "gt", "path": "amount", "value": 1000}),
        ),
        c(
            json!({"kind": "toolArg", "type": "number", "op": "gte", "path": "n", "value": 18446744073709551615u64}),
        ),
        c(
            json!({"kind": "toolArg", "type": "number", "op": "gte", "path": "n", "value": 9007199254740993i64}),
        ),
        c(
            json!({"kind": "toolArg", "type": "boolean", "op": "eq", "path": "force", "value": true, "onMissing": "hitl"}),
        ),
        c(
            json!({"kind": "toolArg", "type": "boolean", "op": "eq", "path": "dry", "value": false, "onMissing": "allow"}),
        ),
        c(json!({"kind": "enduserTag", "op": "has", "tag": "do_not_contact"})),
        c(json!({"kind": "enduserTag", "op": "hasValue", "tag": "role", "value": "approver"})),
        c(
            json!({"kind": "enduserTag", "op": "hasValueAny", "tag": "tier", "values": ["gold", "platinum"]}),
        ),
        c(json!({"kind": "executionTime", "scope": "tool", "op": "gt", "ms": 120000})),
        c(
            json!({"kind": "executionTime", "scope": "total", "op": "lte", "ms": 0.25, "onMissing": "block"}),
        ),
        c(
            json!({"kind": "sequence", "mustHaveCalled": ["run_tests", {"by": "toolTag", "tags": ["review"], "op": "allOf"}]}),
        ),
        c(
            json!({"kind": "sequence", "mustNotHaveCalled": [{"by": "toolTag", "tags": ["secrets"]}, "read_*"]}),
        ),
        c(
            json!({"kind": "sequence", "mustHaveCalled": ["a"], "mustNotHaveCalled": [{"by": "toolTag", "tags": ["x", "y"], "op": "anyOf"}]}),
        ),
        c(
            json!({"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["shell", "bash*"]}, "max": 8}),
        ),
        c(
            json!({"kind": "maxCalls", "selector": {"by": "toolTag", "tags": ["money"]}, "max": 0, "windowSeconds": 3600, "per": "agent"}),
        ),
        c(
            json!({"kind": "maxCalls", "selector": {"by": "toolTag", "tags": ["t"]}, "max": 18446744073709551615u64, "windowSeconds": 1, "per": "agent_user"}),
        ),
        c(
            json!({"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["x"]}, "max": 2, "per": "run"}),
        ),
        c(
            json!({"kind": "metricWindow", "scope": "agent", "metric": {"kind": "inbuilt", "key": "bytes_in"},
            "aggregate": "sum", "windowSeconds": 60, "op": "gt", "value": 1024}),
        ),
        c(
            json!({"kind": "metricWindow", "scope": "agent_user", "metric": {"kind": "custom", "key": "payment_usd"},
            "aggregate": "avg", "windowSeconds": 86400, "op": "gte", "value": 50000.5,
            "filter": {"toolName": "pay_*", "toolTag": ["money", "eu"]}, "onMissing": "hitl"}),
        ),
        c(
            json!({"kind": "metricWindow", "scope": "run", "metric": {"kind": "inbuilt", "key": "llm_cost_usd"},
            "aggregate": "max", "windowSeconds": 600, "op": "lt", "value": 2.0, "filter": {"toolName": ["a", "b*"]}}),
        ),
        c(
            json!({"kind": "metricWindow", "scope": "run", "metric": {"kind": "inbuilt", "key": "records_out"},
            "aggregate": "min", "windowSeconds": 5, "op": "neq", "value": -3, "filter": {"toolTag": "t"}}),
        ),
        c(
            json!({"kind": "metricWindow", "scope": "agent", "metric": {"kind": "inbuilt", "key": "duration_ms"},
            "aggregate": "count", "windowSeconds": 1, "op": "eq", "value": 0, "filter": {}}),
        ),
        c(
            json!({"kind": "timeGate", "timezone": {"source": "enduserTag", "tag": "tz", "fallback": "org"},
            "windows": [{"days": ["mon", "tue", "wed", "thu", "fri"], "start": "08:00", "end": "20:00"},
                        {"days": ["fri", "sat", "sun"], "start": "23:00", "end": "01:00"}]}),
        ),
        c(
            json!({"kind": "timeGate", "timezone": {"source": "enduserTag", "tag": "tz"},
            "windows": [{"days": ["SUN"], "start": "00:00", "end": "24:00"}], "onMissing": "allow"}),
        ),
        c(
            json!({"kind": "timeGate", "timezone": {"source": "static", "tz": "America/New_York"},
            "windows": [{"days": ["wed"], "start": "09:05", "end": "17:55"}]}),
        ),
        c(json!({"kind": "requireSubject", "subjectType": "customer"})),
        c(
            json!({"kind": "requireSubject", "subjectType": "customer", "idSystem": "crm", "role": "primary"}),
        ),
        c(json!({"kind": "signal", "key": "compliance.sanctionsHit",
            "args": {
                "user": {"from": "enduserId"},
                "tier": {"from": "enduserTag", "tag": "tier"},
                "tool": {"from": "toolName"},
                "xb": {"from": "toolTag", "tag": "cross_border"},
                "country": {"from": "toolArg", "path": "beneficiary.country"},
                "bene": {"from": "subject", "subjectType": "counterparty", "role": "beneficiary", "field": "idSystem"},
                "subj": {"from": "subject", "subjectType": "customer", "field": "id"},
                "subj2": {"from": "subject", "subjectType": "customer"},
                "list": {"from": "const", "value": "OFAC-SDN"},
                "obj": {"from": "const", "value": {"a": [1, 2.5, null, true, {"b": "c"}]}},
                "old": {"from": "const", "value": "\"quoted\""}
            },
            "op": "eq", "value": true, "onMissing": "block"})),
        c(json!({"kind": "signal", "key": "k", "op": "neq", "value": {"nested": [1, "2"]}})),
        c(json!({"kind": "signal", "key": "k", "args": {}, "op": "gt", "value": 5})),
        c(json!({"kind": "signal", "key": "k", "op": "gte", "value": 5.5})),
        c(json!({"kind": "signal", "key": "k", "op": "lt", "value": "7"})),
        c(json!({"kind": "signal", "key": "k", "op": "lte", "value": null})),
        c(json!({"kind": "signal", "key": "k", "op": "in", "value": ["EU", "UK", 3]})),
        c(json!({"kind": "signal", "key": "k", "op": "nin", "value": "[\"EU\",\"UK\"]"})),
        c(json!({"kind": "signal", "key": "k", "op": "nin", "value": [], "onMissing": "allow"})),
        c(
            json!({"kind": "sensitiveData", "target": "toolArg", "path": "mail.body", "op": "allOf",
            "detectors": [{"detector": "credit_card"},
                          {"detector": "url", "subCondition": {"check": "domain", "op": "in", "value": ["a.com", "b.io"]}},
                          {"detector": "email_domain", "subCondition": {"check": "tld", "op": "neq", "value": "gov"}}]}),
        ),
        c(
            json!({"kind": "sensitiveData", "target": "toolArg", "detectors": [{"detector": "secret_key"}]}),
        ),
        c(json!({"kind": "custom", "name": "over_limit", "args": {"limit": 100, "l": [1, null]}})),
        c(json!({"kind": "toolArg", "op": "exists", "path": "a.0"})),
        c(json!({"kind": "toolArg", "type": "number", "op": "gt", "value": 3})),
        c(
            json!({"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["*"]}, "max": 2, "tagFilter": ["ext"]}),
        ),
        c(
            json!({"kind": "sequence", "mustHaveCalled": [{"by": "toolName", "patterns": ["a", "b*"]}]}),
        ),
        c(
            json!({"kind": "metricWindow", "scope": "run", "metric": {"kind": "inbuilt", "key": "bytes_in"},
            "aggregate": "sum", "op": "gt", "value": 1}),
        ),
    ];
    let mut rules: Vec<Value> = conditions
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let effect = ["allow", "hitl", "block"][i % 3];
            json!({
                "id": format!("r{i}"),
                "name": format!("Rule {i}: {}", c["kind"].as_str().unwrap()),
                "priority": i as i64 - 20,
                "enabled": i % 7 != 3,
                "selector": {"phase": if i % 2 == 0 { "tool.before" } else { "tool.after" }, "tool": {"name": format!("tool_{i}*")}},
                "condition": c,
                "effect": {"type": effect}
            })
        })
        .collect();
    // and / or / not, nested, over all of the above.
    let nested = json!({
        "kind": "and",
        "all": [
            {"kind": "or", "any": conditions.clone()},
            {"kind": "not", "not": {"kind": "and", "all": conditions.clone()}},
            {"kind": "not", "not": {"kind": "not", "not": {"kind": "or", "any": [
                {"kind": "and", "all": [conditions[0].clone()]}
            ]}}}
        ]
    });
    rules.push(json!({
        "name": "Everything nested — with a derived id!",
        "description": "all kinds under and/or/not",
        "priority": i64::MAX,
        "enabled": true,
        "selector": {"phase": "tool.before", "tool": {"name": ["a*", "b?"], "tagsAll": ["x"], "tagsAny": ["y", "z"]}},
        "condition": nested,
        "effect": {"type": "hitl", "reason": "because — ünïcode \"quoted\"\n"},
        "onMissing": "hitl",
        "mode": "shadow"
    }));
    // Rules covering the remaining rule and selector shapes.
    rules.push(json!({"id": "no-tool", "name": "no tool", "priority": i64::MIN, "enabled": true,
        "selector": {"phase": "tool.before"}, "condition": conditions[1].clone(), "effect": {"type": "block"}, "mode": "off"}));
    rules.push(json!({"id": "tags-only", "name": "tags only", "priority": 0, "enabled": false,
        "selector": {"phase": "tool.after", "tool": {"tagsAny": ["pii"]}}, "condition": conditions[2].clone(),
        "effect": {"type": "allow", "reason": ""}, "onMissing": "allow", "mode": "enforce"}));
    rules.push(json!({"id": "every-tool", "name": "every tool", "priority": 1, "enabled": true,
        "selector": {"phase": "tool.before", "tool": {}}, "condition": conditions[3].clone(), "effect": {"type": "block"}}));
    json!({
        "policy": {
            "name": "every-kind",
            "description": "round-trip fixture",
            "mode": "shadow",
            "combine": "priority_first",
            "onMissingDefault": "block",
            "timezone": "Europe/London",
            "version": 3
        },
        "rules": rules
    })
}

#[test]
fn every_condition_kind_round_trips() {
    let v = every_kind();
    let p = parse_policy_value(&v, None).unwrap_or_else(|e| panic!("{e}"));
    // Make sure the fixture really has every kind.
    let mut kinds: Vec<&str> = Vec::new();
    for r in &p.rules {
        r.condition.walk(&mut |c| kinds.push(c.kind()));
    }
    for k in CONDITION_KINDS {
        assert!(kinds.contains(k), "fixture lacks {k}");
    }
    let again = assert_round_trip(&p, None);
    // And a second time, from the re-parsed value.
    assert_round_trip(&again, Some(Path::new("policies/every-kind.json")));
    // And it compiles.
    CompiledPolicies::compile(vec![p], &[None]).unwrap();
}

#[test]
fn policy_meta_variants_round_trip() {
    let rule = json!({"id": "r", "name": "r", "priority": 0, "enabled": true,
        "selector": {"phase": "tool.before", "tool": {}},
        "condition": {"kind": "toolTag", "op": "has", "tag": "t"}, "effect": {"type": "block"}});
    for meta in [
        json!(null),
        json!({}),
        json!({"name": "n"}),
        json!({"name": "n", "mode": "off", "combine": "most_severe_wins", "onMissingDefault": "allow"}),
        json!({"name": "n", "mode": "enforce", "onMissingDefault": "hitl", "timezone": "Asia/Kolkata"}),
    ] {
        let doc = if meta.is_null() {
            json!([rule.clone()])
        } else {
            json!({"policy": meta, "rules": [rule.clone()]})
        };
        let p = parse_policy_value(&doc, Some(Path::new("dir/named.json")))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_round_trip(&p, None);
    }
    // An empty policy.
    let p = parse_policy("[]", None).unwrap();
    let again = parse_policy_value(&p.to_json(), None).unwrap();
    assert_eq!(again, p);
}

#[test]
fn serialized_shape_is_the_documented_json() {
    let p = parse_policy_value(&every_kind(), None).unwrap();
    let j = p.to_json();
    assert_eq!(j["policy"]["name"], "every-kind");
    assert_eq!(j["policy"]["combine"], "priority_first");
    // Integral numbers stay integers, fractions stay fractions.
    let find = |id: &str| {
        j["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(find("r22")["condition"]["value"], json!(1000));
    assert!(find("r22")["condition"]["value"].is_i64());
    assert_eq!(find("r20")["condition"]["value"], json!(0.1));
    // Selector names are written as arrays; sequence tag entries carry their op.
    assert_eq!(find("r0")["selector"]["tool"]["name"], json!(["tool_0*"]));
    assert_eq!(
        find("r33")["condition"]["mustNotHaveCalled"][0],
        json!({"by": "toolTag", "tags": ["secrets"], "op": "anyOf"})
    );
    // Days are written lowercase.
    assert_eq!(
        find("r45")["condition"]["windows"][0]["days"],
        json!(["sun"])
    );
    assert_eq!(
        find("r45")["condition"]["windows"][0]["end"],
        json!("24:00")
    );
    // A derived id is written out.
    assert_eq!(
        j["rules"][p.rules.len() - 4]["id"],
        json!("everything-nested-with-a-derived-id")
    );
}
