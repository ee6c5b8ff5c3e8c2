//! The `toolgate` command line. One file per subcommand; `main` parses and dispatches.
#![allow(missing_docs)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[macro_use]
pub(crate) mod out;

pub mod check;
pub mod collect;
#[cfg(feature = "console")]
pub mod console;
pub mod eval;
pub mod front;
pub mod keygen;
#[cfg(feature = "mcp")]
pub mod mcp_pins;
#[cfg(feature = "mcp")]
pub mod mcp_proxy;
pub mod notify;
mod otel;
pub mod replay;
pub mod replay_args;
pub mod review;
pub mod state;
pub mod state_cmd;
pub mod test;
pub mod verify;
pub mod whatif;

/// toolgate — governs what AI agents do with their tools.
///
/// toolgate decides, from JSON policies of rules, whether each tool call an agent makes is
/// allowed, blocked, or held for human review, and writes a hash-chained audit trail.
#[derive(Debug, Parser)]
#[command(name = "toolgate", version, about, long_about = None, propagate_version = true)]
#[command(
    after_help = "Quick start:\n  toolgate replay --policy policies/customer-support.json --trace examples/traces/support.jsonl\n  toolgate check policies/\n\nRun `toolgate <COMMAND> --help` for the details of a command."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate policy files and report errors with their file and JSON path.
    #[command(long_about = check::LONG_ABOUT)]
    Check(check::CheckArgs),
    /// Replay a JSONL trace of agent activity through policies and print each decision.
    #[command(long_about = replay::LONG_ABOUT)]
    Replay(replay::ReplayArgs),
    /// Run policy test files (`*.tests.json`) and show a diff for each failing expectation.
    #[command(long_about = test::LONG_ABOUT)]
    Test(test::TestArgs),
    /// List, approve or deny human-review (hitl) requests in a review store file.
    #[command(long_about = review::LONG_ABOUT)]
    Review(review::ReviewArgs),
    /// Run an audit collector: an HTTP server that stores audit events shipped by agents.
    #[command(long_about = collect::LONG_ABOUT)]
    Collect(collect::CollectArgs),
    /// Verify the hash chains of audit trail files and report where any chain breaks.
    #[command(long_about = verify::LONG_ABOUT)]
    Verify(verify::VerifyArgs),
    /// Run evaluations over JSONL inputs, or summarize stored results (`eval stats`).
    Eval(eval::EvalArgs),
    /// Make an Ed25519 key pair for signing audit trails (KEY and KEY.pub).
    #[command(long_about = keygen::LONG_ABOUT)]
    Keygen(keygen::KeygenArgs),
    /// Govern an MCP server: relay an MCP client's session and decide its tool calls.
    #[cfg(feature = "mcp")]
    #[command(name = "mcp-proxy", long_about = mcp_proxy::LONG_ABOUT)]
    McpProxy(mcp_proxy::McpProxyArgs),
    /// MCP gateway helpers: `mcp pins list|accept` for pinned tool definitions.
    #[cfg(feature = "mcp")]
    Mcp(mcp_pins::McpArgs),
    /// Inspect or re-arm the shared state on Redis after a loss (`state status|rearm`).
    #[command(long_about = state_cmd::LONG_ABOUT)]
    State(state_cmd::StateCmdArgs),
    /// Serve the review console: a web page to approve or deny pending reviews.
    #[cfg(feature = "console")]
    #[command(long_about = console::LONG_ABOUT)]
    Console(console::ConsoleArgs),
}

/// Entry point of the binary: parses arguments and runs the subcommand.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    match cli.command {
        Command::Check(a) => check::run(a),
        Command::Replay(a) => replay::run(a),
        Command::Test(a) => test::run(a),
        Command::Review(a) => review::run(a),
        Command::Collect(a) => collect::run(a),
        Command::Verify(a) => verify::run(a),
        Command::Eval(a) => eval::run(a),
        Command::Keygen(a) => keygen::run(a),
        Command::State(a) => state_cmd::run(a),
        #[cfg(feature = "mcp")]
        Command::McpProxy(a) => mcp_proxy::run(a),
        #[cfg(feature = "mcp")]
        Command::Mcp(a) => mcp_pins::run(a),
        #[cfg(feature = "console")]
        Command::Console(a) => console::run(a),
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TOOLGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Builds a multi-threaded tokio runtime for the async subcommands.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, std::io::Error> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}
