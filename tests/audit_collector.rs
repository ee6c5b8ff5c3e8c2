//! The HTTP sink against the real collector (`toolgate collect` server code) on loopback.
#![cfg(feature = "http")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use common::collect::{Collect, body_of, get_json, post};
use common::process::toolgate;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use toolgate::audit::collector::{Collector, CollectorConfig, serve_collector};
use toolgate::audit::{
    AuditBus, AuditError, AuditEvent, BusConfig, EventKind, HttpSink, HttpSinkConfig, RunChain,
    canonical_json, verify_paths,
};

// ---------------------------------------------------------------------------------------------
// helpers

struct InProcess {
    addr: String,
    collector: Collector,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), AuditError>>,
}

impl InProcess {
    async fn start(config: CollectorConfig, listen: &str) -> InProcess {
        let listener = bind_retrying(listen).await;
        let addr = listener.local_addr().unwrap().to_string();
        let collector = Collector::open(config).unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(serve_collector(collector.clone(), listener, async move {
            let _ = rx.await;
        }));
        InProcess {
            addr,
            collector,
            stop: Some(tx),
            task,
        }
    }
    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.task.await.unwrap().unwrap();
    }
}

/// Binds `addr`; a port just released may take a moment to be free again.
async fn bind_retrying(addr: &str) -> TcpListener {
    let started = Instant::now();
    loop {
        match TcpListener::bind(addr).await {
            Ok(l) => return l,
            Err(e) if started.elapsed() < Duration::from_secs(10) => {
                eprintln!("bind {addr}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("cannot bind {addr}: {e}"),
        }
    }
}

/// `toolgate collect` as a real process on `listen` (a port just released may take a moment
/// to be free again: retried for a bounded time).
fn start_process(out: &Path, listen: &str) -> Collect {
    let started = Instant::now();
    loop {
        let mut cmd = toolgate();
        cmd.args(["collect", "--listen", listen, "--out"])
            .arg(out)
            .stderr(Stdio::inherit());
        match Collect::try_spawn(&mut cmd) {
            Ok(c) => {
                let line = c.line();
                assert!(
                    line.contains(&format!("storing to {}", out.display())),
                    "{line}"
                );
                return c;
            }
            Err((_, mut child)) => {
                // Could not bind (port not free yet): retry for a bounded time.
                let status = child.exits_within(Duration::from_secs(10));
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "collector did not start: {status}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn sink_config(url: &str, spool: &Path) -> HttpSinkConfig {
    let mut c = HttpSinkConfig::new(url);
    c.spool_dir = spool.to_path_buf();
    c.batch_size = 250;
    c.batch_interval_ms = 10;
    c.backoff_initial_ms = 5;
    c.backoff_max_ms = 50;
    c.request_timeout_ms = 5_000;
    c
}

fn bus_with(sink: &Arc<HttpSink>) -> AuditBus {
    AuditBus::new(vec![sink.clone()], BusConfig::default())
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// The `i`-th event of a fake agent run of `len` events.
fn seal_step(chain: &mut RunChain, i: usize, len: usize) -> AuditEvent {
    let call = format!("c{}", i / 2);
    let (kind, body) = if i == 0 {
        (
            EventKind::RunStarted,
            json!({"runContext": {"agentId": chain.agent_id()}}),
        )
    } else if i + 1 == len {
        (
            EventKind::RunEnded,
            json!({"status": "success", "totals": {"calls": len / 2}}),
        )
    } else if i % 2 == 1 {
        (
            EventKind::ToolDecision,
            json!({"phase": "tool.before", "callId": call, "tool": {"name": "search", "tags": ["read"]},
                   "args": {"q": format!("query {i}")}, "decision": {"effect": "allow", "code": "ALLOWED",
                   "evaluated": [], "signals": [], "shadow": false, "abortRun": false, "latencyNs": 900}}),
        )
    } else {
        (
            EventKind::ToolResult,
            json!({"callId": call, "tool": {"name": "search"}, "output": {"hits": i, "score": 0.25 * i as f64},
                   "durationMs": 3, "metrics": {"bytes_in": 12, "bytes_out": 20}}),
        )
    };
    chain.seal(kind, Utc::now(), obj(body))
}

fn count_lines(dir: &Path) -> usize {
    let mut n = 0;
    for agent in std::fs::read_dir(dir).unwrap() {
        let agent = agent.unwrap().path();
        if agent.is_dir() {
            for f in std::fs::read_dir(&agent).unwrap() {
                n += std::fs::read_to_string(f.unwrap().path())
                    .unwrap()
                    .lines()
                    .count();
            }
        }
    }
    n
}

// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_events_from_100_concurrent_runs_arrive_exactly_once_and_verify() {
    let out = tempfile::tempdir().unwrap();
    let spool = tempfile::tempdir().unwrap();
    let server = InProcess::start(CollectorConfig::new(out.path()), "127.0.0.1:0").await;
    let sink = Arc::new(HttpSink::new(sink_config(&server.url(), spool.path())).unwrap());
    let bus = bus_with(&sink);

    let started = Instant::now();
    let runs: Vec<_> = (0..100)
        .map(|r| {
            let bus = bus.clone();
            tokio::spawn(async move {
                let mut chain = RunChain::new(format!("run-{r}"), format!("agent-{}", r % 5), None);
                for i in 0..100 {
                    bus.emit(seal_step(&mut chain, i, 100));
                    if i % 10 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for r in runs {
        r.await.unwrap();
    }
    let emitted = started.elapsed();
    bus.flush(Duration::from_secs(30)).await.unwrap();
    let delivered = started.elapsed();
    eprintln!("10,000 events: emitted in {emitted:?}, all stored (fsynced) after {delivered:?}");

    let stats = server.collector.stats();
    assert_eq!(
        (stats.events, stats.duplicates, stats.rejected),
        (10_000, 0, 0)
    );
    assert_eq!(count_lines(out.path()), 10_000);
    assert_eq!(sink.stats().delivered_events, 10_000);
    assert_eq!(sink.stats().rejected_batches, 0);

    let report = verify_paths(&[out.path()]);
    assert!(
        report.is_ok(),
        "{:?}",
        &report.breaks[..report.breaks.len().min(5)]
    );
    assert_eq!((report.events, report.runs), (10_000, 100));
    // 5 agents, one file per agent and day.
    assert_eq!(report.files.len(), 5);

    let (status, run) = get_json(&format!("{}/v1/runs/run-42", server.url())).await;
    assert_eq!(status, 200);
    assert_eq!(run["runId"], "run-42");
    let seqs: Vec<u64> = run["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (0..100).collect::<Vec<_>>());
    let (_, check) = get_json(&format!("{}/v1/runs/run-42/verify", server.url())).await;
    assert_eq!(
        (&check["ok"], &check["events"]),
        (&json!(true), &json!(100))
    );

    bus.shutdown(Duration::from_secs(5)).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collector_killed_mid_stream_and_restarted_stores_every_event_exactly_once() {
    let out = tempfile::tempdir().unwrap();
    let spool = tempfile::tempdir().unwrap();
    let mut first = start_process(out.path(), "127.0.0.1:0");
    let addr = first.addr().to_string();
    let url = format!("http://{addr}");
    let mut cfg = sink_config(&url, spool.path());
    cfg.batch_size = 100;
    let sink = Arc::new(HttpSink::new(cfg).unwrap());
    let bus = bus_with(&sink);
    let mut chains: Vec<RunChain> = (0..30)
        .map(|r| RunChain::new(format!("run-{r}"), "support", Some(format!("user-{r}"))))
        .collect();
    let emit = |bus: &AuditBus, chains: &mut Vec<RunChain>, steps: std::ops::Range<usize>| {
        for i in steps {
            for c in chains.iter_mut() {
                bus.emit(seal_step(c, i, 100));
            }
        }
    };

    // 1. Healthy: 1,200 events delivered.
    emit(&bus, &mut chains, 0..40);
    bus.flush(Duration::from_secs(30)).await.unwrap();
    assert_eq!(get_json(&format!("{url}/healthz")).await.1["events"], 1_200);

    // 2. 900 more events, and the collector is killed (SIGKILL) while the sink ships them.
    emit(&bus, &mut chains, 40..70);
    first.kill();

    // 3. 900 more while it is down. Flush is bounded; the sink retries and spools. (Awaited:
    // on a loaded machine the sink may not have tried yet when the bounded flush gives up.)
    let mut progress = sink.progress();
    emit(&bus, &mut chains, 70..100);
    let r = bus.flush(Duration::from_millis(300)).await;
    assert!(matches!(r, Err(AuditError::Timeout(_))), "{r:?}");
    let spooling = async {
        while sink.stats().retries == 0 || sink.spooled().await == 0 {
            progress.changed().await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(30), spooling)
        .await
        .expect("batches are spooled while the collector is down");

    // 4. A new collector process on the same address and directory.
    let mut second = start_process(out.path(), &addr);
    assert_eq!(second.addr(), addr);
    let started = Instant::now();
    bus.flush(Duration::from_secs(30)).await.unwrap();
    eprintln!(
        "after restart, backlog delivered in {:?}; sink stats {:?}",
        started.elapsed(),
        sink.stats()
    );

    // Every event exactly once, chains intact.
    assert_eq!(get_json(&format!("{url}/healthz")).await.1["events"], 3_000);
    assert_eq!(count_lines(out.path()), 3_000);
    let report = verify_paths(&[out.path()]);
    assert!(
        report.is_ok(),
        "{:?}",
        &report.breaks[..report.breaks.len().min(5)]
    );
    assert_eq!((report.events, report.runs), (3_000, 30));
    assert_eq!(
        std::fs::read_dir(spool.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "json")
            })
            .count(),
        0,
        "spool drained"
    );

    // The restarted collector still knows what it has: runs are served, resends are dropped.
    let (status, run) = get_json(&format!("{url}/v1/runs/run-7")).await;
    assert_eq!(status, 200);
    assert_eq!(run["events"].as_array().unwrap().len(), 100);
    assert_eq!(
        get_json(&format!("{url}/v1/runs/run-7/verify")).await.1["ok"],
        true
    );
    let stored: Vec<AuditEvent> = run["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| AuditEvent::from_value(v.clone()).unwrap())
        .collect();
    let (status, answer) = post(&url, None, body_of(&stored)).await;
    assert_eq!(status, 200);
    assert_eq!(
        answer,
        json!({"accepted": 0, "duplicates": 100, "rejected": []})
    );
    assert_eq!(count_lines(out.path()), 3_000);

    bus.shutdown(Duration::from_secs(5)).await.unwrap();
    second.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_errors_are_not_retried_and_are_kept_for_inspection() {
    let out = tempfile::tempdir().unwrap();
    let mut cc = CollectorConfig::new(out.path());
    cc.token = Some("secret".into());
    cc.max_body_bytes = 64 * 1024;
    let server = InProcess::start(cc, "127.0.0.1:0").await;

    // Wrong token: 401, once.
    let spool = tempfile::tempdir().unwrap();
    let mut cfg = sink_config(&server.url(), spool.path());
    cfg.token = Some("wrong".into());
    // One batch, posted on flush (with the 10 ms interval, a loaded machine posted the first
    // events before the rest were queued: two requests).
    cfg.batch_interval_ms = 60_000;
    let sink = Arc::new(HttpSink::new(cfg).unwrap());
    let bus = bus_with(&sink);
    let mut chain = RunChain::new("r-401", "support", None);
    for i in 0..10 {
        bus.emit(seal_step(&mut chain, i, 10));
    }
    let r = bus.flush(Duration::from_secs(10)).await;
    assert!(
        matches!(&r, Err(e) if e.to_string().contains("401")),
        "{r:?}"
    );
    let s = sink.stats();
    assert_eq!(
        (s.requests, s.rejected_batches, s.retries),
        (1, 1, 0),
        "{s:?}"
    );
    let rejected: Vec<PathBuf> = std::fs::read_dir(spool.path().join("rejected"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(rejected.len(), 1);
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(&rejected[0]).unwrap()).unwrap();
    assert_eq!(saved["status"], 401);
    assert_eq!(saved["events"].as_array().unwrap().len(), 10);
    assert_eq!(server.collector.stats().events, 0);
    // Shutdown reports every rejection of the sink's life.
    let r = bus.shutdown(Duration::from_secs(5)).await;
    assert!(matches!(r, Err(AuditError::Rejected(_))), "{r:?}");
    assert_eq!(sink.stats().requests, 1, "nothing more was sent");

    // Too large: 413, once; later batches still go through.
    let spool = tempfile::tempdir().unwrap();
    let mut cfg = sink_config(&server.url(), spool.path());
    cfg.token = Some("secret".into());
    cfg.batch_interval_ms = 60_000;
    let sink = Arc::new(HttpSink::new(cfg).unwrap());
    let bus = bus_with(&sink);
    let mut chain = RunChain::new("r-413", "support", None);
    let mut body = Map::new();
    body.insert("blob".into(), json!("x".repeat(100 * 1024)));
    bus.emit(chain.seal(EventKind::ToolResult, Utc::now(), body));
    assert!(bus.flush(Duration::from_secs(10)).await.is_err());
    let mut chain = RunChain::new("r-ok", "support", None);
    for i in 0..5 {
        bus.emit(seal_step(&mut chain, i, 5));
    }
    bus.flush(Duration::from_secs(10)).await.unwrap();
    let s = sink.stats();
    assert_eq!(
        (s.rejected_batches, s.retries, s.delivered_events),
        (1, 0, 5),
        "{s:?}"
    );
    assert_eq!(server.collector.stats().events, 5);
    // Shutdown reports every rejection of the sink's life.
    let r = bus.shutdown(Duration::from_secs(5)).await;
    assert!(matches!(r, Err(AuditError::Rejected(_))), "{r:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collector_validates_deduplicates_and_flags_chain_breaks() {
    let out = tempfile::tempdir().unwrap();
    let mut cc = CollectorConfig::new(out.path());
    cc.token = Some("t0ken".into());
    cc.max_body_bytes = 32 * 1024;
    let server = InProcess::start(cc, "127.0.0.1:0").await;
    let url = server.url();
    let tok = Some("t0ken");

    let mut chain = RunChain::new("r1", "support", None);
    let events: Vec<AuditEvent> = (0..10).map(|i| seal_step(&mut chain, i, 10)).collect();

    // Authentication; /healthz needs none.
    assert_eq!(post(&url, None, body_of(&events)).await.0, 401);
    assert_eq!(post(&url, Some("nope"), body_of(&events)).await.0, 401);
    assert_eq!(get_json(&format!("{url}/healthz")).await.0, 200);

    // Malformed bodies: a clear 400, nothing stored.
    let (s, e) = post(&url, tok, "not json").await;
    assert_eq!(s, 400);
    assert!(e["error"].as_str().unwrap().contains("not JSON"), "{e}");
    assert_eq!(post(&url, tok, r#"{"events": "x"}"#).await.0, 400);
    assert_eq!(post(&url, tok, r#"[1]"#).await.0, 400);
    // A malformed event is refused alone: with other events its batch would be stored but it
    // (409, listed in `rejected`; collector_depth.rs); alone, the batch is a clear 400.
    let mut bad = events[3].to_json();
    bad.as_object_mut().unwrap().remove("runId");
    let (s, e) = post(&url, tok, json!({"events": [bad]}).to_string()).await;
    assert_eq!(s, 400, "{e}");
    assert_eq!(e["error"], "events[0]: invalid audit event: missing runId");
    // Oversized: 413.
    let big = format!(r#"{{"events": [], "pad": "{}"}}"#, "x".repeat(40 * 1024));
    let (s, e) = post(&url, tok, big).await;
    assert_eq!(s, 413, "{e}");
    assert_eq!(server.collector.stats().events, 0);
    assert_eq!(count_lines(out.path()), 0);

    // Accepted, then deduplicated (also within one batch).
    assert_eq!(
        post(&url, tok, body_of(&events[..6])).await,
        (200, json!({"accepted": 6, "duplicates": 0, "rejected": []}))
    );
    assert_eq!(
        post(&url, tok, body_of(&events)).await,
        (200, json!({"accepted": 4, "duplicates": 6, "rejected": []}))
    );
    let twice = [events[9].clone(), events[9].clone()];
    assert_eq!(
        post(&url, tok, body_of(&twice)).await,
        (200, json!({"accepted": 0, "duplicates": 2, "rejected": []}))
    );
    assert_eq!(count_lines(out.path()), 10);

    let client = reqwest::Client::new();
    let get = |path: String| {
        let client = client.clone();
        async move {
            let r = client.get(path).bearer_auth("t0ken").send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    assert_eq!(get(format!("{url}/v1/runs/nope")).await.0, 404);
    let (s, run) = get(format!("{url}/v1/runs/r1")).await;
    assert_eq!(s, 200);
    assert_eq!(get(format!("{url}/v1/runs/r1/verify")).await.1["ok"], true);
    // As stored: canonical JSON (so `2.0` reads back as `2`; the hash is the same).
    let got: Vec<String> = run["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(canonical_json)
        .collect();
    let want: Vec<String> = events.iter().map(AuditEvent::to_canonical_json).collect();
    assert_eq!(got, want);

    // A tampered event is rejected (the store only holds chains that verify); the rest of
    // its batch is stored, and the real event can still fill the gap.
    let mut chain = RunChain::new("r2", "support", None);
    let good: Vec<AuditEvent> = (0..4).map(|i| seal_step(&mut chain, i, 4)).collect();
    let mut tampered: Vec<Value> = good.iter().map(AuditEvent::to_json).collect();
    tampered[2]["output"]["hits"] = json!(999);
    let (s, answer) = post(&url, tok, json!({"events": tampered}).to_string()).await;
    assert_eq!(s, 409);
    assert_eq!(answer["accepted"], 3);
    assert_eq!(answer["rejected"][0]["id"], good[2].id().to_string());
    assert_eq!(
        answer["rejected"][0]["reason"],
        "hash does not match the event's content"
    );
    let (_, check) = get(format!("{url}/v1/runs/r2/verify")).await;
    assert_eq!(check["ok"], false);
    assert_eq!(check["breaks"][0]["message"], "seq 2 is missing (deleted?)");
    assert_eq!(
        post(&url, tok, body_of(&good[2..3])).await,
        (200, json!({"accepted": 1, "duplicates": 0, "rejected": []}))
    );
    assert_eq!(get(format!("{url}/v1/runs/r2/verify")).await.1["ok"], true);
    // Out-of-order arrival is not a break; a gap shows until it is filled.
    let mut chain = RunChain::new("r3", "support", None);
    let r3: Vec<AuditEvent> = (0..4).map(|i| seal_step(&mut chain, i, 4)).collect();
    post(&url, tok, body_of(&[r3[2].clone(), r3[0].clone()])).await;
    let (_, check) = get(format!("{url}/v1/runs/r3/verify")).await;
    assert_eq!(check["ok"], false);
    post(&url, tok, body_of(&[r3[1].clone(), r3[3].clone()])).await;
    let (_, check) = get(format!("{url}/v1/runs/r3/verify")).await;
    assert_eq!(check["ok"], true, "{check}");
    assert!(verify_paths(&[out.path()]).is_ok());

    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spooled_batches_survive_a_sink_restart_and_are_resent_first_in_order() {
    let out = tempfile::tempdir().unwrap();
    let spool = tempfile::tempdir().unwrap();
    // A port with nothing listening yet.
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().to_string()
    };
    let url = format!("http://{addr}");
    let mut cfg = sink_config(&url, spool.path());
    cfg.batch_size = 100;
    let mut chain = RunChain::new("r", "support", None);

    // First "process": the collector is unreachable; shutdown is bounded and spools everything.
    {
        let sink = Arc::new(HttpSink::new(cfg.clone()).unwrap());
        let bus = bus_with(&sink);
        for i in 0..300 {
            bus.emit(seal_step(&mut chain, i, 350));
        }
        let started = Instant::now();
        assert!(bus.shutdown(Duration::from_millis(300)).await.is_err());
        assert!(started.elapsed() < Duration::from_secs(3));
        assert_eq!(sink.stats().delivered_events, 0);
    }
    let spooled = std::fs::read_dir(spool.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "json")
        })
        .count();
    assert!(spooled >= 3, "{spooled} spool files");

    // The collector comes up; a new sink on the same spool sends the backlog before new events.
    let server = InProcess::start(CollectorConfig::new(out.path()), &addr).await;
    let sink = Arc::new(HttpSink::new(cfg).unwrap());
    let bus = bus_with(&sink);
    for i in 300..350 {
        bus.emit(seal_step(&mut chain, i, 350));
    }
    bus.flush(Duration::from_secs(30)).await.unwrap();
    bus.shutdown(Duration::from_secs(5)).await.unwrap();

    let day = Utc::now().format("%Y-%m-%d").to_string();
    let text =
        std::fs::read_to_string(out.path().join("support").join(format!("{day}.jsonl"))).unwrap();
    let seqs: Vec<u64> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(
        seqs,
        (0..350).collect::<Vec<_>>(),
        "stored once each, in order"
    );
    assert!(verify_paths(&[out.path()]).is_ok());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collect_process_stops_cleanly_on_ctrl_c_keeping_acknowledged_events() {
    let out = tempfile::tempdir().unwrap();
    let p = start_process(out.path(), "127.0.0.1:0");
    let url = format!("http://{}", p.addr());
    let mut chain = RunChain::new("r", "support", None);
    let events: Vec<AuditEvent> = (0..20).map(|i| seal_step(&mut chain, i, 20)).collect();
    assert_eq!(
        post(&url, None, body_of(&events)).await,
        (
            200,
            json!({"accepted": 20, "duplicates": 0, "rejected": []})
        )
    );
    // Ctrl-C.
    p.signal("-INT");
    let status = p.exits_within(Duration::from_secs(60));
    assert!(status.success(), "{status}");
    assert_eq!(count_lines(out.path()), 20);
    assert!(verify_paths(&[out.path()]).is_ok());
    // A new process serves what the old one stored.
    let mut p2 = start_process(out.path(), "127.0.0.1:0");
    let (_, h) = get_json(&format!("http://{}/healthz", p2.addr())).await;
    assert_eq!(
        (h["events"].clone(), h["runs"].clone()),
        (json!(20), json!(1))
    );
    p2.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_events_are_moved_aside_and_delivery_goes_on() {
    // Finding 14: an agentId over 256 bytes used to get a 500 forever, holding up every event
    // queued behind it.
    let out = tempfile::tempdir().unwrap();
    let server = InProcess::start(CollectorConfig::new(out.path()), "127.0.0.1:0").await;
    let spool = tempfile::tempdir().unwrap();
    let sink = Arc::new(HttpSink::new(sink_config(&server.url(), spool.path())).unwrap());
    let bus = bus_with(&sink);
    let long_agent = "a".repeat(300);
    let mut bad = RunChain::new("r-bad", long_agent.as_str(), None);
    let mut good = RunChain::new("r-good", "support", None);
    for i in 0..10 {
        bus.emit(seal_step(&mut good, i, 20));
        if i < 3 {
            bus.emit(seal_step(&mut bad, i, 3));
        }
    }
    let r = bus.flush(Duration::from_secs(10)).await;
    assert!(
        matches!(&r, Err(AuditError::Rejected(m)) if m.contains("id too long")),
        "{r:?}"
    );
    let s = sink.stats();
    assert_eq!(
        (s.delivered_events, s.rejected_events, s.retries),
        (10, 3, 0),
        "{s:?}"
    );
    let (mut events, mut reasons) = (0, 0);
    for f in std::fs::read_dir(spool.path().join("rejected")).unwrap() {
        let saved: Value =
            serde_json::from_str(&std::fs::read_to_string(f.unwrap().path()).unwrap()).unwrap();
        assert_eq!(saved["status"], 409);
        events += saved["events"].as_array().unwrap().len();
        reasons += saved["rejected"].as_array().unwrap().len();
    }
    assert_eq!((events, reasons), (3, 3));
    // Delivery goes on.
    for i in 10..20 {
        bus.emit(seal_step(&mut good, i, 20));
    }
    bus.flush(Duration::from_secs(10)).await.unwrap();
    assert_eq!(sink.stats().delivered_events, 20);
    assert_eq!(server.collector.stats().events, 20);
    assert!(verify_paths(&[out.path()]).is_ok());
    // Shutdown reports every rejection of the sink's life.
    let r = bus.shutdown(Duration::from_secs(5)).await;
    assert!(matches!(r, Err(AuditError::Rejected(_))), "{r:?}");
    server.stop().await;
}

/// A batch over the collector's `--max-body-bytes` (413) is split in halves down to single
/// events: every event that fits is delivered, and only an event too large by itself is
/// moved aside (before: the whole batch was rejected and none of it delivered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_too_large_for_the_collector_is_split_and_only_an_oversized_event_is_refused() {
    let out = tempfile::tempdir().unwrap();
    let mut config = CollectorConfig::new(out.path());
    config.max_body_bytes = 16 * 1024;
    let server = InProcess::start(config, "127.0.0.1:0").await;
    let spool = tempfile::tempdir().unwrap();
    let mut sc = sink_config(&server.url(), spool.path());
    // One batch for everything, posted on flush.
    sc.batch_interval_ms = 60_000;
    let sink = Arc::new(HttpSink::new(sc).unwrap());
    let bus = bus_with(&sink);
    let mut good = RunChain::new("r-good", "support", None);
    for i in 0..40 {
        let kind = if i == 0 {
            EventKind::RunStarted
        } else {
            EventKind::ToolResult
        };
        let body = obj(json!({"step": i, "pad": "x".repeat(1_000)}));
        bus.emit(good.seal(kind, Utc::now(), body));
    }
    let mut big = RunChain::new("r-big", "support", None);
    bus.emit(big.seal(EventKind::RunStarted, Utc::now(), obj(json!({}))));
    let huge = big.seal(
        EventKind::ToolResult,
        Utc::now(),
        obj(json!({"output": "y".repeat(20_000)})),
    );
    let huge_id = huge.id().to_string();
    bus.emit(huge);
    let r = bus.flush(Duration::from_secs(30)).await;
    assert!(
        matches!(&r, Err(AuditError::Rejected(m)) if m.contains("413")),
        "{r:?}"
    );
    let s = sink.stats();
    assert_eq!((s.delivered_events, s.rejected_events), (41, 1), "{s:?}");
    assert!(s.split_batches >= 2, "{s:?}");
    assert_eq!(server.collector.stats().events, 41);
    let saved: Vec<Value> = std::fs::read_dir(spool.path().join("rejected"))
        .unwrap()
        .map(|f| {
            serde_json::from_str(&std::fs::read_to_string(f.unwrap().path()).unwrap()).unwrap()
        })
        .collect();
    assert_eq!(saved.len(), 1, "{saved:?}");
    assert_eq!(saved[0]["status"], 413);
    assert_eq!(saved[0]["events"][0]["id"], json!(huge_id));
    assert!(verify_paths(&[out.path()]).is_ok());
    let _ = bus.shutdown(Duration::from_secs(5)).await;
    server.stop().await;
}
