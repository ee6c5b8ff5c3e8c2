//! Audit trail without the network: sealing, redaction, the bus, file and console sinks, and
//! `toolgate verify` on real files.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Map, Value, json};
use toolgate::audit::{
    AuditBus, AuditError, AuditEvent, AuditSink, BreakKind, BusConfig, ConsoleFormat, ConsoleSink,
    EventKind, FileSink, FileSinkConfig, MemorySink, RedactionConfig, RunChain, canonical_json,
    sha256_hex, verify_events, verify_paths,
};

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn at(sec: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap() + chrono::Duration::seconds(sec)
}

/// A fake agent run: run.started, `calls` × (tool.decision, tool.result), llm.result, run.ended.
fn fake_run(run_id: &str, agent: &str, calls: usize) -> Vec<AuditEvent> {
    let mut chain = RunChain::new(run_id, agent, Some("u1".into()));
    let mut out = vec![chain.seal(
        EventKind::RunStarted,
        at(0),
        obj(json!({"runContext": {"agentId": agent}})),
    )];
    for i in 0..calls {
        let call = format!("c{i}");
        out.push(chain.seal(
            EventKind::ToolDecision,
            at(i as i64 + 1),
            obj(json!({"phase": "tool.before", "callId": call, "tool": {"name": "getUser", "tags": ["pii"]},
                "args": {"id": i}, "decision": {"effect": "allow", "code": "ALLOWED", "evaluated": [],
                "signals": [], "shadow": false, "abortRun": false, "latencyNs": 1200}})),
        ));
        out.push(chain.seal(
            EventKind::ToolResult,
            at(i as i64 + 1),
            obj(json!({"callId": call, "tool": {"name": "getUser"}, "output": {"name": "Ann", "score": 0.1 + i as f64},
                "durationMs": 12, "metrics": {"bytes_in": 8, "bytes_out": 14}})),
        ));
    }
    out.push(chain.seal(
        EventKind::LlmResult,
        at(calls as i64 + 1),
        obj(json!({"tokensIn": 100, "tokensOut": 20, "costUsd": 0.00123})),
    ));
    out.push(chain.seal(
        EventKind::RunEnded,
        at(calls as i64 + 2),
        obj(json!({"status": "success", "totals": {"calls": calls}})),
    ));
    out
}

async fn write_trail(dir: &Path, runs: usize, calls: usize, max_file_bytes: u64) -> usize {
    let mut cfg = FileSinkConfig::in_dir(dir);
    cfg.max_file_bytes = max_file_bytes;
    let sink = Arc::new(FileSink::new(cfg).unwrap());
    let bus = AuditBus::new(vec![sink], BusConfig::default());
    let mut n = 0;
    for r in 0..runs {
        for e in fake_run(&format!("run-{r}"), "support", calls) {
            bus.emit(e);
            n += 1;
        }
    }
    bus.shutdown(Duration::from_secs(10)).await.unwrap();
    n
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn write_lines(path: &Path, lines: &[String]) {
    let mut f = std::fs::File::create(path).unwrap();
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
}

fn toolgate() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
}

#[tokio::test]
async fn file_sink_writes_dated_canonical_jsonl_that_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let n = write_trail(dir.path(), 3, 4, 100 << 20).await;
    let file = dir.path().join("2026-01-05.jsonl");
    let ls = lines(&file);
    assert_eq!(ls.len(), n);
    for l in &ls {
        let v: Value = serde_json::from_str(l).unwrap();
        assert_eq!(&canonical_json(&v), l, "lines are stored in canonical form");
        let e = AuditEvent::from_value(v).unwrap();
        assert!(e.hash_is_valid());
    }
    let report = verify_paths(&[dir.path()]);
    assert!(report.is_ok(), "{:?}", report.breaks);
    assert_eq!((report.events, report.runs), (n, 3));

    // Appending from a second sink (a new process) continues the same file.
    write_trail(dir.path(), 1, 1, 100 << 20).await;
    assert_eq!(lines(&file).len(), n + 5);
}

#[tokio::test]
async fn file_sink_rotates_by_size_and_runs_verify_across_files() {
    let dir = tempfile::tempdir().unwrap();
    let n = write_trail(dir.path(), 4, 10, 4_000).await;
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() > 3, "rotated into {} files", files.len());
    for f in &files {
        let len = std::fs::metadata(f).unwrap().len();
        assert!(
            len <= 4_000 || lines(f).len() == 1,
            "{} is {len} bytes",
            f.display()
        );
    }
    let report = verify_paths(&[dir.path()]);
    assert!(report.is_ok(), "{:?}", report.breaks);
    assert_eq!((report.events, report.runs), (n, 4));
}

#[tokio::test]
async fn tampered_files_fail_verify_at_the_right_event() {
    let dir = tempfile::tempdir().unwrap();
    write_trail(dir.path(), 2, 3, 100 << 20).await;
    let file = dir.path().join("2026-01-05.jsonl");
    let orig = lines(&file);
    // Lines 1..=9 are run-0 (seq 0..=8), 10..=18 run-1.
    let check = |name: &str, edited: Vec<String>, line: usize, seq: u64, kind: BreakKind| {
        let path = dir.path().join(name);
        write_lines(&path, &edited);
        let report = verify_paths(&[&path]);
        assert_eq!(report.breaks.len(), 1, "{name}: {:#?}", report.breaks);
        let b = &report.breaks[0];
        assert_eq!(
            (b.line, b.seq, b.kind, b.run_id.as_deref()),
            (Some(line), Some(seq), kind, Some("run-0")),
            "{name}: {b}"
        );
        // The CLI says the same and exits 1.
        let out = toolgate().arg("verify").arg(&path).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{name}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let want = format!("{}:{line} run run-0 seq {seq}: ", path.display());
        assert!(stdout.contains(&want), "{name}: {stdout}");
        std::fs::remove_file(&path).unwrap();
    };

    // An edited event (hash left alone): the break is at the edited event.
    let mut edited = orig.clone();
    edited[4] = edited[4].replace("\"Ann\"", "\"Bob\"");
    assert_ne!(edited[4], orig[4]);
    check("edited.jsonl", edited, 5, 4, BreakKind::HashMismatch);

    // A deleted event: the break is at the event after the gap (now on the same line).
    let mut deleted = orig.clone();
    deleted.remove(4);
    check("deleted.jsonl", deleted, 5, 5, BreakKind::MissingSeq);

    // Two events swapped.
    let mut swapped = orig.clone();
    swapped.swap(5, 6);
    check("swapped.jsonl", swapped, 7, 5, BreakKind::OutOfOrder);

    // A forged event: edited and its hash recomputed. Its own hash is fine, the next event's
    // prevHash no longer matches.
    let mut forged = orig.clone();
    let mut v: Value = serde_json::from_str(&forged[4]).unwrap();
    v["output"]["name"] = json!("Mallory");
    let map = v.as_object_mut().unwrap();
    map.remove("hash");
    let h = sha256_hex(&canonical_json(&Value::Object(map.clone())));
    map.insert("hash".into(), json!(h));
    forged[4] = canonical_json(&v);
    check("forged.jsonl", forged, 6, 5, BreakKind::PrevHashMismatch);

    // The intact file: ok line, exit 0.
    let out = toolgate().arg("verify").arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{}: ok: 18 events, 2 runs", file.display())
    );
    // Unreadable input: exit 2. Garbage: a break (exit 1).
    let out = toolgate()
        .arg("verify")
        .arg(dir.path().join("nope.jsonl"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let garbage = dir.path().join("garbage.jsonl");
    std::fs::write(&garbage, "{not json\n").unwrap();
    let out = toolgate().arg("verify").arg(&garbage).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn redaction_happens_before_hashing() {
    let cfg: RedactionConfig = serde_json::from_value(json!({
        "rules": [
            {"path": "args.password", "action": "drop"},
            {"path": "args.email", "action": "hash"},
            {"path": "output.*.ssn", "action": "hash", "kinds": ["tool.result"]}
        ]
    }))
    .unwrap();
    let redactor = cfg.compile().unwrap();
    let mut chain = RunChain::new("r", "a", None);
    let mut body =
        obj(json!({"tool": {"name": "login"}, "args": {"password": "hunter2", "email": "a@b.c"}}));
    redactor.redact(EventKind::ToolDecision, &mut body);
    let e0 = chain.seal(EventKind::ToolDecision, at(0), body);
    let mut body =
        obj(json!({"tool": {"name": "login"}, "output": [{"ssn": "123"}, {"ssn": "456"}]}));
    redactor.redact(EventKind::ToolResult, &mut body);
    let e1 = chain.seal(EventKind::ToolResult, at(1), body);

    let text = format!("{}{}", e0.to_canonical_json(), e1.to_canonical_json());
    for secret in ["hunter2", "a@b.c", "\"123\"", "\"456\""] {
        assert!(!text.contains(secret), "{secret} leaked");
    }
    assert_eq!(
        e0.body()["args"],
        json!({"email": format!("sha256:{}", sha256_hex("\"a@b.c\""))})
    );
    assert!(
        e1.body()["output"][1]["ssn"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert!(e0.hash_is_valid() && e1.hash_is_valid());
    assert!(verify_events([&e0, &e1]).is_ok());
}

/// A sink that never finishes a write: a dead collector without the HTTP sink's spool.
struct StuckSink;
#[async_trait]
impl AuditSink for StuckSink {
    async fn write_batch(&self, _events: &[Arc<AuditEvent>]) -> Result<(), AuditError> {
        futures::future::pending::<()>().await;
        Ok(())
    }
    async fn flush(&self) -> Result<(), AuditError> {
        futures::future::pending::<()>().await;
        Ok(())
    }
}

#[tokio::test]
async fn a_dead_sink_never_delays_emit_and_flush_is_bounded() {
    let memory = Arc::new(MemorySink::new());
    let bus = AuditBus::new(
        vec![Arc::new(StuckSink), memory.clone()],
        BusConfig {
            queue_capacity: 1_000,
            max_batch: 256,
            ..BusConfig::default()
        },
    );
    let events = fake_run("r", "a", 2_500);
    let n = events.len();
    let started = Instant::now();
    for (i, e) in events.into_iter().enumerate() {
        bus.emit(e);
        if i % 100 == 0 {
            // An agent does async work between events; the healthy sink's worker runs then.
            tokio::task::yield_now().await;
        }
    }
    let emit_time = started.elapsed();
    assert!(
        emit_time < Duration::from_secs(2),
        "emit took {emit_time:?}"
    );

    let started = Instant::now();
    let r = bus.flush(Duration::from_millis(200)).await;
    assert!(matches!(r, Err(AuditError::Timeout(_))), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    // The healthy sink got everything; the stuck one's overflow was counted, not waited for.
    assert_eq!(memory.len(), n);
    let stats = bus.stats();
    assert_eq!(stats.emitted, n as u64);
    assert!(stats.dropped > 0);
    assert!(bus.shutdown(Duration::from_millis(100)).await.is_err());
}

#[tokio::test]
async fn bus_works_without_a_runtime_at_construction() {
    let memory = Arc::new(MemorySink::new());
    let bus = std::thread::spawn({
        let m = memory.clone();
        move || AuditBus::new(vec![m], BusConfig::default())
    })
    .join()
    .unwrap();
    for e in fake_run("r", "a", 1) {
        bus.emit(e);
    }
    bus.flush(Duration::from_secs(5)).await.unwrap();
    assert_eq!(memory.len(), 5);
}

#[derive(Clone, Default)]
struct Buf(Arc<parking_lot::Mutex<Vec<u8>>>);
impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn console_sink_pretty_and_json() {
    let pretty = Buf::default();
    let json_out = Buf::default();
    let bus = AuditBus::new(
        vec![
            Arc::new(ConsoleSink::with_writer(
                ConsoleFormat::Pretty,
                Box::new(pretty.clone()),
            )),
            Arc::new(ConsoleSink::with_writer(
                ConsoleFormat::Json,
                Box::new(json_out.clone()),
            )),
        ],
        BusConfig::default(),
    );
    let events = fake_run("r1", "support", 1);
    for e in events.clone() {
        bus.emit(e);
    }
    bus.shutdown(Duration::from_secs(5)).await.unwrap();
    let pretty = String::from_utf8(pretty.0.lock().clone()).unwrap();
    let plines: Vec<&str> = pretty.lines().collect();
    assert_eq!(plines.len(), 5, "{pretty}");
    assert_eq!(
        plines[1],
        "2026-01-05T09:00:01.000Z r1#1 tool.decision     tool.before getUser call=c0 -> allow ALLOWED"
    );
    assert!(plines[4].contains("run.ended") && plines[4].contains("status=success"));
    let json_text = String::from_utf8(json_out.0.lock().clone()).unwrap();
    let parsed: Vec<AuditEvent> = json_text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(parsed, events);
}

/// Runs are scoped by (agentId, runId), as the collector stores them: two agents that happen to
/// use one run id each have their own, intact chain.
#[test]
fn two_agents_may_reuse_a_run_id() {
    let a = fake_run("r-shared", "agent-a", 2);
    let b = fake_run("r-shared", "agent-b", 3);
    let report = verify_events(a.iter().chain(b.iter()));
    assert!(report.is_ok(), "{:?}", report.breaks);
    assert_eq!(report.runs, 2);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trail.jsonl");
    let text: String = a
        .iter()
        .chain(b.iter())
        .map(|e| format!("{}\n", e.to_canonical_json()))
        .collect();
    std::fs::write(&path, text).unwrap();
    let report = verify_paths(&[&path]);
    assert!(report.is_ok(), "{:?}", report.breaks);
}

/// Says when it is handed its first batch, then never returns.
struct StuckOnFirst(std::sync::Mutex<Option<std::sync::mpsc::Sender<()>>>);
#[async_trait]
impl AuditSink for StuckOnFirst {
    async fn write_batch(&self, _events: &[Arc<AuditEvent>]) -> Result<(), AuditError> {
        if let Some(tx) = self.0.lock().ok().and_then(|mut t| t.take()) {
            let _ = tx.send(());
        }
        futures::future::pending::<()>().await;
        Ok(())
    }
    async fn flush(&self) -> Result<(), AuditError> {
        Ok(())
    }
}

#[test]
fn a_hand_off_that_waits_for_a_stuck_sink_gives_up_at_its_deadline_and_counts_the_loss() {
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let memory = Arc::new(MemorySink::new());
    let bus = AuditBus::new(
        vec![
            Arc::new(StuckOnFirst(std::sync::Mutex::new(Some(entered_tx)))),
            memory.clone(),
        ],
        BusConfig {
            queue_capacity: 4,
            max_batch: 256,
            own_thread: true,
        },
    );
    let mut events = fake_run("r", "a", 6).into_iter();
    let mut batch = |n: usize| events.by_ref().take(n).collect::<Vec<_>>();
    let wait = Duration::from_millis(200);
    // The stuck sink's task takes the first batch and never comes back for more.
    bus.emit_all_within(batch(3), wait);
    entered.recv().expect("the sink got its first batch");
    // The second fits in its queue (4 events); the third never will: it waits out its
    // deadline, then is dropped for the stuck sink only (the memory sink takes everything).
    bus.emit_all_within(batch(3), wait);
    let started = Instant::now();
    bus.emit_all_within(batch(3), wait);
    assert!(started.elapsed() >= wait, "it waited for room first");
    assert_eq!(
        bus.stats(),
        toolgate::audit::BusStats {
            emitted: 9,
            dropped: 3
        }
    );
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let _ = rt.block_on(bus.flush(Duration::from_secs(1)));
    assert_eq!(memory.len(), 9, "the healthy sink got every event");
}
