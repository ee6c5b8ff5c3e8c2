//! Embedders: the caller's current span (OpenTelemetry context or `tracing` span) or a W3C
//! `traceparent` is the parent of toolgate's span; results end the span.
mod otel_support;

use std::time::Duration;

use opentelemetry::Context;
use opentelemetry::trace::{
    FutureExt as _, Span as _, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use otel_support::{Receiver, attr_map, attr_str};
use serde_json::json;
use toolgate::engine::{GovernanceEngine, RunContext, ToolCall, ToolOutcome};
use toolgate::otel::{Otel, parent_from_traceparent};
use toolgate::policy::parse_policy;
use tracing::Instrument as _;
use tracing_subscriber::layer::SubscriberExt as _;

fn engine(otel: &Otel) -> GovernanceEngine {
    let policy = parse_policy(
        r#"[{"id": "no-delete", "name": "No deletes", "priority": 1, "enabled": true,
            "selector": {"phase": "tool.before", "tool": {"name": "delete*"}},
            "condition": {"kind": "toolName", "op": "glob", "value": "*"},
            "effect": {"type": "block", "reason": "deleting is not allowed"}}]"#,
        None,
    )
    .unwrap();
    GovernanceEngine::builder()
        .policy(policy)
        .otel(otel)
        .build()
        .unwrap()
}

fn otel(rx: &Receiver) -> Otel {
    Otel::builder()
        .endpoint(rx.endpoint.clone())
        .service_name("embedder-test")
        .build()
        .unwrap()
}

async fn shutdown(otel: Otel) {
    tokio::task::spawn_blocking(move || otel.shutdown().unwrap())
        .await
        .unwrap();
}

fn span_of_call<'a>(spans: &'a [Span], call_id: &str) -> &'a Span {
    spans
        .iter()
        .find(|s| attr_str(&s.attributes, "gen_ai.tool.call.id").as_deref() == Some(call_id))
        .unwrap_or_else(|| panic!("no span for {call_id}"))
}

#[tokio::test]
async fn the_current_opentelemetry_span_is_the_parent() {
    let rx = Receiver::start();
    let otel = otel(&rx);
    let engine = engine(&otel);
    let tracer = otel.tracer_provider().tracer("embedder");
    let parent = tracer.start("agent step");
    let parent_ids = parent.span_context().clone();
    let cx = Context::current_with_span(parent);

    let run = {
        let _attached = cx.clone().attach();
        engine.start_run(RunContext::new("emb-1", "bot"))
    };
    let d = run
        .before_tool(ToolCall::new("c1", "deleteUser", json!({"id": 7})))
        .with_context(cx.clone())
        .await;
    assert!(!d.is_allowed());
    cx.span().end();
    run.end("success", None).await;
    shutdown(otel).await;

    let spans = rx.spans();
    let tool = span_of_call(&spans, "c1");
    assert_eq!(tool.name, "execute_tool deleteUser");
    assert_eq!(tool.trace_id, parent_ids.trace_id().to_bytes().to_vec());
    assert_eq!(
        tool.parent_span_id,
        parent_ids.span_id().to_bytes().to_vec()
    );
    assert_eq!(tool.status.as_ref().map(|s| s.code), Some(2));
    // The caller's span was current when the run started: toolgate opened no run span.
    assert!(!spans.iter().any(|s| s.name.starts_with("invoke_agent")));
    assert_eq!(rx.services()[0], "embedder-test");
}

#[tokio::test]
async fn the_current_tracing_span_is_the_parent() {
    let rx = Receiver::start();
    let otel = otel(&rx);
    let engine = engine(&otel);
    let layer =
        tracing_opentelemetry::layer().with_tracer(otel.tracer_provider().tracer("embedder"));
    let subscriber = tracing_subscriber::registry().with(layer);
    let _guard = tracing::subscriber::set_default(subscriber);

    let run = engine.start_run(RunContext::new("emb-2", "bot"));
    let step = tracing::info_span!("agent step");
    let step_cx = tracing_opentelemetry::OpenTelemetrySpanExt::context(&step);
    let step_ids = step_cx.span().span_context().clone();
    let d = run
        .before_tool(ToolCall::new("c1", "readUser", json!({"id": 7})))
        .instrument(step.clone())
        .await;
    assert!(d.is_allowed());
    run.after_tool("c1", ToolOutcome::err("timeout", Duration::from_millis(30)))
        .await;
    drop(step);
    run.end("success", None).await;
    shutdown(otel).await;

    let spans = rx.spans();
    let tool = span_of_call(&spans, "c1");
    assert!(step_ids.is_valid());
    assert_eq!(tool.trace_id, step_ids.trace_id().to_bytes().to_vec());
    assert_eq!(tool.parent_span_id, step_ids.span_id().to_bytes().to_vec());
    // Allowed, then the tool failed: error status with the tool's error.
    let a = attr_map(&tool.attributes);
    assert_eq!(a["toolgate.effect"], "allow");
    assert_eq!(a["error.type"], "tool_error");
    assert_eq!(a["toolgate.tool.duration_ms"], "30");
    let status = tool.status.as_ref().unwrap();
    assert_eq!((status.code, status.message.as_str()), (2, "timeout"));
}

#[tokio::test]
async fn a_traceparent_continues_the_callers_trace() {
    let rx = Receiver::start();
    let otel = otel(&rx);
    let engine = engine(&otel);
    let cx = parent_from_traceparent(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        None,
    )
    .unwrap();
    let run = engine.start_run(RunContext::new("emb-3", "bot"));
    let d = run
        .before_tool(ToolCall::new("c1", "readUser", json!({})))
        .with_context(cx)
        .await;
    assert!(d.is_allowed());
    // No result recorded: the span ends with the run.
    run.end("success", None).await;
    shutdown(otel).await;

    let spans = rx.spans();
    let tool = span_of_call(&spans, "c1");
    assert_eq!(hex(&tool.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(hex(&tool.parent_span_id), "00f067aa0ba902b7");
    // Without a caller span at run start, the run has its own span.
    let run_span = spans
        .iter()
        .find(|s| s.name == "invoke_agent bot")
        .expect("run span");
    assert_eq!(
        attr_str(&run_span.attributes, "toolgate.run.status").as_deref(),
        Some("success")
    );
}

#[tokio::test]
async fn without_a_caller_span_tool_spans_are_children_of_the_run_span() {
    let rx = Receiver::start();
    let otel = otel(&rx);
    let engine = engine(&otel);
    let run = engine.start_run(RunContext::new("emb-4", "bot"));
    run.before_tool(ToolCall::new("c1", "readUser", json!({})))
        .await;
    run.after_tool(
        "c1",
        ToolOutcome::ok(json!({"name": "Ann"}), Duration::from_millis(5)),
    )
    .await;
    run.before_tool(ToolCall::new("c2", "deleteUser", json!({})))
        .await;
    run.end("success", None).await;
    shutdown(otel).await;

    let spans = rx.spans();
    let run_span = spans.iter().find(|s| s.name == "invoke_agent bot").unwrap();
    for id in ["c1", "c2"] {
        let tool = span_of_call(&spans, id);
        assert_eq!(tool.parent_span_id, run_span.span_id, "{id}");
        assert_eq!(tool.trace_id, run_span.trace_id, "{id}");
    }
    assert_ne!(
        span_of_call(&spans, "c1")
            .status
            .as_ref()
            .map_or(0, |s| s.code),
        2
    );
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
