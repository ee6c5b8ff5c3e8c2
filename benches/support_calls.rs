//! Driver for `benches/callgrind.sh`: plays the support workload's runs and routes every measured
//! `before_tool` through [`decide`], which callgrind counts instructions in.
//!
//! * `support_calls RULES RUNS`: one warm-up run (not counted), then RUNS runs.
//! * `support_calls RULES RUNS audit`: the same with the audit trail on, into the file sink
//!   (fsync off) in a temporary directory; runs are dropped (so `run.ended` is written without
//!   waiting for the disk) and the engine is shut down at the end. Callgrind then counts every
//!   thread (caller, sealer, sink): the whole cost of an audited decision.
//! * `support_calls RULES RUNS llm`: the same runs, each tool call preceded by a model call
//!   decided by [`gate_model`] (the support policy has no `llm.before` rule: what a policy
//!   without model rules pays per model call). Prints the number of model calls.
//! * `support_calls RULES RUNS cedar`: Cedar's stateless workload instead (`support/cedar.rs`):
//!   RUNS passes over its 20 requests, each its own run (started and ended outside
//!   [`decide`]); every decision is checked against Cedar's.

use std::hint::black_box;

use toolgate::engine::{Decision, LlmCall, Run, ToolCall};

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

/// The measured model call (`llm` mode): one `before_llm`, nothing else.
#[inline(never)]
fn gate_model(run: &Run, call: &LlmCall) -> Decision {
    run.before_llm_blocking(call)
}

/// The Cedar workload's passes (the first one a warm-up); returns the decisions counted.
fn cedar(rules: usize, runs: usize) -> usize {
    let w = support::cedar::CedarWorkload::load();
    let engine = w.engine(rules);
    let mut decisions = 0usize;
    for k in 0..=runs {
        for c in &w.calls {
            let run = engine.start_run(c.context.clone());
            let call = c.call.clone();
            let d = if k == 0 {
                warm_up(&run, call)
            } else {
                decisions += 1;
                decide(&run, call)
            };
            assert_eq!(d.effect, c.expect, "{}: {d:?}", c.call.name);
            black_box(d);
        }
    }
    decisions
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rules: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(50);
    let mode = args.next();
    let audit = mode.as_deref() == Some("audit");
    let llm = mode.as_deref() == Some("llm");
    if mode.as_deref() == Some("cedar") {
        println!("{}", cedar(rules, runs));
        return;
    }
    let model = LlmCall::new("gpt-4o").with_messages(serde_json::json!([
        {"role": "system", "content": "You are a support assistant."},
        {"role": "user", "content": "Where is my order?"}
    ]));
    let mut model_calls = 0usize;
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
            if llm && k > 0 {
                model_calls += 1;
                black_box(gate_model(&run, &model));
            }
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
    println!("{}", if llm { model_calls } else { decisions });
}
