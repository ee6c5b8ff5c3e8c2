//! Load on the PostgreSQL collector store: events/s sustained with 1 and 2 collectors (batches
//! of 100) and the POST latency percentiles.
//!
//! ```text
//! cargo run --release --example collector_pg_load -- postgres://postgres@127.0.0.1:5432/test [EVENTS] [POSTERS]
//! ```
//!
//! Each run uses a fresh schema. The collectors run in this process (each with its own
//! connection pool, as separate replicas would); the posters are HTTP clients on loopback.
//! Prints the machine's load average first (the numbers depend on what else runs), a progress
//! line on stderr every tenth of the events, one line per round, and a summary table; each
//! round checks that the database holds every event once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::{Map, Value, json};
use toolgate::audit::collector::{Collector, CollectorConfig, StoreSpec, serve_collector};
use toolgate::audit::{AuditEvent, EventKind, RunChain, canonical_json};

fn bodies(total: usize) -> Vec<String> {
    let runs = total / 100;
    (0..runs)
        .map(|r| {
            let mut chain = RunChain::new(format!("load-{r}"), format!("agent-{}", r % 10), None);
            let events: Vec<Value> = (0..100)
                .map(|i| {
                    let mut body = Map::new();
                    body.insert("callId".into(), json!(format!("c{i}")));
                    body.insert(
                        "output".into(),
                        json!({"hits": i, "text": "lorem ipsum dolor"}),
                    );
                    let kind = if i == 0 {
                        EventKind::RunStarted
                    } else {
                        EventKind::ToolResult
                    };
                    AuditEvent::to_json(&chain.seal(kind, Utc::now(), body))
                })
                .collect();
            canonical_json(&json!({"events": events}))
        })
        .collect()
}

/// What one round measured.
struct Round {
    collectors: usize,
    events_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

/// `/proc/loadavg`'s first three fields, or "unknown".
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}

async fn round(
    base: &str,
    collectors: usize,
    total: usize,
    posters: usize,
) -> Result<Round, Box<dyn std::error::Error>> {
    let (admin, conn) = tokio_postgres::connect(base, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    let schema = format!("tg_load_{}", uuid::Uuid::now_v7().simple());
    admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await?;
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
    let mut urls = Vec::new();
    let mut stops = Vec::new();
    for _ in 0..collectors {
        let collector = Collector::connect(CollectorConfig::with_store(StoreSpec::Postgres(
            url.clone(),
        )))
        .await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        urls.push(format!("http://{}/v1/events", listener.local_addr()?));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        stops.push(tx);
        tokio::spawn(serve_collector(collector, listener, async move {
            let _ = rx.await;
        }));
    }
    let work = bodies(total);
    let batches = work.len();
    let total = batches * 100;
    let work = Arc::new(parking_lot::Mutex::new(work));
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let client = reqwest::Client::new();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for p in 0..posters {
        let (work, client, url) = (work.clone(), client.clone(), urls[p % urls.len()].clone());
        let done = done.clone();
        tasks.spawn(async move {
            let mut lat = Vec::new();
            loop {
                let Some(body) = work.lock().pop() else {
                    return Ok::<_, String>(lat);
                };
                let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if n.is_multiple_of((batches / 10).max(1)) {
                    eprintln!(
                        "  {collectors} collector(s): {}/{total} events posted, {:.0} events/s so far",
                        n * 100,
                        (n * 100) as f64 / started.elapsed().as_secs_f64()
                    );
                }
                let t = Instant::now();
                let r = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status().is_success() => lat.push(t.elapsed()),
                    Ok(r) => return Err(format!("HTTP {}", r.status())),
                    Err(e) => return Err(e.to_string()),
                }
            }
        });
    }
    let mut lat: Vec<Duration> = Vec::new();
    while let Some(l) = tasks.join_next().await {
        lat.extend(l??);
    }
    let elapsed = started.elapsed();
    lat.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .map_or(0.0, |d| ms(*d))
    };
    let stored: i64 = admin
        .query_one(
            &format!("SELECT count(*) FROM {schema}.toolgate_events"),
            &[],
        )
        .await?
        .get(0);
    if stored != total as i64 {
        return Err(format!("{stored} events stored, {total} posted").into());
    }
    let r = Round {
        collectors,
        events_per_s: total as f64 / elapsed.as_secs_f64(),
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        max_ms: lat.last().map_or(0.0, |d| ms(*d)),
    };
    println!(
        "{collectors} collector(s), {posters} posters: {total} events ({batches} POSTs of 100) in \
         {:.2} s = {:.0} events/s; POST p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {stored} stored \
         once; load average now {}",
        elapsed.as_secs_f64(),
        r.events_per_s,
        r.p50_ms,
        r.p99_ms,
        r.max_ms,
        load_average(),
    );
    for s in stops {
        let _ = s.send(());
    }
    admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await?;
    Ok(r)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let Some(base) = args
        .get(1)
        .cloned()
        .or_else(|| std::env::var("TOOLGATE_TEST_POSTGRES_URL").ok())
    else {
        eprintln!("usage: collector_pg_load postgres://... [EVENTS] [POSTERS]");
        std::process::exit(2);
    };
    let total: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(50_000);
    let posters: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(8);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "{total} events, {posters} posters, {cores} cores, load average before: {}",
        load_average()
    );
    let mut rounds = Vec::new();
    for collectors in [1, 2] {
        rounds.push(round(&base, collectors, total, posters).await?);
    }
    println!("| collectors | events/s | POST p50 | POST p99 | POST max |");
    println!("|---|---|---|---|---|");
    for r in &rounds {
        println!(
            "| {} | {:.0} | {:.1} ms | {:.1} ms | {:.1} ms |",
            r.collectors, r.events_per_s, r.p50_ms, r.p99_ms, r.max_ms
        );
    }
    println!("load average after: {}", load_average());
    Ok(())
}
