//! The MCP gateway (`toolgate mcp-proxy`): one process between an MCP client and one MCP
//! server that governs the client's `tools/call` requests with the engine.
//!
//! It is a message *relay*, not a typed server: frames are raw JSON-RPC messages framed by
//! rmcp's stdio codec, each keeping the exact text it came in, so every method, field and
//! `_meta` toolgate does not intercept reaches the other side byte for byte. It intercepts
//! `initialize` (the client's elicitation capability, the server's name), `tools/list` (hidden
//! tools, tags, pins), `tools/call` (the decision) and `notifications/cancelled`. See
//! `docs/mcp-gateway.md`.

mod calls;
mod frame;
mod gateway;
#[cfg(feature = "http")]
mod http;
mod jsonrpc;
mod pins;
mod tools;
mod transport;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc::unbounded_channel;

use frame::Frame;
pub use jsonrpc::{INTERNAL_ERROR, INVALID_PARAMS, blocked_result};
pub use pins::{Pin, PinCheck, PinError, PinFile, definition_hash};
pub use tools::{ToolsFile, ToolsFileError};

use crate::engine::{Enduser, GovernanceEngine};

/// The code of a call blocked because its tool's definition changed since it was pinned.
pub const TOOL_CHANGED: &str = "BLOCKED_TOOL_CHANGED";

/// How long the upstream child may take to exit once its stdin is closed, before it is killed.
const CHILD_GRACE: Duration = Duration::from_secs(3);

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
#[derive(Debug)]
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
}

/// How a gateway session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyExit {
    /// The client closed its input (exit code 0).
    ClientClosed,
    /// The upstream server exited or closed its output (exit code 1).
    UpstreamExited,
}

impl ProxyExit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            ProxyExit::ClientClosed => 0,
            ProxyExit::UpstreamExited => 1,
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
    let mut link = match &upstream {
        Upstream::Command { program, args } => {
            transport::spawn_child(program, args).map_err(|e| ProxyError::Spawn {
                program: program.clone(),
                message: e.to_string(),
            })?
        }
        #[cfg(feature = "http")]
        Upstream::Http { url } => http::connect(url.clone()).await?,
    };
    let engine = config.engine.clone();
    let (client_tx, client_out_rx) = unbounded_channel::<Frame>();
    let client_writer = transport::spawn_writer(client_out, client_out_rx, "client");
    let (client_in_tx, mut client_rx) = unbounded_channel::<Frame>();
    let client_reader = transport::spawn_reader(client_in, client_in_tx, "client");
    let gw = Arc::new(gateway::Gateway::new(config, client_tx, link.tx.clone()));
    drop(link.tx);

    let exit = loop {
        tokio::select! {
            m = client_rx.recv() => match m {
                Some(m) => gw.on_client(m).await,
                None => break ProxyExit::ClientClosed,
            },
            m = link.rx.recv() => match m {
                Some(m) => gw.on_upstream(m).await,
                None => break ProxyExit::UpstreamExited,
            },
        }
    };
    client_reader.abort();
    match exit {
        ProxyExit::UpstreamExited => {
            tracing::error!("the upstream server exited");
            gw.upstream_gone().await;
            gw.end_run("upstream_exited").await;
        }
        ProxyExit::ClientClosed => gw.end_run("success").await,
    }
    // Close the upstream's input and let the child exit on its own for a moment before
    // killing it.
    gw.close();
    if let Some(w) = link.writer.take() {
        let _ = w.await;
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
    let _ = client_writer.await;
    Ok(exit)
}
