//! `toolgate check`.
use std::process::ExitCode;

/// Arguments of `toolgate check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {}

/// Runs `toolgate check`.
pub fn run(_args: CheckArgs) -> ExitCode {
    eprintln!("toolgate check: not implemented yet");
    ExitCode::FAILURE
}
