//! Time per decision on Cedar's stateless workload (`benches/data/cedar-workload.json`, see
//! `benches/support/cedar.rs`): each request a fresh run for its end user, `before_tool` timed
//! alone (the run's start and end are not), every decision checked against Cedar's. Prints the
//! median, p90, p99 and p99.9 at 10 and 1,000 rules (not a test: numbers for docs/performance.md).
//!
//!     cargo bench --bench cedar_latency                 # mimalloc, as the binary ships
//!     cargo bench --no-default-features --bench cedar_latency   # the system allocator
//!
//! The timer's own cost (two `Instant::now` reads back to back, median) is printed and
//! subtracted.

use std::hint::black_box;
use std::time::Instant;

mod support;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Passes over the 20 requests (the first 200 not kept: warm-up).
const PASSES: usize = 20_000;

fn pct(sorted: &[u64], p: f64) -> u64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(0)
}

fn timer_cost() -> u64 {
    let mut v: Vec<u64> = (0..100_000)
        .map(|_| {
            let t = Instant::now();
            black_box(());
            t.elapsed().as_nanos() as u64
        })
        .collect();
    v.sort_unstable();
    pct(&v, 0.5)
}

fn main() {
    let w = support::cedar::CedarWorkload::load();
    let timer = timer_cost();
    println!(
        "Cedar's workload, {} requests per pass, {PASSES} passes; timer cost {timer} ns subtracted",
        w.calls.len()
    );
    for rules in [10usize, 1_000] {
        let engine = w.engine(rules);
        let mut v = Vec::with_capacity(PASSES * w.calls.len());
        for k in 0..PASSES {
            for c in &w.calls {
                let run = engine.start_run(c.context.clone());
                let call = c.call.clone();
                let t = Instant::now();
                let d = run.before_tool_blocking(call);
                let ns = (t.elapsed().as_nanos() as u64).saturating_sub(timer);
                assert_eq!(d.effect, c.expect, "{}: {d:?}", c.call.name);
                black_box(d);
                if k >= 200 {
                    v.push(ns);
                }
            }
        }
        v.sort_unstable();
        println!(
            "cedar/{rules} before_tool: median {} ns, p90 {} ns, p99 {} ns, p99.9 {} ns ({} decisions)",
            pct(&v, 0.5),
            pct(&v, 0.9),
            pct(&v, 0.99),
            pct(&v, 0.999),
            v.len()
        );
    }
}
