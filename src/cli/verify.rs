//! `toolgate verify`.
use std::path::PathBuf;
use std::process::ExitCode;

use crate::audit::{RunVerifier, verify_paths, verify_paths_signed};

/// The long help of `toolgate verify`.
pub const LONG_ABOUT: &str = "Verify the hash chains of audit trail files and report where any chain breaks.\n\n\
Reads JSONL audit files (folders are searched recursively for `*.jsonl`), groups events by run across \
all files and checks every run's chain: each event's hash matches its content, `seq` runs 0, 1, 2, ... \
without gaps, every `prevHash` is the previous event's `hash`, a run's events appear in order, and every \
line is byte for byte the canonical JSON of its content (else \"not canonical\"). \
With --public-key, every run must also be signed by that key: unsigned runs, bad signatures and events \
after a run's last good signature are breaks. Edited, deleted, reordered or forged events are reported as `FILE:LINE run RUN seq S: problem`; \
intact files as `FILE: ok: N events, R runs`.\n\n\
Exit status: 0 when every chain is intact, 1 on any break, 2 when an input cannot be read.";

/// Arguments of `toolgate verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// Audit trail files (JSONL) or directories (searched recursively for `*.jsonl`).
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
