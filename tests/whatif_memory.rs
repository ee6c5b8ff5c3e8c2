//! What-if memory is bounded by the largest run, not the trail (issue 22 point 14): a trail
//! of many runs is rebuilt without holding it, measured as the peak RSS of `toolgate replay
//! --from-audit`, from a folder and from a PostgreSQL store.

mod pg_support;

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use chrono::{DateTime, Duration, Utc};
use serde_json::{Map, Value, json};
use toolgate::audit::{EventKind, RunChain};

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn body(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// Writes `runs` runs of `calls` calls each (every call's args carry `pad` bytes) into
/// `dir`/2026-01-05.jsonl; runs start 10 s apart and overlap their neighbours. Returns the
/// file's size.
fn write_trail(dir: &Path, runs: usize, calls: usize, pad: usize) -> u64 {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("2026-01-05.jsonl");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    each_event(runs, calls, pad, |e| {
        out.write_all(e.to_canonical_json().as_bytes()).unwrap();
        out.write_all(b"\n").unwrap();
    });
    out.flush().unwrap();
    drop(out);
    std::fs::metadata(&path).unwrap().len()
}

/// The events of [`write_trail`]'s runs, in writing order, handed to `line`.
fn each_event(
    runs: usize,
    calls: usize,
    pad: usize,
    mut line: impl FnMut(toolgate::audit::AuditEvent),
) {
    let t0: DateTime<Utc> = "2026-01-05T08:00:00Z".parse().unwrap();
    let filler = "x".repeat(pad);
    for r in 0..runs {
        let mut chain = RunChain::new(format!("r-{r}"), "support", None);
        let start = t0 + Duration::seconds(10 * r as i64);
        line(chain.seal(EventKind::RunStarted, start, Map::new()));
        for c in 0..calls {
            let at = start + Duration::seconds(2 * c as i64 + 1);
            line(chain.seal(
                EventKind::ToolDecision,
                at,
                body(json!({
                    "phase": "tool.before",
                    "callId": format!("c-{c}"),
                    "tool": {"name": "search_kb", "tags": []},
                    "args": {"query": "refund policy", "pad": filler},
                    "decision": {"effect": "allow", "code": "ALLOWED"},
                })),
            ));
            line(chain.seal(
                EventKind::ToolResult,
                at + Duration::milliseconds(500),
                body(json!({"callId": format!("c-{c}"), "output": "ok", "durationMs": 500.0})),
            ));
        }
        line(chain.seal(
            EventKind::RunEnded,
            start + Duration::seconds(2 * calls as i64 + 1),
            body(json!({"status": "completed"})),
        ));
    }
}

/// Peak resident memory (VmHWM, KiB) of a live process.
fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Runs `toolgate replay --from-audit audit` and returns its peak RSS (bytes), read from
/// /proc while it runs (VmHWM only grows), with its stdout and stderr.
fn what_if_peak(audit: impl AsRef<OsStr>) -> (u64, String, String) {
    let policy = repo("policies/customer-support.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["replay", "--policy"])
        .arg(&policy)
        .arg("--from-audit")
        .arg(audit)
        .args(["--format", "jsonl", "--all"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // The pipes are drained by threads so the child never blocks on a full pipe.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).unwrap();
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut s).unwrap();
        s
    });
    let mut peak = 0u64;
    loop {
        if let Some(kib) = vm_hwm_kib(pid) {
            peak = peak.max(kib);
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let status = child.wait().unwrap();
    let out = out.join().unwrap();
    let err = err.join().unwrap();
    assert!(status.success(), "{err}");
    (peak * 1024, out, err)
}

/// Checks the what-if of 40 runs (`small`: 400 calls) and of 400 (`big`: 4,000 calls) of
/// `small_size` and `size` bytes: ten times the runs, the peak grows by far less than a tenth
/// of the trail (it does not hold the runs) and stays below `size / fraction`.
fn bounded_by_the_largest_run(
    small: (u64, String, String),
    big: (u64, String, String),
    small_size: u64,
    size: u64,
    fraction: u64,
) {
    let (small_peak, out, err) = small;
    assert_eq!(
        out.lines().count(),
        400,
        "every call is decided again: {err}"
    );
    let (peak, out, err) = big;
    assert_eq!(
        out.lines().count(),
        4000,
        "every call is decided again: {err}"
    );
    assert!(err.contains("4,000 calls"), "{err}");
    eprintln!(
        "{small_size} bytes: peak RSS {small_peak} bytes; {size} bytes: peak RSS {peak} bytes"
    );
    assert!(
        peak < small_peak + size / 10 && peak < size / fraction,
        "peak RSS {peak} bytes for {size} bytes of events ({small_peak} bytes for \
         {small_size}): the events are held in memory"
    );
}

#[test]
fn a_trail_of_many_runs_is_rebuilt_in_memory_bounded_by_the_largest_run() {
    let dir = tempfile::tempdir().unwrap();
    // The same runs (10 calls with 40 KB of args each, ~400 KB a run), 40 of them and 400:
    // a ~16 MB trail and a ~160 MB one.
    let small = dir.path().join("small");
    let small_size = write_trail(&small, 40, 10, 40_000);
    let big = dir.path().join("big");
    let size = write_trail(&big, 400, 10, 40_000);
    assert!(size > 150_000_000, "trail is {size} bytes");
    bounded_by_the_largest_run(
        what_if_peak(&small),
        what_if_peak(&big),
        small_size,
        size,
        3,
    );
}

/// Stores [`write_trail`]'s runs in the PostgreSQL store at `url` (as `toolgate collect
/// --store` would); returns the bytes of the stored lines.
async fn store_trail(url: &str, runs: usize, calls: usize, pad: usize) -> u64 {
    use toolgate::audit::store::{EventStore, Incoming, postgres::PgStore};
    let store = PgStore::connect(url).await.unwrap();
    let mut batch = Vec::new();
    let mut batches = Vec::new();
    let mut bytes = 0u64;
    each_event(runs, calls, pad, |e| {
        let incoming = Incoming::from_line(&e.to_canonical_json()).unwrap();
        bytes += incoming.line.len() as u64 + 1;
        batch.push(incoming);
        if batch.len() == 200 {
            batches.push(std::mem::take(&mut batch));
        }
    });
    batches.push(batch);
    for b in batches {
        let n = b.len();
        let outcome = store.ingest(b).await.unwrap();
        assert_eq!(outcome.accepted, n, "{outcome:?}");
    }
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_store_of_many_runs_is_rebuilt_in_memory_bounded_by_the_largest_run() {
    // The same runs as the folder test above, stored in PostgreSQL: 40 runs and 400.
    let Some(small) = pg_support::fresh_schema("whatif_small").await else {
        return;
    };
    let Some(big) = pg_support::fresh_schema("whatif_big").await else {
        return;
    };
    let small_size = store_trail(&small, 40, 10, 40_000).await;
    let size = store_trail(&big, 400, 10, 40_000).await;
    assert!(size > 150_000_000, "trail is {size} bytes");
    let small = tokio::task::spawn_blocking(move || what_if_peak(small))
        .await
        .unwrap();
    let big = tokio::task::spawn_blocking(move || what_if_peak(big))
        .await
        .unwrap();
    // As for folders; the floor is higher (a page of each run under way, the pool), so the
    // bound is half the store.
    bounded_by_the_largest_run(small, big, small_size, size, 2);
}
