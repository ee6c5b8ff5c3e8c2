//! The Redis state store on loopback (`TOOLGATE_TEST_REDIS_URL`, default
//! `redis://127.0.0.1:6379/0`): one decision's reserve (a run's history and flags, 4 counters,
//! 2 metric windows: the shape of the customer-support policy), reserve + commit, and
//! throughput with 8 concurrent runs. Prints round trips per decision.

use std::sync::Arc;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use toolgate::state::redis::{
    Commit, CounterSpec, RedisConfig, RedisStateStore, ReserveRequest, WindowSpec,
};

fn request(s: &RedisStateStore, run: &str) -> (ReserveRequest, Commit) {
    let k = s.keys();
    let c = |slot, scope: &str, max, window_ms, expires| CounterSpec {
        key: k.counter("support-bot", slot, scope),
        max,
        window_ms,
        reserve: true,
        expires,
    };
    let req = ReserveRequest {
        run: Some(k.run("support-bot", run)),
        counters: vec![
            c(1, run, u64::MAX, None, true),
            c(2, "support-bot", u64::MAX, None, false),
            c(3, "support-bot\u{1f}alice", u64::MAX, Some(60_000), false),
            c(4, run, u64::MAX, None, true),
        ],
        windows: vec![
            WindowSpec {
                key: k.window("support-bot", 5, "support-bot"),
                window_ms: 60_000,
            },
            WindowSpec {
                key: k.window("support-bot", 6, run),
                window_ms: 3_600_000,
            },
        ],
    };
    let commit = Commit {
        run: req.run.clone(),
        tool: Some("lookup_order".to_string()),
        metrics: vec![(k.window("support-bot", 5, "support-bot"), 60_000, 0.25)],
        adds: Vec::new(),
    };
    (req, commit)
}

fn bench(c: &mut Criterion) {
    let url = std::env::var("TOOLGATE_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379/0".to_string());
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut cfg = RedisConfig::new(url);
    cfg.prefix = format!("tgbench:{}", uuid::Uuid::now_v7().simple());
    cfg.ttl = std::time::Duration::from_secs(600);
    // the concurrent part shares one busy 2-core machine: measure, do not fail on the 50 ms limit
    cfg.timeout = std::time::Duration::from_secs(2);
    let store = rt
        .block_on(RedisStateStore::connect(cfg))
        .expect("Redis for the bench");
    let (req, commit) = request(&store, "bench-run");
    let mut now = 1_700_000_000_000i64;

    let before = store.round_trips();
    rt.block_on(store.reserve(&req, now)).expect("reserve");
    println!("round trips per reserve: {}", store.round_trips() - before);

    c.bench_function("redis_reserve", |b| {
        b.iter(|| {
            now += 1;
            rt.block_on(store.reserve(&req, now)).expect("reserve")
        })
    });
    c.bench_function("redis_reserve_commit", |b| {
        b.iter(|| {
            now += 1;
            rt.block_on(async {
                store.reserve(&req, now).await.expect("reserve");
                store.commit(&commit, now).await.expect("commit");
            })
        })
    });

    // 8 concurrent runs for a fixed number of decisions each: decisions per second.
    let store = Arc::new(store);
    let per_run = 500;
    let t0 = Instant::now();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for r in 0..8 {
            let s = Arc::clone(&store);
            tasks.push(tokio::spawn(async move {
                let (req, commit) = request(&s, &format!("bench-run-{r}"));
                for i in 0..per_run {
                    let t = 1_800_000_000_000 + i;
                    s.reserve(&req, t).await.expect("reserve");
                    s.commit(&commit, t).await.expect("commit");
                }
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
    });
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "8 concurrent runs: {:.0} decisions/s (reserve + commit each)",
        f64::from(8 * per_run as u32) / secs
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
