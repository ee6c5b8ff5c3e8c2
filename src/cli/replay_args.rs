//! The flags of `toolgate replay` (a trace replay, or with `--from-audit` a what-if replay of
//! recorded runs): shared by [`super::replay`] and [`super::whatif`].
use std::path::PathBuf;

/// Output formats of `toolgate replay`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns for people, with a summary line.
    Table,
    /// One JSON object per decision.
    Jsonl,
}

/// The long help of `toolgate replay`.
pub const LONG_ABOUT: &str = "Replay a JSON Lines trace of agent activity through policies and print one decision per \
tool call (and per tool result where after-phase rules are in play), and one per model call \
(`llm.call` line, phase `llm.before`).\n\n\
The trace's `at` timestamps drive the engine's clock; `signal`, `review`, `metric` and `llm` lines drive \
providers, reviews and metrics (see docs/policy-language.md for the format). Bad lines are reported with their line \
number and skipped; the rest of the trace still runs.\n\n\
With --from-audit DIR instead of --trace (what-if), the runs recorded in an audit trail are rebuilt (calls, results, \
LLM metrics, end-user tags, times; signal values from the recorded decisions) and decided again under --policy; \
it prints the calls whose effect would change (all calls with --all) and a summary such as \
`1,204 calls: 37 would change: 30 allow→block, 7 block→allow` (see docs/what-if.md).\n\n\
Exit status: 0 when every line was valid, 1 when a line was bad, 2 when the policies or the trace cannot be read.";

/// Arguments of `toolgate replay`.
#[derive(Debug, clap::Args)]
#[command(long_about = LONG_ABOUT)]
pub struct ReplayArgs {
    /// Policy file or folder (repeat for several).
    #[arg(short, long = "policy", value_name = "PATH", required = true)]
    pub policies: Vec<PathBuf>,
    /// The trace (JSON Lines). `-` reads standard input line by line as it comes (each line
    /// decided, and printed with `--format jsonl`, before the next is read).
    #[arg(
        short,
        long,
        value_name = "FILE",
        required_unless_present = "from_audit"
    )]
    pub trace: Option<PathBuf>,
    /// What-if: decide the runs recorded in this audit trail (a folder of JSONL files) again
    /// under --policy, and print the calls whose effect would change (see docs/what-if.md).
    #[arg(long, value_name = "DIR", conflicts_with = "trace")]
    pub from_audit: Option<String>,
    /// What-if: only runs of this agent.
    #[arg(long, value_name = "ID", requires = "from_audit")]
    pub agent: Option<String>,
    /// What-if: only runs that started at or after this time (RFC 3339).
    #[arg(long, value_name = "T", requires = "from_audit")]
    pub since: Option<String>,
    /// What-if: print every call, not only those whose effect would change.
    #[arg(long, requires = "from_audit")]
    pub all: bool,
    /// What-if: replay runs whose hash chain does not verify too (by default they are listed,
    /// left out, and the exit status is 1).
    #[arg(long, requires = "from_audit")]
    pub no_verify: bool,
    /// The org timezone (IANA name) for timeGate rules with `fallback: "org"`; overrides the policy's.
    #[arg(long, value_name = "TZ")]
    pub org_timezone: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Write the audit trail (hash-chained JSONL, one file per day) into this folder.
    #[arg(long, value_name = "DIR")]
    pub audit: Option<PathBuf>,
    /// Ship the audit trail to a collector (`toolgate collect`), e.g. http://127.0.0.1:7070.
    #[arg(long, value_name = "URL")]
    pub collector: Option<String>,
    /// Bearer token for the collector.
    #[arg(long, value_name = "TOKEN", requires = "collector")]
    pub token: Option<String>,
    /// Sign the audit trail's runs with this Ed25519 private key (see `toolgate keygen`).
    #[arg(long, value_name = "KEY")]
    pub signing_key: Option<PathBuf>,
    /// Keep human reviews in this file (see `toolgate review`), so approvals survive between replays.
    #[arg(long, value_name = "FILE", conflicts_with = "state")]
    pub reviews: Option<PathBuf>,
    #[command(flatten)]
    pub state: super::state::StateArgs,
    /// What to decide when the engine fails (the state store is down or slow, a signal fails).
    #[arg(long, value_enum, default_value_t = super::state::FailureArg::Closed)]
    pub failure_mode: super::state::FailureArg,
    /// Export each decision as an OpenTelemetry span and metrics over OTLP/HTTP (endpoint and
    /// headers from OTEL_EXPORTER_OTLP_*, service name from OTEL_SERVICE_NAME; see docs/otel.md).
    #[arg(long)]
    pub otel: bool,
    #[command(flatten)]
    pub notify: super::notify::NotifyArgs,
}
