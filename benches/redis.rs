//! The engine on Redis on loopback (`TOOLGATE_TEST_REDIS_URL`, default
//! `redis://127.0.0.1:6379/0`), policy `policies/customer-support.json`:
//!
//! - `redis/before_tool/crm_search`: one `before_tool` of a CRM search (a `maxCalls` counter and
//!   an `agent_user` metric window in play), and `redis/before_tool/kb_search` (no state rule in
//!   play: the run's flags and history are still read). Also printed: median and p99 over
//!   2,000 decisions, and the Redis round trips per decision (counted by the store).
//! - 8 concurrent runs: decisions per second (before + after of each call).
//! - `redis/store/*`: the store alone, reserve and reserve + commit of the same shape.
//!
//! A new run every 5 calls keeps the per-run `maxCalls` (6) from blocking.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use toolgate::engine::{GovernanceEngine, Run, RunContext, ToolCall, ToolOutcome};
use toolgate::state::redis::{
    Commit, CounterSpec, RedisConfig, RedisStateStore, ReserveRequest, WindowSpec,
};

fn config() -> RedisConfig {
    let url = std::env::var("TOOLGATE_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379/0".to_string());
    let mut cfg = RedisConfig::new(url);
    cfg.prefix = format!("tgbench:{}", uuid::Uuid::now_v7().simple());
    cfg.ttl = Duration::from_secs(600);
    // a busy shared 2-core machine: measure, do not fail on the 50 ms default
    cfg.timeout = Duration::from_secs(2);
    cfg
}

fn run_for(engine: &GovernanceEngine, i: usize) -> Run {
    engine.start_run(
        RunContext::new(format!("bench-{i}"), "support-bot").with_enduser(
            format!("C-{}", i % 50),
            [("tier".to_string(), "gold".to_string())],
        ),
    )
}

fn crm(id: usize) -> ToolCall {
    ToolCall::new(
        format!("c{id}"),
        "crm_search_contacts",
        json!({"query": "jane", "limit": 5}),
    )
    .with_tags(["crm"])
}

fn kb(id: usize) -> ToolCall {
    ToolCall::new(
        format!("k{id}"),
        "kb_search",
        json!({"query": "reset password"}),
    )
    .with_tags(["kb"])
}

/// Median and p99 of `n` decisions made by `decide`, and the round trips per decision.
fn percentiles(
    rt: &tokio::runtime::Runtime,
    engine: &GovernanceEngine,
    store: &RedisStateStore,
    n: usize,
    make: fn(usize) -> ToolCall,
) -> (Duration, Duration, f64) {
    let mut took = Vec::with_capacity(n);
    let trips = store.round_trips();
    let mut run = run_for(engine, 1_000_000);
    for i in 0..n {
        if i % 5 == 0 {
            run = run_for(engine, 1_000_000 + i);
        }
        let call = make(i);
        let t0 = Instant::now();
        let d = rt.block_on(run.before_tool(call));
        took.push(t0.elapsed());
        assert!(d.is_allowed(), "{d:?}");
    }
    let per = (store.round_trips() - trips) as f64 / n as f64;
    took.sort();
    (took[n / 2], took[n * 99 / 100], per)
}

/// With the audit trail on (file sink, fsync off), runs hold a lease in the store (design §16):
/// the median and p99 of a decision on a held run (one `start_run` every 3 calls, counted in)
/// and on a continued run (a run another handle left open, taken up again: the claim + the
/// `run.continued` event, then its calls), and the round trips per decision.
fn audited(rt: &tokio::runtime::Runtime, store: &Arc<RedisStateStore>) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let engine = GovernanceEngine::builder()
        .policy_path(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/policies/customer-support.json"
        ))
        .shared_state_store(store.clone())
        .audit(toolgate::audit::AuditConfig {
            sinks: vec![toolgate::audit::SinkConfig::File(
                toolgate::audit::FileSinkConfig {
                    fsync: false,
                    ..toolgate::audit::FileSinkConfig::in_dir(dir.path())
                },
            )],
            ..Default::default()
        })
        .build()
        .expect("the example policy loads");
    let n = 2_000;
    for (label, continued) in [("held run", false), ("continued run", true)] {
        let mut took = Vec::with_capacity(n);
        let trips = store.round_trips();
        let mut run: Option<Run> = None;
        for i in 0..n {
            let t0 = Instant::now();
            if i % 3 == 0 {
                // A new handle every 3 calls. Continued: every other one takes up the run the
                // previous handle left open (same id: 6 calls per run, under the cap of 6).
                let id = if continued {
                    7_000_000 + i / 6
                } else {
                    8_000_000 + i
                };
                drop(run.take());
                run = Some(rt.block_on(async {
                    let e = engine.clone();
                    tokio::task::spawn_blocking(move || run_for(&e, id))
                        .await
                        .expect("start_run")
                }));
            }
            let d = rt.block_on(run.as_ref().expect("a run").before_tool(crm(i)));
            took.push(t0.elapsed());
            assert!(d.is_allowed(), "{label}: {d:?}");
        }
        let per = (store.round_trips() - trips) as f64 / n as f64;
        took.sort();
        println!(
            "redis audited before_tool crm_search, {label}: median {:?} p99 {:?}, {per:.2} round trips per decision (start_run counted in)",
            took[n / 2],
            took[n * 99 / 100]
        );
    }
    drop(rt.block_on(engine.shutdown()));
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let store = Arc::new(
        rt.block_on(RedisStateStore::connect(config()))
            .expect("Redis for the bench"),
    );
    let engine = GovernanceEngine::builder()
        .policy_path(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/policies/customer-support.json"
        ))
        .shared_state_store(store.clone())
        .build()
        .expect("the example policy loads");

    audited(&rt, &store);

    for (name, make) in [
        ("crm_search", crm as fn(usize) -> ToolCall),
        ("kb_search", kb),
    ] {
        let (median, p99, trips) = percentiles(&rt, &engine, &store, 2_000, make);
        println!(
            "redis before_tool {name}: median {median:?} p99 {p99:?}, {trips:.2} round trips per decision"
        );
        let mut i = 0usize;
        let mut run = run_for(&engine, 0);
        c.bench_function(&format!("redis/before_tool/{name}"), |b| {
            b.iter(|| {
                i += 1;
                if i.is_multiple_of(5) {
                    run = run_for(&engine, i);
                }
                rt.block_on(run.before_tool(make(i)))
            })
        });
    }

    // 8 concurrent runs, before + after of each call: decisions per second.
    let per_run = 400;
    let trips = store.round_trips();
    let t0 = Instant::now();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for r in 0..8 {
            let engine = engine.clone();
            tasks.push(tokio::spawn(async move {
                let mut run = run_for(&engine, 2_000_000 + r * per_run);
                for i in 0..per_run {
                    if i % 5 == 0 {
                        run = run_for(&engine, 2_000_000 + r * per_run + i);
                    }
                    let call = crm(i);
                    let id = call.id.clone();
                    assert!(run.before_tool(call).await.is_allowed());
                    run.after_tool(&id, ToolOutcome::ok(json!([]), Duration::from_millis(1)))
                        .await;
                }
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
    });
    let secs = t0.elapsed().as_secs_f64();
    let n = 8 * per_run;
    println!(
        "redis 8 concurrent runs: {:.0} decisions/s (before + after each; {:.2} round trips per call)",
        n as f64 / secs,
        (store.round_trips() - trips) as f64 / n as f64
    );

    store_alone(c, &rt, &store);
}

/// The store alone: one decision's reserve and reserve + commit of the same shape.
fn store_alone(c: &mut Criterion, rt: &tokio::runtime::Runtime, store: &RedisStateStore) {
    let k = store.keys();
    let req = ReserveRequest {
        run: Some(k.run("support-bot", "store-run")),
        counters: vec![CounterSpec {
            key: k.counter("support-bot", 1, "store-run"),
            max: u64::MAX,
            window_ms: None,
            reserve: true,
            expires: true,
        }],
        windows: vec![WindowSpec {
            key: k.window("support-bot", 2, "support-bot"),
            window_ms: 3_600_000,
        }],
        resume: false,
        lease: None,
    };
    let commit = Commit {
        run: req.run.clone(),
        tool: Some("crm_search_contacts".to_string()),
        metrics: vec![(k.window("support-bot", 2, "support-bot"), 3_600_000, 1.0)],
        ..Default::default()
    };
    let mut now = 1_700_000_000_000i64;
    c.bench_function("redis/store/reserve", |b| {
        b.iter(|| {
            now += 1;
            rt.block_on(store.reserve(&req, now)).expect("reserve")
        })
    });
    c.bench_function("redis/store/reserve_commit", |b| {
        b.iter(|| {
            now += 1;
            rt.block_on(async {
                store.reserve(&req, now).await.expect("reserve");
                store.commit(&commit, now).await.expect("commit");
            })
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
