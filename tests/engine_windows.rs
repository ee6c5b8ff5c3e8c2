//! timeGate (DST, midnight spans, edges, 24:00, org fallback, missing timezone) (metricWindow is in
//! engine_state/windows.rs, on both stores).

mod common;

use common::*;
use toolgate::engine::{ManualClock, RunContext};
use toolgate::policy::EffectType;

// ---------------------------------------------------------------------------------------------
// timeGate

fn gate(tz: &str, windows: &str) -> String {
    format!(r#"{{"kind": "timeGate", "timezone": {tz}, "windows": {windows}}}"#)
}

const EVERY_DAY: &str = r#"["mon","tue","wed","thu","fri","sat","sun"]"#;

#[tokio::test]
async fn time_gate_follows_dst() {
    let london = gate(
        r#"{"source": "static", "tz": "Europe/London"}"#,
        &format!(r#"[{{"days": {EVERY_DAY}, "start": "09:00", "end": "10:00"}}]"#),
    );
    let by_tag = gate(
        r#"{"source": "enduserTag", "tag": "tz"}"#,
        &format!(r#"[{{"days": {EVERY_DAY}, "start": "09:00", "end": "10:00"}}]"#),
    );
    let clock = clock();
    let engine = engine(
        &probes("", &[("london", &london), ("bytag", &by_tag)]),
        &clock,
    );
    let run = engine.start_run(ctx_user("r", "a", "u", &[("tz", "Europe/London")]));
    for (utc, inside) in [
        ("2026-01-05T09:30:00Z", true),  // GMT: 09:30 local
        ("2026-07-06T09:30:00Z", false), // BST: 10:30 local
        ("2026-07-06T08:30:00Z", true),  // BST: 09:30 local
        ("2026-01-05T08:30:00Z", false),
    ] {
        clock.set(at(utc));
        assert_eq!(triggered(&run, "london").await, inside, "static at {utc}");
        assert_eq!(triggered(&run, "bytag").await, inside, "tag at {utc}");
    }
}

#[tokio::test]
async fn time_gate_windows_spanning_midnight_belong_to_their_start_day() {
    let g = gate(
        r#"{"source": "static", "tz": "UTC"}"#,
        r#"[{"days": ["fri"], "start": "23:00", "end": "01:00"}]"#,
    );
    let clock = clock();
    let engine = engine(&probes("", &[("night", &g)]), &clock);
    let run = engine.start_run(RunContext::new("r", "a"));
    // 2026-01-09 is a Friday.
    for (utc, inside) in [
        ("2026-01-09T22:59:00Z", false),
        ("2026-01-09T23:00:00Z", true), // start inclusive
        ("2026-01-09T23:59:59Z", true),
        ("2026-01-10T00:00:00Z", true), // Saturday, still Friday's window
        ("2026-01-10T00:59:59Z", true),
        ("2026-01-10T01:00:00Z", false), // end exclusive
        ("2026-01-09T00:30:00Z", false), // Friday after midnight: Thursday's window, not listed
        ("2026-01-10T23:30:00Z", false), // Saturday night: not listed
    ] {
        clock.set(at(utc));
        assert_eq!(triggered(&run, "night").await, inside, "at {utc}");
    }
}

#[tokio::test]
async fn time_gate_start_inclusive_end_exclusive_and_24_00() {
    let day = gate(
        r#"{"source": "static", "tz": "UTC"}"#,
        r#"[{"days": ["mon"], "start": "09:00", "end": "17:00"}]"#,
    );
    let late = gate(
        r#"{"source": "static", "tz": "UTC"}"#,
        r#"[{"days": ["mon"], "start": "22:00", "end": "24:00"}]"#,
    );
    let clock = clock();
    let engine = engine(&probes("", &[("day", &day), ("late", &late)]), &clock);
    let run = engine.start_run(RunContext::new("r", "a"));
    for (utc, d, l) in [
        ("2026-01-05T08:59:59Z", false, false),
        ("2026-01-05T09:00:00Z", true, false),
        ("2026-01-05T16:59:59Z", true, false),
        ("2026-01-05T17:00:00Z", false, false),
        ("2026-01-05T21:59:59Z", false, false),
        ("2026-01-05T22:00:00Z", false, true),
        ("2026-01-05T23:59:59Z", false, true),
        ("2026-01-06T00:00:00Z", false, false), // Tuesday
        ("2026-01-12T09:00:00Z", true, false),  // next Monday
    ] {
        clock.set(at(utc));
        assert_eq!(triggered(&run, "day").await, d, "day at {utc}");
        assert_eq!(triggered(&run, "late").await, l, "late at {utc}");
    }
}

fn tag_gate(fallback: bool, on_missing: &str) -> String {
    let fb = if fallback {
        r#", "fallback": "org""#
    } else {
        ""
    };
    let om = if on_missing.is_empty() {
        String::new()
    } else {
        format!(r#", "onMissing": "{on_missing}""#)
    };
    format!(
        r#"{{"kind": "timeGate", "timezone": {{"source": "enduserTag", "tag": "tz"{fb}}},
            "windows": [{{"days": {EVERY_DAY}, "start": "09:00", "end": "10:00"}}]{om}}}"#
    )
}

#[tokio::test]
async fn time_gate_org_fallback_from_policy_and_builder() {
    // 14:30Z on a January Monday is 09:30 in New York and 14:30 in London/UTC.
    let clock = ManualClock::new(at("2026-01-05T14:30:00Z"));
    let json = probes(
        r#", "timezone": "America/New_York""#,
        &[("fb", &tag_gate(true, ""))],
    );
    let engine = engine(&json, &clock);
    for tags in [vec![], vec![("tz", "Mars/Olympus_Mons")], vec![("tz", "")]] {
        let run = engine.start_run(ctx_user("r", "a", "u", &tags));
        let d = probe(&run, "fb").await;
        assert!(
            d.evaluated[0].triggered && d.evaluated[0].missing.is_empty(),
            "tags {tags:?}: {d:?}"
        );
    }
    // No end user at all: the org timezone too.
    let run = engine.start_run(RunContext::new("r", "a"));
    assert!(triggered(&run, "fb").await);
    // A valid tag wins over the fallback.
    let run = engine.start_run(ctx_user("r", "a", "u", &[("tz", "Europe/London")]));
    assert!(!triggered(&run, "fb").await);

    // The builder's org timezone overrides the policy's.
    let engine = builder(&json, &clock)
        .org_timezone(chrono_tz::Europe::London)
        .build()
        .unwrap();
    let run = engine.start_run(ctx_user("r", "a", "u", &[]));
    assert!(!triggered(&run, "fb").await);
    clock.set(at("2026-01-05T09:30:00Z"));
    assert!(triggered(&run, "fb").await);
    // ...and serves when the policy has none.
    let json = probes("", &[("fb", &tag_gate(true, ""))]);
    let engine = builder(&json, &clock)
        .org_timezone(chrono_tz::Europe::London)
        .build()
        .unwrap();
    let run = engine.start_run(ctx_user("r", "a", "u", &[("tz", "nope")]));
    assert!(triggered(&run, "fb").await);
}

#[tokio::test]
async fn time_gate_missing_timezone_is_missing_data() {
    let clock = ManualClock::new(at("2026-01-05T09:30:00Z"));
    // No fallback: missing even though the policy has an org timezone.
    let json = probes(
        r#", "timezone": "UTC", "onMissingDefault": "hitl""#,
        &[
            ("nofb", &tag_gate(false, "")),
            ("own", &tag_gate(false, "block")),
            ("own-allow", &tag_gate(false, "allow")),
        ],
    );
    let engine = engine(&json, &clock);
    for tags in [vec![], vec![("tz", "Not/AZone")]] {
        let run = engine.start_run(ctx_user("r", "a", "u", &tags));
        // Policy onMissingDefault (hitl) decides.
        let d = probe(&run, "nofb").await;
        assert!(d.evaluated[0].triggered, "{d:?}");
        assert_eq!(d.evaluated[0].effect, EffectType::Hitl);
        assert!(!d.evaluated[0].missing.is_empty());
        assert_eq!(d.effect, EffectType::Hitl);
        // The condition's own onMissing first.
        let run = engine.start_run(ctx_user("r2", "a", "u", &tags));
        let d = probe(&run, "own").await;
        assert_eq!(
            (d.effect, d.evaluated[0].triggered),
            (EffectType::Block, true)
        );
        let d = probe(&run, "own-allow").await;
        assert_eq!(
            (d.effect, d.evaluated[0].triggered),
            (EffectType::Allow, false)
        );
    }
    // Fallback asked for but no org timezone anywhere: missing; rule onMissing decides.
    let json = format!(
        r#"[{{"id": "fb", "name": "fb", "priority": 1, "enabled": true,
             "selector": {{"phase": "tool.before", "tool": {{"name": "fb"}}}},
             "condition": {}, "effect": {{"type": "hitl"}}, "onMissing": "block"}}]"#,
        tag_gate(true, "")
    );
    let engine = common::engine(&json, &clock);
    let run = engine.start_run(ctx_user("r", "a", "u", &[]));
    let d = probe(&run, "fb").await;
    assert_eq!(
        (d.effect, d.evaluated[0].triggered),
        (EffectType::Block, true)
    );
    assert!(!d.evaluated[0].missing.is_empty());
}
