//! `toolgate eval`.
use std::process::ExitCode;

/// Arguments of `toolgate eval`.
#[derive(Debug, clap::Args)]
pub struct EvalArgs {}

/// Runs `toolgate eval`.
pub fn run(_args: EvalArgs) -> ExitCode {
    eprintln!("toolgate eval: not implemented yet");
    ExitCode::FAILURE
}
