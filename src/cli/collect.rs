//! `toolgate collect`.
use std::path::PathBuf;
use std::process::ExitCode;

/// The long help of `toolgate collect`.
pub const LONG_ABOUT: &str = "Run an audit collector: an HTTP server that stores the audit events agents ship \
with the HTTP sink (`toolgate replay --collector URL`, or `HttpSink` in the library).\n\n\
POST /v1/events takes {\"events\": [...]} and answers {\"accepted\": N, \"duplicates\": M}: \
bodies are validated (malformed or oversized ones get a 4xx and store nothing), events are \
deduplicated by id, appended to OUT/<agentId>/<YYYY-MM-DD>.jsonl and fsynced before the answer, and \
each run's hash chain is checked as events arrive. GET /v1/runs/{runId} returns a run's events in \
order; GET /healthz answers when the server is up. On start the collector reads OUT again, so a \
restarted collector still deduplicates. Ctrl-C stops it cleanly without losing accepted events.";

/// Arguments of `toolgate collect`.
#[derive(Debug, clap::Args)]
pub struct CollectArgs {
    /// Address to listen on, e.g. `127.0.0.1:8088` (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8088", value_name = "ADDR")]
    pub listen: String,
    /// Directory events are stored in (`DIR/<agentId>/<YYYY-MM-DD>.jsonl`).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Require `Authorization: Bearer <T>` from clients.
    #[arg(long, value_name = "T")]
    pub token: Option<String>,
    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = 16 * 1024 * 1024, value_name = "BYTES")]
    pub max_body_bytes: usize,
    /// Export the events received as OpenTelemetry spans and metrics over OTLP/HTTP (endpoint
    /// and headers from OTEL_EXPORTER_OTLP_*, service name from OTEL_SERVICE_NAME; see docs/otel.md).
    #[arg(long)]
    pub otel: bool,
}

/// Runs `toolgate collect` until Ctrl-C (or SIGTERM), then finishes the requests in flight.
#[cfg(feature = "http")]
pub fn run(args: CollectArgs) -> ExitCode {
    use crate::audit::collector::{Collector, CollectorConfig};

    let rt = match super::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolgate collect: cannot start runtime: {e}");
            return ExitCode::from(2);
        }
    };
    rt.block_on(async move {
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
        let mut config = CollectorConfig::new(&args.out);
        config.token = args.token;
        config.max_body_bytes = args.max_body_bytes;
        let collector = match tokio::task::spawn_blocking(move || Collector::open(config)).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                eprintln!("toolgate collect: {e}");
                return ExitCode::from(2);
            }
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
        println!(
            "listening on http://{addr}, storing to {}",
            args.out.display()
        );
        if stats.events > 0 {
            eprintln!(
                "toolgate collect: {} events of {} runs already stored",
                stats.events, stats.runs
            );
        }
        let max_body = args.max_body_bytes;
        let served =
            super::otel::serve_collector(collector, listener, shutdown_signal(), &otel, max_body)
                .await;
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
    })
}

#[cfg(feature = "http")]
async fn shutdown_signal() {
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
