//! Issue 35, the notifications: bounded posts under a webhook that never answers (no review
//! lost under a 512-descriptor limit), Slack markup from a call escaped, a signature over a
//! timestamp and the body, and a dead webhook that delays a process's exit by one bounded
//! attempt. Every case runs the real `toolgate replay` against real loopback receivers.

mod console_support;
use console_support::harness::*;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A trace of `runs` runs, each calling `refund` with its own amount (a review each).
fn many_runs(fx: &Fixture, name: &str, runs: usize, tool: &str, agent: &str) -> String {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let mut text = String::new();
    for i in 0..runs {
        let run = format!("run-{i}");
        for l in [
            json!({"type": "run.start", "runId": run, "agentId": agent, "at": now}),
            json!({"type": "tool.call", "runId": run, "id": "c1", "tool": {"name": tool},
                   "args": {"amount": 101 + i}, "at": now}),
            json!({"type": "run.end", "runId": run, "status": "success", "at": now}),
        ] {
            text.push_str(&format!("{l}\n"));
        }
    }
    std::fs::write(fx.path(name), text).unwrap();
    fx.s(name)
}

/// Connections a silent server holds now, and the most it held at once.
#[derive(Default)]
struct Held {
    now: std::sync::atomic::AtomicUsize,
    max: std::sync::atomic::AtomicUsize,
}

/// A loopback server that accepts every connection, reads it and never answers; how many it
/// holds (a connection the client gave up on ends when the client closes it).
async fn silent() -> (String, std::sync::Arc<Held>) {
    use std::sync::atomic::Ordering::Relaxed;
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let held = std::sync::Arc::new(Held::default());
    let h = std::sync::Arc::clone(&held);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let n = h.now.fetch_add(1, Relaxed) + 1;
            h.max.fetch_max(n, Relaxed);
            let h = std::sync::Arc::clone(&h);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
                h.now.fetch_sub(1, Relaxed);
            });
        }
    });
    (format!("http://{addr}/hook"), held)
}

/// Point 3: 600 reviews, a webhook that never answers, 256 file descriptors (the issue's
/// 1,000 under 512, scaled to keep a debug build quick): every review is stored, and the
/// webhook never holds more than the bounded posts in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_webhook_under_a_descriptor_limit_loses_no_review() {
    use std::sync::atomic::Ordering::Relaxed;
    let fx = Fixture::new();
    let (hook, held) = silent().await;
    let trace = many_runs(&fx, "t.jsonl", 600, "refund", "support-bot");
    let started = Instant::now();
    let out = tokio::task::spawn_blocking({
        let (policy, reviews, trace) = (fx.s("policy.json"), fx.s("reviews.json"), trace.clone());
        move || {
            Command::new("sh")
                .arg("-c")
                .arg(
                    "ulimit -n 256 && exec \"$0\" replay -p \"$1\" -t \"$2\" --reviews \"$3\" --notify \"$4\"",
                )
                .args([bin().display().to_string(), policy, trace, reviews, hook])
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!(
        "MEASURE 600 reviews, silent webhook, ulimit -n 256: replay took {} ms; the webhook held at most {} connections at once",
        started.elapsed().as_millis(),
        held.max.load(Relaxed)
    );
    assert!(
        !stderr.contains("Too many open files"),
        "ran out of descriptors: {}",
        stderr.lines().take(5).collect::<Vec<_>>().join("\n")
    );
    let stored = reviews_in(&fx).len();
    assert_eq!(stored, 600, "reviews stored: {stored}");
    assert!(
        // 16 posts in flight (NOTIFY_MAX_IN_FLIGHT); the server sees a closed connection's
        // end a moment after the next one's accept, so it may count a few more at once.
        held.max.load(Relaxed) <= 32,
        "posts in flight are bounded: {} at once",
        held.max.load(Relaxed)
    );
}

/// A receiver's next POST, as (headers, body).
async fn next(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(axum::http::HeaderMap, axum::body::Bytes)>,
) -> (axum::http::HeaderMap, Vec<u8>) {
    let (h, b) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("a notification in time")
        .expect("receiver open");
    (h, b.to_vec())
}

/// Point 6: a tool name or agent id from a call cannot post Slack markup (a mention of the
/// whole channel, a link of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_markup_from_a_call_is_escaped() {
    let fx = Fixture::new();
    std::fs::write(
        fx.path("policy.json"),
        r#"[{"id": "all", "name": "everything",
            "selector": {"phase": "tool.before", "tool": {"name": "<!channel>"}},
            "condition": {"kind": "toolArg", "type": "number", "op": "gt", "path": "amount", "value": 100},
            "effect": {"type": "hitl", "reason": "check <@U123> & co"}}]"#,
    )
    .unwrap();
    let (hook, mut rx) = receiver().await;
    let trace = many_runs(
        &fx,
        "t.jsonl",
        1,
        "<!channel>",
        "<https://evil.example/approve|Open the console>",
    );
    fx.replay(
        &trace,
        &[
            "--notify".into(),
            hook,
            "--notify-format".into(),
            "slack".into(),
            "--console-url".into(),
            "https://console.example/".into(),
        ],
    );
    let (_, body) = next(&mut rx).await;
    let text = serde_json::from_slice::<Value>(&body).unwrap()["text"]
        .as_str()
        .unwrap()
        .to_string();
    for raw in ["<!channel>", "<https://evil.example", "<@U123>", " & co"] {
        assert!(!text.contains(raw), "{raw:?} posted as markup: {text}");
    }
    assert!(text.contains("&lt;!channel&gt;"), "{text}");
    assert!(
        text.contains("&lt;https://evil.example/approve|Open the console&gt;"),
        "{text}"
    );
    // The operator's own link stays a link.
    assert!(
        text.ends_with("<https://console.example/|Open the console>"),
        "{text}"
    );
}

/// Point 12: each POST carries a timestamp and a delivery id, and the signature covers
/// `timestamp.body`: a captured POST replayed later is recognisable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_signature_covers_a_timestamp_and_each_post_has_a_delivery_id() {
    let fx = Fixture::new();
    let (hook, mut rx) = receiver().await;
    let trace = many_runs(&fx, "t.jsonl", 2, "refund", "support-bot");
    fx.replay(
        &trace,
        &[
            "--notify".into(),
            hook,
            "--notify-secret-file".into(),
            fx.s("secret"),
        ],
    );
    let mut deliveries = Vec::new();
    for _ in 0..2 {
        let (h, body) = next(&mut rx).await;
        let get = |n: &str| {
            h.get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
                .unwrap_or_else(|| panic!("no {n} header"))
        };
        let ts = get("x-toolgate-timestamp");
        let age = chrono::Utc::now().timestamp() - ts.parse::<i64>().expect("Unix seconds");
        assert!((0..=120).contains(&age), "timestamp {ts}");
        let mut signed = format!("{ts}.").into_bytes();
        signed.extend_from_slice(&body);
        assert_eq!(
            get("x-toolgate-signature"),
            format!(
                "sha256={}",
                toolgate::engine::notify_signature(SECRET.as_bytes(), &signed)
            )
        );
        deliveries.push(get("x-toolgate-delivery"));
    }
    assert_ne!(deliveries[0], deliveries[1]);
}

/// Point 14: a `--notify` URL that refuses connections delays `replay`'s exit by one bounded
/// attempt (not 5 s of retries), and what was not delivered is reported once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_webhook_delays_the_exit_by_one_bounded_attempt() {
    let fx = Fixture::new();
    // A port nobody listens on: bound, then closed.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/hook", l.local_addr().unwrap())
    };
    let trace = many_runs(&fx, "t.jsonl", 1, "refund", "support-bot");
    let started = Instant::now();
    let out = Command::new(bin())
        .args(["replay", "-p", &fx.s("policy.json"), "-t", &trace])
        .args(["--reviews", &fx.s("reviews.json"), "--notify", &dead])
        .output()
        .unwrap();
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!(
        "MEASURE replay with a refusing --notify URL: {} ms",
        took.as_millis()
    );
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr.matches("not delivered at shutdown").count(),
        1,
        "reported once: {stderr}"
    );
    // Generous against a loaded machine; the old code waited 5 s for its retries.
    assert!(took < Duration::from_millis(2_500), "replay took {took:?}");
}
