//! Latency of `Run::before_tool`, the call an agent framework makes before every tool call.
//!
//! - `customer_support/*`: `policies/customer-support.json` with two representative calls that
//!   need no signal: `kb_search` (no rule in play) and `issue_refund` of $50 for a gold
//!   customer (two toolArg / enduserTag rules in play, allowed).
//! - `rules/<n>`: generated policies of 10, 1,000 and 100,000 rules where the same 9 rules are
//!   in play for the benchmarked call (4 selecting its tool by name, 3 on every tool, 2 on its
//!   tags); the rest select other tools by distinct literal names. Condition kinds are mixed:
//!   toolArg, toolName, maxCalls (with a max that never trips) and enduserTag. Every decision
//!   is an allow, so the timing covers evaluating every rule in play.
//!
//! - `support/<n>/run`: the support workload of `benches/data/support-workload.json` (see
//!   `benches/support/mod.rs`) at 10, 1,000 and 100,000 rules: one whole run (start, 20
//!   `before_tool` + `after_tool` for the allowed calls, end), 4 end users in turn, clock fixed.
//!   Before criterion starts, the per-decision median and p99 of `before_tool` over many runs
//!   are printed (`support/<n>: median … p99 …`), as are the audited decision (file sink) and
//!   the 1- and 2-thread throughput.
//! - `start_end/<n>`: `start_run` + `end` at 10 and 100,000 rules (no audit).
//!
//! One run per benchmark (except `support/*`): decisions never block, so the run's counters never trip. Each
//! iteration clones the call (as a framework builds a fresh one per tool call) and drops the
//! decision; `clone_call/*` measures the clone alone, to subtract.
//!
//! ```sh
//! cargo bench --bench decision
//! ```

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group};
use serde_json::{Value, json};
use tokio::runtime::Runtime;
use toolgate::audit::{AuditError, AuditEvent, AuditSink};
use toolgate::engine::{GovernanceEngine, Run, RunContext, ToolCall};
use toolgate::policy::parse_policy_value;

mod support;
use support::{Workload, play};

// The allocator the `toolgate` binary uses (feature `mimalloc`, on by default); build with
// `--no-default-features` to measure with the system allocator.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn bench_call(c: &mut Criterion, rt: &Runtime, id: &str, run: &Run, call: &ToolCall) {
    // Sanity: the benchmarked decision is the intended one.
    let d = rt.block_on(run.before_tool(call.clone()));
    assert!(d.is_allowed(), "{id}: {d:?}");
    // The call is cloned (and the decision dropped) inside the measurement, as an agent
    // framework builds a fresh call each time; `clone_call/*` measures the clone alone.
    c.bench_function(id, |b| {
        b.to_async(rt)
            .iter(|| run.before_tool(black_box(call).clone()))
    });
}

fn bench_clone(c: &mut Criterion, id: &str, call: &ToolCall) {
    c.bench_function(id, |b| b.iter(|| black_box(call).clone()));
}

fn customer_support(c: &mut Criterion) {
    let rt = runtime();
    let engine = GovernanceEngine::builder()
        .policy_path(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/policies/customer-support.json"
        ))
        .build()
        .expect("the example policy loads");
    let run = engine.start_run(RunContext::new("bench", "support-bot").with_enduser(
        "C-1001",
        [
            ("tier".to_string(), "gold".to_string()),
            ("tz".to_string(), "Europe/Paris".to_string()),
        ],
    ));
    let kb = ToolCall::new(
        "c1",
        "kb_search",
        json!({"query": "how do I reset my password", "limit": 5}),
    )
    .with_tags(["kb"]);
    bench_clone(c, "clone_call/kb_search", &kb);
    bench_call(c, &rt, "customer_support/kb_search", &run, &kb);
    let refund = ToolCall::new(
        "c2",
        "issue_refund",
        json!({"orderId": "A-10023", "amount": 50, "currency": "USD"}),
    )
    .with_tags(["billing"]);
    let d = rt.block_on(run.before_tool(refund.clone()));
    assert_eq!(
        d.evaluated.len(),
        2,
        "two rules in play for issue_refund: {d:?}"
    );
    bench_clone(c, "clone_call/issue_refund", &refund);
    bench_call(c, &rt, "customer_support/issue_refund", &run, &refund);
}

/// A sink that drops what it gets: measures building, redacting and sealing (hashing) the
/// `tool.decision` event on the decision path, not the sink's I/O (which never blocks it).
struct NullSink;

#[async_trait::async_trait]
impl AuditSink for NullSink {
    async fn write_batch(&self, _events: &[Arc<AuditEvent>]) -> Result<(), AuditError> {
        Ok(())
    }
    async fn flush(&self) -> Result<(), AuditError> {
        Ok(())
    }
}

fn audited(c: &mut Criterion) {
    let rt = runtime();
    let engine = rt
        .block_on(async {
            GovernanceEngine::builder()
                .policy_path(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/policies/customer-support.json"
                ))
                .audit_sink(Arc::new(NullSink))
                .build()
        })
        .expect("the example policy loads");
    let run = engine.start_run(
        RunContext::new("bench", "support-bot")
            .with_enduser("C-1001", [("tier".to_string(), "gold".to_string())]),
    );
    let refund = ToolCall::new(
        "c2",
        "issue_refund",
        json!({"orderId": "A-10023", "amount": 50, "currency": "USD"}),
    )
    .with_tags(["billing"]);
    bench_call(c, &rt, "audited/issue_refund", &run, &refund);
}

fn rule(id: String, tool: Value, condition: Value) -> Value {
    json!({
        "id": id,
        "name": "generated",
        "priority": 10,
        "enabled": true,
        "selector": {"phase": "tool.before", "tool": tool},
        "condition": condition,
        "effect": {"type": "block", "reason": "generated rule"}
    })
}

/// A condition of kind `k % 4` that is false for the benchmarked call.
fn condition(k: usize, tool: &str) -> Value {
    match k % 4 {
        0 => {
            json!({"kind": "toolArg", "type": "number", "op": "gt", "path": "amount", "value": 1_000_000})
        }
        1 => json!({"kind": "toolName", "op": "glob", "value": "delete*"}),
        2 => json!({
            "kind": "maxCalls",
            "selector": {"by": "toolName", "patterns": [tool]},
            "max": 1_000_000_000_000u64
        }),
        _ => json!({"kind": "enduserTag", "op": "hasValue", "tag": "role", "value": "intern"}),
    }
}

/// `n` rules (n >= 10): 9 in play for `bench_tool` tagged `finance` + `pii`, one more tag rule
/// that does not match it, and `n - 10` rules selecting other tools by literal name.
fn generated_policy(n: usize) -> Value {
    let mut rules = Vec::with_capacity(n);
    // 4 rules selecting the benchmarked tool by name, one of each kind.
    for k in 0..4 {
        rules.push(rule(
            format!("bench-tool-{k}"),
            json!({"name": "bench_tool"}),
            condition(k, "bench_tool"),
        ));
    }
    // 3 rules on every tool.
    rules.push(rule(
        "all-tools-target".into(),
        json!({}),
        json!({"kind": "toolArg", "type": "string", "op": "startsWith", "path": "target", "value": "/prod"}),
    ));
    rules.push(rule(
        "all-tools-suspended".into(),
        json!({}),
        json!({"kind": "enduserTag", "op": "has", "tag": "suspended"}),
    ));
    rules.push(rule(
        "all-tools-denylist".into(),
        json!({}),
        json!({"kind": "toolName", "op": "in", "value": ["rm", "drop_db"]}),
    ));
    // 3 tag rules, 2 of them matching the call's tags.
    rules.push(rule(
        "tag-finance".into(),
        json!({"tagsAny": ["finance"]}),
        condition(0, "bench_tool"),
    ));
    rules.push(rule(
        "tag-pii".into(),
        json!({"tagsAny": ["pii"]}),
        json!({"kind": "maxCalls", "selector": {"by": "toolTag", "tags": ["pii"]}, "max": 1_000_000_000_000u64}),
    ));
    rules.push(rule(
        "tag-admin".into(),
        json!({"tagsAll": ["admin"]}),
        condition(1, "bench_tool"),
    ));
    for i in 0..n.saturating_sub(rules.len()) {
        let tool = format!("tool_{i:06}");
        rules.push(rule(
            format!("filler-{i}"),
            json!({"name": tool}),
            condition(i, &tool),
        ));
    }
    json!({"policy": {"name": format!("generated-{n}")}, "rules": rules})
}

fn rule_count(c: &mut Criterion) {
    let rt = runtime();
    let call = ToolCall::new(
        "c1",
        "bench_tool",
        json!({"amount": 250, "target": "/staging/db", "note": "quarterly"}),
    )
    .with_tags(["finance", "pii"]);
    bench_clone(c, "clone_call/bench_tool", &call);
    for n in [10usize, 1_000, 100_000] {
        let policy =
            parse_policy_value(&generated_policy(n), None).expect("the generated policy parses");
        assert_eq!(policy.rules.len(), n);
        let engine = GovernanceEngine::builder()
            .policy(policy)
            .build()
            .expect("the generated policy compiles");
        let run = engine.start_run(
            RunContext::new("bench", "agent")
                .with_enduser("u1", [("role".to_string(), "engineer".to_string())]),
        );
        let d = rt.block_on(run.before_tool(call.clone()));
        assert_eq!(d.evaluated.len(), 9, "9 rules in play at {n} rules: {d:?}");
        bench_call(c, &rt, &format!("rules/{n}"), &run, &call);
    }
}

fn config() -> Criterion {
    Criterion::default()
        // ~8 s per benchmark, under 2 minutes in all (the 100,000-rule policy takes a few
        // seconds to generate and compile). Enough samples to ride out a noisy shared machine.
        .sample_size(100)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(6))
}

fn support_runs(c: &mut Criterion) {
    let w = Workload::load();
    for n in [10usize, 1_000, 100_000] {
        let engine = w.engine(n);
        let mut k = 0usize;
        c.bench_function(&format!("support/{n}/run"), |b| {
            b.iter(|| {
                let run = engine.start_run(w.context(k));
                k += 1;
                play(&w, &run, |_, d| {
                    black_box(d);
                });
                end_now(&run);
            })
        });
    }
}

/// Ends a run without a runtime: with the audit trail off, `end` awaits nothing.
fn end_now(run: &Run) {
    let fut = std::pin::pin!(run.end("success", None));
    let mut fut = fut;
    let waker = std::task::Waker::noop();
    let ready = std::future::Future::poll(fut.as_mut(), &mut std::task::Context::from_waker(waker));
    assert!(ready.is_ready(), "end awaited with the audit trail off");
}

fn start_end(c: &mut Criterion) {
    let w = Workload::load();
    for n in [10usize, 100_000] {
        let engine = w.engine(n);
        let mut k = 0usize;
        c.bench_function(&format!("start_end/{n}"), |b| {
            b.iter_batched(
                || {
                    k += 1;
                    w.context(k)
                },
                |ctx| {
                    let run = engine.start_run(ctx);
                    end_now(&run);
                },
                BatchSize::SmallInput,
            )
        });
    }
}

/// Per-decision latencies of `before_tool` over `runs` runs of the workload, sorted.
/// The call is cloned before the clock starts (a framework builds it anyway).
fn decision_latencies(
    w: &Workload,
    engine: &GovernanceEngine,
    runs: usize,
    end: &dyn Fn(&Run),
) -> Vec<u64> {
    let mut out = Vec::with_capacity(runs * w.calls.len());
    for k in 0..runs {
        let run = engine.start_run(w.context(k));
        for call in &w.calls {
            let call_clone = call.clone();
            let t = std::time::Instant::now();
            let d = run.before_tool_blocking(call_clone);
            out.push(t.elapsed().as_nanos() as u64);
            if d.is_allowed() {
                let o = toolgate::engine::ToolOutcome::ok(
                    json!({"ok": true}),
                    Duration::from_millis(3),
                );
                run.after_tool_blocking(&call.id, o);
            }
        }
        end(&run);
    }
    out.sort_unstable();
    out
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or(0)
}

fn print_latencies(label: &str, v: &[u64]) {
    println!(
        "{label}: median {} ns, p99 {} ns ({} decisions)",
        pct(v, 0.5),
        pct(v, 0.99),
        v.len()
    );
}

/// Per-decision median and p99 on the support workload, audit off.
fn support_percentiles(w: &Workload) {
    for n in [10usize, 1_000, 100_000] {
        let engine = w.engine(n);
        assert_eq!(engine.policies().active_rules(), n);
        decision_latencies(w, &engine, 200, &end_now); // warm-up
        let v = decision_latencies(w, &engine, 5_000, &end_now);
        print_latencies(&format!("support/{n} before_tool"), &v);
    }
}

/// Audited decisions into the file sink: the caller's cost per decision (median, p99), and
/// sustained throughput (decisions until everything is sealed, written and flushed), with the
/// file sink's fsync on (the default: on every batch holding a `run.ended`, on flush) and off,
/// and into a sink that drops what it gets (the sealer alone).
fn audited_file(w: &Workload, rt: &Runtime) {
    for (label, fsync) in [
        ("file", true),
        ("file, fsync off", false),
        ("null sink", false),
    ] {
        // TOOLGATE_BENCH_SINK=label: this configuration alone (e.g. "file", for profiling).
        if std::env::var("TOOLGATE_BENCH_SINK").is_ok_and(|only| only != label) {
            continue;
        }
        let dir = std::env::temp_dir().join(format!(
            "toolgate-bench-audit-{}-{}",
            std::process::id(),
            label.len()
        ));
        let counter = Arc::new(CountingSink::default());
        let engine = rt.block_on(async {
            let b = GovernanceEngine::builder()
                .policy(w.policy(10))
                .clock(Arc::new(support::FixedClock(w.clock)));
            // TOOLGATE_BENCH_SEALERS=n: seal on n threads instead of one per core (up to 4).
            let b = match std::env::var("TOOLGATE_BENCH_SEALERS")
                .ok()
                .and_then(|n| n.parse().ok())
            {
                Some(n) => b.audit_sealer_threads(n),
                None => b,
            };
            let b = if label == "null sink" {
                b.audit_sink(counter.clone())
            } else {
                b.audit(toolgate::audit::AuditConfig {
                    sinks: vec![toolgate::audit::SinkConfig::File(
                        toolgate::audit::FileSinkConfig {
                            fsync,
                            ..toolgate::audit::FileSinkConfig::in_dir(&dir)
                        },
                    )],
                    ..Default::default()
                })
            };
            b.build().expect("the support policy compiles")
        });
        let end = |run: &Run| rt.block_on(run.end("success", None));
        if fsync {
            decision_latencies(w, &engine, 200, &end);
            rt.block_on(engine.flush()).expect("flush");
            let v = decision_latencies(w, &engine, 2_000, &end);
            print_latencies("audited/file before_tool (caller's thread, runs ended)", &v);
        }
        // Sustained: runs are dropped instead of ended (a dropped run still writes
        // `run.ended`, without waiting for the disk), and everything is flushed once at the end.
        let runs = 5_000;
        // Warm-up: the sealer and sink threads of this engine grow their heaps (first page
        // faults) before the measured runs, whichever configuration runs first.
        decision_latencies(w, &engine, 1_000, &|_: &Run| {});
        rt.block_on(engine.flush()).expect("flush");
        let before = written(&dir, &counter);
        let cpu_before = thread_cpu();
        let t = std::time::Instant::now();
        // Whole runs as an application plays them: no clock read around each decision and no
        // sorting of latencies inside the measured time (the latencies are measured above).
        let mut decisions = 0usize;
        for k in 0..runs {
            let run = engine.start_run(w.context(k));
            support::play(w, &run, |_, d| {
                decisions += 1;
                black_box(d);
            });
        }
        let decided = t.elapsed().as_secs_f64();
        rt.block_on(engine.flush()).expect("flush");
        let secs = t.elapsed().as_secs_f64();
        let cpu = cpu_since(&cpu_before);
        let events = written(&dir, &counter) - before;
        println!(
            "audited/{label} throughput: {:.0} decisions/s, {:.0} events/s ({} runs of {} calls with their results, {events} events, all sealed and written; {:.0}% of the time deciding, the rest draining)",
            decisions as f64 / secs,
            events as f64 / secs,
            runs,
            w.calls.len(),
            100.0 * decided / secs
        );
        println!(
            "audited/{label} CPU per decision by thread: {}",
            cpu.iter()
                .map(|(name, ns)| format!(
                    "{name} {:.2} µs",
                    *ns as f64 / 1000.0 / decisions as f64
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        rt.block_on(engine.shutdown()).expect("shutdown");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// CPU time so far of each thread of this process, by thread name (Linux's
/// `/proc/self/task/*/schedstat`; empty elsewhere).
fn thread_cpu() -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let ns: u64 = std::fs::read_to_string(task.path().join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()))
            .unwrap_or(0);
        *out.entry(name.trim().to_string()).or_default() += ns;
    }
    out
}

/// CPU time by thread name since `before` (threads that used less than 1 ms left out).
fn cpu_since(before: &std::collections::BTreeMap<String, u64>) -> Vec<(String, u64)> {
    thread_cpu()
        .into_iter()
        .map(|(name, ns)| {
            let spent = ns.saturating_sub(before.get(&name).copied().unwrap_or(0));
            (name, spent)
        })
        .filter(|(_, ns)| *ns >= 1_000_000)
        .collect()
}

/// A sink that counts what it gets.
#[derive(Default)]
struct CountingSink(std::sync::atomic::AtomicU64);

#[async_trait::async_trait]
impl AuditSink for CountingSink {
    async fn write_batch(&self, events: &[Arc<AuditEvent>]) -> Result<(), AuditError> {
        self.0
            .fetch_add(events.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
    async fn flush(&self) -> Result<(), AuditError> {
        Ok(())
    }
}

/// Events written so far: lines in the trail's files, or those counted by `counter`.
fn written(dir: &std::path::Path, counter: &CountingSink) -> u64 {
    let lines: u64 = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read(e.path()).ok())
        .map(|b| b.iter().filter(|&&c| c == b'\n').count() as u64)
        .sum();
    lines + counter.0.load(std::sync::atomic::Ordering::Relaxed)
}

/// Decisions per second with 1 and 2 threads sharing one engine (one run per thread at a time).
fn threads(w: &Workload) {
    let engine = w.engine(10);
    let per_thread = 3_000usize;
    for n_threads in [1usize, 2] {
        let t = std::time::Instant::now();
        std::thread::scope(|s| {
            for th in 0..n_threads {
                let (engine, w) = (&engine, &w);
                s.spawn(move || {
                    for k in 0..per_thread {
                        let run = engine.start_run(w.context(th * per_thread + k));
                        play(w, &run, |_, d| {
                            black_box(d);
                        });
                        end_now(&run);
                    }
                });
            }
        });
        let decisions = (n_threads * per_thread * w.calls.len()) as f64;
        println!(
            "threads/{n_threads}: {:.0} before_tool decisions/s (runs with after_tool and end)",
            decisions / t.elapsed().as_secs_f64()
        );
    }
}

criterion_group! {
    name = benches;
    config = config();
    targets = customer_support, rule_count, audited, support_runs, start_end
}

fn main() {
    // `cargo bench --bench decision -- FILTER` runs the criterion cases matching FILTER; the
    // printed measurements run unless FILTER is given and does not match "summary".
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if filter.as_deref() == Some("threads") {
        threads(&Workload::load());
        return;
    }
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    };
    if filter.as_deref() == Some("sustained") {
        // The audited runs alone (for profiling the audit path).
        audited_file(&Workload::load(), &runtime());
        return;
    }
    if filter
        .as_deref()
        .is_none_or(|f| "summary".contains(f) || f.contains("summary"))
    {
        let w = Workload::load();
        let rt = runtime();
        support_percentiles(&w);
        audited_file(&w, &rt);
        threads(&w);
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
