//! Collector request bodies: any `POST /v1/events` body is accepted or rejected with a
//! reason, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::audit::collector::check_events_body;

fuzz_target!(|data: &[u8]| {
    let _ = check_events_body(data);
});
