//! The collector refuses only the bad event of a batch: an event nested deeper than any reader
//! takes (or otherwise not an audit event) is refused alone, and the other events of its
//! batch — another agent's run — are stored (issue 32, point 3).
#![cfg(feature = "http")]

mod common;
use common::collect::{Collect, get_json, post, sealed_run};

use chrono::Utc;
use serde_json::json;
use toolgate::audit::{AuditEvent, verify_paths};

fn events(run_id: &str, agent: &str, n: usize) -> Vec<AuditEvent> {
    sealed_run(
        run_id,
        agent,
        n,
        Utc::now,
        |i| json!({"callId": format!("c{i}")}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_too_deep_event_is_refused_alone_and_the_rest_of_its_batch_is_stored() {
    let dir = tempfile::TempDir::new().unwrap();
    let store = dir.path().join("store");
    let c = Collect::start_with(&store, &[], &[]);
    let good: Vec<String> = events("other-run", "other-agent", 3)
        .iter()
        .map(|e| e.to_json().to_string())
        .collect();
    // An event whose output nests 130 levels: past serde_json's limit (and toolgate's).
    let deep = format!(
        r#"{{"id":"0190b0c0-0000-7000-8000-000000000000","output":{}1{}}}"#,
        "[".repeat(130),
        "]".repeat(130)
    );
    let body = format!(
        r#"{{"events":[{},{deep},{}]}}"#,
        good[..2].join(","),
        good[2]
    );
    let (status, answer) = post(&c.url(), None, body).await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["accepted"], json!(3), "{answer}");
    let rejected = answer["rejected"].as_array().unwrap();
    assert_eq!(rejected.len(), 1, "{answer}");
    assert_eq!(rejected[0]["index"], json!(2));
    let (_, page) = get_json(&format!("{}/v1/runs/other-run", c.url())).await;
    assert_eq!(page["events"].as_array().map(Vec::len), Some(3), "{page}");
    drop(c);
    let report = verify_paths(&[&store]);
    assert!(report.is_ok(), "{:?}", report.breaks);
}
