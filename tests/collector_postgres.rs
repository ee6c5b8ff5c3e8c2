//! Two `toolgate collect` processes on one PostgreSQL database, 20 concurrent posters with
//! overlapping batches, a forked run, an over-long agent id, and a kill -9 mid-stream.
//! Needs `TOOLGATE_TEST_POSTGRES_URL` (skips when unset, fails when set and unreachable).
#![cfg(feature = "postgres")]

mod pg_support;

mod common;
use common::collect::{Collect, body_of, sealed_run};
use std::collections::HashSet;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::Utc;
use parking_lot::Mutex;
use pg_support::fresh_schema;
use serde_json::{Value, json};
use toolgate::audit::AuditEvent;
use toolgate::audit::store::postgres::count_runs;

fn run(run_id: &str, agent: &str, n: usize) -> Vec<AuditEvent> {
    sealed_run(run_id, agent, n, Utc::now, |i| json!({"step": i}))
}

/// A deterministic shuffle (xorshift), so a failure can be replayed.
fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        v.swap(i, (seed % (i as u64 + 1)) as usize);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_collectors_on_one_database_store_every_event_once_and_survive_kill_9() {
    let Some(url) = fresh_schema("fleet").await else {
        return;
    };
    let c1 = Collect::start(&url);
    let c2 = Collect::start(&url);
    let client = reqwest::Client::new();

    // 20 good runs of 50 events over 5 agents; a run that is then forked; an over-long agent.
    let good: Vec<Vec<AuditEvent>> = (0..20)
        .map(|i| run(&format!("run-{i}"), &format!("agent-{}", i % 5), 50))
        .collect();
    let original = run("run-forked", "agent-0", 10);
    let fork = run("run-forked", "agent-0", 10);
    let long = run("run-long", &"x".repeat(300), 5);
    let r = client
        .post(format!("{}/v1/events", c1.url()))
        .header("content-type", "application/json")
        .body(body_of(&original.iter().collect::<Vec<_>>()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);

    let mut all: Vec<&AuditEvent> = good.iter().flatten().collect();
    all.extend(fork.iter());
    all.extend(long.iter());
    let fork_ids: HashSet<String> = fork.iter().map(|e| e.id().to_string()).collect();
    let long_ids: HashSet<String> = long.iter().map(|e| e.id().to_string()).collect();
    let bodies: Vec<Vec<String>> = (0..20u64)
        .map(|p| {
            let mut mine = all.clone();
            shuffle(&mut mine, 0x9e37_79b9_7f4a_7c15 ^ (p + 1));
            mine.chunks(100).map(body_of).collect()
        })
        .collect();

    let urls = Arc::new(Mutex::new(vec![c1.url(), c2.url()]));
    let answered = Arc::new(AtomicUsize::new(0));
    let killed = Arc::new(tokio::sync::Notify::new());
    let rejected: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let mut posters = tokio::task::JoinSet::new();
    for (p, batches) in bodies.into_iter().enumerate() {
        let (client, urls, answered, killed, rejected) = (
            client.clone(),
            urls.clone(),
            answered.clone(),
            killed.clone(),
            rejected.clone(),
        );
        posters.spawn(async move {
            for (b, body) in batches.into_iter().enumerate() {
                let mut attempt = p + b;
                loop {
                    let target = {
                        let u = urls.lock();
                        u[attempt % u.len()].clone()
                    };
                    attempt += 1;
                    let sent = client
                        .post(format!("{target}/v1/events"))
                        .header("content-type", "application/json")
                        .body(body.clone())
                        .send()
                        .await;
                    let Ok(resp) = sent else {
                        continue; // that collector is down: the other one takes it
                    };
                    let status = resp.status().as_u16();
                    let answer: Value = resp.json().await.unwrap_or(Value::Null);
                    assert!(status == 200 || status == 409, "{status}: {answer}");
                    for r in answer["rejected"].as_array().unwrap() {
                        rejected.lock().push((
                            r["id"].as_str().unwrap().to_string(),
                            r["reason"].as_str().unwrap().to_string(),
                        ));
                    }
                    if answered.fetch_add(1, Ordering::SeqCst) == 60 {
                        killed.notify_one();
                    }
                    break;
                }
            }
        });
    }
    // kill -9 the first collector mid-stream; posters fail over to the second.
    killed.notified().await;
    let mut c1 = c1;
    c1.kill();
    urls.lock().retain(|u| *u != c1.url());
    while let Some(r) = posters.join_next().await {
        r.unwrap();
    }
    // Restart it: everything acknowledged is there, resends are duplicates.
    let c1 = Collect::start(&url);
    let counts = count_runs(&url).await.unwrap();
    for i in 0..20 {
        let key = (format!("agent-{}", i % 5), format!("run-{i}"));
        assert_eq!(counts.get(&key), Some(&50), "{key:?}");
    }
    assert_eq!(
        counts.get(&("agent-0".to_string(), "run-forked".to_string())),
        Some(&10)
    );
    assert_eq!(counts.len(), 21, "{counts:?}");
    let resend = client
        .post(format!("{}/v1/events", c1.url()))
        .header("content-type", "application/json")
        .body(body_of(&good[3].iter().collect::<Vec<_>>()))
        .send()
        .await
        .unwrap();
    let answer: Value = resend.json().await.unwrap();
    assert_eq!(
        answer,
        json!({"accepted": 0, "duplicates": 50, "rejected": []})
    );

    // Every rejection is a fork or an over-long id, with its reason; each was rejected by
    // every poster.
    let rejected = rejected.lock().clone();
    assert_eq!(rejected.len(), 20 * (fork.len() + long.len()));
    for (id, reason) in &rejected {
        if fork_ids.contains(id) {
            assert!(reason.starts_with("fork:"), "{reason}");
        } else {
            assert!(long_ids.contains(id), "{id}: {reason}");
            assert!(reason.starts_with("id too long"), "{reason}");
        }
    }

    // `toolgate verify postgres://...` passes.
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["verify", &url])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("ok: 1010 events, 21 runs"), "{stdout}");
    drop(c2);
}
