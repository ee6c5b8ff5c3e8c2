//! Issue 36: what an `llm.before` rule may say. A table of one valid condition of every kind:
//! the kinds that make sense before a model call load (alone and nested in and/or/not), every
//! other one is refused naming the file, the JSON path and the rule; the per-kind details
//! (maxCalls by tag, executionTime of the tool, sensitiveData targets, signal bindings,
//! selector tags) likewise. Plus a property: any nesting of allowed kinds loads, and one
//! refused kind anywhere in it is reported at its own path.

use proptest::prelude::*;
use serde_json::{Value, json};
use toolgate::policy::{CONDITION_KINDS, LLM_CONDITION_KINDS, parse_policy};

/// One valid condition of each kind (valid in a tool.before rule).
fn sample(kind: &str) -> Value {
    match kind {
        "toolName" => json!({"kind": "toolName", "op": "eq", "value": "x"}),
        "toolTag" => json!({"kind": "toolTag", "op": "has", "tag": "pii"}),
        "toolArg" => {
            json!({"kind": "toolArg", "type": "string", "op": "eq", "path": "a", "value": "b"})
        }
        "enduserTag" => json!({"kind": "enduserTag", "op": "has", "tag": "vip"}),
        "executionTime" => {
            json!({"kind": "executionTime", "scope": "total", "op": "gt", "ms": 60000})
        }
        "sequence" => json!({"kind": "sequence", "mustHaveCalled": ["login"]}),
        "maxCalls" => json!({"kind": "maxCalls",
            "selector": {"by": "toolName", "patterns": ["gpt-*"]}, "max": 3}),
        "metricWindow" => json!({"kind": "metricWindow", "scope": "run",
            "metric": {"kind": "inbuilt", "key": "llm_tokens_in"}, "aggregate": "sum",
            "op": "gte", "value": 1000}),
        "timeGate" => json!({"kind": "timeGate", "timezone": {"source": "static", "tz": "UTC"},
            "windows": [{"days": ["mon"], "start": "09:00", "end": "17:00"}]}),
        "requireSubject" => json!({"kind": "requireSubject", "subjectType": "customer"}),
        "signal" => json!({"kind": "signal", "key": "budget.left",
            "args": {"user": {"from": "enduserId"}}, "op": "lte", "value": 0}),
        "sensitiveData" => json!({"kind": "sensitiveData", "target": "llmInput",
            "detectors": [{"detector": "credit_card"}]}),
        "custom" => json!({"kind": "custom", "name": "overBudget"}),
        "and" => json!({"kind": "and", "all": [sample("enduserTag")]}),
        "or" => json!({"kind": "or", "any": [sample("enduserTag")]}),
        "not" => json!({"kind": "not", "not": sample("enduserTag")}),
        other => panic!("no sample for {other}"),
    }
}

fn doc(selector: Value, condition: Value) -> String {
    json!({"policy": {"name": "p"}, "rules": [{"id": "gate", "name": "gate",
        "selector": selector, "condition": condition, "effect": {"type": "block"}}]})
    .to_string()
}

fn llm(condition: Value) -> String {
    doc(json!({"phase": "llm.before"}), condition)
}

#[test]
fn every_condition_kind_is_allowed_or_refused_in_llm_before() {
    let file = std::path::Path::new("policies/budget.json");
    for kind in CONDITION_KINDS {
        let got = parse_policy(&llm(sample(kind)), Some(file));
        if LLM_CONDITION_KINDS.contains(kind) {
            assert!(got.is_ok(), "{kind} must load: {:?}", got.err());
        } else {
            let e = got.expect_err(kind).to_string();
            assert!(
                e.starts_with("policies/budget.json: rules[0].condition.kind: "),
                "{kind}: {e}"
            );
            assert!(
                e.contains("rule \"gate\" (phase llm.before)") && e.contains(kind),
                "{kind}: {e}"
            );
            // Nested, it is reported at its own path.
            let nested = json!({"kind": "or", "any": [sample("enduserTag"),
                {"kind": "not", "not": sample(kind)}]});
            let e = parse_policy(&llm(nested), None).expect_err(kind).to_string();
            assert!(
                e.starts_with("rules[0].condition.any[1].not.kind: "),
                "{kind}: {e}"
            );
        }
        // Every kind stays valid in a tool rule (sensitiveData aside: its llmInput target).
        if *kind != "sensitiveData" {
            let tool = doc(json!({"phase": "tool.before", "tool": {}}), sample(kind));
            assert!(parse_policy(&tool, None).is_ok(), "{kind} in tool.before");
        }
    }
    let allowed: Vec<&&str> = CONDITION_KINDS
        .iter()
        .filter(|k| LLM_CONDITION_KINDS.contains(k))
        .collect();
    assert_eq!(allowed.len(), LLM_CONDITION_KINDS.len());
}

#[test]
fn the_details_that_do_not_apply_to_a_model_call_are_refused() {
    let cases = [
        (
            llm(json!({"kind": "maxCalls", "selector": {"by": "toolTag", "tags": ["x"]}, "max": 1})),
            "rules[0].condition.selector",
            "models have no tags",
        ),
        (
            llm(json!({"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["*"]},
                "max": 1, "tagFilter": ["x"]})),
            "rules[0].condition.tagFilter",
            "tagFilter does not apply",
        ),
        (
            llm(json!({"kind": "executionTime", "scope": "tool", "op": "gt", "ms": 1})),
            "rules[0].condition.scope",
            "only scope \"total\"",
        ),
        (
            llm(json!({"kind": "sensitiveData", "target": "toolArg",
                "detectors": [{"detector": "email"}]})),
            "rules[0].condition.target",
            "target must be \"llmInput\"",
        ),
        (
            llm(json!({"kind": "signal", "key": "k", "args": {"t": {"from": "toolTag", "tag": "x"}},
                "op": "eq", "value": true})),
            "rules[0].condition.args.t",
            "models have no tags",
        ),
        (
            doc(
                json!({"phase": "tool.before", "tool": {}}),
                json!({"kind": "sensitiveData", "target": "llmInput",
                    "detectors": [{"detector": "email"}]}),
            ),
            "rules[0].condition.target",
            "only in a rule whose selector.phase is \"llm.before\"",
        ),
        (
            doc(
                json!({"phase": "llm.before", "tool": {"tagsAny": ["x"]}}),
                sample("metricWindow"),
            ),
            "rules[0].selector.tool",
            "model's name only",
        ),
    ];
    for (text, path, message) in cases {
        let e = parse_policy(&text, None).expect_err(path).to_string();
        assert!(e.starts_with(&format!("{path}: ")), "{e}");
        assert!(e.contains(message), "{e}");
    }
    // Bindings that exist for a model call load: the model's name, the end user, a constant,
    // a path into the messages.
    let ok = llm(json!({"kind": "signal", "key": "k", "args": {
        "m": {"from": "toolName"}, "u": {"from": "enduserId"}, "c": {"from": "const", "value": 1},
        "first": {"from": "toolArg", "path": "0.content"}}, "op": "eq", "value": true}));
    assert!(parse_policy(&ok, None).is_ok());
    // A selector without `tool` is every model; with a name, those models.
    let named = doc(
        json!({"phase": "llm.before", "tool": {"name": ["gpt-*", "claude-*"]}}),
        sample("metricWindow"),
    );
    assert!(parse_policy(&named, None).is_ok());
}

/// A condition tree of allowed kinds, with (maybe) one refused leaf somewhere.
fn tree(depth: u32) -> BoxedStrategy<Value> {
    let leaf = prop::sample::select(
        LLM_CONDITION_KINDS
            .iter()
            .filter(|k| !matches!(**k, "and" | "or" | "not"))
            .copied()
            .collect::<Vec<_>>(),
    )
    .prop_map(sample);
    if depth == 0 {
        return leaf.boxed();
    }
    let inner = tree(depth - 1);
    prop_oneof![
        leaf,
        prop::collection::vec(inner.clone(), 1..4).prop_map(|v| json!({"kind": "and", "all": v})),
        prop::collection::vec(inner.clone(), 1..4).prop_map(|v| json!({"kind": "or", "any": v})),
        inner.prop_map(|c| json!({"kind": "not", "not": c})),
    ]
    .boxed()
}

/// The JSON path of every leaf of `c` (under `path`).
fn leaves(c: &Value, path: &str, out: &mut Vec<String>) {
    match c["kind"].as_str() {
        Some("and") | Some("or") => {
            let key = if c["kind"] == "and" { "all" } else { "any" };
            for (i, p) in c[key].as_array().into_iter().flatten().enumerate() {
                leaves(p, &format!("{path}.{key}[{i}]"), out);
            }
        }
        Some("not") => leaves(&c["not"], &format!("{path}.not"), out),
        _ => out.push(path.to_string()),
    }
}

fn replace_at(c: &mut Value, path: &str, with: Value) {
    let mut cur = c;
    for seg in path.split('.').skip(1) {
        cur = match seg.split_once('[') {
            Some((k, i)) => &mut cur[k][i.trim_end_matches(']').parse::<usize>().unwrap()],
            None => &mut cur[seg],
        };
    }
    *cur = with;
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn nestings_of_allowed_kinds_load_and_one_refused_leaf_is_named(
        c in tree(3),
        pick in any::<prop::sample::Index>(),
        bad in prop::sample::select(vec!["toolName", "toolTag", "toolArg", "sequence", "requireSubject"]),
    ) {
        prop_assert!(parse_policy(&llm(c.clone()), None).is_ok());
        let mut paths = Vec::new();
        leaves(&c, "rules[0].condition", &mut paths);
        let at = pick.get(&paths).clone();
        let mut broken = c.clone();
        replace_at(&mut broken, &at, sample(bad));
        let e = parse_policy(&llm(broken), None).expect_err("refused").to_string();
        let want = format!("{at}.kind: ");
        prop_assert!(e.starts_with(&want), "{} / {}", e, want);
        prop_assert!(e.contains("rule \"gate\""));
    }
}
