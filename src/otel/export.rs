//! The OTLP/HTTP transport: an HTTP client over the crate's `reqwest`, and exporters that
//! report their first failure.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

/// Largest response body read from the OTLP endpoint.
const MAX_RESPONSE_BYTES: u64 = 4 * 1024 * 1024;

/// The last transport error of the export client, with its causes ("connection refused",
/// "operation timed out"): the OTLP exporter reports only "network error".
pub(crate) type LastError = Arc<parking_lot::Mutex<Option<String>>>;

/// A blocking `reqwest` client: the SDK exports from its own background threads.
#[derive(Debug)]
pub(crate) struct BlockingHttp(reqwest::blocking::Client, LastError);

impl BlockingHttp {
    /// A client with this request timeout. Built on a thread of its own, because the blocking
    /// client cannot be created on an async runtime's thread.
    pub(crate) fn new(timeout: Duration, last_error: LastError) -> Result<BlockingHttp, String> {
        std::thread::Builder::new()
            .name("toolgate-otel-http".into())
            .spawn(move || {
                reqwest::blocking::Client::builder()
                    .timeout(timeout)
                    .build()
            })
            .map_err(|e| format!("cannot start the HTTP client thread: {e}"))?
            .join()
            .map_err(|_| "the HTTP client thread failed".to_string())?
            .map(|c| BlockingHttp(c, last_error))
            .map_err(|e| format!("cannot build the HTTP client: {e}"))
    }
}

#[async_trait::async_trait]
impl HttpClient for BlockingHttp {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        use std::io::Read;
        let request: reqwest::blocking::Request = request.try_into()?;
        let response = match self.0.execute(request) {
            Ok(r) => r,
            Err(e) => {
                *self.1.lock() = Some(with_causes(&e));
                return Err(e.into());
            }
        };
        let status = response.status();
        let headers = response.headers().clone();
        let mut body = Vec::new();
        response.take(MAX_RESPONSE_BYTES).read_to_end(&mut body)?;
        let mut out = Response::builder().status(status).body(Bytes::from(body))?;
        *out.headers_mut() = headers;
        Ok(out)
    }
}

/// An error and its causes, `: `-joined, each said once.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(&format!(": {text}"));
        }
        source = s.source();
    }
    out
}

/// What to do with an export failure (the first one only).
pub type FailureHook = Arc<dyn Fn(&str) + Send + Sync>;

/// Counts export failures and hands the first one to a hook.
pub(crate) struct FailureReport {
    failures: AtomicU64,
    hook: FailureHook,
    last_error: LastError,
}

impl fmt::Debug for FailureReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailureReport")
            .field("failures", &self.failures.load(Ordering::Relaxed))
            .finish()
    }
}

impl FailureReport {
    pub(crate) fn new(hook: FailureHook, last_error: LastError) -> FailureReport {
        FailureReport {
            failures: AtomicU64::new(0),
            hook,
            last_error,
        }
    }

    /// Reports `message` through the hook if nothing was reported yet (counts as a failure).
    pub(crate) fn once(&self, message: &str) {
        if self.failures.fetch_add(1, Ordering::Relaxed) == 0 {
            (self.hook)(message);
        }
    }

    /// Records a failure of exporting `signal` to `endpoint`; the first one goes to the hook.
    pub(crate) fn failed(&self, signal: &str, endpoint: &str, error: &dyn fmt::Display) {
        if self.failures.fetch_add(1, Ordering::Relaxed) == 0 {
            let cause = self
                .last_error
                .lock()
                .as_ref()
                .map(|c| format!(" ({c})"))
                .unwrap_or_default();
            (self.hook)(&format!(
                "OpenTelemetry export of {signal} to {endpoint} failed: {error}{cause} \
                 (later export failures are not reported)"
            ));
        }
    }

    pub(crate) fn count(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
}

/// Wraps an exporter: its failures go to the report.
#[derive(Debug)]
pub(crate) struct Reported<E> {
    pub(crate) inner: E,
    pub(crate) endpoint: String,
    pub(crate) report: Arc<FailureReport>,
}

impl<E: SpanExporter> SpanExporter for Reported<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let r = self.inner.export(batch).await;
        if let Err(e) = &r {
            self.report.failed("traces", &self.endpoint, e);
        }
        r
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

impl<E: PushMetricExporter> PushMetricExporter for Reported<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let r = self.inner.export(metrics).await;
        if let Err(e) = &r {
            self.report.failed("metrics", &self.endpoint, e);
        }
        r
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}
