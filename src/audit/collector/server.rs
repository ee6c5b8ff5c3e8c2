//! The collector's accept loop: a cap on connections, a header read timeout, and a bounded
//! graceful shutdown.

use std::future::Future;
use std::sync::Arc;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::{Collector, CollectorConfig};
use crate::audit::AuditError;

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
    let service = TowerToHyperService::new(collector.router());
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(cfg.header_timeout)
        .keep_alive(true);
    let permits = Arc::new(Semaphore::new(cfg.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        // Wait for a free slot before accepting: over the cap, clients wait in the listen queue
        // instead of taking file handles.
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = &mut shutdown => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // E.g. out of file handles: back off a little instead of spinning.
                    tracing::warn!("collector: accept failed: {e}");
                    drop(permit);
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let conn = http.serve_connection(TokioIo::new(stream), service.clone());
        let conn = graceful.watch(conn);
        conns.spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("collector connection: {e}");
            }
            drop(permit);
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(cfg.shutdown_grace) => {
            tracing::warn!(
                "collector: {} connection(s) still open after {:?}; closing them",
                conns.len(),
                cfg.shutdown_grace
            );
        }
    }
    conns.abort_all();
    while conns.join_next().await.is_some() {}
    Ok(())
}
