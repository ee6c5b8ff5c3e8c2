//! A real OTLP/HTTP receiver for the OpenTelemetry tests: axum routes `/v1/traces` and
//! `/v1/metrics` that decode the protobuf export requests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    /// (service name, span) pairs' service names, in order.
    services: Vec<String>,
    metrics: Vec<ExportMetricsServiceRequest>,
}

/// The receiver, serving on a runtime of its own until dropped.
pub struct Receiver {
    pub endpoint: String,
    got: Arc<Mutex<Received>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

fn proto_ok() -> impl IntoResponse {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        Vec::<u8>::new(),
    )
}

async fn traces(State(got): State<Arc<Mutex<Received>>>, body: Bytes) -> impl IntoResponse {
    let req = ExportTraceServiceRequest::decode(body).expect("a protobuf trace export");
    let mut g = got.lock().unwrap();
    for rs in req.resource_spans {
        let service = rs
            .resource
            .as_ref()
            .and_then(|r| attr_str(&r.attributes, "service.name"))
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                g.services.push(service.clone());
                g.spans.push(s);
            }
        }
    }
    proto_ok()
}

async fn metrics(State(got): State<Arc<Mutex<Received>>>, body: Bytes) -> impl IntoResponse {
    let req = ExportMetricsServiceRequest::decode(body).expect("a protobuf metrics export");
    got.lock().unwrap().metrics.push(req);
    proto_ok()
}

impl Receiver {
    pub fn start() -> Receiver {
        let got = Arc::new(Mutex::new(Received::default()));
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .route("/v1/metrics", post(metrics))
            .with_state(got.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // A thread and runtime of its own, so async tests can start and drop it.
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = stopped.await;
                    })
                    .await
                    .unwrap();
            });
        });
        Receiver {
            endpoint: format!("http://{addr}"),
            got,
            _stop: stop,
        }
    }

    pub fn spans(&self) -> Vec<Span> {
        self.got.lock().unwrap().spans.clone()
    }

    pub fn services(&self) -> Vec<String> {
        self.got.lock().unwrap().services.clone()
    }

    /// The latest value of each data point of a cumulative sum metric, by its attributes.
    pub fn sum(&self, name: &str) -> BTreeMap<BTreeMap<String, String>, i64> {
        let mut out = BTreeMap::new();
        for m in self.metrics_named(name) {
            if let Some(metric::Data::Sum(sum)) = m.data {
                for p in sum.data_points {
                    let v = match p.value {
                        Some(number_data_point::Value::AsInt(i)) => i,
                        Some(number_data_point::Value::AsDouble(d)) => d as i64,
                        None => 0,
                    };
                    out.insert(attr_map(&p.attributes), v);
                }
            }
        }
        out
    }

    /// The latest count of each data point of a histogram, by its attributes, and the unit.
    pub fn histogram_counts(
        &self,
        name: &str,
    ) -> (BTreeMap<BTreeMap<String, String>, u64>, String) {
        let mut out = BTreeMap::new();
        let mut unit = String::new();
        for m in self.metrics_named(name) {
            unit = m.unit.clone();
            if let Some(metric::Data::Histogram(h)) = m.data {
                for p in h.data_points {
                    out.insert(attr_map(&p.attributes), p.count);
                }
            }
        }
        (out, unit)
    }

    fn metrics_named(&self, name: &str) -> Vec<opentelemetry_proto::tonic::metrics::v1::Metric> {
        let g = self.got.lock().unwrap();
        g.metrics
            .iter()
            .flat_map(|r| &r.resource_metrics)
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
            .filter(|m| m.name == name)
            .cloned()
            .collect()
    }
}

fn value_str(v: &Option<AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        _ => String::new(),
    }
}

pub fn attr_str(attrs: &[KeyValue], key: &str) -> Option<String> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| value_str(&kv.value))
}

pub fn attr_map(attrs: &[KeyValue]) -> BTreeMap<String, String> {
    attrs
        .iter()
        .map(|kv| (kv.key.clone(), value_str(&kv.value)))
        .collect()
}

/// A loopback port nothing listens on.
pub fn dead_endpoint() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}")
}
