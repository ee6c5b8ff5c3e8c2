//! Trace lines: every line of the input is parsed as a trace line and replayed against a
//! small policy; bad lines are reported, never a panic or a hang.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use toolgate::policy::parse_policy;
use toolgate::trace::{Replayer, TraceLine};

const POLICY: &str = include_str!("../../policies/customer-support.json");

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for line in text.lines() {
        let _ = serde_json::from_str::<TraceLine>(line);
    }
    let policies = parse_policy(POLICY, None)
        .map(|p| vec![p])
        .unwrap_or_default();
    let Ok(mut replayer) = Replayer::new(policies, None) else {
        return;
    };
    runtime().block_on(async {
        let _ = replayer.run_text(text).await;
        replayer.finish().await;
    });
});
