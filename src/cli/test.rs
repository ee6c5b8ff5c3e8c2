//! `toolgate test`.
use std::process::ExitCode;

/// Arguments of `toolgate test`.
#[derive(Debug, clap::Args)]
pub struct TestArgs {}

/// Runs `toolgate test`.
pub fn run(_args: TestArgs) -> ExitCode {
    eprintln!("toolgate test: not implemented yet");
    ExitCode::FAILURE
}
