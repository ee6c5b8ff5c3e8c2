//! Canonical JSON and verification: the canonical form of any JSON line is a fixed point
//! (parse → canonicalize → parse → canonicalize gives the same text), an event's expected
//! hash is stable across it, and `verify` over arbitrary bytes reports, never panics.
#![no_main]

use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use toolgate::audit::{AuditEvent, canonical_json, expected_hash, verify_events, verify_paths};

fn scratch() -> &'static PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        dir.join(format!("toolgate-fuzz-{}.jsonl", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    let mut events = Vec::new();
    for line in data.split(|b| *b == b'\n') {
        let Ok(v) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        let canon = canonical_json(&v);
        let again: Value = serde_json::from_str(&canon).expect("canonical JSON parses");
        assert_eq!(
            canonical_json(&again),
            canon,
            "canonical form is not a fixed point"
        );
        assert_eq!(expected_hash(&v), expected_hash(&again));
        if let Ok(ev) = AuditEvent::from_value(v) {
            events.push(ev);
        }
    }
    let _ = verify_events(events.iter());
    let path = scratch();
    if let Ok(mut f) = std::fs::File::create(path) {
        if f.write_all(data).is_ok() {
            let _ = verify_paths(&[path]);
        }
    }
});
