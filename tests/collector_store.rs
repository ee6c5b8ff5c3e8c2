//! One acceptance suite (design §9) run against every collector store: the JSONL folder and,
//! when `TOOLGATE_TEST_POSTGRES_URL` is set, PostgreSQL (a fresh schema per test).

mod common;
#[cfg(feature = "postgres")]
mod pg_support;

use std::sync::Arc;

use chrono::Utc;
use common::collect::sealed_run;
use serde_json::{Value, json};
use toolgate::audit::store::jsonl::JsonlStore;
use toolgate::audit::store::{EventQuery, EventStore, Incoming, IngestOutcome};
use toolgate::audit::{AuditEvent, EventKind, expected_hash, verify_paths};

fn run(run_id: &str, agent: &str, n: usize) -> Vec<AuditEvent> {
    sealed_run(run_id, agent, n, Utc::now, |i| {
        if i == 0 {
            json!({})
        } else {
            json!({"callId": format!("c{i}"), "n": i})
        }
    })
}

fn incoming(events: &[&AuditEvent]) -> Vec<Incoming> {
    events
        .iter()
        .map(|e| Incoming::from_value(e.to_json()).unwrap())
        .collect()
}

/// `value` with its hash recomputed.
fn rehash(mut value: Value) -> Value {
    let h = expected_hash(&value).unwrap();
    value["hash"] = json!(h);
    value
}

async fn ingest(store: &dyn EventStore, events: &[&AuditEvent]) -> IngestOutcome {
    store.ingest(incoming(events)).await.unwrap()
}

fn reasons(o: &IngestOutcome) -> Vec<String> {
    o.rejected.iter().map(|r| r.reason.clone()).collect()
}

/// The shared suite. `verify` checks the whole store as `toolgate verify` would.
async fn acceptance(store: Arc<dyn EventStore>, verify: impl AsyncFn() -> Result<(), String>) {
    let s = store.as_ref();
    let a = run("run-a", "support", 6);
    let all: Vec<&AuditEvent> = a.iter().collect();

    // Stored, then duplicates (also within one batch).
    let o = ingest(s, &all[..4]).await;
    assert_eq!((o.accepted, o.duplicates, o.rejected.len()), (4, 0, 0));
    let o = ingest(s, &[all[3], all[3], all[4]]).await;
    assert_eq!((o.accepted, o.duplicates, o.rejected.len()), (1, 2, 0));

    // Finding 15: one id, other content (or another run) → rejected, not a duplicate.
    let mut changed = a[5].to_json();
    changed["n"] = json!(999);
    let changed = rehash(changed);
    let mut moved = a[5].to_json();
    moved["runId"] = json!("run-elsewhere");
    let moved = rehash(moved);
    let mut batch = incoming(&[all[5]]);
    batch.push(Incoming::from_value(changed).unwrap());
    batch.push(Incoming::from_value(moved).unwrap());
    let o = s.ingest(batch).await.unwrap();
    assert_eq!(o.accepted, 1, "{o:?}");
    assert_eq!(o.rejected.len(), 2, "{o:?}");
    assert!(
        reasons(&o)
            .iter()
            .all(|r| r == "id reused with different content"),
        "{o:?}"
    );
    let o = ingest(s, &[all[5]]).await;
    assert_eq!((o.accepted, o.duplicates), (0, 1));

    // Finding 16: a second run reusing the runId (same agent) is a fork; the first stays.
    let fork = run("run-a", "support", 3);
    let fork_refs: Vec<&AuditEvent> = fork.iter().collect();
    let o = ingest(s, &fork_refs).await;
    assert_eq!(o.accepted, 0, "{o:?}");
    assert_eq!(o.rejected.len(), 3);
    assert!(reasons(&o).iter().all(|r| r.starts_with("fork:")), "{o:?}");
    // Another agent's run is another run.
    let other = run("run-b", "billing", 2);
    let o = ingest(s, &other.iter().collect::<Vec<_>>()).await;
    assert_eq!(o.accepted, 2);

    // Finding 17: out of order across batches (2–3, then 0, then 1) → the store verifies.
    let c = run("run-c", "support", 4);
    for part in [&[&c[2], &c[3]][..], &[&c[0]][..], &[&c[1]][..]] {
        let o = ingest(s, part).await;
        assert_eq!(o.accepted, part.len(), "{o:?}");
    }
    // Finding 14: over-long and non-ASCII agent ids; a mixed batch stores the good events.
    let long = run("run-l", &"x".repeat(257), 1);
    let max = run("run-m", &"é".repeat(128), 1);
    let ru1 = run("run-r1", "агент", 2);
    let ru2 = run("run-r2", "робот", 2);
    let o = ingest(s, &[&long[0], &max[0], &ru1[0], &ru1[1], &ru2[0], &ru2[1]]).await;
    assert_eq!(o.accepted, 5, "{o:?}");
    assert_eq!(o.rejected[0].id, long[0].id());
    assert!(o.rejected[0].reason.starts_with("id too long"), "{o:?}");
    let p = s.run_page(Some("робот"), "run-r2", None, 10).await.unwrap();
    assert_eq!((p.lines.len(), p.agent_id.as_str()), (2, "робот"));
    assert!(s.run_page(Some("агент"), "run-r2", None, 10).await.is_err());

    // Tampered content → rejected.
    let mut bad = c[0].to_json();
    bad["id"] = json!(uuid::Uuid::now_v7().to_string());
    let o = s
        .ingest(vec![Incoming::from_value(bad).unwrap()])
        .await
        .unwrap();
    assert_eq!(reasons(&o), vec!["hash does not match the event's content"]);

    // Reads: pages with `next`, per-run verify, event queries.
    let p1 = s.run_page(None, "run-c", None, 3).await.unwrap();
    assert_eq!((p1.lines.len(), p1.next), (3, Some(2)));
    let p2 = s.run_page(None, "run-c", p1.next, 3).await.unwrap();
    assert_eq!((p2.lines.len(), p2.next), (1, None));
    let got: Vec<u64> = p1
        .lines
        .iter()
        .chain(&p2.lines)
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(got, vec![0, 1, 2, 3]);
    assert_eq!(
        p1.lines[0],
        c[0].to_canonical_json(),
        "the exact canonical line"
    );
    let check = s.verify_run(Some("support"), "run-a").await.unwrap();
    assert!(check.is_ok() && check.events == 6, "{check:?}");
    let mut q = EventQuery {
        kind: Some(EventKind::RunStarted),
        limit: 2,
        ..EventQuery::default()
    };
    let mut started = 0;
    loop {
        let page = s.events(&q).await.unwrap();
        started += page.lines.len();
        for l in &page.lines {
            assert_eq!(
                serde_json::from_str::<Value>(l).unwrap()["kind"],
                "run.started"
            );
        }
        match page.next {
            Some(n) => q.after = Some(n),
            None => break,
        }
    }
    // run-a, run-b, run-c, run-m, run-r1, run-r2.
    assert_eq!(started, 6);

    verify().await.unwrap();

    // A forked tail that arrives before its gap fills: the gap-filler that contradicts it is
    // rejected, so no stored link is broken (the
    // run is left with a gap, which verify reports: the rest of the fork never arrives).
    let d = run("run-d", "support", 3);
    let d_fork = run("run-d", "support", 3);
    assert_eq!(ingest(s, &[&d[0], &d_fork[2]]).await.accepted, 2);
    let o = ingest(s, &[&d[1]]).await;
    assert_eq!(o.rejected.len(), 1, "{o:?}");
    assert!(reasons(&o)[0].contains("does not follow"), "{o:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jsonl_store_passes_the_acceptance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(JsonlStore::open(dir.path()).unwrap());
    let path = dir.path().to_path_buf();
    acceptance(store, async || {
        let r = verify_paths(&[&path]);
        if r.is_ok() {
            Ok(())
        } else {
            Err(format!("{:?}", r.breaks))
        }
    })
    .await;
    // Non-ASCII agent ids do not collapse into one folder.
    assert!(dir.path().join("агент").is_dir());
    assert!(dir.path().join("робот").is_dir());
    // A reopened store knows everything (dedupe survives a restart).
    let again = JsonlStore::open(dir.path()).unwrap();
    let a = run("run-z", "support", 1);
    assert_eq!(ingest(&again, &[&a[0]]).await.accepted, 1);
    assert_eq!(again.counts().1, 8);
}

#[cfg(feature = "postgres")]
mod pg {
    use super::*;
    use crate::pg_support::fresh_schema;
    use toolgate::audit::store::postgres::{PgStore, verify_postgres};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres_store_passes_the_acceptance_suite() {
        let Some(url) = fresh_schema("accept").await else {
            return;
        };
        let store = Arc::new(PgStore::connect(&url).await.unwrap());
        // Migrating again (a second replica starting) is a no-op.
        PgStore::connect(&url).await.unwrap();
        let u = url.clone();
        acceptance(store, async move || {
            let r = verify_postgres(&u, None).await.map_err(|e| e.to_string())?;
            if r.breaks.is_empty() && r.events > 0 {
                Ok(())
            } else {
                Err(format!("{:?}", r.breaks))
            }
        })
        .await;
    }
}
