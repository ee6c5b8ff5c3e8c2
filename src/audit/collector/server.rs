//! Serving a collector: through the shared HTTP front ([`crate::http_front`]), which owns the
//! connection caps, the header and body timeouts, the Host check and the bounded graceful
//! shutdown.

use std::future::Future;

use super::{Collector, CollectorConfig};
use crate::audit::AuditError;
use crate::http_front::{self, FrontConfig};

/// Opens the configured store and serves it on `listener` until `shutdown` completes; then stops
/// accepting, gives requests in flight [`CollectorConfig::shutdown_grace`] to finish (each is
/// answered only after its events are durable) and returns.
pub async fn serve(
    config: CollectorConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AuditError> {
    let collector = Collector::connect(config).await?;
    serve_collector(collector, listener, shutdown).await
}

/// Like [`serve`] for a collector already opened (e.g. to keep a handle for its stats).
pub async fn serve_collector(
    collector: Collector,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AuditError> {
    let cfg = collector.config().clone();
    serve_router(collector.router(), &cfg, listener, shutdown).await
}

/// The front's configuration of a collector.
pub fn front_config(config: &CollectorConfig) -> FrontConfig {
    FrontConfig {
        header_timeout: config.header_timeout,
        body_timeout: config.body_timeout,
        per_address: config.per_address,
        max_connections: config.max_connections,
        shutdown_grace: config.shutdown_grace,
        allowed_hosts: config.allowed_hosts.clone(),
        name: "toolgate collect",
        ..FrontConfig::default()
    }
}

/// Serves a collector's router (possibly wrapped in extra layers, e.g. OpenTelemetry export)
/// through the HTTP front configured from `config`.
pub async fn serve_router(
    router: axum::Router,
    config: &CollectorConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AuditError> {
    http_front::serve(router, listener, front_config(config), shutdown)
        .await
        .map_err(|e| AuditError::Http(format!("collector: {e}")))
}
