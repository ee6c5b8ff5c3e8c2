//! Audited decisions into an fsync'd file, 1 and 2 caller threads (issue #38: audited
//! throughput scales past one core, 2 threads ≥ 1.6× one thread), and the audited decision's
//! cost on the caller's thread (≤ 300 ns).
//!
//! Each caller thread plays its own runs of the support workload (`benches/support/mod.rs`:
//! 20 `before_tool`, `after_tool` for the allowed calls) under an agent of its own, so the
//! threads share the engine, its sealers and the file sink, not the policy's `per: agent`
//! counters. The trail goes to the default file sink (fsync on) in a temporary directory. Two
//! ways of ending runs:
//!
//! - `ended`: every run is ended with `Run::end`, which returns once the run's events are
//!   written and fsynced (each caller waits for the disk once per run);
//! - `dropped`: runs are dropped (a dropped run still writes `run.ended`, without waiting), and
//!   the time runs until one `flush` at the end has everything sealed, written and fsynced.
//!
//! Each configuration runs for a fixed time, 1 and 2 threads alternately, a few rounds; the
//! medians and the ratio 2 threads / 1 thread are printed. `TOOLGATE_BENCH_SECS` (default 2)
//! and `TOOLGATE_BENCH_ROUNDS` (default 3) change the time per measurement and the rounds.
//!
//! ```sh
//! cargo bench --bench audit_scaling
//! ```

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use toolgate::engine::{GovernanceEngine, Run, RunContext};

mod support;
use support::{FixedClock, Workload, play};

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Ended,
    Dropped,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Ended => "ended",
            Mode::Dropped => "dropped",
        }
    }
}

fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The context of run `k` of caller thread `th` (an agent per thread).
fn context(w: &Workload, th: usize, k: usize) -> RunContext {
    let (id, tags) = &w.endusers[k % w.endusers.len()];
    RunContext::new(format!("t{th}-run-{k}"), format!("support-bot-{th}"))
        .with_enduser(id.clone(), tags.clone())
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// An engine on the 10-rule support policy writing to the file sink (fsync on) in `dir`.
fn engine(w: &Workload, rt: &tokio::runtime::Runtime, dir: &std::path::Path) -> GovernanceEngine {
    let _guard = rt.enter();
    GovernanceEngine::builder()
        .policy(w.policy(10))
        .clock(Arc::new(FixedClock(w.clock)))
        .audit(toolgate::audit::AuditConfig {
            sinks: vec![toolgate::audit::SinkConfig::File(
                toolgate::audit::FileSinkConfig::in_dir(dir),
            )],
            ..Default::default()
        })
        .build()
        .expect("the support policy compiles")
}

/// Lines written to the trail in `dir`.
fn lines(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read(e.path()).ok())
        .map(|b| b.iter().filter(|&&c| c == b'\n').count() as u64)
        .sum()
}

/// Decisions per second with `threads` callers for `secs`, everything sealed, written and
/// fsynced by the end of the measured time.
fn measure(w: &Workload, mode: Mode, threads: usize, secs: f64, round: usize) -> f64 {
    let dir = std::env::temp_dir().join(format!(
        "toolgate-bench-scaling-{}-{}-{threads}-{round}",
        std::process::id(),
        mode.label()
    ));
    let rt = current_thread();
    let engine = engine(w, &rt, &dir);
    let budget = Duration::from_secs_f64(secs);
    let t = Instant::now();
    let decisions: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|th| {
                let (engine, w) = (&engine, &w);
                s.spawn(move || {
                    let rt = current_thread();
                    let mut decisions = 0usize;
                    let mut k = 0usize;
                    while t.elapsed() < budget {
                        let run = engine.start_run(context(w, th, k));
                        play(w, &run, |_, d| {
                            decisions += 1;
                            black_box(d);
                        });
                        if mode == Mode::Ended {
                            rt.block_on(run.end("success", None));
                        }
                        k += 1;
                    }
                    decisions
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a caller thread"))
            .sum()
    });
    rt.block_on(engine.flush()).expect("flush");
    let elapsed = t.elapsed().as_secs_f64();
    let written = lines(&dir);
    rt.block_on(engine.shutdown()).expect("shutdown");
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(written > decisions as u64, "every decision is in the trail");
    decisions as f64 / elapsed
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The audited decision on the caller's thread: median and p99 of `before_tool` over whole
/// runs ended with `Run::end` (one thread).
fn caller_latency(w: &Workload) {
    let dir = std::env::temp_dir().join(format!(
        "toolgate-bench-scaling-{}-latency",
        std::process::id()
    ));
    let rt = current_thread();
    let engine = engine(w, &rt, &dir);
    let mut all = Vec::new();
    for k in 0..1_200 {
        let run: Run = engine.start_run(context(w, 0, k));
        for call in &w.calls {
            let call_clone = call.clone();
            let t = Instant::now();
            let d = run.before_tool_blocking(call_clone);
            let ns = t.elapsed().as_nanos() as u64;
            if k >= 200 {
                all.push(ns);
            }
            if d.is_allowed() {
                let o = toolgate::engine::ToolOutcome::ok(
                    serde_json::json!({"ok": true}),
                    Duration::from_millis(3),
                );
                run.after_tool_blocking(&call.id, o);
            }
        }
        rt.block_on(run.end("success", None));
    }
    all.sort_unstable();
    let at = |p: f64| all[((all.len() - 1) as f64 * p).round() as usize];
    println!(
        "audited before_tool on the caller's thread (file sink, fsync on, runs ended): median {} ns, p99 {} ns ({} decisions)",
        at(0.5),
        at(0.99),
        all.len()
    );
    rt.block_on(engine.shutdown()).expect("shutdown");
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let w = Workload::load();
    let secs: f64 = env_num("TOOLGATE_BENCH_SECS", 2.0);
    let rounds: usize = env_num("TOOLGATE_BENCH_ROUNDS", 3);
    if filter.as_deref().is_none_or(|f| "latency".contains(f)) {
        caller_latency(&w);
    }
    for mode in [Mode::Ended, Mode::Dropped] {
        if filter.as_deref().is_some_and(|f| !mode.label().contains(f)) {
            continue;
        }
        // Warm-up (heaps of the sealer and sink threads, the page cache of the temp dir).
        measure(&w, mode, 2, secs / 4.0, usize::MAX);
        let (mut one, mut two) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            one.push(measure(&w, mode, 1, secs, round));
            two.push(measure(&w, mode, 2, secs, round));
        }
        let fmt = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        println!(
            "audited/{} 1 thread: {} decisions/s (median {:.0})",
            mode.label(),
            fmt(&one),
            median(one.clone())
        );
        println!(
            "audited/{} 2 threads: {} decisions/s (median {:.0})",
            mode.label(),
            fmt(&two),
            median(two.clone())
        );
        println!(
            "audited/{} 2 threads / 1 thread: {:.2}x",
            mode.label(),
            median(two) / median(one)
        );
    }
}
