//! `--otel` of the subcommands: OpenTelemetry export set up from the environment.
use std::process::ExitCode;

use crate::engine::EngineBuilder;

/// The export of one command, when `--otel` was given.
#[cfg(feature = "otel")]
pub(crate) type Handle = Option<crate::otel::Otel>;
/// Without the `otel` feature there is never an export.
#[cfg(not(feature = "otel"))]
pub(crate) type Handle = Option<std::convert::Infallible>;

/// Starts export (configured by `OTEL_EXPORTER_OTLP_*` and `OTEL_SERVICE_NAME`) when `enabled`.
/// The first export failure is reported once on stderr.
pub(crate) fn start(enabled: bool, cmd: &str) -> Result<Handle, ExitCode> {
    if !enabled {
        return Ok(None);
    }
    #[cfg(feature = "otel")]
    {
        let prefix = format!("toolgate {cmd}");
        let hook = move |msg: &str| eprintln!("{prefix}: {msg}");
        match crate::otel::Otel::builder().on_export_failure(hook).build() {
            Ok(o) => Ok(Some(o)),
            Err(e) => {
                eprintln!("toolgate {cmd}: --otel: {e}");
                Err(ExitCode::from(2))
            }
        }
    }
    #[cfg(not(feature = "otel"))]
    {
        eprintln!("toolgate {cmd}: --otel needs toolgate built with the `otel` feature");
        Err(ExitCode::from(2))
    }
}

/// Registers the export with an engine.
pub(crate) fn register(builder: EngineBuilder, handle: &Handle) -> EngineBuilder {
    match handle {
        #[cfg(feature = "otel")]
        Some(o) => builder.otel(o),
        #[cfg(not(feature = "otel"))]
        Some(never) => match *never {},
        None => builder,
    }
}

/// Ends open spans and exports everything still queued (off the async threads).
pub(crate) async fn finish(handle: Handle, cmd: &str) {
    #[cfg(feature = "otel")]
    if let Some(o) = handle {
        let r = tokio::task::spawn_blocking(move || {
            let r = o.shutdown();
            (r, o.export_failures())
        })
        .await;
        // A failed export was already reported once; report only other failures.
        if let Ok((Err(e), 0)) = r {
            eprintln!("toolgate {cmd}: {e}");
        }
    }
    #[cfg(not(feature = "otel"))]
    let _ = (handle, cmd);
}

/// Serves a collector; with export on, the events it accepts also become spans and metrics.
#[cfg(feature = "http")]
pub(crate) async fn serve_collector(
    collector: crate::audit::collector::Collector,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    handle: &Handle,
) -> Result<(), String> {
    let config = collector.config().clone();
    match handle {
        #[cfg(feature = "otel")]
        Some(o) => {
            let export = std::sync::Arc::new(crate::otel::AuditExport::new(o));
            let router = crate::otel::collector_layer(
                collector.router(),
                export,
                config.max_body_bytes,
                config.token.clone(),
            );
            crate::audit::collector::serve_router(router, &config, listener, shutdown)
                .await
                .map_err(|e| e.to_string())
        }
        #[cfg(not(feature = "otel"))]
        Some(never) => match *never {},
        None => {
            crate::audit::collector::serve_router(collector.router(), &config, listener, shutdown)
                .await
                .map_err(|e| e.to_string())
        }
    }
}
