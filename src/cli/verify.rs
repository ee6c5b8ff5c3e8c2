//! `toolgate verify`.
use std::process::ExitCode;

/// Arguments of `toolgate verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {}

/// Runs `toolgate verify`.
pub fn run(_args: VerifyArgs) -> ExitCode {
    eprintln!("toolgate verify: not implemented yet");
    ExitCode::FAILURE
}
