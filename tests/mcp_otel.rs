//! `toolgate mcp-proxy --otel`: a W3C `traceparent` in a `tools/call`'s `_meta` is the parent of
//! the call's `execute_tool` span, exported to a real OTLP/HTTP receiver.
#![cfg(all(feature = "mcp", feature = "otel", feature = "http"))]

mod mcp_client;
mod otel_support;

use mcp_client::{Proxy, Setup};
use otel_support::Receiver;
use serde_json::json;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

#[test]
fn a_traceparent_in_meta_is_the_parent_of_the_calls_span() {
    let rx = Receiver::start();
    // Only this test runs in this binary: the gateway inherits the variables.
    // SAFETY: no other thread of this test binary reads the environment at this point.
    unsafe {
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", &rx.endpoint);
        std::env::set_var("OTEL_SERVICE_NAME", "toolgate-mcp-otel-test");
    }
    let s = Setup::new();
    let mut args = s.args();
    args.push("--otel".into());
    let mut p = Proxy::start(&args, &[mcp_client::fixture()]);
    p.initialize("2025-06-18", false);
    let r = p.request(
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "hi"},
               "_meta": {"traceparent": format!("00-{TRACE_ID}-{PARENT_ID}-01")}}),
    );
    assert_eq!(r["result"]["structuredContent"], json!({"echo": "hi"}));
    assert!(p.finish().success());

    let spans = rx.spans();
    let span = spans
        .iter()
        .find(|s| s.name == "execute_tool echo")
        .unwrap_or_else(|| {
            panic!(
                "no execute_tool span in {:?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            )
        });
    assert_eq!(hex::encode(&span.trace_id), TRACE_ID);
    assert_eq!(hex::encode(&span.parent_span_id), PARENT_ID);
}
