//! A streaming check of one run's stored chain, fed its lines in `seq` order: memory does not
//! grow with the run.

use serde_json::{Value, json};

use super::Incoming;

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
#[derive(Debug, Clone, Default)]
pub struct RunCheck {
    /// Events read.
    pub events: u64,
    /// Breaks found (at most 1,000 kept).
    pub breaks: Vec<RunBreak>,
    /// Breaks found in all.
    pub break_count: u64,
    next_seq: u64,
    last_hash: Option<String>,
}

impl RunCheck {
    fn add(&mut self, seq: Option<u64>, message: String) {
        self.break_count += 1;
        if self.breaks.len() < MAX_BREAKS {
            self.breaks.push(RunBreak { seq, message });
        }
    }

    /// Checks the next stored line of the run.
    pub fn push_line(&mut self, line: &str) {
        self.events += 1;
        let inc = match Incoming::from_line(line) {
            Ok(i) => i,
            Err(e) => {
                self.add(None, format!("unreadable event: {e}"));
                return;
            }
        };
        self.push(&inc);
    }

    /// Checks the next event of the run.
    pub fn push(&mut self, inc: &Incoming) {
        if !inc.hash_ok {
            self.add(
                Some(inc.seq),
                "hash does not match the event's content".into(),
            );
        }
        if inc.seq < self.next_seq {
            self.add(
                Some(inc.seq),
                format!(
                    "out of order: seq {} after seq {}",
                    inc.seq,
                    self.next_seq - 1
                ),
            );
            return;
        }
        if inc.seq > self.next_seq {
            self.add(
                Some(inc.seq),
                format!("missing seq {}..{}", self.next_seq, inc.seq - 1),
            );
        } else if inc.prev_hash != self.last_hash {
            self.add(
                Some(inc.seq),
                match inc.seq {
                    0 => "prevHash of seq 0 must be null".into(),
                    s => format!("prevHash does not match the hash of seq {}", s - 1),
                },
            );
        }
        self.next_seq = inc.seq + 1;
        self.last_hash = Some(inc.hash.clone());
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
