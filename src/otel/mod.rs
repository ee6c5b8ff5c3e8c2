//! OpenTelemetry: every decision as a span and in two metrics, exported over OTLP/HTTP
//! (protobuf). Feature `otel`.
//!
//! Per tool call, a span `execute_tool <tool>` following the GenAI semantic conventions
//! (`gen_ai.operation.name` = `execute_tool`, `gen_ai.tool.name`, `gen_ai.tool.call.id`) with
//! `toolgate.effect`, `toolgate.code`, `toolgate.rule_id`, `toolgate.run_id`,
//! `toolgate.agent_id`; blocked and hitl calls have error status. The span covers the decision
//! and, for an allowed call, lasts until its result is recorded. Metrics:
//! `toolgate.decisions` (counter) and `toolgate.decision.duration` (histogram, seconds).
//!
//! The parent of a tool span is the caller's current span (an OpenTelemetry [`Context`]
//! attached to the task, or the current `tracing` span through `tracing-opentelemetry`); when
//! there is none, a span `invoke_agent <agent>` that toolgate opens for the run.
//!
//! On the decision path toolgate only copies what it needs (ids, names, the decision's codes)
//! into a bounded queue; a worker thread builds the spans and records the metrics, and the
//! SDK's threads export them (a batch span processor with a bounded queue and a periodic
//! metric reader). A decision never waits for the network or for a lock held by export; when
//! a queue is full, data is dropped and counted ([`Otel::dropped`]).
//!
//! ```no_run
//! use toolgate::engine::{GovernanceEngine, RunContext};
//! use toolgate::otel::Otel;
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! // Endpoint, headers and service name from OTEL_EXPORTER_OTLP_* and OTEL_SERVICE_NAME.
//! let otel = Otel::from_env().unwrap();
//! let engine = GovernanceEngine::builder().otel(&otel).build().unwrap();
//! let run = engine.start_run(RunContext::new("run-1", "support-bot"));
//! // ... decisions ...
//! run.end("success", None).await;
//! otel.shutdown(); // flushes what is queued
//! # });
//! ```

mod audit;
#[cfg(feature = "http")]
mod collect;
mod env;
mod export;
mod observer;
mod spans;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::{Context, KeyValue, metrics::MeterProvider as _};
use opentelemetry_otlp::{
    MetricExporter, Protocol, SpanExporter, WithExportConfig, WithHttpConfig,
};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};

pub use audit::AuditExport;
#[cfg(feature = "http")]
pub use collect::collector_layer;
pub use env::MAX_QUEUE_CAP;
pub use export::FailureHook;
use export::{BlockingHttp, FailureReport, Reported};
use observer::Worker;
use spans::Telemetry;

use crate::engine::{DecisionObserver, EngineBuilder};

/// The default OTLP/HTTP endpoint (a collector on this machine).
pub const DEFAULT_ENDPOINT: &str = "http://localhost:4318";

/// Errors of setting up export.
#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    /// The exporter could not be built (bad endpoint, bad header, ...).
    #[error("OpenTelemetry: {0}")]
    Setup(String),
    /// Flushing or shutting down failed.
    #[error("OpenTelemetry: {0}")]
    Shutdown(String),
}

/// Configures [`Otel`]. Whatever is not set comes from the standard environment variables
/// (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_{TRACES,METRICS}_ENDPOINT`,
/// `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_SERVICE_NAME`,
/// `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_BSP_*`, `OTEL_METRIC_EXPORT_INTERVAL`).
#[derive(Default)]
pub struct OtelBuilder {
    endpoint: Option<String>,
    headers: HashMap<String, String>,
    service_name: Option<String>,
    timeout: Option<Duration>,
    max_queue: Option<usize>,
    on_failure: Option<FailureHook>,
}

impl std::fmt::Debug for OtelBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtelBuilder")
            .field("endpoint", &self.endpoint)
            .field("service_name", &self.service_name)
            .finish()
    }
}

impl OtelBuilder {
    /// The base OTLP/HTTP endpoint, e.g. `http://127.0.0.1:4318`: spans go to
    /// `<endpoint>/v1/traces`, metrics to `<endpoint>/v1/metrics`.
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// Adds a header to every export request (e.g. an API key).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// The `service.name` resource attribute (default `OTEL_SERVICE_NAME`, else `toolgate`).
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = Some(name.into());
        self
    }

    /// How long one export request may take (default `OTEL_EXPORTER_OTLP_TIMEOUT`, else 10 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Most spans waiting for export (default `OTEL_BSP_MAX_QUEUE_SIZE`, else 2048); more are
    /// dropped rather than slowing decisions.
    pub fn max_queue(mut self, spans: usize) -> Self {
        self.max_queue = Some(spans);
        self
    }

    /// Called with a message on the first export failure (later ones are only counted, see
    /// [`Otel::export_failures`]). Default: a `tracing` warning.
    pub fn on_export_failure(mut self, hook: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.on_failure = Some(Arc::new(hook));
        self
    }

    /// Builds the providers and starts their export threads.
    pub fn build(self) -> Result<Otel, OtelError> {
        env::check_protocol()?;
        env::check_headers()?;
        let queue = env::queue_size(self.max_queue)?;
        let timeout = match self.timeout {
            Some(t) => t,
            None => env::timeout()?,
        };
        let last_error = export::LastError::default();
        let http =
            Arc::new(BlockingHttp::new(timeout, last_error.clone()).map_err(OtelError::Setup)?);
        let traces_url = signal_endpoint(self.endpoint.as_deref(), "TRACES", "/v1/traces");
        let metrics_url = signal_endpoint(self.endpoint.as_deref(), "METRICS", "/v1/metrics");
        let hook = self.on_failure.unwrap_or_else(|| {
            Arc::new(|msg: &str| tracing::warn!(target: "toolgate::otel", "{msg}"))
        });
        let report = Arc::new(FailureReport::new(hook, last_error));
        // One attempt per export: a failing endpoint costs one request, not a backoff series
        // (at exit, that series delayed the process by seconds).
        let once = || opentelemetry_otlp::RetryPolicy::default().with_max_retries(0);
        let resource = resource(self.service_name);

        let spans = SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(traces_url.clone())
            .with_timeout(timeout)
            .with_headers(self.headers.clone())
            .with_shared_http_client(http.clone())
            .with_retry_policy(once())
            .build()
            .map_err(|e| OtelError::Setup(e.to_string()))?;
        let metrics = MetricExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(metrics_url.clone())
            .with_timeout(timeout)
            .with_headers(self.headers)
            .with_shared_http_client(http)
            .with_retry_policy(once())
            .build()
            .map_err(|e| OtelError::Setup(e.to_string()))?;

        let batch = BatchConfigBuilder::default().with_max_queue_size(queue);
        let processor = BatchSpanProcessor::builder(Reported {
            inner: spans,
            endpoint: traces_url.clone(),
            report: report.clone(),
        })
        .with_batch_config(batch.build())
        .build();
        let tracer_provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource.clone())
            .build();
        let reader = PeriodicReader::builder(Reported {
            inner: metrics,
            endpoint: metrics_url,
            report: report.clone(),
        })
        .build();
        let meter_provider = SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource)
            .build();
        let scope = opentelemetry::InstrumentationScope::builder("toolgate")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let tracer = tracer_provider.tracer_with_scope(scope.clone());
        let meter = meter_provider.meter_with_scope(scope);
        let telemetry = Arc::new(Telemetry::new(tracer, &meter));
        let worker = Arc::new(Worker::start(telemetry.clone()).map_err(OtelError::Setup)?);
        Ok(Otel {
            tracer_provider,
            meter_provider,
            telemetry,
            worker,
            report,
            endpoint: traces_url,
        })
    }
}

/// The OpenTelemetry export of an engine's decisions: register it with
/// [`EngineBuilder::otel`], and call [`shutdown`](Otel::shutdown) before exiting.
#[derive(Clone)]
pub struct Otel {
    tracer_provider: SdkTracerProvider,
    meter_provider: SdkMeterProvider,
    telemetry: Arc<Telemetry>,
    worker: Arc<Worker>,
    report: Arc<FailureReport>,
    endpoint: String,
}

/// The longest [`Otel::shutdown`] waits for the last export.
pub const SHUTDOWN_LIMIT: Duration = Duration::from_secs(1);

impl std::fmt::Debug for Otel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Otel")
            .field("export_failures", &self.report.count())
            .field("dropped", &self.worker.dropped())
            .finish()
    }
}

impl Otel {
    /// Starts configuring export.
    pub fn builder() -> OtelBuilder {
        OtelBuilder::default()
    }

    /// Export configured by the standard environment variables only.
    pub fn from_env() -> Result<Otel, OtelError> {
        OtelBuilder::default().build()
    }

    /// The observer to register with an engine (what [`EngineBuilder::otel`] does).
    pub fn observer(&self) -> Arc<dyn DecisionObserver> {
        Arc::new(self.worker.observer())
    }

    /// The tracer provider, e.g. for a `tracing-opentelemetry` layer of your own spans.
    pub fn tracer_provider(&self) -> &SdkTracerProvider {
        &self.tracer_provider
    }

    /// Decisions and results not exported because toolgate's own queue was full (the
    /// worker that builds spans could not keep up).
    pub fn dropped(&self) -> u64 {
        self.worker.dropped()
    }

    /// How many exports have failed so far.
    pub fn export_failures(&self) -> u64 {
        self.report.count()
    }

    /// Exports what is queued now. Blocking: call it off the async threads
    /// (`tokio::task::spawn_blocking`) or after the runtime.
    pub fn flush(&self) -> Result<(), OtelError> {
        self.worker.drain();
        let t = self.tracer_provider.force_flush();
        let m = self.meter_provider.force_flush();
        t.and(m).map_err(|e| OtelError::Shutdown(e.to_string()))
    }

    /// Ends the spans still open (calls without a result, runs not ended), exports everything
    /// (one attempt) and stops the export threads, waiting at most [`SHUTDOWN_LIMIT`]: an
    /// endpoint that accepts and never answers costs a second, then the rest is dropped and
    /// the error says so. Blocking, like [`flush`](Self::flush).
    pub fn shutdown(&self) -> Result<(), OtelError> {
        self.worker.drain();
        self.telemetry.end_all();
        let (tx, rx) = std::sync::mpsc::channel();
        let tracer = self.tracer_provider.clone();
        let meter = self.meter_provider.clone();
        std::thread::Builder::new()
            .name("toolgate-otel-shutdown".into())
            .spawn(move || {
                let t = tracer.shutdown();
                let m = meter.shutdown();
                let _ = tx.send(t.and(m));
            })
            .map_err(|e| OtelError::Shutdown(format!("cannot start the shutdown thread: {e}")))?;
        match rx.recv_timeout(SHUTDOWN_LIMIT) {
            Ok(r) => r.map_err(|e| OtelError::Shutdown(e.to_string())),
            Err(_) => {
                let message = format!(
                    "OpenTelemetry export to {} did not finish within {SHUTDOWN_LIMIT:?} at exit: \
                     the endpoint accepted the connection but did not answer; the spans and \
                     metrics still queued are dropped",
                    self.endpoint
                );
                self.report.once(&message);
                Err(OtelError::Shutdown(message))
            }
        }
    }
}

impl EngineBuilder {
    /// Exports every decision as an OpenTelemetry span and in metrics (see [`crate::otel`]).
    pub fn otel(self, otel: &Otel) -> Self {
        self.observer(otel.observer())
    }
}

/// The parent context of a W3C trace context header (`traceparent`, and `tracestate` if any),
/// e.g. one found in an MCP request's `_meta`. `None` when `traceparent` is not valid.
///
/// Make it the parent of toolgate's span for the call by running the decision in it:
/// `run.before_tool(call).with_context(cx).await` (`opentelemetry::trace::FutureExt`).
pub fn parent_from_traceparent(traceparent: &str, tracestate: Option<&str>) -> Option<Context> {
    let mut carrier = HashMap::new();
    carrier.insert("traceparent".to_string(), traceparent.to_string());
    if let Some(ts) = tracestate {
        carrier.insert("tracestate".to_string(), ts.to_string());
    }
    let cx = TraceContextPropagator::new().extract_with_context(&Context::new(), &carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

/// The full URL of one signal: the builder's base endpoint, else
/// `OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT` as is, else `OTEL_EXPORTER_OTLP_ENDPOINT` + path, else
/// the default endpoint + path.
fn signal_endpoint(base: Option<&str>, signal: &str, path: &str) -> String {
    let join = |b: &str| format!("{}{path}", b.trim_end_matches('/'));
    if let Some(b) = base {
        return join(b);
    }
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    if let Some(url) = var(&format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")) {
        return url;
    }
    join(&var("OTEL_EXPORTER_OTLP_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.to_string()))
}

/// The resource: detected from the environment, with `service.name` = `toolgate` unless set.
fn resource(service_name: Option<String>) -> Resource {
    let detected = Resource::builder().build();
    let unnamed = detected
        .get(&opentelemetry::Key::new("service.name"))
        .is_none_or(|v| v.as_str().starts_with("unknown_service"));
    let name = match service_name {
        Some(n) => Some(n),
        None if unnamed => Some("toolgate".to_string()),
        None => None,
    };
    match name {
        Some(n) => Resource::builder()
            .with_attribute(KeyValue::new("service.name", n))
            .build(),
        None => detected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_gives_a_remote_parent() {
        let cx = parent_from_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            None,
        );
        let cx = cx.expect("valid traceparent");
        let sc = cx.span().span_context().clone();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_remote());
    }

    #[test]
    fn bad_traceparent_is_none() {
        assert!(parent_from_traceparent("00-zz-00f067aa0ba902b7-01", None).is_none());
        assert!(parent_from_traceparent("", None).is_none());
    }

    #[test]
    fn endpoint_of_a_signal_appends_its_path() {
        assert_eq!(
            signal_endpoint(Some("http://h:4318/"), "TRACES", "/v1/traces"),
            "http://h:4318/v1/traces"
        );
    }
}
