//! `toolgate replay`.
use std::process::ExitCode;

/// Arguments of `toolgate replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {}

/// Runs `toolgate replay`.
pub fn run(_args: ReplayArgs) -> ExitCode {
    eprintln!("toolgate replay: not implemented yet");
    ExitCode::FAILURE
}
