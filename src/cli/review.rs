//! `toolgate review`.
use std::process::ExitCode;

/// Arguments of `toolgate review`.
#[derive(Debug, clap::Args)]
pub struct ReviewArgs {}

/// Runs `toolgate review`.
pub fn run(_args: ReviewArgs) -> ExitCode {
    eprintln!("toolgate review: not implemented yet");
    ExitCode::FAILURE
}
