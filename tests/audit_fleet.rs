//! The collector stores, `verify` and signed runs tried as a hostile or careless operator
//! would (issue 22): NUL ids, swapped columns, a truncated signed run, two collectors on one
//! folder, an empty database read by what-if, credentials in error messages.
//! PostgreSQL parts need `TOOLGATE_TEST_POSTGRES_URL` (skip when unset).
#![cfg(all(feature = "http", feature = "postgres"))]

mod pg_support;

mod common;
use common::collect::{Collect, body_of, get_json, post, sealed_run};
use common::process::{self, run_within};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Map, json};
use toolgate::audit::store::EventStore as _;
use toolgate::audit::store::Incoming;
use toolgate::audit::store::postgres::PgStore;
use toolgate::audit::{
    AuditEvent, CHECKPOINT_EVERY_EVENTS, EventKind, RunChain, RunSigner, canonical_json,
};

fn t0() -> DateTime<Utc> {
    "2026-01-05T09:00:00Z".parse().unwrap()
}

fn run(run_id: &str, agent: &str, n: usize) -> Vec<AuditEvent> {
    sealed_run(run_id, agent, n, t0, |i| json!({"step": i}))
}

fn toolgate(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

/// Point 7: a NUL byte in a runId or agentId is refused alike by both stores ("invalid id",
/// 409), and the clean events of the batch are stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_ids_are_invalid_ids_on_both_stores() {
    let Some(pg) = pg_support::fresh_schema("nulid").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("store");
    for store in [folder.to_str().unwrap(), pg.as_str()] {
        let c = Collect::start(store);
        let mut events = run("r\u{0}x", "support", 2);
        events.extend(run("r-agent", "sup\u{0}port", 1));
        events.extend(run("r-clean", "support", 3));
        let (status, answer) = post(&c.url(), None, body_of(&events)).await;
        assert_eq!(status, 409, "{store}: {answer}");
        assert_eq!(answer["accepted"], json!(3), "{store}: {answer}");
        let reasons: Vec<&str> = answer["rejected"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["reason"].as_str().unwrap())
            .collect();
        assert_eq!(reasons.len(), 3, "{store}: {answer}");
        for r in &reasons {
            assert!(r.starts_with("invalid id"), "{store}: {r}");
        }
        // Reading a run by such an id is a plain "not found", never a server fault.
        let resp = reqwest::get(format!("{}/v1/runs/r%00x/verify", c.url()))
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 404, "{store}");
    }
}

/// Point 7: `replay` to a collector whose store refuses some events, or that cannot be
/// reached, exits non-zero and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_exits_non_zero_when_its_events_are_not_delivered() {
    let Some(pg) = pg_support::fresh_schema("replaynul").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let c = Collect::start(&pg);
    let trace = format!(
        "{}\n{}\n{}\n{}\n",
        json!({"type":"run.start","runId":"r\u{0}nul","agentId":"support","at":"2026-01-05T10:00:00Z"}),
        json!({"type":"run.start","runId":"r-ok","agentId":"support","at":"2026-01-05T10:00:00Z"}),
        json!({"type":"run.end","runId":"r\u{0}nul","status":"success","at":"2026-01-05T10:00:01Z"}),
        json!({"type":"run.end","runId":"r-ok","status":"success","at":"2026-01-05T10:00:01Z"}),
    );
    let trace_path = dir.path().join("t.jsonl");
    std::fs::write(&trace_path, trace).unwrap();
    let policy = repo("policies/customer-support.json");
    let replay = |collector: &str| {
        Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .current_dir(dir.path())
            .args(["replay", "--policy"])
            .arg(&policy)
            .arg("--trace")
            .arg(&trace_path)
            .args(["--collector", collector])
            .output()
            .unwrap()
    };
    let out = replay(&c.url());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("invalid id"), "{stderr}");
    let (_, page) = get_json(&format!("{}/v1/runs/r-ok", c.url())).await;
    assert_eq!(page["events"].as_array().map(Vec::len), Some(2), "{page}");

    // Nothing listens: the events stay in the spool and replay says so, exiting non-zero.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    std::fs::remove_dir_all(dir.path().join("toolgate-audit")).ok();
    let out = replay(&url);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("not delivered"), "{stderr}");
}

/// Point 9: swapping the `run_id` columns of two runs' rows is a break for
/// `verify postgres://` and for the `/verify` route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapped_run_id_columns_are_caught() {
    let Some(pg) = pg_support::fresh_schema("swap").await else {
        return;
    };
    let store = PgStore::connect(&pg).await.unwrap();
    let mut events = run("r-a", "support", 3);
    events.extend(run("r-b", "support", 3));
    let batch = events
        .iter()
        .map(|e| Incoming::from_value(e.to_json()).unwrap())
        .collect();
    assert!(store.ingest(batch).await.unwrap().rejected.is_empty());
    let (code, text) = toolgate(&["verify", &pg]);
    assert_eq!(code, Some(0), "{text}");

    let (client, conn) = tokio_postgres::connect(&pg, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(
            "UPDATE toolgate_events SET run_id = 'r-tmp' WHERE run_id = 'r-a';
             UPDATE toolgate_events SET run_id = 'r-a' WHERE run_id = 'r-b';
             UPDATE toolgate_events SET run_id = 'r-b' WHERE run_id = 'r-tmp';",
        )
        .await
        .unwrap();
    let (code, text) = toolgate(&["verify", &pg]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("run_id column"), "{text}");

    let c = Collect::start(&pg);
    let (_, v) = get_json(&format!("{}/v1/runs/r-a/verify", c.url())).await;
    assert_eq!(v["ok"], json!(false), "{v}");
    assert!(v["breaks"].to_string().contains("run_id column"), "{v}");
}

/// A signed run of `n` tool results with its checkpoints, not ended.
fn signed_open_run(key: &Arc<RunSigner>, run_id: &str, n: u64) -> Vec<AuditEvent> {
    let mut chain = RunChain::new(run_id, "agent-x", None).with_signer(Some(key.clone()));
    let mut events = Vec::new();
    let mut ts = t0();
    for i in 0..n {
        let mut b = Map::new();
        b.insert("i".into(), json!(i));
        events.push(chain.seal(EventKind::ToolResult, ts, b));
        events.extend(chain.checkpoint_if_due(ts));
        ts += chrono::Duration::milliseconds(1);
    }
    events
}

/// Point 13: a signed run cut right after its last checkpoint (no `run.ended`) is
/// "incomplete" on a folder and on PostgreSQL, unless `--allow-open`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_run_without_its_signed_end_is_incomplete() {
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("key");
    let (code, text) = toolgate(&["keygen", "--out", key_path.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{text}");
    let public = dir.path().join("key.pub");
    let signer = Arc::new(RunSigner::from_file(&key_path).unwrap());
    // Cut right after the checkpoint at seq 1,000.
    let events = signed_open_run(&signer, "r-cut", CHECKPOINT_EVERY_EVENTS);
    assert_eq!(events.last().unwrap().kind(), EventKind::Checkpoint);
    let folder = dir.path().join("trail");
    std::fs::create_dir(&folder).unwrap();
    let text: String = events
        .iter()
        .map(|e| canonical_json(&e.to_json()) + "\n")
        .collect();
    std::fs::write(folder.join("2026-01-05.jsonl"), text).unwrap();
    let pk = public.to_str().unwrap();
    let (code, text) = toolgate(&["verify", "--public-key", pk, folder.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("run r-cut seq"), "{text}");
    assert!(text.contains("incomplete"), "{text}");
    let (code, text) = toolgate(&[
        "verify",
        "--public-key",
        pk,
        "--allow-open",
        folder.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{text}");

    let Some(pg) = pg_support::fresh_schema("cut").await else {
        return;
    };
    let store = PgStore::connect(&pg).await.unwrap();
    for chunk in events.chunks(500) {
        let batch = chunk
            .iter()
            .map(|e| Incoming::from_value(e.to_json()).unwrap())
            .collect();
        assert!(store.ingest(batch).await.unwrap().rejected.is_empty());
    }
    let (code, text) = toolgate(&["verify", "--public-key", pk, &pg]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("run r-cut"), "{text}");
    assert!(text.contains("incomplete"), "{text}");
    let (code, text) = toolgate(&["verify", "--public-key", pk, "--allow-open", &pg]);
    assert_eq!(code, Some(0), "{text}");
}

/// Point 10: a second collector on a folder another collector uses refuses to start.
#[test]
fn a_second_collector_on_one_folder_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("store");
    let first = Collect::start(folder.to_str().unwrap());
    let mut second = process::toolgate();
    second
        .args(["collect", "--listen", "127.0.0.1:0", "--store"])
        .arg(&folder);
    let out = run_within(&mut second, Duration::from_secs(20))
        .expect("the second collector must refuse to start, not run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("in use by another collector"), "{stderr}");
    drop(first);
    // Once the first is gone, the folder is free again.
    let _again = Collect::start(folder.to_str().unwrap());
}

/// Point 12: what-if reads a database without migrating it; an empty database is a clear
/// error, and no table is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_if_never_migrates_and_an_empty_database_is_an_error() {
    let Some(pg) = pg_support::fresh_schema("empty").await else {
        return;
    };
    let (code, text) = toolgate(&[
        "replay",
        "--policy",
        repo("policies/customer-support.json").to_str().unwrap(),
        "--from-audit",
        &pg,
    ]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("no toolgate audit store"), "{text}");
    let (client, conn) = tokio_postgres::connect(&pg, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let tables: i64 = client
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "what-if created tables");
}

/// Point 11: a PostgreSQL error shows the server's message and SQLSTATE, and no password
/// given in the URL (user:pass@ or `?password=`) is ever printed.
#[test]
fn postgres_errors_name_the_server_message_and_hide_passwords() {
    let Ok(base) = std::env::var("TOOLGATE_TEST_POSTGRES_URL") else {
        return;
    };
    let cfg: tokio_postgres::Config = base.parse().unwrap();
    let host = match &cfg.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        _ => "127.0.0.1".into(),
    };
    let port = cfg.get_ports().first().copied().unwrap_or(5432);
    let user = cfg.get_user().unwrap_or("postgres");
    let pw = cfg
        .get_password()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .unwrap_or_default();
    let missing = format!(
        "postgres://{user}@{host}:{port}/tg_no_such_db_xyz?password={}",
        urlencode(&pw)
    );
    let (code, text) = toolgate(&["verify", missing.as_str()]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("3D000"), "{text}");
    assert!(text.contains("tg_no_such_db_xyz"), "{text}");
    assert!(!text.contains("db error\n"), "{text}");
    if !pw.is_empty() {
        assert!(!text.contains(&format!("password={pw}")), "{text}");
    }
    // A password with a raw "/" in it, in user:pass@ form.
    let wrong = format!("postgres://{user}:s3cr/et-pw@{host}:{port}/tg_no_such_db_xyz");
    let (code, text) = toolgate(&["verify", &wrong]);
    assert_eq!(code, Some(2), "{text}");
    assert!(!text.contains("s3cr"), "{text}");
    assert!(!text.contains("et-pw"), "{text}");
    // The collector: the server's message on start-up, the password in `?password=` hidden.
    let q = format!("postgres://{user}@{host}:{port}/tg_no_such_db_xyz?password=s3cr%2Fet-pw");
    let (code, text) = toolgate(&["collect", "--listen", "127.0.0.1:0", "--store", &q]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("3D000"), "{text}");
    assert!(!text.contains("s3cr"), "{text}");
    assert!(!text.contains("et-pw"), "{text}");
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A peer session holding, in an open transaction, the advisory lock the store takes for the
/// run `agent`/`run_id` (its bucket, see RUN_LOCK_BUCKETS) in the schema of `pg`.
async fn hold_run_lock(pg: &str, agent: &str, run_id: &str) -> tokio_postgres::Client {
    let (holder, conn) = tokio_postgres::connect(pg, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .execute(
            &format!(
                "SELECT pg_advisory_xact_lock({}, (hashtextextended($1, 0) & $3)::int)",
                toolgate::audit::store::postgres::RUN_LOCK_CLASS_SQL
            ),
            &[
                &format!("{agent}\u{1f}{run_id}"),
                &toolgate::audit::store::postgres::RUN_LOCK_CLASS,
                &(toolgate::audit::store::postgres::RUN_LOCK_BUCKETS - 1),
            ],
        )
        .await
        .unwrap();
    holder
}

/// Advisory locks belong to the database: stores in two schemas of one database (tenants,
/// parallel tests) must not wait on each other's runs. A run held in one schema is stored at
/// once in another (CI once failed when a 60,000-run batch in one schema held every bucket
/// while another schema's writer timed out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_in_two_schemas_do_not_share_run_locks() {
    let Some(held) = pg_support::fresh_schema("lock_a").await else {
        return;
    };
    let Some(free) = pg_support::fresh_schema("lock_b").await else {
        return;
    };
    // The first collector migrates its schema; its run is then held by a peer.
    let a = Collect::start(&held);
    let (status, answer) = post(&a.url(), None, body_of(&run("r-warm", "support", 1))).await;
    assert_eq!(status, 200, "{answer}");
    let holder = hold_run_lock(&held, "support", "r-shared").await;
    let b = Collect::start(&free);
    let (status, answer) = post(&b.url(), None, body_of(&run("r-shared", "support", 2))).await;
    assert_eq!(
        status, 200,
        "the other schema's writer waited on the lock: {answer}"
    );
    // The holder does hold the run in its own schema.
    let (status, answer) = post(&a.url(), None, body_of(&run("r-shared", "support", 2))).await;
    assert_eq!(status, 503, "{answer}");
    holder.batch_execute("ROLLBACK").await.unwrap();
}

/// Point 6: a peer that holds a run's lock inside an open transaction (here a raw session;
/// a frozen collector is the same to the server) costs a writer of that run a bounded wait
/// answered 503 with `Retry-After`, never a hang; other runs and `/healthz` are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_peer_costs_others_a_bounded_retry() {
    let Some(pg) = pg_support::fresh_schema("stall").await else {
        return;
    };
    let c = Collect::start(&pg);
    let holder = hold_run_lock(&pg, "support", "r-stalled").await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let send = |body: String| {
        let client = client.clone();
        let url = c.url();
        async move {
            client
                .post(format!("{url}/v1/events"))
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
        }
    };
    // 20 writers of the stalled run (more than the pool's 16 connections) ...
    let stalled = run("r-stalled", "support", 2);
    let writers: Vec<_> = (0..20)
        .map(|_| tokio::spawn(send(body_of(&stalled))))
        .collect();
    // ... do not stop another run, nor the health check.
    let other = send(body_of(&run("r-other", "support", 2))).await.unwrap();
    assert_eq!(other.status().as_u16(), 200);
    let health = client
        .get(format!("{}/healthz", c.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
    for w in writers {
        let resp = w.await.unwrap().expect("an answer, not a hang");
        assert_eq!(resp.status().as_u16(), 503);
        let after: u64 = resp.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&after), "{after}");
    }
    // Once the peer lets go, the run is stored.
    holder.batch_execute("ROLLBACK").await.unwrap();
    let (status, answer) = post(&c.url(), None, body_of(&stalled)).await;
    assert_eq!(status, 200, "{answer}");
}

/// Point 8: six concurrent batches of 10,000 runs each do not exhaust the server's lock
/// table: every batch is stored, at worst after a 503 the client retries (as the HTTP sink
/// does), never a 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_run_batches_take_a_bounded_number_of_locks() {
    let Some(pg) = pg_support::fresh_schema("manyruns").await else {
        return;
    };
    let c = Collect::start(&pg);
    let posts: Vec<_> = (0..6)
        .map(|b| {
            let events: Vec<AuditEvent> = (0..10_000)
                .flat_map(|i| run(&format!("r-{b}-{i}"), "bulk", 1))
                .collect();
            let url = c.url();
            tokio::spawn(async move {
                let body = body_of(&events);
                for _ in 0..60 {
                    let (status, answer) = post(&url, None, body.clone()).await;
                    if status != 503 {
                        return (status, answer);
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                panic!("still 503 after 60 tries");
            })
        })
        .collect();
    for p in posts {
        let (status, answer) = p.await.unwrap();
        assert_eq!(status, 200, "{answer}");
        assert_eq!(
            answer["accepted"].as_u64().unwrap() + answer["duplicates"].as_u64().unwrap(),
            10_000
        );
    }
    let runs = toolgate::audit::store::postgres::count_runs(&pg)
        .await
        .unwrap();
    assert_eq!(runs.len(), 60_000);
}

/// Point 16: key files are read at most a few KB of a regular file: a FIFO does not hang, a
/// huge file is refused without reading it, an empty file gets a plain message, and a private
/// key others can read is warned about.
#[test]
fn key_files_are_small_regular_files() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let trail = dir.path().join("trail");
    std::fs::create_dir(&trail).unwrap();
    let verify_with = |key: &Path| {
        let mut verify = process::toolgate();
        verify
            .arg("verify")
            .arg("--public-key")
            .arg(key)
            .arg(&trail);
        let out = run_within(&mut verify, Duration::from_secs(20)).expect("verify must not hang");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let empty = dir.path().join("empty.pub");
    std::fs::write(&empty, "").unwrap();
    let (code, text) = verify_with(&empty);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("is empty"), "{text}");

    let fifo = dir.path().join("fifo.pub");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let (code, text) = verify_with(&fifo);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("not a regular file"), "{text}");

    let huge = dir.path().join("huge.pub");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let (code, text) = verify_with(&huge);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("too large"), "{text}");

    // A private key others can read: a warning, and it still signs.
    let key = dir.path().join("key");
    let (code, text) = toolgate(&["keygen", "--out", key.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{text}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .current_dir(dir.path())
        .arg("replay")
        .arg("--policy")
        .arg(repo("policies/customer-support.json"))
        .arg("--trace")
        .arg(repo("examples/traces/support.jsonl"))
        .arg("--audit")
        .arg(dir.path().join("audit"))
        .arg("--signing-key")
        .arg(&key)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("readable by other users"), "{stderr}");
}

/// Point 17: a trace `signal` line with `"value": null` sets the value null (design §5).
#[test]
fn a_null_signal_value_is_a_value() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.jsonl");
    std::fs::write(
        &trace,
        format!(
            "{}\n{}\n{}\n",
            json!({"type":"signal","key":"crm.isDifficultCustomer","value":null}),
            json!({"type":"run.start","runId":"r1","agentId":"support","at":"2026-01-05T10:00:00Z"}),
            json!({"type":"run.end","runId":"r1","status":"success","at":"2026-01-05T10:00:01Z"}),
        ),
    )
    .unwrap();
    let (code, text) = toolgate(&[
        "replay",
        "--policy",
        repo("policies/customer-support.json").to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{text}");
    assert!(!text.contains("needs a"), "{text}");
}

/// Point 20: 600 idle unauthenticated connections (more than the 512 served at once) do not
/// hold up a legitimate POST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_do_not_delay_a_real_client() {
    let dir = tempfile::tempdir().unwrap();
    let c = Collect::start(dir.path().join("store").to_str().unwrap());
    let mut idle = Vec::new();
    for _ in 0..600 {
        idle.push(tokio::net::TcpStream::connect(c.addr()).await.unwrap());
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let resp = client
        .post(format!("{}/v1/events", c.url()))
        .header("content-type", "application/json")
        .body(body_of(&run("r-real", "support", 2)))
        .send()
        .await
        .expect("the POST is served while idle connections wait");
    assert_eq!(resp.status().as_u16(), 200);
    drop(idle);
}
