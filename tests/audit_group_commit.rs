//! Runs ended at the same time on several threads, sealed on several shards, share the file
//! sink's fsyncs (group commit): each `Run::end` returns with its run's events in the file,
//! and every run's chain verifies.

use std::time::Duration;

use serde_json::json;
use toolgate::audit::{AuditConfig, FileSinkConfig, SinkConfig, verify_paths};
use toolgate::engine::{GovernanceEngine, RunContext, ToolCall, ToolOutcome};
use toolgate::policy::parse_policy;

#[test]
fn runs_ended_on_several_threads_are_all_written_and_every_chain_verifies() {
    let dir = tempfile::tempdir().expect("temp dir");
    let policy = parse_policy(
        &json!({"rules": [{"name": "big refunds", "selector": {"phase": "tool.before",
            "tool": {"name": "refund"}}, "condition": {"kind": "toolArg", "type": "number",
            "path": "amount", "op": "gt", "value": 100}, "effect": {"type": "block",
            "reason": "too big"}}]})
        .to_string(),
        None,
    )
    .expect("policy");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let engine = {
        let _in = runtime.enter();
        GovernanceEngine::builder()
            .policy(policy)
            .audit(AuditConfig {
                // fsync on (the default), every run end synced at once.
                sinks: vec![SinkConfig::File(FileSinkConfig {
                    sync_interval_ms: 0,
                    ..FileSinkConfig::in_dir(dir.path())
                })],
                ..Default::default()
            })
            .audit_sealer_threads(3)
            .build()
            .expect("engine")
    };
    let (threads, runs, calls) = (4usize, 15usize, 4usize);
    std::thread::scope(|s| {
        for th in 0..threads {
            let (engine, dir) = (&engine, dir.path());
            s.spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                for r in 0..runs {
                    let run_id = format!("t{th}-r{r}");
                    let run = engine.start_run(RunContext::new(&run_id, format!("agent-{th}")));
                    for c in 0..calls {
                        let id = format!("c{c}");
                        let amount = if c % 2 == 0 { 10 } else { 500 };
                        let call = ToolCall::new(&id, "refund", json!({ "amount": amount }));
                        if run.before_tool_blocking(call).is_allowed() {
                            let o = ToolOutcome::ok(json!({"ok": true}), Duration::from_millis(1));
                            run.after_tool_blocking(&id, o);
                        }
                    }
                    rt.block_on(run.end("success", None));
                    // `end` returned: the run's last event is in the file.
                    let ended = format!("\"runId\":\"{run_id}\"");
                    let written = std::fs::read_dir(dir)
                        .expect("the trail's folder")
                        .flatten()
                        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
                        .any(|text| {
                            text.lines()
                                .any(|l| l.contains(&ended) && l.contains("\"run.ended\""))
                        });
                    assert!(
                        written,
                        "run {run_id}: run.ended is in the file once end returns"
                    );
                }
            });
        }
    });
    runtime.block_on(engine.shutdown()).expect("shutdown");
    let report = verify_paths(&[dir.path()]);
    assert!(report.is_ok(), "{:?}", report.breaks);
    assert_eq!(report.runs, threads * runs);
    // Per run: run.started, 4 decisions, 2 results, run.ended.
    assert_eq!(report.events, threads * runs * 8);
}
