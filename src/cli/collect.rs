//! `toolgate collect`.
use std::path::PathBuf;
use std::process::ExitCode;

/// The long help of `toolgate collect`.
pub const LONG_ABOUT: &str = "Run an audit collector: an HTTP server that stores the audit events agents ship \
with the HTTP sink (`toolgate replay --collector URL`, or `HttpSink` in the library).\n\n\
POST /v1/events takes {\"events\": [...]} (Content-Type: application/json) and answers \
{\"accepted\": N, \"duplicates\": M, \"rejected\": [{\"id\", \"reason\"}]}: 200, or 409 when some events \
were rejected (an id reused with other content, a fork of a run, an agentId or runId over 256 bytes, a \
hash that does not match); the others are stored. Malformed or oversized bodies get a 4xx and store \
nothing; a 5xx means nothing was stored. Accepted events are durable (fsynced, or committed) before the \
answer. The store is a folder (--store DIR, events in DIR/<agent>/<YYYY-MM-DD>.jsonl, the default) or \
PostgreSQL (--store postgres://...; any number of collectors may share one database).\n\n\
Reads: GET /v1/runs/{runId}?agentId=&afterSeq=&limit= (a page of a run), GET /v1/runs/{runId}/verify, \
GET /v1/events?agentId=&kind=&since=&until=&after=&limit=, GET /healthz. The token comes from \
--token-file, the TOOLGATE_COLLECTOR_TOKEN environment variable or --token (visible in `ps`). \
SIGTERM or Ctrl-C stops accepting, gives requests in flight --shutdown-grace-secs, and exits.";

/// Arguments of `toolgate collect`.
#[derive(Debug, clap::Args)]
pub struct CollectArgs {
    /// Address to listen on, e.g. `127.0.0.1:8088` (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8088", value_name = "ADDR")]
    pub listen: String,
    /// Where events are stored: a folder (`DIR/<agent>/<YYYY-MM-DD>.jsonl`) or `postgres://...`.
    #[arg(
        long,
        value_name = "DIR|postgres://...",
        required_unless_present = "out",
        conflicts_with = "out"
    )]
    pub store: Option<String>,
    /// The folder events are stored in (same as `--store DIR`).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Require `Authorization: Bearer <T>` from clients (prefer --token-file or
    /// TOOLGATE_COLLECTOR_TOKEN: arguments are visible to other users in `ps`).
    #[arg(
        long,
        value_name = "T",
        env = "TOOLGATE_COLLECTOR_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Read the bearer token from this file (its first line).
    #[arg(long, value_name = "FILE", conflicts_with = "token")]
    pub token_file: Option<PathBuf>,
    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = 16 * 1024 * 1024, value_name = "BYTES")]
    pub max_body_bytes: usize,
    /// Export the events received as OpenTelemetry spans and metrics over OTLP/HTTP (endpoint
    /// and headers from OTEL_EXPORTER_OTLP_*, service name from OTEL_SERVICE_NAME; see docs/otel.md).
    #[arg(long)]
    pub otel: bool,
    /// Most connections open at once (lowered to keep file descriptors free).
    #[arg(long, default_value_t = 512, value_name = "N")]
    pub max_connections: usize,
    #[command(flatten)]
    pub front: super::front::FrontArgs,
    /// Seconds a client has to send a request's headers (at most 10).
    #[arg(long, default_value_t = 10, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=10))]
    pub header_timeout_secs: u64,
    /// Seconds a client has to send a request's body (at most 30).
    #[arg(long, default_value_t = 30, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=30))]
    pub body_timeout_secs: u64,
    /// On SIGTERM / Ctrl-C, seconds requests in flight may still take.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    pub shutdown_grace_secs: u64,
}

#[cfg(feature = "http")]
fn read_token(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read token file {}: {e}", path.display()))?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        return Err(format!("token file {} is empty", path.display()));
    }
    Ok(token)
}

/// Runs `toolgate collect` until Ctrl-C (or SIGTERM), then finishes the requests in flight.
#[cfg(feature = "http")]
pub fn run(args: CollectArgs) -> ExitCode {
    use std::time::Duration;

    use crate::audit::collector::{Collector, CollectorConfig, StoreSpec};

    let spec = match (&args.store, &args.out) {
        (Some(s), _) => StoreSpec::parse(s),
        (None, Some(o)) => StoreSpec::Dir(o.clone()),
        (None, None) => {
            eprintln!("toolgate collect: --store is required");
            return ExitCode::from(2);
        }
    };
    let token = match &args.token_file {
        Some(p) => match read_token(p) {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("toolgate collect: {e}");
                return ExitCode::from(2);
            }
        },
        None => args.token.clone().filter(|t| !t.is_empty()),
    };
    let mut config = CollectorConfig::with_store(spec.clone());
    config.token = token;
    config.max_body_bytes = args.max_body_bytes;
    config.max_connections = args.max_connections;
    config.per_address = args.front.per_address();
    config.allowed_hosts = args.front.allowed_hosts.clone();
    config.header_timeout = Duration::from_secs(args.header_timeout_secs.max(1));
    config.body_timeout = Duration::from_secs(args.body_timeout_secs.max(1));
    config.shutdown_grace = Duration::from_secs(args.shutdown_grace_secs);

    let rt = match super::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolgate collect: cannot start runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let code = rt.block_on(async move {
        let otel = match super::otel::start(args.otel, "collect") {
            Ok(o) => o,
            Err(code) => return code,
        };
        let listener = match tokio::net::TcpListener::bind(&args.listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("toolgate collect: cannot listen on {}: {e}", args.listen);
                return ExitCode::from(2);
            }
        };
        let collector = match Collector::connect(config).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("toolgate collect: {e}");
                return ExitCode::from(2);
            }
        };
        let addr = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or(args.listen);
        let stats = collector.stats();
        outln!("listening on http://{addr}, storing to {}", spec.display());
        if stats.events > 0 {
            eprintln!("toolgate collect: {} events already stored", stats.events);
        }
        let served =
            super::otel::serve_collector(collector, listener, shutdown_signal(), &otel).await;
        super::otel::finish(otel, "collect").await;
        match served {
            Ok(()) => {
                eprintln!("toolgate collect: stopped");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("toolgate collect: {e}");
                ExitCode::FAILURE
            }
        }
    });
    // Connections past the grace period are not waited for.
    rt.shutdown_timeout(Duration::from_secs(1));
    code
}

/// Completes on Ctrl-C or SIGTERM.
#[cfg(feature = "http")]
pub(crate) async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Without the `http` feature there is no collector.
#[cfg(not(feature = "http"))]
pub fn run(_args: CollectArgs) -> ExitCode {
    eprintln!("toolgate collect: built without the `http` feature");
    ExitCode::from(2)
}
