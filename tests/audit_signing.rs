//! Signed runs: `toolgate keygen`, `--signing-key`, `toolgate verify --public-key`, and the
//! library side (RunChain checkpoints, the engine builder).

mod common;
#[cfg(feature = "postgres")]
mod pg_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use assert_cmd::Command;
use chrono::{DateTime, Duration, Utc};
use serde_json::{Map, Value, json};
use toolgate::audit::{
    AuditEvent, BreakKind, CHECKPOINT_EVERY_EVENTS, EventKind, MemorySink, RunChain, RunSigner,
    canonical_json, expected_hash, verify_events, verify_events_signed, verify_paths,
};

fn toolgate() -> Command {
    Command::cargo_bin("toolgate").unwrap()
}

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn t0() -> DateTime<Utc> {
    common::at("2026-01-05T09:00:00Z")
}

/// `toolgate keygen` into `dir`, returning (KEY, KEY.pub).
fn keygen(dir: &Path) -> (PathBuf, PathBuf) {
    let key = dir.join("key");
    let out = toolgate()
        .arg("keygen")
        .arg("--out")
        .arg(&key)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("keyId ed25519:"), "{stdout}");
    (key.clone(), dir.join("key.pub"))
}

/// Replays the example support trace with an audit trail in `dir`/audit, signed with `key`.
fn signed_trail(dir: &Path, key: Option<&Path>) -> PathBuf {
    let audit = dir.join("audit");
    let mut cmd = toolgate();
    cmd.arg("replay")
        .arg("--policy")
        .arg(repo("policies/customer-support.json"))
        .arg("--trace")
        .arg(repo("examples/traces/support.jsonl"))
        .arg("--audit")
        .arg(&audit);
    if let Some(k) = key {
        cmd.arg("--signing-key").arg(k);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    audit.join("2026-01-05.jsonl")
}

fn verify(args: &[&Path]) -> (Option<i32>, String) {
    let mut cmd = toolgate();
    cmd.arg("verify");
    for a in args {
        cmd.arg(a);
    }
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn write_lines(path: &Path, events: &[Value]) {
    let text: String = events.iter().map(|e| canonical_json(e) + "\n").collect();
    std::fs::write(path, text).unwrap();
}

#[test]
fn keygen_writes_a_private_key_only_its_owner_reads_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keygen(dir.path());
    let private = std::fs::read_to_string(&key).unwrap();
    assert!(
        private.starts_with("-----BEGIN PRIVATE KEY-----"),
        "{private}"
    );
    let public_text = std::fs::read_to_string(&public).unwrap();
    assert!(public_text.starts_with("-----BEGIN PUBLIC KEY-----"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let again = toolgate()
        .arg("keygen")
        .arg("--out")
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert_eq!(std::fs::read_to_string(&key).unwrap(), private);
}

#[test]
fn a_signed_trail_verifies_with_its_public_key_and_not_with_another() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keygen(dir.path());
    let file = signed_trail(dir.path(), Some(&key));
    let ended: Vec<Value> = read_lines(&file)
        .into_iter()
        .filter(|e| e["kind"] == "run.ended")
        .collect();
    assert_eq!(ended.len(), 3);
    for e in &ended {
        assert!(
            e["signature"].as_str().is_some_and(|s| s.len() == 128),
            "{e}"
        );
        assert!(
            e["keyId"]
                .as_str()
                .is_some_and(|s| s.starts_with("ed25519:"))
        );
    }
    let (code, text) = verify(&[Path::new("--public-key"), &public, &file]);
    assert_eq!(code, Some(0), "{text}");

    let other = tempfile::tempdir().unwrap();
    let (_, other_public) = keygen(other.path());
    let (code, text) = verify(&[Path::new("--public-key"), &other_public, &file]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("signed with key ed25519:"), "{text}");

    // A file that is not a public key: exit 2.
    let (code, text) = verify(&[Path::new("--public-key"), &key, &file]);
    assert_eq!(code, Some(2), "{text}");
}

#[test]
fn an_unsigned_trail_fails_verify_with_a_public_key_and_names_each_run() {
    let dir = tempfile::tempdir().unwrap();
    let (_, public) = keygen(dir.path());
    let file = signed_trail(dir.path(), None);
    assert_eq!(verify(&[&file]).0, Some(0));
    let (code, text) = verify(&[Path::new("--public-key"), &public, &file]);
    assert_eq!(code, Some(1), "{text}");
    for run in ["r-101", "r-102", "r-103"] {
        assert!(text.contains(&format!("run {run} is not signed")), "{text}");
    }
}

/// The attack: r-102's call c6 was blocked (email outside local hours); say it was allowed,
/// and re-hash it and every later event of the run, relinking `prevHash`.
fn flip_r102_tail(events: &mut [Value]) {
    let at = events
        .iter()
        .position(|e| e["runId"] == "r-102" && e["kind"] == "tool.decision" && e["callId"] == "c6")
        .unwrap();
    assert_eq!(events[at]["decision"]["effect"], "block");
    events[at]["decision"]["effect"] = json!("allow");
    events[at]["decision"]["code"] = json!("ALLOWED");
    let mut prev: Option<String> = None;
    for e in events.iter_mut().skip(at) {
        if e["runId"] != "r-102" {
            continue;
        }
        if let Some(p) = &prev {
            e["prevHash"] = json!(p);
        }
        let h = expected_hash(e).unwrap();
        e["hash"] = json!(h);
        prev = Some(h);
    }
}

/// The attack the signature stops: flip a decision in a run's tail and re-hash every event
/// after it. The chain is intact again, so plain verify passes (as documented); the
/// signature on `run.ended` no longer matches, so verify with the public key fails and names
/// the run.
#[test]
fn a_rewritten_and_rehashed_tail_passes_plain_verify_but_not_signed_verify() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keygen(dir.path());
    let file = signed_trail(dir.path(), Some(&key));
    let mut events = read_lines(&file);
    flip_r102_tail(&mut events);
    let tampered = dir.path().join("tampered.jsonl");
    write_lines(&tampered, &events);

    let (code, text) = verify(&[&tampered]);
    assert_eq!(
        code,
        Some(0),
        "plain verify cannot see a re-hashed tail: {text}"
    );
    assert!(verify_paths(&[&tampered]).is_ok());

    let (code, text) = verify(&[Path::new("--public-key"), &public, &tampered]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("run r-102"), "{text}");
    assert!(text.contains("bad signature"), "{text}");
    assert!(!text.contains("run r-101 seq"), "{text}");
    assert!(!text.contains("run r-103 seq"), "{text}");
}

#[test]
fn events_after_the_last_signed_point_are_reported() {
    let signer = Arc::new(RunSigner::from_seed(&[1; 32]));
    let public = signer.public_key();
    let mut chain = RunChain::new("r1", "a", None).with_signer(Some(signer));
    let mut events = Vec::new();
    let mut ts = t0();
    // 1,500 events: a checkpoint after the first 1,000.
    for i in 0..1500 {
        let mut b = Map::new();
        b.insert("i".into(), json!(i));
        events.push(chain.seal(EventKind::ToolResult, ts, b));
        events.extend(chain.checkpoint_if_due(ts));
        ts += Duration::milliseconds(1);
    }
    let checkpoints: Vec<&AuditEvent> = events
        .iter()
        .filter(|e| e.kind() == EventKind::Checkpoint)
        .collect();
    assert_eq!(checkpoints.len(), 1);
    assert_eq!(checkpoints[0].seq(), CHECKPOINT_EVERY_EVENTS);
    assert!(checkpoints[0].body().contains_key("signature"));

    // The run never ended: the 500 events after the checkpoint are not covered.
    let r = verify_events_signed(&events, &public);
    assert!(verify_events(&events).is_ok());
    assert_eq!(r.breaks.len(), 1, "{:#?}", r.breaks);
    assert_eq!(r.breaks[0].kind, BreakKind::AfterLastSigned);
    assert_eq!(r.breaks[0].seq, Some(CHECKPOINT_EVERY_EVENTS + 1));
    assert!(
        r.breaks[0].message.contains("500 event(s)"),
        "{}",
        r.breaks[0]
    );

    // Ending the run signs them.
    events.push(chain.seal(EventKind::RunEnded, ts, Map::new()));
    assert!(verify_events_signed(&events, &public).is_ok());
}

#[test]
fn a_checkpoint_is_written_once_a_minute_of_a_run_has_passed() {
    let signer = Arc::new(RunSigner::from_seed(&[2; 32]));
    let mut chain = RunChain::new("r1", "a", None).with_signer(Some(signer));
    let _ = chain.seal(EventKind::RunStarted, t0(), Map::new());
    assert!(chain.checkpoint_if_due(t0()).is_none());
    let _ = chain.seal(
        EventKind::ToolResult,
        t0() + Duration::seconds(59),
        Map::new(),
    );
    assert!(
        chain
            .checkpoint_if_due(t0() + Duration::seconds(59))
            .is_none()
    );
    let later = t0() + Duration::seconds(60);
    let _ = chain.seal(EventKind::ToolResult, later, Map::new());
    let c = chain
        .checkpoint_if_due(later)
        .expect("a checkpoint after 60 s");
    assert_eq!((c.kind(), c.seq()), (EventKind::Checkpoint, 3));
    // The next one is due 60 s after this one, not before.
    let _ = chain.seal(
        EventKind::ToolResult,
        later + Duration::seconds(30),
        Map::new(),
    );
    assert!(
        chain
            .checkpoint_if_due(later + Duration::seconds(30))
            .is_none()
    );
}

#[test]
fn an_unsigned_chain_never_writes_checkpoints_or_signatures() {
    let mut chain = RunChain::new("r1", "a", None);
    for i in 0..1100 {
        let mut b = Map::new();
        b.insert("i".into(), json!(i));
        let _ = chain.seal(EventKind::ToolResult, t0(), b);
        assert!(chain.checkpoint_if_due(t0() + Duration::hours(1)).is_none());
    }
    let mut b = Map::new();
    // A body cannot smuggle in a signature either.
    b.insert("signature".into(), json!("00"));
    let e = chain.seal(EventKind::RunEnded, t0(), b);
    assert!(!e.body().contains_key("signature"));
}

#[tokio::test]
async fn the_engine_signs_run_ended_with_the_builders_key() {
    let clock = common::clock();
    let signer = RunSigner::from_seed(&[3; 32]);
    let public = signer.public_key();
    let sink = Arc::new(MemorySink::new());
    let engine = common::builder("[]", &clock)
        .audit_sink(sink.clone())
        .signing_key(signer)
        .build()
        .unwrap();
    let run = engine.start_run(toolgate::engine::RunContext::new("r1", "agent"));
    let d = run
        .before_tool(common::call("c1", "search", json!({"q": 1})))
        .await;
    assert_eq!(d.effect.to_string(), "allow");
    run.end("success", None).await;
    let events = sink.events();
    let last = events.last().unwrap();
    assert_eq!(last.kind(), EventKind::RunEnded);
    assert_eq!(last.body()["keyId"], json!(public.key_id()));
    let r = verify_events_signed(events.iter().map(|e| e.as_ref()), &public);
    assert!(r.is_ok(), "{:#?}", r.breaks);
}

/// The same checks on a PostgreSQL collector store: the tail-flip attack, an unsigned run and
/// a run whose last events follow its last checkpoint, stored in the database. Plain
/// `toolgate verify postgres://...` passes; with the public key it fails and names each run.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_verify_of_a_postgres_store_catches_a_rewritten_tail() {
    use toolgate::audit::store::EventStore as _;
    use toolgate::audit::store::Incoming;
    use toolgate::audit::store::postgres::{PgStore, verify_postgres};

    let Some(url) = pg_support::fresh_schema("signed").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keygen(dir.path());
    let file = signed_trail(dir.path(), Some(&key));
    let mut events = read_lines(&file);
    flip_r102_tail(&mut events);
    // A run without signatures, and a signed run that stops 5 events after its checkpoint.
    let mut unsigned = RunChain::new("r-unsigned", "agent-x", None);
    let signer = Arc::new(RunSigner::from_file(&key).unwrap());
    let mut open = RunChain::new("r-open", "agent-x", None).with_signer(Some(signer));
    let mut ts = t0();
    for i in 0..(CHECKPOINT_EVERY_EVENTS + 5) {
        let mut b = Map::new();
        b.insert("i".into(), json!(i));
        if i < 3 {
            events.push(
                unsigned
                    .seal(EventKind::ToolResult, ts, b.clone())
                    .to_json(),
            );
        }
        events.push(open.seal(EventKind::ToolResult, ts, b).to_json());
        events.extend(open.checkpoint_if_due(ts).map(|c| c.to_json()));
        ts += Duration::milliseconds(1);
    }
    let store = PgStore::connect(&url).await.unwrap();
    for chunk in events.chunks(500) {
        let batch = chunk
            .iter()
            .map(|e| Incoming::from_value(e.clone()).unwrap())
            .collect();
        let o = store.ingest(batch).await.unwrap();
        assert!(o.rejected.is_empty(), "{:?}", o.rejected);
    }

    let (code, text) = verify(&[Path::new(&url)]);
    assert_eq!(
        code,
        Some(0),
        "plain verify cannot see a re-hashed tail: {text}"
    );
    assert!(
        text.contains(&format!("ok: {} events, 5 runs", events.len())),
        "{text}"
    );

    let (code, text) = verify(&[Path::new("--public-key"), &public, Path::new(&url)]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("run r-102 seq"), "{text}");
    assert!(text.contains("bad signature"), "{text}");
    assert!(!text.contains("run r-101 seq"), "{text}");
    assert!(!text.contains("run r-103 seq"), "{text}");
    assert!(
        text.contains("run r-unsigned is not signed (3 events)"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "5 event(s) of run r-open after the last good signature (seq {CHECKPOINT_EVERY_EVENTS})"
        )),
        "{text}"
    );
    // The library call gives the same report, breaks located by run and seq.
    let r = verify_postgres(
        &url,
        Some(&RunSigner::from_file(&key).unwrap().public_key()),
    )
    .await
    .unwrap();
    let kinds: Vec<(Option<&str>, BreakKind)> = r
        .breaks
        .iter()
        .map(|b| (b.run_id.as_deref(), b.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            (Some("r-open"), BreakKind::AfterLastSigned),
            (Some("r-unsigned"), BreakKind::UnsignedRun),
            (Some("r-102"), BreakKind::AfterLastSigned),
            (Some("r-102"), BreakKind::BadSignature),
        ],
        "{:#?}",
        r.breaks
    );

    // A key file that is not a public key: exit 2, as for files.
    let (code, text) = verify(&[Path::new("--public-key"), &key, Path::new(&url)]);
    assert_eq!(code, Some(2), "{text}");
}
