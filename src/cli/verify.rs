//! `toolgate verify`.
use std::path::PathBuf;
use std::process::ExitCode;

use crate::audit::{RunVerifier, verify_paths, verify_paths_signed, verify_paths_signed_open};

/// The long help of `toolgate verify`.
pub const LONG_ABOUT: &str = "Verify the hash chains of audit trail files and report where any chain breaks.\n\n\
Reads JSONL audit files (folders are searched recursively for `*.jsonl`), groups events by run across \
all files and checks every run's chain (each real file is read once, symlink loops are skipped, \
FIFOs and devices met in folders are skipped with a note, and a line over 128 MiB is a break that \
ends the reading of its file): each event's hash matches its content, `seq` runs 0, 1, 2, ... \
without gaps, every `prevHash` is the previous event's `hash`, a run's events appear in order, and every \
line is byte for byte the canonical JSON of its content (else \"not canonical\"). \
With --public-key, every run must also be signed by that key: unsigned runs, bad signatures and events \
after a run's last good signature are breaks, and so is a signed run without a signed `run.ended` \
(\"incomplete\": cut after its last checkpoint, or still open) unless --allow-open says open runs are \
expected (then a run without `run.ended` is checked up to its last signature). Edited, deleted, reordered or forged events are reported as `FILE:LINE run RUN seq S: problem`; \
intact files as `FILE: ok: N events, R runs`. \
A `postgres://...` argument (on its own) verifies a collector's PostgreSQL store with the same checks, \
--public-key included, reading it run by run in a read-only snapshot; breaks print as \
`URL agent A run R seq S: problem`.\n\n\
A run taken over from a holder whose lease lapsed (`run.resumed`) is one chain through the \
takeover; the events the replaced holder wrote after the last head it stored hang off that head as \
its tail and are checked as a chain of their own (printed as `info:`); a chain restarted after its \
head was lost with the state store's state (`run.resumed` with `headLost`) is a `warning:`, which \
--strict turns into a failure.\n\n\
Exit status: 0 when every chain is intact, 1 on any break (or, with --strict, any warning), 2 when an input cannot be read.";

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
    /// With --public-key: runs without a signed `run.ended` are expected (live or crashed
    /// runs): they are checked up to their last signature instead of reported "incomplete".
    #[arg(long, requires = "public_key")]
    pub allow_open: bool,
    /// Fail (exit 1) on warnings too: a run whose chain restarts after its head was lost with
    /// the state store's state (`run.resumed` with `headLost`).
    #[arg(long)]
    pub strict: bool,
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
        return match public_key(&args) {
            Ok(key) => verify_postgres(url, key.as_ref(), args.allow_open),
            Err(code) => code,
        };
    }
    let report = match public_key(&args) {
        Ok(None) => verify_paths(&args.paths),
        Ok(Some(key)) if args.allow_open => verify_paths_signed_open(&args.paths, &key),
        Ok(Some(key)) => verify_paths_signed(&args.paths, &key),
        Err(code) => return code,
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
            None => outln!(
                "{}: ok: {} events, {} runs",
                f.path.display(),
                f.events,
                f.runs
            ),
            Some(lines) => {
                for l in lines {
                    outln!("{l}");
                }
            }
        }
    }
    for l in unlocated {
        outln!("{l}");
    }
    for n in &report.notes {
        outln!("{n}");
    }
    let warnings = report.notes.iter().filter(|n| n.warning).count();
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
    } else if args.strict && warnings > 0 {
        eprintln!("{warnings} warning(s), and --strict fails on warnings");
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// The `--public-key`, read; exit code 2 when it cannot be.
fn public_key(args: &VerifyArgs) -> Result<Option<RunVerifier>, ExitCode> {
    let Some(file) = &args.public_key else {
        return Ok(None);
    };
    RunVerifier::from_file(file).map(Some).map_err(|e| {
        eprintln!("error: --public-key: {e}");
        ExitCode::from(2)
    })
}

/// `toolgate verify postgres://...`: every run of a database store, from its stored lines,
/// with the checks of a folder (and, with a key, of signatures).
#[cfg(feature = "postgres")]
fn verify_postgres(url: &str, key: Option<&RunVerifier>, allow_open: bool) -> ExitCode {
    let shown = crate::audit::collector::redact_url(url);
    let rt = match super::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(crate::audit::store::postgres::verify_postgres_with(
        url, key, allow_open,
    )) {
        Err(e) => {
            eprintln!("{shown}: cannot read: {e}");
            ExitCode::from(2)
        }
        Ok(r) => {
            for b in &r.breaks {
                let mut at = shown.clone();
                if let Some(a) = &b.agent_id {
                    at.push_str(&format!(" agent {a}"));
                }
                match (&b.run_id, b.line) {
                    (Some(r), _) => at.push_str(&format!(" run {r}")),
                    (None, Some(l)) => at.push_str(&format!(" row {l}")),
                    (None, None) => {}
                }
                if let Some(s) = b.seq {
                    at.push_str(&format!(" seq {s}"));
                }
                outln!("{at}: {}", b.message);
            }
            if r.breaks.is_empty() {
                outln!("{shown}: ok: {} events, {} runs", r.events, r.runs);
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
fn verify_postgres(_url: &str, _key: Option<&RunVerifier>, _allow_open: bool) -> ExitCode {
    eprintln!("toolgate verify: built without the `postgres` feature");
    ExitCode::from(2)
}
