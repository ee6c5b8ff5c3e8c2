//! `toolgate mcp pins list|accept`: the pinned tool definitions of `toolgate mcp-proxy --pin`.
use std::path::PathBuf;
use std::process::ExitCode;

use crate::mcp::PinFile;

/// Arguments of `toolgate mcp`.
#[derive(Debug, clap::Args)]
pub struct McpArgs {
    #[command(subcommand)]
    pub command: McpCommand,
}

/// `toolgate mcp` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum McpCommand {
    /// Pinned tool definitions (see `mcp-proxy --pin`).
    #[command(subcommand)]
    Pins(PinsAction),
}

/// What to do with pins.
#[derive(Debug, clap::Subcommand)]
pub enum PinsAction {
    /// List the pinned tools and which ones changed.
    List {
        /// The pin file.
        #[arg(long, value_name = "FILE")]
        pin: PathBuf,
    },
    /// Accept a tool's changed definition: calls to it are allowed again.
    Accept {
        /// The tool's name.
        name: String,
        /// The pin file.
        #[arg(long, value_name = "FILE")]
        pin: PathBuf,
    },
}

/// Runs `toolgate mcp`.
pub fn run(args: McpArgs) -> ExitCode {
    let McpCommand::Pins(action) = args.command;
    match action {
        PinsAction::List { pin } => match PinFile::new(&pin).list() {
            Ok(pins) if pins.is_empty() => {
                outln!("no pinned tools in {}", pin.display());
                ExitCode::SUCCESS
            }
            Ok(pins) => {
                for (name, p) in pins {
                    match &p.changed_to {
                        Some(h) => outln!(
                            "{name}  CHANGED  pinned={} now={}",
                            short(&p.sha256),
                            short(h)
                        ),
                        None => outln!("{name}  pinned   {}", short(&p.sha256)),
                    }
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        PinsAction::Accept { name, pin } => match PinFile::new(&pin).accept(&name) {
            Ok(p) => {
                outln!("{name}: accepted {}", short(&p.sha256));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

fn short(h: &str) -> &str {
    h.get(..12).unwrap_or(h)
}
