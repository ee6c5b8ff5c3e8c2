//! Issue 22, point 4: key encoding is injective on both stores. For any two (agent, end user,
//! run, rule) tuples, a key (the memory store's `StateKey`, or any Redis key, including the
//! ones the scripts derive by appending `|v` and `|a`) is shared only when the tuples agree on
//! everything that key's scope names. Ids draw on the characters that used to alias: `|`,
//! `a`, `v`, U+001F, NUL, `%`, braces and colons.
#![cfg(feature = "redis")]

use std::collections::HashMap;

use proptest::prelude::*;
use toolgate::state::redis::Keys;
use toolgate::state::{agent_scope, run_scope, user_scope};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Tuple {
    agent: String,
    user: String,
    run: String,
    slot: u64,
}

/// What a key stands for: its kind and the components its scope names.
type Identity = (&'static str, Vec<String>, u64);

fn scopes(t: &Tuple) -> [(&'static str, Vec<String>, String); 3] {
    [
        (
            "run",
            vec![t.agent.clone(), t.run.clone()],
            run_scope(&t.agent, &t.run),
        ),
        ("agent", vec![t.agent.clone()], agent_scope(&t.agent)),
        (
            "user",
            vec![t.agent.clone(), t.user.clone()],
            user_scope(&t.agent, &t.user),
        ),
    ]
}

/// The memory store's keys of a tuple: (slot, scope).
fn memory_keys(t: &Tuple) -> Vec<(Identity, String)> {
    scopes(t)
        .into_iter()
        .map(|(kind, parts, scope)| ((kind, parts, t.slot), format!("{:016x}{scope}", t.slot)))
        .collect()
}

/// Every Redis key of a tuple, with the suffixes the scripts append (`|v`, `|a`: windows, and
/// `end_run`'s delete of all three for every key it is given).
fn redis_keys(keys: &Keys, t: &Tuple) -> Vec<(Identity, String)> {
    let mut out = Vec::new();
    let mut push = |kind: &'static str, parts: &[String], slot: u64, key: String| {
        for (suffix, name) in [("", kind), ("|v", "v"), ("|a", "a")] {
            let id: Identity = (
                name,
                [vec![kind.to_string()], parts.to_vec()].concat(),
                slot,
            );
            out.push((id, format!("{key}{suffix}")));
        }
    };
    for (kind, parts, scope) in scopes(t) {
        let k = keys.counter(&t.agent, t.slot, &scope);
        push(
            if kind == "run" {
                "c-run"
            } else if kind == "agent" {
                "c-agent"
            } else {
                "c-user"
            },
            &parts,
            t.slot,
            k,
        );
        let w = keys.window(&t.agent, t.slot, &scope);
        push(
            if kind == "run" {
                "w-run"
            } else if kind == "agent" {
                "w-agent"
            } else {
                "w-user"
            },
            &parts,
            t.slot,
            w,
        );
    }
    let run = keys.run(&t.agent, &t.run);
    let parts = [t.agent.clone(), t.run.clone()];
    push("history", &parts, 0, run.history);
    push("flags", &parts, 0, run.flags);
    push("chain", &parts, 0, run.chain);
    out
}

fn assert_injective(
    all: impl IntoIterator<Item = (Identity, String)>,
) -> Result<(), TestCaseError> {
    let mut seen: HashMap<String, Identity> = HashMap::new();
    for (id, key) in all {
        if let Some(other) = seen.get(&key) {
            prop_assert_eq!(other, &id, "key {:?} stands for two things", key);
        }
        seen.insert(key, id);
    }
    Ok(())
}

fn id() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("|".to_string()),
        Just("a".to_string()),
        Just("v".to_string()),
        Just("u".to_string()),
        Just("\u{1f}".to_string()),
        Just("\0".to_string()),
        Just("%".to_string()),
        Just("7C".to_string()),
        Just("{".to_string()),
        Just("}".to_string()),
        Just(":".to_string()),
        Just("1".to_string()),
    ];
    proptest::collection::vec(piece, 0..6).prop_map(|v| v.concat())
}

fn tuple() -> impl Strategy<Value = Tuple> {
    (id(), id(), id(), 0u64..3).prop_map(|(agent, user, run, slot)| Tuple {
        agent,
        user,
        run,
        slot,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn distinct_tuples_never_share_a_memory_key(a in tuple(), b in tuple()) {
        assert_injective(memory_keys(&a).into_iter().chain(memory_keys(&b)))?;
    }

    #[test]
    fn distinct_tuples_never_share_a_redis_key(a in tuple(), b in tuple()) {
        let keys = Keys::new("tg");
        assert_injective(redis_keys(&keys, &a).into_iter().chain(redis_keys(&keys, &b)))?;
    }
}

/// The cases the issue names, and ids of 1 MB.
#[test]
fn the_aliases_the_issue_names_are_gone() {
    let keys = Keys::new("tg");
    let t = |agent: &str, user: &str, run: &str| Tuple {
        agent: agent.into(),
        user: user.into(),
        run: run.into(),
        slot: 1,
    };
    let big = "|a\u{1f}\0".repeat(256 * 1024);
    let cases = [
        (t("agent", "u", "r"), t("agent", "u|a", "r|a")),
        (t("agent", "u", "r"), t("agent", "u|v", "r|v")),
        (t("a\u{1f}b", "c", "r"), t("a", "b\u{1f}c", "r")),
        (t("a", "b\0c", "r"), t("a\0b", "c", "r")),
        (t(&big, &big, &big), t(&format!("{big}|a"), &big, &big)),
        (
            t(&big, &big, &big),
            t(&big, &format!("{big}x"), &format!("|a{big}")),
        ),
    ];
    for (a, b) in cases {
        let mem = memory_keys(&a).into_iter().chain(memory_keys(&b));
        assert_injective(mem).expect("memory keys");
        let red = redis_keys(&keys, &a)
            .into_iter()
            .chain(redis_keys(&keys, &b));
        assert_injective(red).expect("redis keys");
    }
}
