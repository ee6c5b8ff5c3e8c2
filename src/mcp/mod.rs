//! The MCP gateway (`toolgate mcp-proxy`): one process between an MCP client and one MCP
//! server that governs the client's `tools/call` requests with the engine.
//!
//! It is a message *relay*, not a typed server: frames are raw JSON-RPC messages, one per line,
//! each keeping the exact text it came in, so every method, field and `_meta` toolgate does not
//! intercept reaches the other side byte for byte (request ids are the gateway's own: see
//! `gateway.rs`). It intercepts
//! `initialize` (the client's elicitation capability, the server's name), `tools/list` (hidden
//! tools, tags, pins), `tools/call` (the decision) and `notifications/cancelled`. See
//! `docs/mcp-gateway.md`.

mod approval;
mod calls;
mod frame;
mod gateway;
#[cfg(feature = "http")]
mod http;
#[cfg(feature = "http")]
mod hub;
mod jsonrpc;
#[cfg(feature = "http")]
mod listen;
mod mrtr;
mod pins;
mod relay;
mod seal;
mod tokens;
mod tools;
mod transport;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

pub use jsonrpc::{INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, blocked_result};
#[cfg(feature = "http")]
pub use listen::{
    DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_SESSIONS_PER_TOKEN, DEFAULT_RUN_IDLE, HEADER_MISMATCH,
    ListenConfig, UpstreamPer, serve,
};
pub use pins::{Pin, PinCheck, PinError, PinFile, definition_hash};
pub use seal::SealKey;
pub use tokens::{Identity, TokenFile, TokenFileError, token_sha256};
pub use tools::{ToolsFile, ToolsFileError};

use crate::engine::{Enduser, GovernanceEngine};

/// The code of a call blocked because its tool's definition changed since it was pinned.
pub const TOOL_CHANGED: &str = "BLOCKED_TOOL_CHANGED";

/// The default of `--max-message-bytes`: the largest message either side may send.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 << 20;

/// The default of `--approval-timeout`: how long an approval question waits for an answer.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(600);

/// How long the upstream child may take to exit once its stdin is closed, before it is killed.
pub(crate) const CHILD_GRACE: Duration = Duration::from_secs(3);

/// Where the upstream server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// A child process speaking MCP over its stdin/stdout.
    Command {
        /// The program.
        program: String,
        /// Its arguments.
        args: Vec<String>,
    },
    /// A server at a streamable HTTP endpoint, e.g. `http://127.0.0.1:3001/mcp`.
    #[cfg(feature = "http")]
    Http {
        /// The endpoint.
        url: String,
    },
}

/// The gateway's configuration.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The engine deciding the calls (with its review store and audit trail).
    pub engine: GovernanceEngine,
    /// The agent id; default `mcp:<server name from initialize>`.
    pub agent_id: Option<String>,
    /// The end user, if any.
    pub enduser: Option<Enduser>,
    /// Tags and hidden tools.
    pub tools: ToolsFile,
    /// The pin file, if tool definitions are pinned.
    pub pins: Option<PinFile>,
    /// The review file, named in the approval command shown to the client.
    pub reviews_file: Option<PathBuf>,
    /// The `--state` URL (password redacted) when reviews live on Redis, named in the approval
    /// command shown to the client.
    pub state_url: Option<String>,
    /// The largest message accepted from either side (a larger one is answered with −32603
    /// naming the limit).
    pub max_message_bytes: usize,
    /// How long an approval question (`elicitation/create`) waits before the call is denied;
    /// also how long a sealed `requestState` (2026-07-28) stays valid.
    pub approval_timeout: Duration,
    /// The agent's tags.
    pub agent_tags: Vec<String>,
    /// The run id (default: a fresh UUID v7 per session).
    pub run_id: Option<String>,
    /// The key sealing `requestState` of `input_required` results (2026-07-28 clients).
    pub request_state_key: SealKey,
}

/// How a gateway session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyExit {
    /// The client closed its input (exit code 0).
    ClientClosed,
    /// The upstream server exited or closed its output (exit code 1).
    UpstreamExited,
    /// SIGINT or SIGTERM ended the session (exit code 128 + the signal's number).
    Signal(i32),
}

impl ProxyExit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            ProxyExit::ClientClosed => 0,
            ProxyExit::UpstreamExited => 1,
            ProxyExit::Signal(n) => u8::try_from(128 + n).unwrap_or(1),
        }
    }
}

/// Errors of starting the gateway.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The upstream server could not be started (or its URL is malformed).
    #[error("cannot start the upstream server `{program}`: {message}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        message: String,
    },
    /// The upstream server at a streamable HTTP endpoint does not answer.
    #[error("{message}")]
    Unreachable {
        /// The endpoint.
        url: String,
        /// Why (names the endpoint).
        message: String,
    },
}

impl ProxyError {
    /// The process exit code: 1 for an upstream that does not answer (as for one that exits
    /// during the session), 2 for a gateway that could not start.
    pub fn code(&self) -> u8 {
        match self {
            ProxyError::Spawn { .. } => 2,
            ProxyError::Unreachable { .. } => 1,
        }
    }
}

/// Runs one gateway session between the client on `client_in`/`client_out` and `upstream`,
/// until either side goes away. Ends the run and flushes the audit trail before returning.
pub async fn run_proxy<R, W>(
    config: ProxyConfig,
    upstream: Upstream,
    client_in: R,
    client_out: W,
) -> Result<ProxyExit, ProxyError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let max = config.max_message_bytes;
    let mut link = connect_upstream(&upstream, max).await?;
    let engine = config.engine.clone();
    let (client_tx, client_out_rx) = transport::queue();
    let client_writer = transport::spawn_writer(client_out, client_out_rx, "client");
    let (client_in_tx, mut client_rx) = transport::queue();
    let client_reader = transport::spawn_reader(client_in, client_in_tx, max, "client");
    let gw = Arc::new(gateway::Gateway::new(config, client_tx, link.tx.clone()));
    drop(link.tx);

    // One loop per direction, so a side that does not read (backpressure) never stops the
    // other direction.
    let from_client = async {
        while let Some(m) = client_rx.recv().await {
            gw.on_client(m.value).await;
        }
    };
    let from_upstream = async {
        while let Some(m) = link.rx.recv().await {
            gw.on_upstream(m.value).await;
        }
    };
    tokio::pin!(from_client, from_upstream);
    let exit = tokio::select! {
        _ = &mut from_client => ProxyExit::ClientClosed,
        _ = &mut from_upstream => ProxyExit::UpstreamExited,
        n = signal() => ProxyExit::Signal(n),
    };
    client_reader.abort();
    // While the calls in flight are wound up, the upstream's answers are still read (a call
    // being decided may wait on the tool list), unless the upstream is what ended.
    let upstream_open = !matches!(exit, ProxyExit::UpstreamExited);
    let wind_up = async {
        match exit {
            ProxyExit::UpstreamExited => {
                tracing::error!("the upstream server exited");
                gw.upstream_gone().await;
                gw.end_run("upstream_exited").await;
            }
            ProxyExit::ClientClosed => {
                let status = if gw.client_gone().await {
                    tracing::warn!("the client left with requests in flight");
                    "incomplete"
                } else {
                    "success"
                };
                gw.end_run(status).await;
            }
            ProxyExit::Signal(n) => {
                tracing::warn!("signal {n}: ending the session");
                gw.client_gone().await;
                gw.end_run("interrupted").await;
            }
        }
    };
    tokio::pin!(wind_up);
    if upstream_open {
        tokio::select! {
            _ = &mut wind_up => {}
            _ = &mut from_upstream => wind_up.await,
        }
    } else {
        wind_up.await;
    }
    // Close the upstream's input and let the child exit on its own for a moment before
    // killing it.
    gw.close();
    if let Some(w) = link.writer.take() {
        let _ = tokio::time::timeout(CHILD_GRACE, w).await;
    }
    if let Some(mut child) = link.child.take()
        && tokio::time::timeout(CHILD_GRACE, child.wait())
            .await
            .is_err()
    {
        let _ = child.kill().await;
    }
    if let Err(e) = engine.shutdown().await {
        tracing::warn!("audit trail: {e}");
    }
    let _ = tokio::time::timeout(CHILD_GRACE, client_writer).await;
    Ok(exit)
}

/// Starts (stdio) or connects to (HTTP) the upstream server.
pub(crate) async fn connect_upstream(
    upstream: &Upstream,
    max: usize,
) -> Result<transport::Link, ProxyError> {
    Ok(match upstream {
        Upstream::Command { program, args } => {
            transport::spawn_child(program, args, max).map_err(|e| ProxyError::Spawn {
                program: program.clone(),
                message: e.to_string(),
            })?
        }
        #[cfg(feature = "http")]
        Upstream::Http { url } => http::connect(url.clone(), max).await?,
    })
}

/// The first SIGINT or SIGTERM (its number); never on other platforms, or when the handlers
/// cannot be installed.
pub(crate) async fn signal() -> i32 {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            return tokio::select! {
                _ = int.recv() => 2,
                _ = term.recv() => 15,
            };
        }
    }
    std::future::pending().await
}
