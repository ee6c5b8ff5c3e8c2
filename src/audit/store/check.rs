//! A streaming check of one run's stored chain, fed its lines in `seq` order: memory does not
//! grow with the run. The checks are those of `toolgate verify` ([`StreamVerifier`]).

use serde_json::{Value, json};

use crate::audit::StreamVerifier;

/// Most breaks a [`RunCheck`] keeps (the count goes on).
const MAX_BREAKS: usize = 1_000;

/// One break in a stored run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunBreak {
    /// The event's seq, when it could be read.
    pub seq: Option<u64>,
    /// What is wrong.
    pub message: String,
}

/// The state of a streaming chain check.
#[derive(Debug)]
pub struct RunCheck {
    /// Events read.
    pub events: u64,
    /// Breaks found (at most 1,000 kept).
    pub breaks: Vec<RunBreak>,
    /// Breaks found in all.
    pub break_count: u64,
    verifier: StreamVerifier,
}

impl Default for RunCheck {
    fn default() -> Self {
        RunCheck {
            events: 0,
            breaks: Vec::new(),
            break_count: 0,
            verifier: StreamVerifier::new(None),
        }
    }
}

impl RunCheck {
    /// Checks the next stored line of the run (its bytes must be the canonical form of its
    /// content, as stores keep them).
    pub fn push_line(&mut self, line: &str) {
        self.events += 1;
        self.verifier.push_line(line);
        for b in self.verifier.take_breaks() {
            self.break_count += 1;
            if self.breaks.len() < MAX_BREAKS {
                self.breaks.push(RunBreak {
                    seq: b.seq,
                    message: b.message,
                });
            }
        }
    }

    /// Records a break found by the store itself (e.g. a row whose columns differ from its
    /// line), at the event pushed last.
    pub fn push_break(&mut self, seq: Option<u64>, message: String) {
        self.break_count += 1;
        if self.breaks.len() < MAX_BREAKS {
            self.breaks.push(RunBreak { seq, message });
        }
    }

    /// Whether the run verified.
    pub fn is_ok(&self) -> bool {
        self.break_count == 0
    }

    /// `{"ok","events","breaks":[{"seq","message"}]}`.
    pub fn to_json(&self) -> Value {
        json!({
            "ok": self.is_ok(),
            "events": self.events,
            "breaks": self.breaks.iter()
                .map(|b| json!({"seq": b.seq, "message": b.message}))
                .collect::<Vec<_>>(),
        })
    }
}
