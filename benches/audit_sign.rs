//! Cost of signed runs: sealing a signed `run.ended` vs an unsigned one, and verifying a
//! signed run with the public key vs without.
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Map, json};
use toolgate::audit::{
    AuditEvent, EventKind, RunChain, RunSigner, verify_events, verify_events_signed,
};

fn body(i: usize) -> Map<String, serde_json::Value> {
    let mut b = Map::new();
    b.insert("callId".into(), json!(format!("c{i}")));
    b.insert("output".into(), json!({"name": "Ann", "orders": [1, 2, 3]}));
    b
}

fn run(signer: Option<Arc<RunSigner>>, n: usize) -> Vec<AuditEvent> {
    let ts = chrono::Utc::now();
    let mut chain = RunChain::new("r1", "agent", None).with_signer(signer);
    let mut out: Vec<AuditEvent> = (0..n)
        .map(|i| chain.seal(EventKind::ToolResult, ts, body(i)))
        .collect();
    out.push(chain.seal(EventKind::RunEnded, ts, body(n)));
    out
}

fn bench(c: &mut Criterion) {
    let signer = Arc::new(RunSigner::from_seed(&[9; 32]));
    let public = signer.public_key();
    c.bench_function("seal run.ended unsigned", |b| {
        let mut chain = RunChain::new("r1", "agent", None);
        b.iter(|| chain.seal(EventKind::RunEnded, chrono::Utc::now(), body(0)))
    });
    c.bench_function("seal run.ended signed", |b| {
        let mut chain = RunChain::new("r1", "agent", None).with_signer(Some(signer.clone()));
        b.iter(|| chain.seal(EventKind::RunEnded, chrono::Utc::now(), body(0)))
    });
    let events = run(Some(signer.clone()), 999);
    c.bench_function("verify 1,000-event run, plain", |b| {
        b.iter(|| verify_events(&events))
    });
    c.bench_function("verify 1,000-event run, with public key", |b| {
        b.iter(|| verify_events_signed(&events, &public))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
