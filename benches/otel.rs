//! Decision latency with OpenTelemetry export on vs off (`Run::before_tool`, and
//! `before_tool` + `after_tool` for an allowed call, whose span ends at its result).
//!
//! Export goes to an OTLP/HTTP receiver in this process that accepts and discards every
//! request, so the export threads do real work while decisions are measured. Back-to-back
//! decisions measure the decision while the background threads compete for the same cores;
//! `*_spaced` leaves 100 µs between decisions (untimed), as an agent's tool calls are, so the
//! background work happens between them.
//!
//! ```sh
//! cargo bench --bench otel -- --warm-up-time 1 --measurement-time 3
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use tokio::runtime::Runtime;
use toolgate::engine::{GovernanceEngine, RunContext, ToolCall, ToolOutcome};
use toolgate::otel::Otel;

fn receiver(rt: &Runtime) -> String {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    let app = axum::Router::new().fallback(|| async { "" });
    rt.spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

fn engine(otel: Option<&Otel>) -> GovernanceEngine {
    let b = GovernanceEngine::builder().policy_path(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/policies/customer-support.json"
    ));
    match otel {
        Some(o) => b.otel(o),
        None => b,
    }
    .build()
    .expect("the policy loads")
}

fn bench(c: &mut Criterion) {
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let endpoint = receiver(&server);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let otel = Otel::builder()
        .endpoint(endpoint)
        .build()
        .expect("otel starts");
    let allowed =
        ToolCall::new("c1", "kb_search", json!({"query": "returns"})).with_tags(["kb", "read"]);
    let blocked = ToolCall::new("c2", "crm_get_customer", json!({"email": "a@b.c"}))
        .with_tags(["crm", "pii", "read"]);
    for (label, o) in [("off", None), ("on", Some(&otel))] {
        let engine = engine(o);
        let run = engine.start_run(RunContext::new("bench", "support-bot"));
        let d = rt.block_on(run.before_tool(blocked.clone()));
        assert!(!d.is_allowed());
        c.bench_function(&format!("otel_{label}/before_tool_blocked"), |b| {
            b.to_async(&rt)
                .iter(|| run.before_tool(black_box(&blocked).clone()))
        });
        c.bench_function(&format!("otel_{label}/before_tool_blocked_spaced"), |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    let call = black_box(&blocked).clone();
                    let started = Instant::now();
                    black_box(rt.block_on(run.before_tool(call)));
                    timed += started.elapsed();
                    std::thread::sleep(Duration::from_micros(100));
                }
                timed
            })
        });
        c.bench_function(&format!("otel_{label}/before_and_after_allowed"), |b| {
            b.to_async(&rt).iter(|| async {
                let d = run.before_tool(black_box(&allowed).clone()).await;
                assert!(d.is_allowed());
                run.after_tool(
                    "c1",
                    ToolOutcome::ok(json!([{"doc": 1}]), Duration::from_millis(5)),
                )
                .await
            })
        });
    }
    let _ = otel.shutdown();
}

criterion_group!(benches, bench);
criterion_main!(benches);
