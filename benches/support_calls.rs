//! Driver for `benches/callgrind.sh`: plays the support workload's runs and routes every measured
//! `before_tool` through [`decide`], which callgrind counts instructions in.
//!
//! * `support_calls RULES RUNS`: one warm-up run (not counted), then RUNS runs.
//! * `support_calls RULES RUNS audit`: the same with the audit trail on, into the file sink
//!   (fsync off) in a temporary directory; runs are dropped (so `run.ended` is written without
//!   waiting for the disk) and the engine is shut down at the end. Callgrind then counts every
//!   thread (caller, sealer, sink): the whole cost of an audited decision.

use std::hint::black_box;

use toolgate::engine::{Decision, Run, ToolCall};

mod support;
use support::Workload;

// The allocator the `toolgate` binary uses, when built with feature `mimalloc` (`callgrind.sh`
// builds the lean core: the system allocator).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The measured call: one decision, nothing else.
#[inline(never)]
fn decide(run: &Run, call: ToolCall) -> Decision {
    run.before_tool_blocking(call)
}

/// The warm-up run's decisions (not counted). Its body differs from [`decide`]'s, so the two
/// are never folded into one function (which would count the warm-up too).
#[inline(never)]
fn warm_up(run: &Run, call: ToolCall) -> Decision {
    black_box(run).before_tool_blocking(black_box(call))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rules: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(50);
    let audit = args.next().as_deref() == Some("audit");
    let w = Workload::load();
    let dir = std::env::temp_dir().join(format!("toolgate-callgrind-{}", std::process::id()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let engine = if audit {
        let _guard = rt.enter();
        w.audited_engine(rules, &dir)
    } else {
        w.engine(rules)
    };
    let mut decisions = 0usize;
    for k in 0..=runs {
        let run = engine.start_run(w.context(k));
        for call in &w.calls {
            let c = call.clone();
            let d = if k == 0 {
                warm_up(&run, c)
            } else {
                decisions += 1;
                decide(&run, c)
            };
            if d.is_allowed() {
                let o = toolgate::engine::ToolOutcome::ok(
                    serde_json::json!({"ok": true}),
                    std::time::Duration::from_millis(3),
                );
                run.after_tool_blocking(&call.id, o);
            }
            black_box(d);
        }
    }
    if audit {
        rt.block_on(engine.shutdown())
            .expect("the audit trail shuts down");
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!("{decisions}");
}
