//! `replay --otel` against endpoints that fail (issue 22 point 18, issue 21 point 16): one
//! bounded export attempt at exit, one report naming the failure, and bad `OTEL_*` settings
//! refused at start-up.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

/// `replay` of the example trace, with `--otel` and these variables; the output and how long
/// it took.
fn replay(otel: bool, envs: &[(&str, &str)]) -> (Output, Duration) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.arg("replay")
        .arg("--policy")
        .arg(repo("policies/customer-support.json"))
        .arg("--trace")
        .arg(repo("examples/traces/support.jsonl"));
    if otel {
        cmd.arg("--otel");
    }
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("OTEL_")) {
        cmd.env_remove(k);
    }
    cmd.envs(envs.iter().copied());
    let started = Instant::now();
    let out = cmd.output().unwrap();
    (out, started.elapsed())
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_refused_endpoint_costs_one_bounded_attempt_and_one_report() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let (plain, base) = replay(false, &[]);
    assert!(plain.status.success());
    let (out, took) = replay(true, &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.matches("OpenTelemetry export").count(), 1, "{err}");
    assert!(err.contains("refused"), "{err}");
    let extra = took.saturating_sub(base);
    assert!(
        extra < Duration::from_millis(1000),
        "{extra:?} extra: {err}"
    );
}

#[test]
fn a_backend_that_never_answers_delays_exit_at_most_a_second() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    // Accept connections and never answer.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming() {
            held.push(s);
        }
    });
    let (plain, base) = replay(false, &[]);
    assert!(plain.status.success());
    let (out, took) = replay(true, &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("did not answer"), "{err}");
    let extra = took.saturating_sub(base);
    assert!(
        extra < Duration::from_millis(2500),
        "{extra:?} extra: {err}"
    );
}

#[test]
fn bad_otel_settings_are_start_up_errors() {
    for (var, value, says) in [
        ("OTEL_BSP_MAX_QUEUE_SIZE", "0", "OTEL_BSP_MAX_QUEUE_SIZE"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "lots", "OTEL_BSP_MAX_QUEUE_SIZE"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "http/protobuf"),
        (
            "OTEL_EXPORTER_OTLP_TIMEOUT",
            "10s",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "api-key",
            "OTEL_EXPORTER_OTLP_HEADERS",
        ),
    ] {
        let (out, _) = replay(true, &[(var, value)]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {err}");
        assert!(err.contains(says), "{var}={value}: {err}");
    }
}
