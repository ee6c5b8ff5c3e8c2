//! `toolgate verify`.
use std::path::PathBuf;
use std::process::ExitCode;

use crate::audit::{RunVerifier, verify_paths, verify_paths_signed};

/// The long help of `toolgate verify`.
pub const LONG_ABOUT: &str = "Verify the hash chains of audit trail files and report where any chain breaks.\n\n\
Reads JSONL audit files (folders are searched recursively for `*.jsonl`), groups events by run across \
all files and checks every run's chain (each real file is read once, symlink loops are skipped, \
FIFOs and devices met in folders are skipped with a note, and a line over 16 MiB is a break that \
ends the reading of its file): each event's hash matches its content, `seq` runs 0, 1, 2, ... \
without gaps, every `prevHash` is the previous event's `hash`, a run's events appear in order, and every \
line is byte for byte the canonical JSON of its content (else \"not canonical\"). \
With --public-key, every run must also be signed by that key: unsigned runs, bad signatures and events \
after a run's last good signature are breaks. Edited, deleted, reordered or forged events are reported as `FILE:LINE run RUN seq S: problem`; \
intact files as `FILE: ok: N events, R runs`.\n\n\
Exit status: 0 when every chain is intact, 1 on any break, 2 when an input cannot be read.";

/// Arguments of `toolgate verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// Audit trail files (JSONL) or directories (searched recursively for `*.jsonl`), or one
    /// PostgreSQL collector store (`postgres://...`).
    #[arg(required = true, value_name = "FILE|DIR")]
    pub paths: Vec<PathBuf>,
    /// Require every run to be signed by this Ed25519 public key (PEM, `toolgate keygen` writes KEY.pub).
    #[arg(long, value_name = "FILE")]
    pub public_key: Option<PathBuf>,
}

/// Runs `toolgate verify`: prints `FILE: ok: N events, R runs` for every intact file and
/// `FILE:LINE run RUN seq S: problem` for every break. Exit code 0 when every chain is intact,
/// 1 on any break, 2 when an input cannot be read.
pub fn run(args: VerifyArgs) -> ExitCode {
    if let Some(url) = args.paths.iter().find_map(|p| {
        p.to_str()
            .filter(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"))
    }) {
        if args.paths.len() > 1 {
            eprintln!("a postgres:// store is verified on its own");
            return ExitCode::from(2);
        }
        if args.public_key.is_some() {
            eprintln!("error: --public-key is not supported with a postgres:// store yet");
            return ExitCode::from(2);
        }
        return verify_postgres(url);
    }
    let report = match &args.public_key {
        None => verify_paths(&args.paths),
        Some(file) => match RunVerifier::from_file(file) {
            Ok(key) => verify_paths_signed(&args.paths, &key),
            Err(e) => {
                eprintln!("error: --public-key: {e}");
                return ExitCode::from(2);
            }
        },
    };
    for (path, err) in &report.unreadable {
        eprintln!("{}: cannot read: {err}", path.display());
    }
    for (path, why) in &report.skipped {
        eprintln!("{}: skipped: {why}", path.display());
    }
    let mut by_file: std::collections::HashMap<&std::path::Path, Vec<String>> =
        std::collections::HashMap::new();
    let mut unlocated = Vec::new();
    for b in &report.breaks {
        match &b.path {
            Some(p) => by_file.entry(p.as_path()).or_default().push(b.to_string()),
            None => unlocated.push(b.to_string()),
        }
    }
    for f in &report.files {
        match by_file.get(f.path.as_path()) {
            None => println!(
                "{}: ok: {} events, {} runs",
                f.path.display(),
                f.events,
                f.runs
            ),
            Some(lines) => {
                for l in lines {
                    println!("{l}");
                }
            }
        }
    }
    for l in unlocated {
        println!("{l}");
    }
    if report.files.is_empty() && report.unreadable.is_empty() {
        eprintln!("no audit files (*.jsonl) found");
    }
    if !report.unreadable.is_empty() {
        ExitCode::from(2)
    } else if !report.breaks.is_empty() {
        eprintln!(
            "{} chain break(s) in {} events of {} runs",
            report.breaks.len(),
            report.events,
            report.runs
        );
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// `toolgate verify postgres://...`: every run of a database store, from its stored lines.
#[cfg(feature = "postgres")]
fn verify_postgres(url: &str) -> ExitCode {
    let shown = crate::audit::collector::redact_url(url);
    let rt = match super::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(crate::audit::store::postgres::verify_postgres(url)) {
        Err(e) => {
            eprintln!("{shown}: cannot read: {e}");
            ExitCode::from(2)
        }
        Ok(r) => {
            for (agent, run, b) in &r.breaks {
                match b.seq {
                    Some(s) => println!("{shown} agent {agent} run {run} seq {s}: {}", b.message),
                    None => println!("{shown} agent {agent} run {run}: {}", b.message),
                }
            }
            if r.breaks.is_empty() {
                println!("{shown}: ok: {} events, {} runs", r.events, r.runs);
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "{} chain break(s) in {} events of {} runs",
                    r.breaks.len(),
                    r.events,
                    r.runs
                );
                ExitCode::from(1)
            }
        }
    }
}

#[cfg(not(feature = "postgres"))]
fn verify_postgres(_url: &str) -> ExitCode {
    eprintln!("toolgate verify: built without the `postgres` feature");
    ExitCode::from(2)
}
