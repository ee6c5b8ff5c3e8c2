//! The standard `OTEL_*` variables toolgate reads itself, checked at start-up: a value that
//! cannot be honoured is an error naming the variable, never silently ignored.

use std::time::Duration;

use super::OtelError;

/// The largest span queue (`OTEL_BSP_MAX_QUEUE_SIZE` and [`super::OtelBuilder::max_queue`]
/// are capped to it): the SDK allocates its queue up front, so an unbounded setting could
/// take gigabytes at start-up.
pub const MAX_QUEUE_CAP: usize = 65_536;

/// The default span queue.
const DEFAULT_QUEUE: usize = 2_048;

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Refuses any OTLP protocol but HTTP/protobuf (the only one built in).
pub(super) fn check_protocol() -> Result<(), OtelError> {
    for name in [
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    ] {
        if let Some(v) = var(name)
            && v.trim() != "http/protobuf"
        {
            return Err(OtelError::Setup(format!(
                "{name}={v}: toolgate exports OTLP over http/protobuf only; set it to \
                 http/protobuf or unset it"
            )));
        }
    }
    Ok(())
}

/// `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds, at least 1), else 10 s.
pub(super) fn timeout() -> Result<Duration, OtelError> {
    let name = "OTEL_EXPORTER_OTLP_TIMEOUT";
    match var(name) {
        None => Ok(Duration::from_secs(10)),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
            _ => Err(OtelError::Setup(format!(
                "{name}={v}: not a number of milliseconds (e.g. 10000)"
            ))),
        },
    }
}

/// Checks `OTEL_EXPORTER_OTLP_HEADERS` (and the per-signal ones): comma-separated `key=value`
/// with a non-empty key. The message names the item by position, never its value (headers
/// carry API keys).
pub(super) fn check_headers() -> Result<(), OtelError> {
    for name in [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    ] {
        let Some(v) = var(name) else { continue };
        for (i, item) in v.split(',').enumerate() {
            let ok = item
                .split_once('=')
                .is_some_and(|(k, _)| !k.trim().is_empty());
            if !ok {
                return Err(OtelError::Setup(format!(
                    "{name}: item {} is not key=value (e.g. api-key=SECRET,x-team=a)",
                    i + 1
                )));
            }
        }
    }
    Ok(())
}

/// The span queue size: `set` (the builder's), else `OTEL_BSP_MAX_QUEUE_SIZE`, else 2,048;
/// 0 or not a number is an error, more than [`MAX_QUEUE_CAP`] is capped (with a warning).
pub(super) fn queue_size(set: Option<usize>) -> Result<usize, OtelError> {
    let name = "OTEL_BSP_MAX_QUEUE_SIZE";
    let size = match (set, var(name)) {
        (Some(n), _) => n,
        (None, None) => DEFAULT_QUEUE,
        (None, Some(v)) => v.trim().parse::<usize>().map_err(|_| {
            OtelError::Setup(format!("{name}={v}: not a number of spans (e.g. 2048)"))
        })?,
    };
    if size == 0 {
        return Err(OtelError::Setup(format!(
            "{name}: a span queue of 0 would drop every span; use 1..={MAX_QUEUE_CAP}"
        )));
    }
    if size > MAX_QUEUE_CAP {
        tracing::warn!(
            target: "toolgate::otel",
            "span queue of {size} capped to {MAX_QUEUE_CAP} (the queue is allocated up front)"
        );
        return Ok(MAX_QUEUE_CAP);
    }
    Ok(size)
}
