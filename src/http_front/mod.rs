//! The one HTTP front of toolgate's servers (`toolgate collect`, `toolgate console`,
//! `toolgate mcp-proxy --listen`): each serves its [`axum::Router`] through [`serve`], which
//! owns what a hostile peer tries on any server:
//!
//! - a **per-address connection cap** ([`FrontConfig::per_address`], default 64) and a
//!   **global cap** ([`FrontConfig::max_connections`], lowered to keep
//!   [`FrontConfig::fd_headroom`] file descriptors free under the process's `RLIMIT_NOFILE`),
//!   both counted at accept, before the first byte. At a cap, the oldest connection that has
//!   sent nothing yet (of that address, or of any) is closed to make room; when every one is
//!   busy, the new connection is closed at once (never left in the listen queue, never a
//!   `Too many open files` loop);
//! - a **header-read timeout** ([`FrontConfig::header_timeout`], ≤ 10 s by default): a
//!   connection that sends nothing, or not all of its headers, or stays idle between
//!   keep-alive requests longer, is closed;
//! - a **body timeout** ([`FrontConfig::body_timeout`], 30 s): a request body not received
//!   whole by then fails to read ([`is_body_timeout`]), the server answers 408;
//! - a **Host check** against DNS rebinding: bound to a loopback address (or given
//!   [`FrontConfig::allowed_hosts`]), a request whose `Host` is neither a loopback name nor one
//!   of the allowed hosts gets 403;
//! - a **bounded graceful shutdown**: once `shutdown` completes, no new connection is accepted,
//!   requests in flight get [`FrontConfig::shutdown_grace`], then every connection is closed.

mod conns;
mod guard;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::task::JoinSet;

pub use guard::is_body_timeout;

/// The default per-address connection cap.
pub const DEFAULT_PER_ADDRESS: usize = 64;

/// The default global connection cap (lowered to keep file descriptors free).
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// The default header-read timeout.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The default body timeout.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// How a server is fronted.
#[derive(Debug, Clone)]
pub struct FrontConfig {
    /// Time a connection has to send a request's headers (and most it may stay idle between
    /// requests).
    pub header_timeout: Duration,
    /// Time a request has to send its whole body.
    pub body_timeout: Duration,
    /// Most connections one client address may hold open.
    pub per_address: usize,
    /// Most connections open at once (lowered to keep `fd_headroom` descriptors free).
    pub max_connections: usize,
    /// File descriptors kept free, under the process's limit, for everything but connections
    /// (files, the store, upstream processes).
    pub fd_headroom: usize,
    /// After the shutdown signal: how long requests in flight may still take.
    pub shutdown_grace: Duration,
    /// Hosts (`name` or `name:port`) accepted in a `Host` header besides loopback names.
    pub allowed_hosts: Vec<String>,
    /// Who is named in log lines (`collect`, `console`, `mcp-proxy`).
    pub name: &'static str,
}

impl Default for FrontConfig {
    fn default() -> Self {
        FrontConfig {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            per_address: DEFAULT_PER_ADDRESS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            fd_headroom: 128,
            shutdown_grace: Duration::from_secs(10),
            allowed_hosts: Vec::new(),
            name: "toolgate",
        }
    }
}

/// The global cap `config` gives under the process's file-descriptor limit: its
/// `max_connections`, lowered so that `fd_headroom` descriptors (and those already open) stay
/// free.
pub fn effective_max_connections(config: &FrontConfig) -> usize {
    let wanted = config.max_connections.max(1);
    match fd_limit() {
        Some(limit) => {
            let used = open_fds().unwrap_or(0);
            let room = limit.saturating_sub(used + config.fd_headroom);
            wanted.min(room.max(1))
        }
        None => wanted,
    }
}

#[cfg(unix)]
fn fd_limit() -> Option<usize> {
    let l = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    l.current.map(|n| usize::try_from(n).unwrap_or(usize::MAX))
}

#[cfg(not(unix))]
fn fd_limit() -> Option<usize> {
    None
}

fn open_fds() -> Option<usize> {
    std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count())
}

/// Serves `app` on `listener` through the front until `shutdown` completes; then stops
/// accepting, gives requests in flight `config.shutdown_grace` and closes what is left.
pub async fn serve(
    app: axum::Router,
    listener: tokio::net::TcpListener,
    config: FrontConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let local = listener.local_addr()?;
    let app = guard::wrap(app, &config, local);
    let service = TowerToHyperService::new(app);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        .keep_alive(true);
    let global = effective_max_connections(&config);
    if global < config.max_connections {
        tracing::warn!(
            "{}: at most {global} connections (of --max-connections {}): the file-descriptor \
             limit leaves no room for more",
            config.name,
            config.max_connections
        );
    }
    let book = conns::Book::new(config.per_address, global);
    let graceful = GracefulShutdown::new();
    let mut tasks = JoinSet::new();
    let mut last_accept_warning: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    // E.g. out of file handles: say so once a second, and back off.
                    if last_accept_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                        tracing::warn!("{}: accept failed: {e}", config.name);
                        last_accept_warning = Some(Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
        };
        let Some((slot, evicted)) = book.admit(peer.ip()) else {
            drop(stream);
            continue;
        };
        let header_timeout = config.header_timeout;
        let http = http.clone();
        let service = service.clone();
        let watcher = graceful.watcher();
        let counters = book.counters.clone();
        tasks.spawn(async move {
            // Until its first byte the connection may be evicted to make room.
            let mut byte = [0u8; 1];
            let first = tokio::select! {
                r = tokio::time::timeout(header_timeout, stream.peek(&mut byte)) => match r {
                    Ok(Ok(n)) => n > 0,
                    Ok(Err(_)) => false,
                    Err(_) => {
                        counters.header_timeouts.fetch_add(1, Ordering::Relaxed);
                        false
                    }
                },
                _ = evicted => false,
            };
            if !first {
                return;
            }
            slot.busy();
            // The peer's address, as axum's `ConnectInfo` (the console throttles logins per
            // address with it).
            let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
                req.extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                hyper::service::Service::call(&service, req)
            });
            let conn = http.serve_connection(TokioIo::new(stream), service);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!("connection from {peer}: {e}");
            }
            drop(slot);
        });
    }
    drop(listener);
    let c = &book.counters;
    tracing::info!(
        "{}: stopping; connections refused (per address / global): {} / {}, idle evicted: {}, \
         header timeouts: {}",
        config.name,
        c.refused_per_address.load(Ordering::Relaxed),
        c.refused_global.load(Ordering::Relaxed),
        c.evicted_idle.load(Ordering::Relaxed),
        c.header_timeouts.load(Ordering::Relaxed),
    );
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(config.shutdown_grace) => {
            tracing::warn!(
                "{}: {} connection(s) still open after {:?}; closing them",
                config.name,
                book.open(),
                config.shutdown_grace
            );
        }
    }
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// Whether `addr` is a loopback address (the front then checks `Host`).
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}
