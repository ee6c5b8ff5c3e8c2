//! `toolgate mcp-proxy`: the MCP gateway, between an MCP client (on stdin/stdout) and one server
//! (a child process, or a streamable HTTP endpoint with `--upstream URL`).
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use crate::engine::{Enduser, FileReviewStore, GovernanceEngine};
use crate::mcp::{PinFile, ProxyConfig, SealKey, ToolsFile, Upstream, run_proxy};

/// The long help of `toolgate mcp-proxy`.
pub const LONG_ABOUT: &str = "Govern an MCP server: toolgate sits between an MCP client (which starts it as its \
server command) and the real server (started as a child after `--`), decides every `tools/call` with the \
policies, and passes everything else through unchanged.\n\n\
Example client config: \"command\": \"toolgate\", \"args\": [\"mcp-proxy\", \"--policy\", \"p.json\", \"--\", \
\"npx\", \"-y\", \"@modelcontextprotocol/server-filesystem\", \"/data\"]\n\n\
stdout carries only MCP messages; logs go to stderr (TOOLGATE_LOG=info for more). Exit status: 0 when the \
client closed the session, 1 when the server exited (or can no longer be reached), 2 when the gateway could \
not start, 130/143 after SIGINT/SIGTERM. See docs/mcp-gateway.md.";

pub use super::state::FailureArg;
use super::state::StateArgs;

/// Arguments of `toolgate mcp-proxy`.
#[derive(Debug, clap::Args)]
#[command(long_about = LONG_ABOUT)]
pub struct McpProxyArgs {
    /// Policy file or folder (repeat for several).
    #[arg(short, long = "policy", value_name = "PATH", required = true)]
    pub policies: Vec<PathBuf>,
    /// The agent id (default `mcp:<server name>`).
    #[arg(long, value_name = "ID")]
    pub agent_id: Option<String>,
    /// The end user the session acts for.
    #[arg(long, value_name = "ID")]
    pub enduser: Option<String>,
    /// An end-user tag (repeat for several).
    #[arg(long, value_name = "K=V", requires = "enduser")]
    pub enduser_tag: Vec<String>,
    /// Tools file: tags by tool-name glob, hidden tools.
    #[arg(long, value_name = "FILE")]
    pub tools: Option<PathBuf>,
    /// Pin tool definitions in this file; changed tools are blocked until accepted.
    #[arg(long, value_name = "FILE")]
    pub pin: Option<PathBuf>,
    /// Keep human reviews in this file (see `toolgate review`).
    #[arg(long, value_name = "FILE", conflicts_with = "state")]
    pub reviews: Option<PathBuf>,
    #[command(flatten)]
    pub state: StateArgs,
    #[command(flatten)]
    pub notify: super::notify::NotifyArgs,
    /// Write the audit trail (hash-chained JSONL) into this folder.
    #[arg(long, value_name = "DIR")]
    pub audit: Option<PathBuf>,
    /// Ship the audit trail to a collector (`toolgate collect`).
    #[arg(long, value_name = "URL")]
    pub collector: Option<String>,
    /// Bearer token for the collector.
    #[arg(long, value_name = "TOKEN", requires = "collector")]
    pub token: Option<String>,
    /// Sign each run's trail with this Ed25519 private key (`toolgate keygen`): `run.ended` and
    /// periodic `checkpoint` events carry a signature. Needs --audit or --collector.
    #[arg(long, value_name = "KEY")]
    pub signing_key: Option<PathBuf>,
    /// Export each decision as an OpenTelemetry span and metrics over OTLP/HTTP (endpoint and
    /// headers from OTEL_EXPORTER_OTLP_*, service name from OTEL_SERVICE_NAME; see docs/otel.md).
    #[arg(long)]
    pub otel: bool,
    /// The org timezone (IANA name); overrides the policy's.
    #[arg(long, value_name = "TZ")]
    pub org_timezone: Option<String>,
    /// What to decide when the engine fails.
    #[arg(long, value_enum, default_value_t = FailureArg::Closed)]
    pub failure_mode: FailureArg,
    /// The upstream server's command and arguments (after `--`).
    #[arg(
        last = true,
        value_name = "COMMAND",
        required_unless_present = "upstream"
    )]
    pub command: Vec<String>,
    /// The largest JSON-RPC message accepted from either side, in bytes; a larger one is
    /// answered with JSON-RPC −32603 naming this limit (a tool result is recorded as an error).
    #[arg(long, value_name = "BYTES", default_value_t = crate::mcp::DEFAULT_MAX_MESSAGE_BYTES as u64,
          value_parser = clap::value_parser!(u64).range(1024..=(1u64 << 32)))]
    pub max_message_bytes: u64,
    /// How long an approval question (`elicitation/create`) waits for the user, in seconds,
    /// before the call is denied.
    #[arg(long, value_name = "SECS", default_value_t = crate::mcp::DEFAULT_APPROVAL_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    pub approval_timeout: u64,
    /// Connect to an upstream server over streamable HTTP instead, e.g. http://127.0.0.1:3001/mcp.
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    pub upstream: Option<String>,
    /// Serve MCP over streamable HTTP at http://ADDR/mcp to any number of clients (instead of
    /// one client on stdin/stdout); needs --token-file. Port 0 picks a free port (printed).
    #[arg(long, value_name = "ADDR", requires = "token_file")]
    pub listen: Option<std::net::SocketAddr>,
    /// With --listen: who may call. JSON {"tokens":[{"sha256","agentId","enduser"?,"agentTags"?}]};
    /// the agent and end user of a call come from its bearer token.
    #[arg(long, value_name = "FILE", requires = "listen")]
    pub token_file: Option<PathBuf>,
    /// With --listen: an allowed `Origin` (repeat for several); other origins get 403.
    #[arg(long, value_name = "ORIGIN", requires = "listen")]
    pub allow_origin: Vec<String>,
    /// With --listen: a 2026-07-28 run (or 2025-11-25 session) without requests for this long
    /// ends.
    #[arg(long, value_name = "SECS", default_value_t = 1800, value_parser = clap::value_parser!(u64).range(1..))]
    pub run_idle_secs: u64,
    /// The key sealing `requestState` of approvals asked of 2026-07-28 clients (at least 32
    /// bytes; share it between replicas). Default: random per process.
    #[arg(long, value_name = "FILE")]
    pub request_state_key: Option<PathBuf>,
    #[command(flatten)]
    pub front: super::front::FrontArgs,
    /// With --listen: most connections open at once (lowered to keep file descriptors free).
    #[arg(long, value_name = "N", default_value_t = 512, requires = "listen")]
    pub max_connections: usize,
    /// With --listen: most 2025-11-25 sessions (and, apart, 2026-07-28 named runs) one token
    /// may hold open; beyond it `initialize` (or a new run name) gets 429.
    #[arg(long, value_name = "N", requires = "listen",
          default_value_t = crate::mcp::DEFAULT_MAX_SESSIONS_PER_TOKEN as u64,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_sessions_per_token: u64,
    /// With --listen: one upstream for every client (`shared`), or one per token or per
    /// session (for servers that use sampling, elicitation, roots or logging with several
    /// clients; see docs/mcp-gateway.md).
    #[arg(
        long,
        value_enum,
        value_name = "MODE",
        default_value = "shared",
        requires = "listen"
    )]
    pub upstream_per: UpstreamPerArg,
}

/// `--upstream-per`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum UpstreamPerArg {
    Shared,
    Token,
    Session,
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::from(2)
}

/// Runs `toolgate mcp-proxy`.
pub fn run(args: McpProxyArgs) -> ExitCode {
    let enduser = match &args.enduser {
        None => None,
        Some(id) => {
            let mut tags = std::collections::BTreeMap::new();
            for kv in &args.enduser_tag {
                match kv.split_once('=') {
                    Some((k, v)) => tags.insert(k.to_string(), v.to_string()),
                    None => return fail(format!("--enduser-tag {kv:?}: expected K=V")),
                };
            }
            Some(Enduser {
                id: id.clone(),
                tags,
            })
        }
    };
    let tools = match &args.tools {
        Some(p) => match ToolsFile::load(p) {
            Ok(t) => t,
            Err(e) => return fail(e),
        },
        None => ToolsFile::default(),
    };
    // A pin file that cannot be read would pin nothing: refuse to start.
    if let Some(p) = &args.pin
        && let Err(e) = PinFile::new(p).list()
    {
        return fail(e);
    }
    let upstream = match (&args.upstream, args.command.split_first()) {
        #[cfg(feature = "http")]
        (Some(url), _) => Upstream::Http { url: url.clone() },
        #[cfg(not(feature = "http"))]
        (Some(_), _) => return fail("--upstream needs toolgate built with the `http` feature"),
        (None, Some((program, rest))) => Upstream::Command {
            program: program.clone(),
            args: rest.to_vec(),
        },
        (None, None) => return fail("give the upstream server's command after `--`"),
    };
    let rt = match super::runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start the runtime: {e}")),
    };
    let code = rt.block_on(async move {
        let otel = match super::otel::start(args.otel, "mcp-proxy") {
            Ok(o) => o,
            Err(code) => return code,
        };
        let mut builder = args
            .policies
            .iter()
            .fold(GovernanceEngine::builder(), |b, p| b.policy_path(p.clone()));
        if let Some(tz) = &args.org_timezone {
            match tz.parse::<chrono_tz::Tz>() {
                Ok(tz) => builder = builder.org_timezone(tz),
                Err(_) => return fail("--org-timezone: not a known IANA timezone"),
            }
        }
        builder = builder.failure_mode(args.failure_mode.into());
        builder = match args.state.apply(builder, args.failure_mode) {
            Ok(b) => b,
            Err(e) => return fail(e),
        };
        let mut audit = crate::audit::AuditConfig::default();
        if let Some(dir) = &args.audit {
            audit.sinks.push(crate::audit::SinkConfig::File(
                crate::audit::FileSinkConfig::in_dir(dir),
            ));
        }
        #[cfg(feature = "http")]
        if let Some(url) = &args.collector {
            let mut c = crate::audit::HttpSinkConfig::new(url.clone());
            c.token = args.token.clone();
            audit.sinks.push(crate::audit::SinkConfig::Http(c));
        }
        #[cfg(not(feature = "http"))]
        if args.collector.is_some() {
            return fail("--collector needs toolgate built with the `http` feature");
        }
        if args.signing_key.is_some() && audit.sinks.is_empty() {
            return fail("--signing-key needs --audit or --collector (a trail to sign)");
        }
        audit.signing_key = args.signing_key.clone();
        if !audit.sinks.is_empty() {
            builder = builder.audit(audit);
        }
        builder = super::otel::register(builder, &otel);
        if let Some(file) = &args.reviews {
            builder = builder.review_store(Arc::new(FileReviewStore::new(file)));
        }
        match args.notify.config() {
            Ok(Some(n)) => builder = builder.notify(n),
            Ok(None) => {}
            Err(e) => return fail(e),
        }
        let request_state_key = match &args.request_state_key {
            Some(p) => match SealKey::load(p) {
                Ok(k) => {
                    // Replicas sharing this key share the hitl fingerprint key too, so a call
                    // holding redacted data finds the review another replica raised.
                    builder = builder.hitl_fingerprint_key(&k.derive(b"toolgate hitl fingerprint"));
                    k
                }
                Err(e) => return fail(e),
            },
            None => SealKey::random(),
        };
        let engine = match builder.build() {
            Ok(e) => e,
            Err(e) => return fail(e),
        };
        let config = ProxyConfig {
            engine,
            agent_id: args.agent_id,
            enduser,
            tools,
            pins: args.pin.map(PinFile::new),
            reviews_file: args.reviews,
            state_url: args.state.shown(),
            max_message_bytes: usize::try_from(args.max_message_bytes).unwrap_or(usize::MAX),
            approval_timeout: std::time::Duration::from_secs(args.approval_timeout),
            agent_tags: Vec::new(),
            run_id: None,
            request_state_key,
        };
        let result = match (args.listen, &args.token_file) {
            #[cfg(feature = "http")]
            (Some(addr), Some(file)) => {
                let tokens = match crate::mcp::TokenFile::load(file) {
                    Ok(t) => t,
                    Err(e) => return fail(e),
                };
                let listen = crate::mcp::ListenConfig {
                    addr,
                    tokens,
                    allow_origins: args.allow_origin.clone(),
                    run_idle: std::time::Duration::from_secs(args.run_idle_secs),
                    max_body_bytes: crate::mcp::DEFAULT_MAX_BODY_BYTES,
                    allowed_hosts: args.front.allowed_hosts.clone(),
                    per_address: args.front.per_address(),
                    max_connections: args.max_connections,
                    max_sessions_per_token: usize::try_from(args.max_sessions_per_token)
                        .unwrap_or(usize::MAX),
                    upstream_per: match args.upstream_per {
                        UpstreamPerArg::Shared => crate::mcp::UpstreamPer::Shared,
                        UpstreamPerArg::Token => crate::mcp::UpstreamPer::Token,
                        UpstreamPerArg::Session => crate::mcp::UpstreamPer::Session,
                    },
                };
                crate::mcp::serve(config, upstream, listen).await
            }
            #[cfg(not(feature = "http"))]
            (Some(_), _) => return fail("--listen needs toolgate built with the `http` feature"),
            _ => run_proxy(config, upstream, tokio::io::stdin(), tokio::io::stdout()).await,
        };
        super::otel::finish(otel, "mcp-proxy").await;
        match result {
            Ok(exit) => ExitCode::from(exit.code()),
            Err(e) => {
                fail(&e);
                ExitCode::from(e.code())
            }
        }
    });
    // The runtime's blocking reader of stdin may still wait for input that never comes (the
    // upstream exited while the client keeps its end open): do not wait for it.
    rt.shutdown_background();
    code
}
