//! The check of one run, fed its events in `seq` order: hashes, gaps, repeats, chain links and,
//! with a key, signatures. It keeps the previous event and a few counters, not the run, so
//! every event source (files, read whole and sorted; a database, read in order) shares it.

use super::BreakKind;
use crate::audit::sign::SignatureError;

/// Where an event was read: a file index (when reading files) and a 1-based line or position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Loc {
    /// Index of the file, when reading files.
    pub file: Option<usize>,
    /// 1-based line in the file, or position in the input.
    pub line: usize,
}

/// One event as the checks need it.
pub(super) struct Entry {
    pub loc: Loc,
    pub seq: u64,
    pub hash: String,
    pub prev_hash: Option<String>,
    pub hash_ok: bool,
    /// With a key: the result of checking the event's signature, if it is a signed point
    /// (`run.ended`, `checkpoint`, or any event carrying `signature`).
    pub signature: Option<Result<(), SignatureError>>,
    /// The event is a `run.ended`.
    pub is_end: bool,
    /// The event may follow the run's `run.ended` (see [`crate::audit::may_follow_end`]).
    pub may_follow_end: bool,
    /// A `run.resumed`: whether its chain head was lost (`headLost`).
    pub resumed: Option<bool>,
    /// A `run.resumed`: the holder it replaced.
    pub replaced: Option<String>,
}

/// Where a [`RunStream`] reports breaks.
pub(super) trait Breaks {
    /// Records a break of run `run` (agent id, run id) at `loc`.
    fn found(&mut self, loc: Loc, run: &RunKey, seq: u64, kind: BreakKind, message: String);
    /// `loc` for people, in messages that point at another event.
    fn describe(&self, loc: Loc) -> String;
}

/// A run: (agent id, run id). Two agents may use one run id.
pub(super) type RunKey = (String, String);

struct Prev {
    loc: Loc,
    seq: u64,
    hash: String,
}

/// The streaming check of one run (module docs).
pub(super) struct RunStream {
    run: RunKey,
    with_key: bool,
    expected: u64,
    prev: Option<Prev>,
    events: usize,
    first: Option<(Loc, u64)>,
    /// Some event carries a signature (good or not) rather than none at all.
    any_signed: bool,
    /// Signed points without a signature, met before any signed event: breaks only if the run
    /// turns out to be signed (an unsigned run is one "unsigned run" break instead).
    unsigned_points: Vec<(Loc, u64)>,
    last_good: Option<u64>,
    /// Where the last good signature is, and whether it is a `run.ended`'s.
    last_good_at: Option<(Loc, bool)>,
    after_good: Option<(Loc, u64)>,
    after_count: usize,
    /// Open runs (no `run.ended`) are expected: neither "incomplete" nor their unsigned tail
    /// is a break.
    allow_open: bool,
    /// A `run.ended` was met.
    saw_end: bool,
    /// The `seq` of the first `run.ended`, once met in the chain.
    ended_at: Option<u64>,
}

impl RunStream {
    /// A check of `run`; `with_key`: signatures are checked; `allow_open`: a run without
    /// `run.ended` is not reported as incomplete.
    pub fn new(run: RunKey, with_key: bool, allow_open: bool) -> RunStream {
        RunStream {
            run,
            with_key,
            expected: 0,
            prev: None,
            events: 0,
            first: None,
            any_signed: false,
            unsigned_points: Vec::new(),
            last_good: None,
            last_good_at: None,
            after_good: None,
            after_count: 0,
            allow_open,
            saw_end: false,
            ended_at: None,
        }
    }

    /// A check of a part of `run` that continues from the event `(seq, hash)` (a replaced
    /// holder's tail, see `takeover.rs`): not signed on its own, and open.
    pub fn continuing(run: RunKey, seq: u64, hash: String) -> RunStream {
        let mut s = RunStream::new(run, false, true);
        s.expected = seq + 1;
        s.prev = Some(Prev {
            loc: Loc {
                file: None,
                line: 0,
            },
            seq,
            hash,
        });
        s
    }

    /// The run checked.
    pub fn run(&self) -> &RunKey {
        &self.run
    }

    /// Checks the next event (events come in `seq` order; equal `seq`s in the order read).
    pub fn push(&mut self, e: Entry, out: &mut impl Breaks) {
        self.events += 1;
        self.saw_end |= e.is_end;
        self.first.get_or_insert((e.loc, e.seq));
        if !e.hash_ok {
            out.found(
                e.loc,
                &self.run,
                e.seq,
                BreakKind::HashMismatch,
                "hash does not match the event's content (the event was edited)".into(),
            );
        }
        self.chain(&e, out);
        self.after_end(&e, out);
        if self.with_key {
            self.signature(&e, out);
        }
    }

    fn chain(&mut self, e: &Entry, out: &mut impl Breaks) {
        let run = &self.run;
        if let Some(p) = self.prev.as_ref().filter(|p| p.seq == e.seq) {
            let msg = if p.hash == e.hash {
                format!("duplicate of the event at {}", out.describe(p.loc))
            } else {
                format!("another event with this seq is at {}", out.describe(p.loc))
            };
            out.found(e.loc, run, e.seq, BreakKind::DuplicateSeq, msg);
            return;
        }
        if e.seq > self.expected {
            let missing = if e.seq - self.expected == 1 {
                format!("seq {} is missing (deleted?)", self.expected)
            } else {
                format!(
                    "seq {}..{} are missing (deleted?)",
                    self.expected,
                    e.seq - 1
                )
            };
            out.found(e.loc, run, e.seq, BreakKind::MissingSeq, missing);
        } else if e.seq < self.expected {
            let msg = format!("out of order: appears after seq {}", self.expected - 1);
            out.found(e.loc, run, e.seq, BreakKind::OutOfOrder, msg);
            return;
        } else {
            let want = self.prev.as_ref().map(|p| p.hash.as_str());
            if e.prev_hash.as_deref() != want {
                let msg = match &self.prev {
                    None => "prevHash of seq 0 must be null".to_string(),
                    Some(p) => format!(
                        "prevHash does not match the hash of seq {} at {} (that event was \
                         edited and re-hashed, or this one was)",
                        p.seq,
                        out.describe(p.loc)
                    ),
                };
                out.found(e.loc, run, e.seq, BreakKind::PrevHashMismatch, msg);
            }
        }
        self.expected = e.seq + 1;
        self.prev = Some(Prev {
            loc: e.loc,
            seq: e.seq,
            hash: e.hash.clone(),
        });
    }

    /// Nothing but the end's own events (slow evaluations, the closing checkpoint, an error
    /// found letting go of the chain) follows a `run.ended`: a decision, a result or a second
    /// `run.ended` after it means the run went on after it was reported ended.
    fn after_end(&mut self, e: &Entry, out: &mut impl Breaks) {
        match self.ended_at {
            Some(end) if e.seq > end && !e.may_follow_end => {
                let what = if e.is_end {
                    "a second run.ended"
                } else {
                    "an event"
                };
                out.found(
                    e.loc,
                    &self.run,
                    e.seq,
                    BreakKind::AfterEnd,
                    format!("{what} after the run's run.ended (seq {end}): the run went on after it ended"),
                );
            }
            None if e.is_end => self.ended_at = Some(e.seq),
            _ => {}
        }
    }

    fn signature(&mut self, e: &Entry, out: &mut impl Breaks) {
        match &e.signature {
            Some(Ok(())) => {
                self.now_signed(out);
                self.last_good = Some(e.seq);
                self.last_good_at = Some((e.loc, e.is_end));
                self.after_good = None;
                self.after_count = 0;
                return;
            }
            Some(Err(SignatureError::Missing)) if !self.any_signed => {
                self.unsigned_points.push((e.loc, e.seq));
            }
            Some(Err(SignatureError::Missing)) => {
                out.found(
                    e.loc,
                    &self.run,
                    e.seq,
                    BreakKind::BadSignature,
                    unsigned_point(),
                );
            }
            Some(Err(err)) => {
                self.now_signed(out);
                out.found(
                    e.loc,
                    &self.run,
                    e.seq,
                    BreakKind::BadSignature,
                    err.to_string(),
                );
            }
            None => {}
        }
        self.after_count += 1;
        self.after_good.get_or_insert((e.loc, e.seq));
    }

    /// The run carries a signature: the unsigned points met so far are breaks.
    fn now_signed(&mut self, out: &mut impl Breaks) {
        if self.any_signed {
            return;
        }
        self.any_signed = true;
        for (loc, seq) in std::mem::take(&mut self.unsigned_points) {
            out.found(
                loc,
                &self.run,
                seq,
                BreakKind::BadSignature,
                unsigned_point(),
            );
        }
    }

    /// Ends the run: with a key, an unsigned run or events after its last good signature are
    /// breaks. Returns the number of events checked.
    pub fn finish(self, out: &mut impl Breaks) -> usize {
        let run = &self.run;
        let id = &run.1;
        let Some((first, first_seq)) = self.first.filter(|_| self.with_key) else {
            return self.events;
        };
        if !self.any_signed {
            let msg = format!("run {id} is not signed ({} events)", self.events);
            out.found(first, run, first_seq, BreakKind::UnsignedRun, msg);
        } else if let Some((loc, seq)) = self.after_good {
            if self.allow_open && !self.saw_end {
                return self.events;
            }
            let after = match self.last_good {
                Some(s) => format!("the last good signature (seq {s})"),
                None => "no good signature".to_string(),
            };
            let msg = format!(
                "{} event(s) of run {id} after {after}: not covered by a signature",
                self.after_count
            );
            out.found(loc, run, seq, BreakKind::AfterLastSigned, msg);
        } else if let (Some(seq), Some((loc, false))) = (self.last_good, self.last_good_at)
            && !self.allow_open
        {
            let msg = format!(
                "run {id} is incomplete: its last signed event is a checkpoint (seq {seq}), not \
                 a signed run.ended (cut short, or still open: pass --allow-open if open runs \
                 are expected)"
            );
            out.found(loc, run, seq, BreakKind::Incomplete, msg);
        }
        self.events
    }
}

fn unsigned_point() -> String {
    "unsigned run.ended/checkpoint: signature or keyId missing".to_string()
}
