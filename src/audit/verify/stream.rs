//! Verifying events as they stream from a database, run by run, keeping no run in memory.

use std::fmt;

use super::checker::Verifier;
use super::run::Loc;
use super::{BreakKind, ChainBreak, VerifyReport};
use crate::audit::sign::RunVerifier;

/// returns them (`ORDER BY agent_id, run_id, seq`): each event is checked as it comes, so memory
/// holds one event and a few counters, not a run. The checks are those of [`super::verify_paths`]
/// (one checker serves both); a run met again after another run is checked as a new run (its
/// `seq`s then show a gap). Breaks are located by position in the input (1-based `line`).
pub struct StreamVerifier {
    inner: Verifier,
    position: usize,
}

impl std::fmt::Debug for StreamVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamVerifier")
            .field("events", &self.inner.events)
            .finish_non_exhaustive()
    }
}

impl StreamVerifier {
    /// A verifier; with `key`, every run must also be signed by it (see the module docs).
    pub fn new(key: Option<&RunVerifier>) -> StreamVerifier {
        StreamVerifier {
            inner: Verifier::new(key.cloned(), true),
            position: 0,
        }
    }

    /// With a key: a signed run without a signed `run.ended` is expected (an open run) rather
    /// than reported as incomplete, and its events after the last signature are not breaks.
    pub fn allow_open(mut self, allow: bool) -> StreamVerifier {
        self.inner.allow_open = allow;
        self
    }

    /// Checks the next stored line (its bytes must be the canonical form of its content).
    pub fn push_line(&mut self, line: &str) {
        self.position += 1;
        let loc = Loc {
            file: None,
            line: self.position,
        };
        self.inner.add_line(loc, line.as_bytes());
    }

    /// Takes the breaks found so far (in the order found; a run's end-of-run breaks come with
    /// [`StreamVerifier::finish`]), so a caller that reports as it goes keeps memory bounded.
    pub fn take_breaks(&mut self) -> Vec<ChainBreak> {
        std::mem::take(&mut self.inner.breaks)
            .into_iter()
            .map(|(_, b)| b)
            .collect()
    }

    /// Events read so far.
    pub fn events(&self) -> usize {
        self.inner.events
    }

    /// Records a break found by the caller at the line pushed last (e.g. a database row whose
    /// columns differ from its line).
    pub fn push_break(
        &mut self,
        run: Option<(&str, &str)>,
        seq: Option<u64>,
        kind: BreakKind,
        message: String,
    ) {
        let loc = Loc {
            file: None,
            line: self.position,
        };
        let run = run.map(|(a, r)| (a.to_string(), r.to_string()));
        self.inner.push_break(loc, run.as_ref(), seq, kind, message);
    }

    /// Ends the last run and returns the report.
    pub fn finish(self) -> VerifyReport {
        self.inner.finish(Vec::new(), Vec::new())
    }
}
