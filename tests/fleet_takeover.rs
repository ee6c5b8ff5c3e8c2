//! Issue 34 on real processes and private `redis-server`s: lost state never re-opens a cap
//! (FLUSHALL and a restart without persistence under live `toolgate replay` processes), a
//! dead holder's run is taken over after its lease lapses (`kill -9`), a frozen one appends
//! nothing more (SIGSTOP/SIGCONT), a restart without persistence keeps held runs' chains, and
//! one chain per run id (`run.continued`, an ended run's id refused). Needs
//! `TOOLGATE_TEST_REDIS_URL` set (the private servers are started here; `redis-server` on PATH).
#![cfg(feature = "redis")]

mod common;
mod mcp_client;
mod redis_support;
#[path = "fleet_takeover/support.rs"]
mod support;

use redis_support::{OwnRedis, free_port, url};
use serde_json::Value;
use support::*;

const LEASE_MS: u64 = 1500;

/// Two live `replay` processes on one private Redis, cap 10 per agent, `mode`: 10 calls fill
/// the cap; then Redis loses everything (`lose`) and 10 more calls follow. Answers how many
/// of those 10 were allowed, and the processes.
fn cap_after_loss(
    mode: &str,
    lose: impl FnOnce(&mut OwnRedis),
) -> (usize, Vec<Replay>, OwnRedis, tempfile::TempDir) {
    let mut server = OwnRedis::start(free_port());
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = write(dir.path(), "p.json", CAP10);
    let mut procs: Vec<Replay> = (0..2)
        .map(|i| {
            Replay::start(
                &policy,
                &server.url(),
                mode,
                LEASE_MS,
                &dir.path().join(format!("trail-{i}")),
            )
        })
        .collect();
    for (i, p) in procs.iter_mut().enumerate() {
        p.start_run(&format!("r{i}"), "agent");
    }
    let mut before = 0;
    for k in 0..12 {
        let i = k % 2;
        if allowed(&procs[i].call(&format!("r{i}"))) {
            before += 1;
        }
    }
    assert_eq!(before, 10, "the cap holds before the loss");
    lose(&mut server);
    let mut after = 0;
    for k in 0..10 {
        let i = k % 2;
        let row = procs[i].call(&format!("r{i}"));
        if allowed(&row) {
            after += 1;
        }
    }
    (after, procs, server, dir)
}

/// How many `error` events in `trail` say toolgate's state was lost.
fn lost_state_errors(trail: &std::path::Path) -> usize {
    trail_events(trail)
        .into_iter()
        .filter(|e| {
            e["kind"] == "error"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("lost toolgate's state"))
        })
        .count()
}

fn flushall(s: &mut OwnRedis) {
    redis_cmd(s.port, &["FLUSHALL"]).expect("FLUSHALL");
}

fn restart(s: &mut OwnRedis) {
    let _ = redis_cmd(s.port, &["SHUTDOWN", "NOSAVE"]);
    s.stop();
    *s = OwnRedis::start(s.port);
}

#[test]
fn a_flush_never_reopens_a_cap_for_two_replay_processes() {
    if url().is_none() {
        return;
    }
    let (after, procs, server, dir) = cap_after_loss("closed", flushall);
    assert_eq!(after, 0, "calls allowed past the cap after FLUSHALL");
    // Every refused call is written as an error, in each process's own trail.
    for p in procs {
        let trail = p.trail.clone();
        assert!(p.finish().success());
        let errors = lost_state_errors(&trail);
        assert!(errors >= 5, "{errors} error events in {}", trail.display());
    }
    // An operator re-arms the prefix (logged): counts start again from what Redis holds.
    let out = toolgate()
        .args([
            "state",
            "rearm",
            "--state",
            &server.url(),
            "--reason",
            "budgets reset",
        ])
        .args(["--by", "ops"])
        .output()
        .expect("toolgate runs");
    assert!(out.status.success(), "{out:?}");
    let logged: Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!(logged["by"], "ops");
    assert!(logged["lostAt"].is_i64(), "{logged}");
    let status = toolgate()
        .args(["state", "status", "--state", &server.url()])
        .output()
        .expect("toolgate runs");
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains("armed") && text.contains("budgets reset"),
        "{text}"
    );
    let policy = dir.path().join("p.json");
    let mut p = Replay::start(
        &policy,
        &server.url(),
        "closed",
        LEASE_MS,
        &dir.path().join("t3"),
    );
    p.start_run("r9", "agent");
    assert!(
        allowed(&p.call("r9")),
        "re-armed: the cap counts again from zero"
    );
}

#[test]
fn a_restart_without_persistence_never_reopens_a_cap() {
    if url().is_none() {
        return;
    }
    let (after, _procs, _server, _dir) = cap_after_loss("closed", restart);
    assert_eq!(
        after, 0,
        "calls allowed past the cap after a restart without persistence"
    );
}

#[test]
fn under_open_lost_counts_allow_with_an_error_event_each() {
    if url().is_none() {
        return;
    }
    let (after, procs, _server, _dir) = cap_after_loss("open", flushall);
    assert_eq!(after, 10, "open: allowed");
    for p in procs {
        let trail = p.trail.clone();
        assert!(p.finish().success());
        let lost = lost_state_errors(&trail);
        assert!(lost >= 5, "an error event for each call: {lost}");
    }
}

/// The holder's run id and its first event in `trail` of `kind`.
fn first_of(trail: &std::path::Path, run: &str) -> Value {
    let mut ev: Vec<Value> = trail_events(trail)
        .into_iter()
        .filter(|e| e["runId"] == run)
        .collect();
    ev.sort_by_key(|e| e["seq"].as_u64());
    ev.into_iter().next().expect("events")
}

#[test]
fn a_killed_holders_run_is_taken_over_after_its_lease() {
    if url().is_none() {
        return;
    }
    let server = OwnRedis::start(free_port());
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = write(dir.path(), "p.json", ALLOW);
    let (ta, tb) = (dir.path().join("a"), dir.path().join("b"));
    let mut a = Replay::start(&policy, &server.url(), "closed", LEASE_MS, &ta);
    a.start_run("r", "agent");
    for _ in 0..3 {
        assert!(allowed(&a.call("r")));
    }
    a.wait_written(|e| e["kind"] == "tool.decision" && e["seq"] == 3);
    a.kill9();
    let mut b = Replay::start(&policy, &server.url(), "closed", LEASE_MS, &tb);
    b.start_run("r", "agent");
    assert!(allowed(&b.call("r")));
    b.end_run("r");
    assert!(b.finish().success());
    let first = first_of(&tb, "r");
    assert_eq!(first["kind"], "run.resumed", "{first}");
    assert!(
        first["replacedHolder"]
            .as_str()
            .is_some_and(|h| !h.is_empty())
    );
    assert_eq!(first["headLost"], false);
    let (code, text) = verify(&[&ta, &tb], &[]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("info:") && text.contains("taken over"),
        "{text}"
    );
}

#[test]
fn a_frozen_holder_appends_nothing_more_to_a_run_taken_over() {
    if url().is_none() {
        return;
    }
    let server = OwnRedis::start(free_port());
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = write(dir.path(), "p.json", ALLOW);
    let (ta, tb) = (dir.path().join("a"), dir.path().join("b"));
    let mut a = Replay::start(&policy, &server.url(), "closed", LEASE_MS, &ta);
    a.start_run("r", "agent");
    for _ in 0..2 {
        assert!(allowed(&a.call("r")));
    }
    a.wait_written(|e| e["kind"] == "tool.decision" && e["seq"] == 2);
    a.signal("STOP");
    let mut b = Replay::start(&policy, &server.url(), "closed", LEASE_MS, &tb);
    b.start_run("r", "agent");
    assert!(allowed(&b.call("r")));
    a.signal("CONT");
    let late = a.call("r");
    assert!(!allowed(&late), "the frozen holder's late call: {late}");
    assert_eq!(late["code"], "BLOCKED_FAILURE", "{late}");
    assert!(allowed(&b.call("r")));
    b.end_run("r");
    assert!(b.finish().success());
    assert!(a.finish().success());
    let side: Vec<Value> = trail_events(&ta)
        .into_iter()
        .filter(|e| {
            e["runId"]
                .as_str()
                .is_some_and(|r| r.starts_with("r#lease-lost-"))
        })
        .collect();
    assert!(
        side.iter().any(|e| e["kind"] == "error"),
        "the late call is an error in a side chain: {side:?}"
    );
    let (code, text) = verify(&[&ta, &tb], &[]);
    assert_eq!(code, 0, "{text}");
}

#[test]
fn a_holder_alive_through_a_restart_writes_its_head_back() {
    if url().is_none() {
        return;
    }
    let mut server = OwnRedis::start(free_port());
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = write(dir.path(), "p.json", ALLOW);
    let (ta, tb) = (dir.path().join("a"), dir.path().join("b"));
    let mut a = Replay::start(&policy, &server.url(), "closed", LEASE_MS, &ta);
    a.start_run("r", "agent");
    assert!(allowed(&a.call("r")));
    restart(&mut server);
    // The first call after the restart finds the loss (an error); the next ones go on and
    // write the head back with the lease.
    let mut ok = 0;
    let mut last = Value::Null;
    for _ in 0..20 {
        last = a.call("r");
        if allowed(&last) {
            ok += 1;
            if ok == 2 {
                break;
            }
        }
    }
    assert_eq!(ok, 2, "the holder goes on after the restart");
    // Killed once its last decision is in its trail (what kill -9 cannot take back).
    let id = last["callId"].clone();
    a.wait_written(|e| e["kind"] == "tool.decision" && e["callId"] == id);
    a.kill9();
    let mut b = Replay::start(&policy, &server.url(), "closed", LEASE_MS, &tb);
    b.start_run("r", "agent");
    assert!(allowed(&b.call("r")));
    b.end_run("r");
    assert!(b.finish().success());
    let first = first_of(&tb, "r");
    assert_eq!(first["kind"], "run.resumed", "{first}");
    assert_eq!(
        first["headLost"], false,
        "the head was written back: {first}"
    );
    let (code, text) = verify(&[&ta, &tb], &[]);
    assert_eq!(code, 0, "{text}");
}

#[test]
fn a_run_whose_head_and_holder_are_gone_resumes_with_head_lost() {
    if url().is_none() {
        return;
    }
    let mut server = OwnRedis::start(free_port());
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = write(dir.path(), "p.json", ALLOW);
    let (ta, tb) = (dir.path().join("a"), dir.path().join("b"));
    let mut a = Replay::start(&policy, &server.url(), "closed", LEASE_MS, &ta);
    let mut b = Replay::start(&policy, &server.url(), "closed", LEASE_MS, &tb);
    b.start_run("other", "agent");
    assert!(allowed(&b.call("other")));
    a.start_run("r", "agent");
    assert!(allowed(&a.call("r")));
    a.wait_written(|e| e["kind"] == "tool.decision" && e["runId"] == "r");
    a.kill9();
    restart(&mut server);
    b.start_run("r", "agent");
    let _ = b.call("r");
    b.end_run("r");
    b.end_run("other");
    assert!(b.finish().success());
    let first = first_of(&tb, "r");
    assert_eq!(first["kind"], "run.resumed", "{first}");
    assert_eq!(first["headLost"], true, "{first}");
    let (code, text) = verify(&[&ta, &tb], &[]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("warning:"), "{text}");
    let (strict, text) = verify(&[&ta, &tb], &["--strict"]);
    assert_eq!(strict, 1, "{text}");
}

#[test]
fn a_continued_run_writes_run_continued_and_an_ended_id_is_refused() {
    if url().is_none() {
        return;
    }
    let server = OwnRedis::start(free_port());
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = write(dir.path(), "p.json", ALLOW);
    let t: Vec<_> = (0..3).map(|i| dir.path().join(format!("t{i}"))).collect();
    let mut a = Replay::start(&policy, &server.url(), "closed", LEASE_MS, &t[0]);
    a.start_run("r", "agent");
    assert!(allowed(&a.call("r")));
    assert!(a.finish().success());
    let mut b = Replay::start(&policy, &server.url(), "closed", LEASE_MS, &t[1]);
    b.start_run("r", "agent");
    assert!(allowed(&b.call("r")));
    b.end_run("r");
    assert!(b.finish().success());
    let first = first_of(&t[1], "r");
    assert_eq!(
        first["kind"], "run.continued",
        "not a second run.started: {first}"
    );
    let mut c = Replay::start(&policy, &server.url(), "closed", LEASE_MS, &t[2]);
    c.start_run("r", "agent");
    let refused = c.call("r");
    assert!(
        !allowed(&refused),
        "an ended run's id is refused: {refused}"
    );
    assert!(c.finish().success());
    assert!(
        trail_events(&t[2]).iter().all(|e| e["runId"] != "r"),
        "nothing written into the ended run's chain"
    );
    let (code, text) = verify(&[&t[0], &t[1], &t[2]], &[]);
    assert_eq!(code, 0, "{text}");
    let started = [&t[0], &t[1]]
        .iter()
        .flat_map(|d| trail_events(d))
        .filter(|e| e["runId"] == "r" && e["kind"] == "run.started")
        .count();
    assert_eq!(started, 1, "one run.started per run id");
}

/// Two `mcp-proxy --state` gateways (the fixture upstream) on one private Redis, cap 10 per
/// agent: 10 calls fill the cap; after FLUSHALL and again after a restart without
/// persistence, 10 more calls each: none allowed.
#[test]
fn two_gateways_never_reopen_a_cap_after_a_flush_or_a_restart() {
    if url().is_none() {
        return;
    }
    let mut server = OwnRedis::start(free_port());
    let s = mcp_client::Setup::new();
    std::fs::write(s.path("cap.json"), CAP10).expect("policy");
    let gateway = |n: usize| {
        let p = |x: &str| s.path(x).display().to_string();
        let args: Vec<String> = vec![
            "--policy".into(),
            p("cap.json"),
            "--audit".into(),
            p(&format!("audit{n}")),
            "--state".into(),
            server.url(),
            "--state-timeout-ms".into(),
            "1000".into(),
            "--state-lease-ms".into(),
            LEASE_MS.to_string(),
        ];
        let mut g = mcp_client::Proxy::start(&args, &[mcp_client::fixture()]);
        g.initialize("2025-06-18", false);
        g
    };
    let mut gws = vec![gateway(0), gateway(1)];
    let call = |gws: &mut [mcp_client::Proxy], k: usize| {
        let r = gws[k % 2].call("read_note", serde_json::json!({"id": "a"}));
        mcp_client::code(&r).is_empty() && r.get("result").is_some()
    };
    let before = (0..12).filter(|&k| call(&mut gws, k)).count();
    assert_eq!(before, 10, "the cap holds before the loss");
    flushall(&mut server);
    let after_flush = (0..10).filter(|&k| call(&mut gws, k)).count();
    assert_eq!(after_flush, 0, "calls allowed past the cap after FLUSHALL");
    restart(&mut server);
    let after_restart = (0..10).filter(|&k| call(&mut gws, k)).count();
    assert_eq!(
        after_restart, 0,
        "calls allowed past the cap after a restart"
    );
    for g in gws {
        assert_eq!(g.finish().code(), Some(0));
    }
}

/// Red team: an operator with Redis access forges a run's lease (a token of their own, an
/// hour long). The holder stops appending at its next call (blocked, in a side chain); a new
/// process cannot take the run while the forged lease lives (blocked, side chain) — nothing
/// is ever written into the run's chain by two writers — and once the forged key is gone the
/// run is taken over cleanly. Every trail verifies.
#[test]
fn a_forged_lease_never_forks_a_run() {
    if url().is_none() {
        return;
    }
    let server = OwnRedis::start(free_port());
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = write(dir.path(), "p.json", ALLOW);
    let t: Vec<_> = (0..3).map(|i| dir.path().join(format!("t{i}"))).collect();
    let mut a = Replay::start(&policy, &server.url(), "closed", LEASE_MS, &t[0]);
    a.start_run("r", "agent");
    assert!(allowed(&a.call("r")));
    redis_cmd(
        server.port,
        &["SET", "toolgate:{agent}:l:r", "forged", "PX", "3600000"],
    )
    .expect("forge");
    let late = a.call("r");
    assert_eq!(late["code"], "BLOCKED_FAILURE", "{late}");
    let mut b = Replay::start(&policy, &server.url(), "closed", LEASE_MS, &t[1]);
    b.start_run("r", "agent");
    let refused = b.call("r");
    assert_eq!(refused["code"], "BLOCKED_FAILURE", "{refused}");
    redis_cmd(server.port, &["DEL", "toolgate:{agent}:l:r"]).expect("del");
    let mut c = Replay::start(&policy, &server.url(), "closed", LEASE_MS, &t[2]);
    c.start_run("r", "agent");
    assert!(allowed(&c.call("r")));
    c.end_run("r");
    for p in [a, b, c] {
        assert!(p.finish().success());
    }
    let first = first_of(&t[2], "r");
    assert_eq!(first["kind"], "run.resumed", "{first}");
    let in_r = |d: &std::path::Path| trail_events(d).iter().filter(|e| e["runId"] == "r").count();
    assert_eq!(
        in_r(&t[1]),
        0,
        "the refused process wrote nothing into the run's chain"
    );
    let (code, text) = verify(&[&t[0], &t[1], &t[2]], &[]);
    assert_eq!(code, 0, "{text}");
}
