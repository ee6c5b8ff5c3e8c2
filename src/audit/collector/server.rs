//! The collector's accept loop: caps on open and served connections, idle connections that
//! hold no serving slot (and are evicted per address), a header read timeout, and a bounded
//! graceful shutdown.

use std::future::Future;
use std::sync::Arc;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use parking_lot::Mutex;
use tokio::sync::{Semaphore, oneshot};
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
    serve_router(collector.router(), &cfg, listener, shutdown).await
}

/// Serves a collector's router (possibly wrapped in extra layers, e.g. OpenTelemetry export)
/// with `config`'s connection cap, header timeout and bounded graceful shutdown.
pub async fn serve_router(
    router: axum::Router,
    config: &CollectorConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AuditError> {
    let cfg = config.clone();
    let service = TowerToHyperService::new(router);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(cfg.header_timeout)
        .keep_alive(true);
    let max = cfg.max_connections.max(1);
    // Open connections (file handles): bounded; over it, clients wait in the listen queue.
    let open = Arc::new(Semaphore::new(max.saturating_mul(4)));
    // Connections being served: only those that have sent something take a slot, so idle
    // connections cannot keep a real client waiting.
    let serving = Arc::new(Semaphore::new(max));
    let idle = Arc::new(Mutex::new(IdleSet::new(max.saturating_mul(2))));
    let graceful = GracefulShutdown::new();
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = open.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = &mut shutdown => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
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
        // Until it sends its first bytes the connection is idle: it holds no serving slot,
        // waits at most the header timeout, and is evicted (oldest first) when its address has
        // too many idle connections or all idle ones are too many.
        let (id, evicted) = idle.lock().insert(peer.ip());
        let idle = idle.clone();
        let serving = serving.clone();
        let header_timeout = cfg.header_timeout;
        let http = http.clone();
        let service = service.clone();
        let watcher = graceful.watcher();
        conns.spawn(async move {
            let mut byte = [0u8; 1];
            let first = tokio::select! {
                r = tokio::time::timeout(header_timeout, stream.peek(&mut byte)) => {
                    matches!(r, Ok(Ok(n)) if n > 0)
                }
                _ = evicted => false,
            };
            idle.lock().remove(id, peer.ip());
            if !first {
                drop(permit);
                return;
            }
            let slot = match tokio::time::timeout(header_timeout, serving.acquire_owned()).await {
                Ok(Ok(slot)) => slot,
                _ => return,
            };
            let conn = http.serve_connection(TokioIo::new(stream), service);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!("collector connection: {e}");
            }
            drop(slot);
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

/// Most connections one address may hold open without having sent anything; a further one
/// evicts that address's oldest idle connection.
pub const IDLE_PER_ADDRESS: usize = 64;

/// The connections that have sent nothing yet, oldest first, and how to close each.
struct IdleSet {
    next: u64,
    order: VecDeque<(u64, IpAddr)>,
    live: HashMap<u64, oneshot::Sender<()>>,
    per_addr: HashMap<IpAddr, usize>,
    max_total: usize,
}

impl IdleSet {
    fn new(max_total: usize) -> IdleSet {
        IdleSet {
            next: 0,
            order: VecDeque::new(),
            live: HashMap::new(),
            per_addr: HashMap::new(),
            max_total: max_total.max(1),
        }
    }

    /// Registers a new idle connection from `addr`, evicting others over the caps; returns
    /// its id and what tells it it was evicted.
    fn insert(&mut self, addr: IpAddr) -> (u64, oneshot::Receiver<()>) {
        while self.per_addr.get(&addr).copied().unwrap_or(0) >= IDLE_PER_ADDRESS {
            if !self.evict_oldest(Some(addr)) {
                break;
            }
        }
        while self.live.len() >= self.max_total {
            if !self.evict_oldest(None) {
                break;
            }
        }
        let id = self.next;
        self.next += 1;
        let (tx, rx) = oneshot::channel();
        self.live.insert(id, tx);
        self.order.push_back((id, addr));
        *self.per_addr.entry(addr).or_default() += 1;
        (id, rx)
    }

    /// Closes the oldest live idle connection (of `addr`, if given).
    fn evict_oldest(&mut self, addr: Option<IpAddr>) -> bool {
        let pos = self
            .order
            .iter()
            .position(|(id, a)| self.live.contains_key(id) && addr.is_none_or(|want| want == *a));
        let Some(pos) = pos else {
            return false;
        };
        let Some((id, a)) = self.order.remove(pos) else {
            return false;
        };
        if let Some(tx) = self.live.remove(&id) {
            let _ = tx.send(());
        }
        self.dec(a);
        true
    }

    /// The connection sent something, timed out or was evicted.
    fn remove(&mut self, id: u64, addr: IpAddr) {
        if self.live.remove(&id).is_some() {
            self.dec(addr);
        }
        // Forget ids no longer live at the front.
        while self
            .order
            .front()
            .is_some_and(|(id, _)| !self.live.contains_key(id))
        {
            self.order.pop_front();
        }
    }

    fn dec(&mut self, addr: IpAddr) {
        if let Some(n) = self.per_addr.get_mut(&addr) {
            *n -= 1;
            if *n == 0 {
                self.per_addr.remove(&addr);
            }
        }
    }
}
