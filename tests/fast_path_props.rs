//! Property: on random stateless policies and calls, the engine's decision (tool profiles
//! cached, evaluated lists shared between decisions, calls kept in the run's slots) is the one
//! a plain evaluation of the policy as written gives: same effect, code, deciding rule and
//! evaluated list (ids, triggered, effects, shadow, missing data), call after call, in a long
//! run and in fresh ones.

use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};
use toolgate::engine::{DecisionCode, GovernanceEngine, RunContext, ToolCall, ToolOutcome};
use toolgate::policy::{EffectType, parse_policy_value};

const NAMES: &[&str] = &["read", "Write", "delete_all", "send"];
const TAGS: &[&str] = &["pii", "Net", "fs"];
const ROLES: &[&str] = &["admin", "user"];

#[derive(Debug, Clone)]
enum Cond {
    Name(String),
    Tag(String),
    Amount(f64),
    Dry(bool),
    Role(String),
    And(Vec<Cond>),
    Or(Vec<Cond>),
    Not(Box<Cond>),
}

#[derive(Debug, Clone)]
enum Sel {
    All,
    Name(String),
    Any(String),
    AllOf(String, String),
}

#[derive(Debug, Clone)]
struct Rule {
    priority: u8,
    shadow: bool,
    sel: Sel,
    cond: Cond,
    block: bool,
    on_missing_block: bool,
}

#[derive(Debug, Clone)]
struct Pol {
    priority_first: bool,
    rules: Vec<Rule>,
}

#[derive(Debug, Clone)]
struct Call {
    name: String,
    tags: Vec<String>,
    amount: Option<Value>,
    dry: Option<bool>,
}

fn pick(list: &'static [&'static str]) -> impl Strategy<Value = String> {
    (0..list.len(), any::<bool>()).prop_map(move |(i, upper)| {
        if upper {
            list[i].to_uppercase()
        } else {
            list[i].to_string()
        }
    })
}

fn arb_cond() -> impl Strategy<Value = Cond> {
    let leaf = prop_oneof![
        pick(NAMES).prop_map(Cond::Name),
        pick(TAGS).prop_map(Cond::Tag),
        (0u8..100).prop_map(|v| Cond::Amount(f64::from(v))),
        any::<bool>().prop_map(Cond::Dry),
        (0..ROLES.len()).prop_map(|i| Cond::Role(ROLES[i].to_string())),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 1..3).prop_map(Cond::And),
            proptest::collection::vec(inner.clone(), 1..3).prop_map(Cond::Or),
            inner.prop_map(|c| Cond::Not(Box::new(c))),
        ]
    })
}

fn arb_rule() -> impl Strategy<Value = Rule> {
    let sel = prop_oneof![
        Just(Sel::All),
        pick(NAMES).prop_map(Sel::Name),
        pick(TAGS).prop_map(Sel::Any),
        (pick(TAGS), pick(TAGS)).prop_map(|(a, b)| Sel::AllOf(a, b)),
    ];
    (
        0u8..3,
        0u8..5,
        sel,
        arb_cond(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(priority, shadow, sel, cond, block, on_missing_block)| Rule {
                priority,
                shadow: shadow == 0,
                sel,
                cond,
                block,
                on_missing_block,
            },
        )
}

fn arb_policies() -> impl Strategy<Value = Vec<Pol>> {
    proptest::collection::vec(
        (any::<bool>(), proptest::collection::vec(arb_rule(), 1..7)).prop_map(
            |(priority_first, rules)| Pol {
                priority_first,
                rules,
            },
        ),
        1..3,
    )
}

fn arb_call() -> impl Strategy<Value = Call> {
    let amount = prop_oneof![
        Just(None),
        (0u8..100).prop_map(|v| Some(json!(v))),
        Just(Some(json!("ten"))),
    ];
    (
        pick(NAMES),
        proptest::collection::vec(pick(TAGS), 0..3),
        amount,
        proptest::option::of(any::<bool>()),
    )
        .prop_map(|(name, tags, amount, dry)| Call {
            name,
            tags,
            amount,
            dry,
        })
}

fn cond_json(c: &Cond) -> Value {
    match c {
        Cond::Name(n) => json!({"kind": "toolName", "op": "eq", "value": n}),
        Cond::Tag(t) => json!({"kind": "toolTag", "op": "has", "tag": t}),
        Cond::Amount(v) => {
            json!({"kind": "toolArg", "type": "number", "op": "gt", "path": "amount", "value": v})
        }
        Cond::Dry(b) => {
            json!({"kind": "toolArg", "type": "boolean", "op": "eq", "path": "dry", "value": b})
        }
        Cond::Role(r) => json!({"kind": "enduserTag", "op": "hasValue", "tag": "role", "value": r}),
        Cond::And(cs) => {
            json!({"kind": "and", "all": cs.iter().map(cond_json).collect::<Vec<_>>()})
        }
        Cond::Or(cs) => json!({"kind": "or", "any": cs.iter().map(cond_json).collect::<Vec<_>>()}),
        Cond::Not(c) => json!({"kind": "not", "not": cond_json(c)}),
    }
}

fn id(pi: usize, ri: usize) -> String {
    format!("p{pi}r{ri}")
}

fn policy_json(pi: usize, p: &Pol) -> Value {
    let rules: Vec<Value> = p
        .rules
        .iter()
        .enumerate()
        .map(|(ri, r)| {
            let tool = match &r.sel {
                Sel::All => json!({}),
                Sel::Name(n) => json!({"name": [n]}),
                Sel::Any(t) => json!({"tagsAny": [t]}),
                Sel::AllOf(a, b) => json!({"tagsAll": [a, b]}),
            };
            json!({
                "id": id(pi, ri), "name": id(pi, ri), "priority": r.priority, "enabled": true,
                "mode": if r.shadow { "shadow" } else { "enforce" },
                "onMissing": if r.on_missing_block { "block" } else { "allow" },
                "selector": {"phase": "tool.before", "tool": tool},
                "condition": cond_json(&r.cond),
                "effect": {"type": if r.block { "block" } else { "allow" }, "reason": id(pi, ri)}
            })
        })
        .collect();
    json!({
        "policy": {"name": format!("p{pi}"),
                   "combine": if p.priority_first { "priority_first" } else { "most_severe_wins" }},
        "rules": rules
    })
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Tri {
    T,
    F,
    U,
}

/// The plain evaluation of a condition, as the policy language defines it (short-circuit
/// `and`/`or`, unknown for missing data, which is noted).
fn eval(c: &Cond, call: &Call, role: Option<&str>, missing: &mut Vec<String>) -> Tri {
    let b = |x: bool| if x { Tri::T } else { Tri::F };
    match c {
        Cond::Name(n) => b(call.name.to_lowercase() == n.to_lowercase()),
        Cond::Tag(t) => b(call
            .tags
            .iter()
            .any(|x| x.to_lowercase() == t.to_lowercase())),
        Cond::Amount(v) => match &call.amount {
            Some(Value::Number(n)) => b(n.as_f64().is_some_and(|n| n > *v)),
            Some(_) => {
                missing.push("toolArg amount: of another type".into());
                Tri::U
            }
            None => {
                missing.push("toolArg amount: absent".into());
                Tri::U
            }
        },
        Cond::Dry(want) => match call.dry {
            Some(d) => b(d == *want),
            None => {
                missing.push("toolArg dry: absent".into());
                Tri::U
            }
        },
        Cond::Role(r) => b(role == Some(r.as_str())),
        Cond::And(cs) | Cond::Or(cs) => {
            let (dominant, mut acc) = if matches!(c, Cond::Or(_)) {
                (Tri::T, Tri::F)
            } else {
                (Tri::F, Tri::T)
            };
            for part in cs {
                let t = eval(part, call, role, missing);
                if t == dominant {
                    return t;
                }
                if t == Tri::U {
                    acc = Tri::U;
                }
            }
            acc
        }
        Cond::Not(c) => match eval(c, call, role, missing) {
            Tri::T => Tri::F,
            Tri::F => Tri::T,
            Tri::U => Tri::U,
        },
    }
}

fn selects(sel: &Sel, call: &Call) -> bool {
    let has = |t: &str| call.tags.iter().any(|x| x.eq_ignore_ascii_case(t));
    match sel {
        Sel::All => true,
        Sel::Name(n) => n.eq_ignore_ascii_case(&call.name),
        Sel::Any(t) => has(t),
        Sel::AllOf(a, b) => has(a) && has(b),
    }
}

/// What the plain evaluation expects: effect, deciding rule, shadow flag, and per rule in
/// play (id, triggered, effect, shadow, missing).
type Expected = (
    EffectType,
    Option<String>,
    bool,
    Vec<(String, bool, EffectType, bool, Vec<String>)>,
);

fn expected(pols: &[Pol], call: &Call, role: Option<&str>) -> Expected {
    // Rules in play in evaluation order: priority descending, then load order.
    let mut order: Vec<(usize, usize)> = pols
        .iter()
        .enumerate()
        .flat_map(|(pi, p)| (0..p.rules.len()).map(move |ri| (pi, ri)))
        .collect();
    order.sort_by_key(|&(pi, ri)| std::cmp::Reverse(pols[pi].rules[ri].priority));
    let mut evaluated = Vec::new();
    // Per policy: (effect, position) of the enforced outcome.
    let mut outcome: Vec<Option<(EffectType, usize)>> = vec![None; pols.len()];
    let mut any_shadow = false;
    for (pos, &(pi, ri)) in order
        .iter()
        .filter(|&&(pi, ri)| selects(&pols[pi].rules[ri].sel, call))
        .enumerate()
    {
        let r = &pols[pi].rules[ri];
        let own = if r.block {
            EffectType::Block
        } else {
            EffectType::Allow
        };
        let mut missing = Vec::new();
        let (triggered, effect) = match eval(&r.cond, call, role, &mut missing) {
            Tri::T => (true, own),
            Tri::F => (false, own),
            Tri::U if r.on_missing_block => (true, EffectType::Block),
            Tri::U => (false, own),
        };
        if triggered {
            if r.shadow {
                any_shadow = true;
            } else {
                let slot = &mut outcome[pi];
                match slot {
                    None => *slot = Some((effect, pos)),
                    Some(_) if pols[pi].priority_first => {}
                    Some((e, _)) if effect > *e => *slot = Some((effect, pos)),
                    Some(_) => {}
                }
            }
        }
        evaluated.push((id(pi, ri), triggered, effect, r.shadow, missing));
    }
    let mut best: Option<(EffectType, usize)> = None;
    for o in outcome.iter().flatten() {
        best = match best {
            Some(b) if !(o.0 > b.0 || (o.0 == b.0 && o.1 < b.1)) => Some(b),
            _ => Some(*o),
        };
    }
    let effect = best.map_or(EffectType::Allow, |b| b.0);
    let rule = best.map(|b| evaluated[b.1].0.clone());
    (effect, rule, any_shadow, evaluated)
}

fn tool_call(i: usize, c: &Call) -> ToolCall {
    let mut args = serde_json::Map::new();
    if let Some(a) = &c.amount {
        args.insert("amount".into(), a.clone());
    }
    if let Some(d) = c.dry {
        args.insert("dry".into(), Value::Bool(d));
    }
    ToolCall::new(format!("c{i}"), c.name.clone(), Value::Object(args)).with_tags(c.tags.clone())
}

fn check(
    d: &toolgate::engine::Decision,
    want: &Expected,
    call: &Call,
) -> Result<(), TestCaseError> {
    let (effect, rule, shadow, evaluated) = want;
    prop_assert_eq!(d.effect, *effect, "{:?}: {:?}", call, d);
    prop_assert_eq!(
        d.code,
        if *effect == EffectType::Allow {
            DecisionCode::Allowed
        } else {
            DecisionCode::BlockedRule
        }
    );
    prop_assert_eq!(d.rule_id.as_deref(), rule.as_deref(), "{:?}", d);
    prop_assert_eq!(d.reason.as_deref(), rule.as_deref());
    prop_assert_eq!(d.shadow, *shadow);
    let got: Vec<(String, bool, EffectType, bool, Vec<String>)> = d
        .evaluated
        .iter()
        .map(|e| {
            prop_assert!(e.error.is_none() && e.detected.is_none() && e.detected_more == 0);
            Ok((
                e.rule_id.to_string(),
                e.triggered,
                e.effect,
                e.shadow,
                e.missing.clone(),
            ))
        })
        .collect::<Result<_, TestCaseError>>()?;
    prop_assert_eq!(&got, evaluated, "{:?}", call);
    // The decision's JSON is the same whether its list is shared or its own.
    let list: Vec<toolgate::engine::EvaluatedRule> = d.evaluated.to_vec();
    prop_assert_eq!(
        serde_json::to_value(&d.evaluated).expect("JSON"),
        serde_json::to_value(&list).expect("JSON")
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn the_fast_path_decides_as_the_plain_evaluation(
        pols in arb_policies(),
        calls in proptest::collection::vec(arb_call(), 1..12),
        role in proptest::option::of(0..ROLES.len()),
    ) {
        let policies = pols
            .iter()
            .enumerate()
            .map(|(pi, p)| parse_policy_value(&policy_json(pi, p), None).expect("parses"))
            .collect::<Vec<_>>();
        let mut builder = GovernanceEngine::builder();
        for p in policies {
            builder = builder.policy(p);
        }
        let engine = builder.build().expect("compiles");
        let role = role.map(|i| ROLES[i]);
        let context = |run: &str| {
            let c = RunContext::new(run, "agent");
            match role {
                Some(r) => c.with_enduser("u", [("role".to_string(), r.to_string())]),
                None => c,
            }
        };
        // One long run (each call twice: the second decision shares what the first cached),
        // the allowed calls' results recorded now and then.
        let run = engine.start_run(context("long"));
        for (i, call) in calls.iter().enumerate() {
            let want = expected(&pols, call, role);
            for _ in 0..2 {
                let d = run.before_tool_blocking(tool_call(i, call));
                check(&d, &want, call)?;
                let waits = run.awaits_result(&format!("c{i}"));
                prop_assert_eq!(waits, d.is_allowed());
            }
            let id = format!("c{i}");
            if i % 3 == 0 && run.awaits_result(&id) {
                let outcome = ToolOutcome::ok(json!(null), Duration::from_millis(1));
                run.after_tool_blocking(&id, outcome);
                prop_assert!(!run.awaits_result(&id));
            }
        }
        // Fresh runs, every other one through `before_tool_now` (nothing to await in a
        // stateless policy: decided at once).
        for (i, call) in calls.iter().enumerate() {
            let run = engine.start_run(context(&format!("fresh-{i}")));
            let d = if i % 2 == 0 {
                let now = run.before_tool_now(tool_call(i, call));
                prop_assert!(now.is_ok(), "a stateless decision is made at once");
                now.unwrap_or_else(|_| unreachable!())
            } else {
                run.before_tool_blocking(tool_call(i, call))
            };
            check(&d, &expected(&pols, call, role), call)?;
        }
    }
}
