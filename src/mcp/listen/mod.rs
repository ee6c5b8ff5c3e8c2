//! `toolgate mcp-proxy --listen ADDR`: MCP's streamable HTTP transport downstream, one endpoint
//! (`/mcp`) for any number of clients at once, in front of one upstream shared through the
//! [`Hub`]. Every request needs a bearer token of the token file (the caller's identity comes
//! from it); an `Origin` must be allowed; bodies are limited. 2025-11-25 clients get a session
//! (`MCP-Session-Id`) per `initialize`; 2026-07-28 clients are stateless, their run named by
//! `_meta["dev.toolgate/runId"]` or one per token, ended when idle.

mod checks;
mod headers;
mod modern;
mod outq;
mod runs;
mod session;
mod stream;
mod upstreams;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use serde_json::Value;

use super::frame::Frame;
use super::hub::{Hub, MODERN};
use super::jsonrpc::{self, Kind};
use super::tokens::{Identity, TokenFile};
use super::{ProxyConfig, ProxyError, ProxyExit, Upstream};
use session::Session;
use stream::{answer, sse};
pub use upstreams::UpstreamPer;
use upstreams::Upstreams;

/// The default largest request body (`--listen`): 4 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 << 20;

/// The default of `--max-sessions-per-token`.
pub const DEFAULT_MAX_SESSIONS_PER_TOKEN: usize = 64;

/// The default of `--run-idle-secs`.
pub const DEFAULT_RUN_IDLE: Duration = Duration::from_secs(1800);

/// The JSON-RPC error of a header that does not match the body (2026-07-28 `HeaderMismatch`).
pub const HEADER_MISMATCH: i64 = -32020;

const SESSION_HEADER: &str = "mcp-session-id";
const RUN_META: &str = "dev.toolgate/runId";

/// How the gateway listens.
#[derive(Debug, Clone)]
pub struct ListenConfig {
    /// The address to listen on (port 0: any free port, printed at start).
    pub addr: SocketAddr,
    /// Who may call.
    pub tokens: TokenFile,
    /// Origins allowed (a request with another `Origin` gets 403).
    pub allow_origins: Vec<String>,
    /// A 2026-07-28 run (and a 2025-11-25 session) without requests for this long ends.
    pub run_idle: Duration,
    /// The largest request body (larger: 413).
    pub max_body_bytes: usize,
    /// Hosts accepted in `Host` besides loopback names (DNS rebinding; see
    /// [`crate::http_front`]).
    pub allowed_hosts: Vec<String>,
    /// Most connections one client address may hold open.
    pub per_address: usize,
    /// Most connections open at once.
    pub max_connections: usize,
    /// Most 2025-11-25 sessions (and, apart, 2026-07-28 named runs) one token may hold open.
    pub max_sessions_per_token: usize,
    /// Whether clients share the upstream, or each token (or session) has its own.
    pub upstream_per: UpstreamPer,
}

impl ListenConfig {
    /// Defaults on `addr` for the callers of `tokens`.
    pub fn new(addr: SocketAddr, tokens: TokenFile) -> ListenConfig {
        ListenConfig {
            addr,
            tokens,
            allow_origins: Vec::new(),
            run_idle: DEFAULT_RUN_IDLE,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            allowed_hosts: Vec::new(),
            per_address: crate::http_front::DEFAULT_PER_ADDRESS,
            max_connections: crate::http_front::DEFAULT_MAX_CONNECTIONS,
            max_sessions_per_token: DEFAULT_MAX_SESSIONS_PER_TOKEN,
            upstream_per: UpstreamPer::Shared,
        }
    }
}

/// How long requests in flight (and open streams) may take once the gateway is stopping.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

struct Server {
    base: ProxyConfig,
    listen: ListenConfig,
    ups: Upstreams,
    /// 2025-11-25 sessions by `MCP-Session-Id`.
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// 2026-07-28 runs by (token, run id; "" for the token's own run).
    runs: Mutex<HashMap<(usize, String), Arc<Session>>>,
    /// The tokens' current runs (shared with the other replicas on a shared state store).
    book: runs::RunBook,
}

/// Serves MCP over streamable HTTP until a signal (or the upstream going away); ends every
/// session's run and flushes the audit trail before returning. Prints
/// `toolgate mcp-proxy: listening on http://ADDR/mcp` on stderr once it listens.
pub async fn serve(
    config: ProxyConfig,
    upstream: Upstream,
    listen: ListenConfig,
) -> Result<ProxyExit, ProxyError> {
    let mut link = super::connect_upstream(&upstream, config.max_message_bytes).await?;
    let (hub, gone) = Hub::start(&mut link);
    if let Err(message) = hub.initialize().await {
        return Err(ProxyError::Spawn {
            program: upstream_name(&upstream),
            message,
        });
    }
    let listener = tokio::net::TcpListener::bind(listen.addr)
        .await
        .map_err(|e| ProxyError::Spawn {
            program: format!("--listen {}", listen.addr),
            message: e.to_string(),
        })?;
    let local = listener.local_addr().map_err(|e| ProxyError::Spawn {
        program: format!("--listen {}", listen.addr),
        message: e.to_string(),
    })?;
    // One write of the whole line: the upstream child shares this stderr, and `eprintln!`
    // writes a line in pieces, between which the child's output could land (a test once read
    // `…:Allowed directories: [ '…` as the port).
    {
        use std::io::Write as _;
        let line = format!("toolgate mcp-proxy: listening on http://{local}/mcp\n");
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
    let engine = config.engine.clone();
    let idle = listen.run_idle;
    let upstream_per = listen.upstream_per;
    let max_message_bytes = config.max_message_bytes;
    let front = crate::http_front::FrontConfig {
        per_address: listen.per_address,
        max_connections: listen.max_connections,
        allowed_hosts: listen.allowed_hosts.clone(),
        shutdown_grace: SHUTDOWN_GRACE,
        name: "toolgate mcp-proxy",
        ..Default::default()
    };
    let server = Arc::new(Server {
        base: config,
        listen,
        ups: Upstreams::new(hub, upstream_per, upstream.clone(), max_message_bytes),
        sessions: Mutex::new(HashMap::new()),
        runs: Mutex::new(HashMap::new()),
        book: match engine.shared_store() {
            Some(store) => runs::RunBook::Shared(store),
            None => runs::RunBook::Memory(Default::default()),
        },
    });
    let app = Router::new()
        .route("/mcp", axum::routing::post(post).get(get).delete(delete))
        .with_state(server.clone());
    let reaper = tokio::spawn(reap(server.clone(), idle));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<ProxyExit>();
    let stop = async move {
        let exit = tokio::select! {
            _ = gone => ProxyExit::UpstreamExited,
            n = super::signal() => ProxyExit::Signal(n),
        };
        let _ = stop_tx.send(exit);
    };
    // Open streams (GET, subscriptions) would hold a graceful shutdown: the front bounds it.
    let result = crate::http_front::serve(app, listener, front, stop).await;
    let exit = match stop_rx.await {
        Ok(e) => e,
        Err(_) => ProxyExit::ClientClosed,
    };
    if let Err(e) = result {
        tracing::error!("--listen: {e}");
    }
    reaper.abort();
    let status = match exit {
        ProxyExit::UpstreamExited => "upstream_exited",
        ProxyExit::Signal(_) => "interrupted",
        ProxyExit::ClientClosed => "success",
    };
    let all: Vec<Arc<Session>> = {
        let mut v: Vec<Arc<Session>> = server.sessions.lock().drain().map(|(_, s)| s).collect();
        v.extend(server.runs.lock().drain().map(|(_, s)| s));
        v
    };
    let shared = server.book.shared();
    let upstream_gone = exit == ProxyExit::UpstreamExited;
    // All at once: a session gives its calls still being decided up to DECIDING_GRACE to
    // record how they ended; one after another, a stop with N such sessions took N times that.
    futures::future::join_all(all.iter().map(|s| async move {
        if upstream_gone {
            s.gw.upstream_gone().await;
        }
        // A run shared with the other replicas goes on without this one: left, not ended.
        let leave = shared && s.current.is_some();
        s.close_as((!leave).then_some(status)).await;
    }))
    .await;
    server.ups.stop_all().await;
    drop(link.tx);
    if let Some(mut child) = link.child.take()
        && tokio::time::timeout(super::CHILD_GRACE, child.wait())
            .await
            .is_err()
    {
        let _ = child.kill().await;
    }
    if let Err(e) = engine.shutdown().await {
        tracing::warn!("audit trail: {e}");
    }
    // A server stopped by SIGINT/SIGTERM stopped as asked: exit 0.
    Ok(match exit {
        ProxyExit::Signal(_) => ProxyExit::ClientClosed,
        e => e,
    })
}

fn upstream_name(u: &Upstream) -> String {
    match u {
        Upstream::Command { program, .. } => program.clone(),
        Upstream::Http { url } => url.clone(),
    }
}

/// Ends sessions and runs idle for `idle`.
async fn reap(server: Arc<Server>, idle: Duration) {
    let every = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let stale = |s: &Arc<Session>| s.idle_for().is_some_and(|d| d >= idle);
        let mut ended: Vec<Arc<Session>> = Vec::new();
        server.sessions.lock().retain(|_, s| {
            let keep = !stale(s);
            if !keep {
                ended.push(s.clone());
            }
            keep
        });
        server.runs.lock().retain(|_, s| {
            // A run with a record (shared, or a token's own): see `reap_recorded_runs`.
            let keep = s.current.is_some() || !stale(s);
            if !keep {
                ended.push(s.clone());
            }
            keep
        });
        for s in ended {
            s.close("idle").await;
        }
        server.reap_recorded_runs().await;
        server.ups.reap().await;
    }
}

/// A request refused before it reaches a session.
type Refusal = Box<Response>;

/// 502: the client's own upstream (`--upstream-per`) could not be started.
fn upstream_failed(e: String) -> Refusal {
    tracing::error!("--upstream-per: cannot start an upstream: {e}");
    Box::new(rpc_error(
        StatusCode::BAD_GATEWAY,
        "null",
        jsonrpc::INTERNAL_ERROR,
        "the upstream server could not be started",
    ))
}

/// A JSON-RPC error as an HTTP response.
fn rpc_error(status: StatusCode, id: &str, code: i64, message: &str) -> Response {
    json_response(status, jsonrpc::error_to(id, code, message))
}

fn json_response(status: StatusCode, f: Frame) -> Response {
    let mut r = Response::new(Body::from(f.to_bytes()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn plain(status: StatusCode, text: &'static str) -> Response {
    (status, text).into_response()
}

impl Server {
    /// 403 unless the `Origin` (when present) is allowed.
    fn origin(&self, h: &HeaderMap) -> Result<(), Refusal> {
        match h.get(header::ORIGIN) {
            None => Ok(()),
            Some(o)
                if self
                    .listen
                    .allow_origins
                    .iter()
                    .any(|a| a.as_bytes() == o.as_bytes()) =>
            {
                Ok(())
            }
            Some(_) => Err(Box::new(rpc_error(
                StatusCode::FORBIDDEN,
                "null",
                jsonrpc::INVALID_REQUEST,
                "Origin not allowed (see --allow-origin)",
            ))),
        }
    }

    /// The caller: 401 without a token of the token file.
    fn caller(&self, h: &HeaderMap) -> Result<(usize, &Identity), Refusal> {
        let token = h
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, rest) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
            });
        match token.and_then(|t| self.listen.tokens.identify(t)) {
            Some(found) => Ok(found),
            None => {
                let mut r = rpc_error(
                    StatusCode::UNAUTHORIZED,
                    "null",
                    jsonrpc::INVALID_REQUEST,
                    "a valid bearer token is required",
                );
                r.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                Err(Box::new(r))
            }
        }
    }

    /// The gateway configuration of a session of `who`.
    fn config(&self, who: &Identity, run_id: Option<String>) -> ProxyConfig {
        let mut c = self.base.clone();
        c.agent_id = Some(who.agent_id.clone());
        c.enduser = who.enduser.clone();
        c.agent_tags = who.agent_tags.clone();
        c.run_id = run_id;
        c
    }

    fn legacy_session(&self, h: &HeaderMap, token: usize) -> Result<Arc<Session>, Refusal> {
        let Some(id) = h.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
            return Err(Box::new(rpc_error(
                StatusCode::BAD_REQUEST,
                "null",
                jsonrpc::INVALID_REQUEST,
                "Bad Request: no MCP-Session-Id (initialize first)",
            )));
        };
        match self.sessions.lock().get(id) {
            Some(s) if s.token == token && !s.is_closed() => {
                s.touch();
                Ok(s.clone())
            }
            _ => Err(Box::new(rpc_error(
                StatusCode::NOT_FOUND,
                "null",
                jsonrpc::INVALID_REQUEST,
                "Session not found",
            ))),
        }
    }
}

async fn post(State(srv): State<Arc<Server>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let h = &parts.headers;
    if let Err(r) = srv.origin(h) {
        return *r;
    }
    let (token, who) = match srv.caller(h) {
        Ok((t, w)) => (t, w.clone()),
        Err(r) => return *r,
    };
    if let Err(r) = checks::json_content_type(h) {
        return *r;
    }
    let body = match axum::body::to_bytes(body, srv.listen.max_body_bytes).await {
        Ok(b) => b,
        Err(e) if crate::http_front::is_body_timeout(&e) => {
            return rpc_error(
                StatusCode::REQUEST_TIMEOUT,
                "null",
                jsonrpc::INTERNAL_ERROR,
                "the request body was not received in time",
            );
        }
        Err(_) => {
            return rpc_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "null",
                jsonrpc::INTERNAL_ERROR,
                &format!(
                    "the request body exceeds the gateway's limit of {} bytes",
                    srv.listen.max_body_bytes
                ),
            );
        }
    };
    let msg = match std::str::from_utf8(&body)
        .ok()
        .and_then(|t| Frame::parse(t).ok())
    {
        Some(m) => m,
        None => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                "null",
                jsonrpc::PARSE_ERROR,
                "Parse error",
            );
        }
    };
    if !msg.is_object() || msg.dup_keys() {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            "null",
            jsonrpc::INVALID_REQUEST,
            "not one JSON-RPC message (batches are not supported; no member may be named twice)",
        );
    }
    if let Err(r) = checks::valid_id(&msg) {
        return *r;
    }
    let meta_version = msg
        .pointer("/params/_meta")
        .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .and_then(Value::as_str);
    let modern = meta_version == Some(MODERN)
        || (h.get(SESSION_HEADER).is_none()
            && h.get("mcp-protocol-version").is_some_and(|v| v == MODERN)
            && !matches!(jsonrpc::kind(&msg), Kind::Request("initialize")));
    if modern {
        if let Err(why) = headers::check(h, &msg) {
            let id = msg
                .id_text()
                .map(|t| t.into_owned())
                .unwrap_or("null".into());
            return rpc_error(StatusCode::BAD_REQUEST, &id, HEADER_MISMATCH, &why);
        }
        return modern::post(&srv, msg, token, &who).await;
    }
    let kind = jsonrpc::kind(&msg);
    if let Kind::Request("initialize") = kind {
        if h.get(SESSION_HEADER).is_some() {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                "null",
                jsonrpc::INVALID_REQUEST,
                "initialize opens a session: send it without MCP-Session-Id",
            );
        }
        let id = format!("{:032x}", rand::random::<u128>());
        let cap = srv.listen.max_sessions_per_token;
        let held = |sessions: &HashMap<String, Arc<Session>>| {
            sessions
                .values()
                .filter(|s| s.token == token && !s.is_closed())
                .count()
        };
        // Checked before an upstream of its own (`--upstream-per session`) is started.
        if held(&srv.sessions.lock()) >= cap {
            return *checks::too_many_sessions(cap);
        }
        let hub = match srv.ups.for_session(token, &id).await {
            Ok(h) => h,
            Err(e) => return *upstream_failed(e),
        };
        let s = {
            let mut sessions = srv.sessions.lock();
            if held(&sessions) >= cap {
                return *checks::too_many_sessions(cap);
            }
            let s = Session::open(srv.config(&who, None), &hub, token, None, false);
            sessions.insert(id.clone(), s.clone());
            s
        };
        let mut r = answer(s.request(msg, false, true).await).await;
        if let Ok(v) = HeaderValue::from_str(&id) {
            r.headers_mut().insert(SESSION_HEADER, v);
        }
        return r;
    }
    let s = match srv.legacy_session(h, token) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    match kind {
        Kind::Request(_) => answer(s.request(msg, false, true).await).await,
        Kind::Notification(_) | Kind::Response => {
            s.message(msg).await;
            StatusCode::ACCEPTED.into_response()
        }
        Kind::Other => rpc_error(
            StatusCode::BAD_REQUEST,
            "null",
            jsonrpc::INVALID_REQUEST,
            "not a JSON-RPC request",
        ),
    }
}

async fn get(State(srv): State<Arc<Server>>, h: HeaderMap) -> Response {
    if let Err(r) = srv.origin(&h) {
        return *r;
    }
    let token = match srv.caller(&h) {
        Ok((t, _)) => t,
        Err(r) => return *r,
    };
    if h.get(SESSION_HEADER).is_none() {
        return plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "GET needs an MCP-Session-Id (2025-11-25); 2026-07-28 uses subscriptions/listen",
        );
    }
    match srv.legacy_session(&h, token) {
        Ok(s) => {
            let rx = s.get_stream();
            sse(rx, Some(s))
        }
        Err(r) => *r,
    }
}

async fn delete(State(srv): State<Arc<Server>>, h: HeaderMap) -> Response {
    if let Err(r) = srv.origin(&h) {
        return *r;
    }
    let token = match srv.caller(&h) {
        Ok((t, _)) => t,
        Err(r) => return *r,
    };
    let s = match srv.legacy_session(&h, token) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    if let Some(id) = h.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) {
        srv.sessions.lock().remove(id);
    }
    s.close("success").await;
    // Its own upstream (`--upstream-per session`) stops now, not at the reaper's next round.
    let srv2 = srv.clone();
    tokio::spawn(async move { srv2.ups.reap().await });
    StatusCode::OK.into_response()
}
