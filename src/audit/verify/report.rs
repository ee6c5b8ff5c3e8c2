//! What a verification reports: the breaks found, the files read, and notes.

use std::fmt;
use std::path::PathBuf;

/// What is wrong at a [`ChainBreak`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakKind {
    /// A line that is not JSON or not an audit event.
    Malformed,
    /// `hash` does not match the event's content: the event was edited.
    HashMismatch,
    /// `prevHash` does not match the previous event's `hash`.
    PrevHashMismatch,
    /// `seq` numbers are missing before this event: events were deleted.
    MissingSeq,
    /// Another event of the run has the same `seq`.
    DuplicateSeq,
    /// The event appears after an event of the same run with a higher `seq`.
    OutOfOrder,
    /// The line is not byte for byte the canonical JSON of its content.
    NotCanonical,
    /// Verifying with a public key: the run has no signed event.
    UnsignedRun,
    /// Verifying with a public key: a signature that does not check out.
    BadSignature,
    /// Verifying with a public key: events after the run's last good signature.
    AfterLastSigned,
    /// A database row whose indexed columns (`id`, `agent_id`, `run_id`, `seq`, `kind`, `ts`,
    /// `hash`, `prev_hash`) differ from its stored line: the row was moved or edited.
    ColumnMismatch,
    /// Verifying with a public key: a signed run without a signed `run.ended` (cut after its
    /// last checkpoint, or still open).
    Incomplete,
    /// An event after the run's `run.ended` other than those that belong to the end (slow
    /// evaluations, the closing checkpoint, an `error`): the run went on after it ended.
    AfterEnd,
}

/// One place where a chain breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainBreak {
    /// The file, when verifying files.
    pub path: Option<PathBuf>,
    /// 1-based line in the file (or position in the input when verifying events).
    pub line: Option<usize>,
    /// The agent of the run, when known.
    pub agent_id: Option<String>,
    /// The run, when known.
    pub run_id: Option<String>,
    /// The event's `seq`, when known.
    pub seq: Option<u64>,
    /// The kind of break.
    pub kind: BreakKind,
    /// What is wrong, for people.
    pub message: String,
}

impl fmt::Display for ChainBreak {
    /// `FILE:LINE run RUN seq S: message`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.path, self.line) {
            (Some(p), Some(l)) => write!(f, "{}:{l}", p.display())?,
            (Some(p), None) => write!(f, "{}", p.display())?,
            (None, Some(l)) => write!(f, "event {l}")?,
            (None, None) => write!(f, "-")?,
        }
        if let Some(r) = &self.run_id {
            write!(f, " run {r}")?;
        }
        if let Some(s) = self.seq {
            write!(f, " seq {s}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Per-file counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSummary {
    /// The file.
    pub path: PathBuf,
    /// Events (valid lines) in it.
    pub events: usize,
    /// Distinct runs in it.
    pub runs: usize,
    /// Breaks located in it.
    pub breaks: usize,
}

/// The result of a verification.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Files read, in the order read.
    pub files: Vec<FileSummary>,
    /// Every break found, by file and line.
    pub breaks: Vec<ChainBreak>,
    /// Paths that could not be read, with the reason.
    pub unreadable: Vec<(PathBuf, String)>,
    /// Paths met while searching a folder and not read, with the reason (not a regular file,
    /// a symlink loop, the same file reached again by another path).
    pub skipped: Vec<(PathBuf, String)>,
    /// Events checked.
    pub events: usize,
    /// Runs checked.
    pub runs: usize,
    /// What is worth knowing but is no break: runs taken over from a holder whose lease
    /// lapsed (information), chains restarted after their head was lost (warnings).
    pub notes: Vec<VerifyNote>,
}

/// A note of a verification (see [`VerifyReport::notes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyNote {
    /// The file, when reading files.
    pub path: Option<PathBuf>,
    /// 1-based line in the file.
    pub line: Option<usize>,
    /// The run's agent.
    pub agent_id: String,
    /// The run.
    pub run_id: String,
    /// The event's `seq`.
    pub seq: u64,
    /// A warning (`toolgate verify --strict` fails on it) rather than information.
    pub warning: bool,
    /// What it is.
    pub message: String,
}

impl fmt::Display for VerifyNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = &self.path {
            write!(f, "{}:{}: ", p.display(), self.line.unwrap_or(0))?;
        }
        write!(
            f,
            "{}: run {} seq {}: {}",
            if self.warning { "warning" } else { "info" },
            self.run_id,
            self.seq,
            self.message
        )
    }
}

impl VerifyReport {
    /// No breaks and nothing unreadable.
    pub fn is_ok(&self) -> bool {
        self.breaks.is_empty() && self.unreadable.is_empty()
    }
}
