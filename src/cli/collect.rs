//! `toolgate collect`.
use std::process::ExitCode;

/// Arguments of `toolgate collect`.
#[derive(Debug, clap::Args)]
pub struct CollectArgs {}

/// Runs `toolgate collect`.
pub fn run(_args: CollectArgs) -> ExitCode {
    eprintln!("toolgate collect: not implemented yet");
    ExitCode::FAILURE
}
