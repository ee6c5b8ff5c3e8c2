//! Chain verification: finds missing, reordered, edited, deleted or forged events.
//!
//! For every run (events grouped by `runId`, across all files given):
//!
//! * each event's `hash` must equal the SHA-256 of its canonical JSON without `hash`
//!   (else it was edited);
//! * sorted by `seq`, the run must go 0, 1, 2, ... without gaps (else events were deleted) or
//!   repeats;
//! * each event's `prevHash` must equal the `hash` of the event before it (null for seq 0) —
//!   this catches an edited event whose hash was recomputed ("forged"): the break is reported
//!   at the event after it;
//! * within one file, a run's events must appear in `seq` order (else lines were reordered);
//! * after a run's `run.ended` come only the end's own events (`evaluation.result`,
//!   `checkpoint`, `error`): anything else means the run went on after it ended;
//! * each line of a file must be byte for byte the canonical JSON of its content ("not
//!   canonical": whitespace, key order, escapes, number forms, duplicate keys).
//!
//! With a public key ([`verify_paths_signed`], [`verify_events_signed`]) every run must also
//! be signed: each `run.ended` / `checkpoint` event (and any event carrying `signature`) must
//! bear a good signature by that key (see [`super::sign`]), a run with none is "unsigned", and
//! events after a run's last good signature are reported. Without a key, a run's tail can be
//! rewritten and re-hashed unnoticed; with it, it cannot.
//!
//! The chain cannot show that events were cut off the *end* of a run; keep the last hash
//! somewhere else (e.g. a collector) to detect that.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::sign::{RunVerifier, SIGNATURE_FIELD};
use super::{AuditEvent, expected_hash};
use run::{Breaks, Entry, Loc, RunKey, RunStream};

mod files;
mod run;
mod takeover;

pub use files::{AuditFiles, audit_files};
mod strict;

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

/// Collects events and breaks. Files: every run's events are kept (a run may span files in any
/// order) and checked at the end, sorted by `seq`. Streaming ([`StreamVerifier`]): events come
/// run by run in `seq` order and are checked at once, keeping no events.
#[derive(Default)]
struct Verifier {
    files: Vec<Arc<PathBuf>>,
    /// Events by run, keyed by (agentId, runId): two agents may use one run id.
    runs: BTreeMap<RunKey, Vec<Entry>>,
    breaks: Vec<(Option<usize>, ChainBreak)>,
    file_events: HashMap<usize, usize>,
    file_runs: HashMap<usize, std::collections::HashSet<String>>,
    events: usize,
    runs_checked: usize,
    key: Option<RunVerifier>,
    streaming: bool,
    allow_open: bool,
    current: Option<RunStream>,
    notes: Vec<VerifyNote>,
}

impl Breaks for Verifier {
    fn found(&mut self, loc: Loc, run: &RunKey, seq: u64, kind: BreakKind, message: String) {
        self.push_break(loc, Some(run), Some(seq), kind, message);
    }

    fn describe(&self, loc: Loc) -> String {
        match self.path(loc.file) {
            Some(p) => format!("{}:{}", p.display(), loc.line),
            None => format!("event {}", loc.line),
        }
    }
}

impl Verifier {
    fn new(key: Option<RunVerifier>, streaming: bool) -> Verifier {
        Verifier {
            key,
            streaming,
            ..Verifier::default()
        }
    }

    fn path(&self, file: Option<usize>) -> Option<PathBuf> {
        file.and_then(|f| self.files.get(f))
            .map(|p| p.to_path_buf())
    }

    fn push_break(
        &mut self,
        loc: Loc,
        run: Option<&RunKey>,
        seq: Option<u64>,
        kind: BreakKind,
        message: String,
    ) {
        let b = ChainBreak {
            path: self.path(loc.file),
            line: Some(loc.line),
            agent_id: run.map(|r| r.0.clone()),
            run_id: run.map(|r| r.1.clone()),
            seq,
            kind,
            message,
        };
        self.breaks.push((loc.file, b));
    }

    /// A line of input: strict form, then the event. `text` may end in a newline.
    fn add_line(&mut self, loc: Loc, text: &[u8]) {
        match serde_json::from_slice::<Value>(text) {
            Ok(v) => {
                let text = text.strip_suffix(b"\n").unwrap_or(text);
                if let Some(msg) = strict::not_canonical(text, &v) {
                    let str_of = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
                    let run = str_of("agentId").zip(str_of("runId"));
                    let seq = v.get("seq").and_then(Value::as_u64);
                    self.push_break(loc, run.as_ref(), seq, BreakKind::NotCanonical, msg);
                }
                self.add_value(loc, v)
            }
            Err(e) => self.push_break(
                loc,
                None,
                None,
                BreakKind::Malformed,
                format!("not valid JSON: {e}"),
            ),
        }
    }

    fn add_value(&mut self, loc: Loc, value: Value) {
        let computed = expected_hash(&value);
        let signature = match (&self.key, value.as_object()) {
            (Some(key), Some(map))
                if map.contains_key(SIGNATURE_FIELD)
                    || matches!(
                        map.get("kind").and_then(Value::as_str),
                        Some("run.ended" | "checkpoint")
                    ) =>
            {
                Some(key.verify_event(map))
            }
            _ => None,
        };
        let event = match AuditEvent::from_value(value) {
            Ok(e) => e,
            Err(e) => {
                self.push_break(loc, None, None, BreakKind::Malformed, e.to_string());
                return;
            }
        };
        self.events += 1;
        if let Some(f) = loc.file {
            *self.file_events.entry(f).or_default() += 1;
            self.file_runs.entry(f).or_default().insert(format!(
                "{}\u{1f}{}",
                event.agent_id(),
                event.run_id()
            ));
        }
        let entry = Entry {
            loc,
            seq: event.seq(),
            hash: event.hash().to_string(),
            prev_hash: event.prev_hash().map(str::to_owned),
            hash_ok: computed.as_deref() == Some(event.hash()),
            signature,
            is_end: event.kind() == super::EventKind::RunEnded,
            may_follow_end: super::may_follow_end(event.kind()),
            resumed: (event.kind() == super::EventKind::RunResumed)
                .then(|| event.body().get("headLost").and_then(Value::as_bool) == Some(true)),
            replaced: (event.kind() == super::EventKind::RunResumed)
                .then(|| {
                    event
                        .body()
                        .get("replacedHolder")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
                .flatten(),
        };
        let same_run = |r: &RunKey| r.0 == event.agent_id() && r.1 == event.run_id();
        if !self.streaming {
            let key = (event.agent_id().to_string(), event.run_id().to_string());
            self.runs.entry(key).or_default().push(entry);
            return;
        }
        let mut stream = match self.current.take() {
            Some(s) if same_run(s.run()) => s,
            other => {
                if let Some(done) = other {
                    self.end_run(done);
                }
                let key = (event.agent_id().to_string(), event.run_id().to_string());
                RunStream::new(key, self.key.is_some(), self.allow_open)
            }
        };
        stream.push(entry, self);
        self.current = Some(stream);
    }

    fn end_run(&mut self, stream: RunStream) {
        stream.finish(self);
        self.runs_checked += 1;
    }

    /// Files: checks every collected run (within-file order in the order read, then the chain
    /// by `seq`).
    fn check_runs(&mut self) {
        let runs = std::mem::take(&mut self.runs);
        for (key, mut entries) in runs {
            let mut last_in_file: HashMap<Option<usize>, u64> = HashMap::new();
            for e in &entries {
                if let Some(&prev) = last_in_file.get(&e.loc.file)
                    && e.seq < prev
                {
                    self.push_break(
                        e.loc,
                        Some(&key),
                        Some(e.seq),
                        BreakKind::OutOfOrder,
                        format!("out of order: appears after seq {prev}"),
                    );
                }
                let slot = last_in_file.entry(e.loc.file).or_insert(e.seq);
                *slot = (*slot).max(e.seq);
            }
            entries.sort_by_key(|e| e.seq);
            let entries = match takeover::split(&key, entries) {
                Err(entries) => entries,
                Ok((parts, notes)) => {
                    self.check_parts(&key, parts, notes);
                    continue;
                }
            };
            let mut stream = RunStream::new(key, self.key.is_some(), self.allow_open);
            for e in entries {
                stream.push(e, self);
            }
            self.end_run(stream);
        }
    }

    /// A run split at its takeovers (see `verify/takeover.rs`): each part checked as a chain.
    fn check_parts(
        &mut self,
        key: &RunKey,
        parts: Vec<takeover::Part>,
        notes: Vec<takeover::PartNote>,
    ) {
        for (loc, seq, warning, message) in notes {
            self.notes.push(VerifyNote {
                path: self.path(loc.file),
                line: Some(loc.line),
                agent_id: key.0.clone(),
                run_id: key.1.clone(),
                seq,
                warning,
                message,
            });
        }
        for part in parts {
            let mut stream = match part.after {
                Some((seq, hash)) => RunStream::continuing(key.clone(), seq, hash),
                None => RunStream::new(key.clone(), self.key.is_some(), self.allow_open),
            };
            for e in part.entries {
                stream.push(e, self);
            }
            stream.finish(self);
        }
        self.runs_checked += 1;
    }

    fn finish(
        mut self,
        unreadable: Vec<(PathBuf, String)>,
        skipped: Vec<(PathBuf, String)>,
    ) -> VerifyReport {
        self.check_runs();
        if let Some(stream) = self.current.take() {
            self.end_run(stream);
        }
        let mut breaks = std::mem::take(&mut self.breaks);
        breaks.sort_by_key(|(f, b)| (*f, b.line));
        let mut per_file: HashMap<usize, usize> = HashMap::new();
        for (f, _) in &breaks {
            if let Some(f) = f {
                *per_file.entry(*f).or_default() += 1;
            }
        }
        let files = self
            .files
            .iter()
            .enumerate()
            .map(|(i, p)| FileSummary {
                path: p.to_path_buf(),
                events: self.file_events.get(&i).copied().unwrap_or(0),
                runs: self.file_runs.get(&i).map_or(0, |r| r.len()),
                breaks: per_file.get(&i).copied().unwrap_or(0),
            })
            .collect();
        VerifyReport {
            files,
            breaks: breaks.into_iter().map(|(_, b)| b).collect(),
            unreadable,
            skipped,
            events: self.events,
            runs: self.runs_checked,
            notes: self.notes,
        }
    }
}

/// Verifies events that arrive run by run, each run's events in `seq` order, as a database
/// returns them (`ORDER BY agent_id, run_id, seq`): each event is checked as it comes, so memory
/// holds one event and a few counters, not a run. The checks are those of [`verify_paths`]
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

/// Verifies events held in memory (e.g. from a [`super::MemorySink`]). Breaks are located by
/// position in the input (1-based `line`, no `path`).
pub fn verify_events<'a>(events: impl IntoIterator<Item = &'a AuditEvent>) -> VerifyReport {
    verify_events_inner(events, None)
}

/// [`verify_events`], and every run must be signed by `key` (see the module docs).
pub fn verify_events_signed<'a>(
    events: impl IntoIterator<Item = &'a AuditEvent>,
    key: &RunVerifier,
) -> VerifyReport {
    verify_events_inner(events, Some(key.clone()))
}

fn verify_events_inner<'a>(
    events: impl IntoIterator<Item = &'a AuditEvent>,
    key: Option<RunVerifier>,
) -> VerifyReport {
    let mut v = Verifier::new(key, false);
    for (i, e) in events.into_iter().enumerate() {
        let loc = Loc {
            file: None,
            line: i + 1,
        };
        v.add_value(loc, e.to_json());
    }
    v.finish(Vec::new(), Vec::new())
}

/// The longest line [`verify_paths`] reads (128 MiB: an event holding a result at the MCP
/// gateway's default 64 MiB message limit, its escapes included); a longer line is a break and ends the
/// reading of its file, so memory stays bounded whatever the input.
pub const MAX_LINE_BYTES: usize = 128 << 20;

/// Verifies JSONL files and directories (searched recursively for `*.jsonl`, in name order).
/// All runs are checked across all files, so a run may span files.
///
/// Each real file is read once, however many paths (symlinks, repeated arguments) lead to it;
/// symlink loops end the search of that branch; in folders only regular files are read (a FIFO
/// or device named `*.jsonl` is skipped with a note in [`VerifyReport::skipped`]). Files named
/// on the command line are read whatever they are, up to the first line longer than
/// [`MAX_LINE_BYTES`].
pub fn verify_paths<P: AsRef<Path>>(paths: &[P]) -> VerifyReport {
    files::verify_paths_inner(paths, None, false)
}

/// [`verify_paths`], and every run must be signed by `key` (see the module docs); a signed
/// run without a signed `run.ended` is a break ([`BreakKind::Incomplete`]).
pub fn verify_paths_signed<P: AsRef<Path>>(paths: &[P], key: &RunVerifier) -> VerifyReport {
    files::verify_paths_inner(paths, Some(key.clone()), false)
}

/// [`verify_paths_signed`] where open runs are expected (`toolgate verify --allow-open`): a
/// run without `run.ended` is checked up to its last signature, and the events after it are
/// not breaks (nothing signs them yet).
pub fn verify_paths_signed_open<P: AsRef<Path>>(paths: &[P], key: &RunVerifier) -> VerifyReport {
    files::verify_paths_inner(paths, Some(key.clone()), true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{EventKind, RunChain};
    use chrono::Utc;
    use serde_json::{Map, json};

    fn run(n: usize) -> Vec<AuditEvent> {
        let mut c = RunChain::new("r", "a", None);
        (0..n)
            .map(|i| {
                let mut b = Map::new();
                b.insert("i".into(), json!(i));
                c.seal(EventKind::ToolResult, Utc::now(), b)
            })
            .collect()
    }

    #[test]
    fn intact_chain_is_ok() {
        let r = verify_events(&run(5));
        assert!(r.is_ok(), "{:?}", r.breaks);
        assert_eq!((r.events, r.runs), (5, 1));
    }

    #[test]
    fn deleted_event_is_missing_seq() {
        let mut evs = run(5);
        evs.remove(2);
        let r = verify_events(&evs);
        assert_eq!(r.breaks.len(), 1);
        assert_eq!(r.breaks[0].kind, BreakKind::MissingSeq);
        assert_eq!(r.breaks[0].seq, Some(3));
    }

    #[test]
    fn swapped_events_are_out_of_order() {
        let mut evs = run(5);
        evs.swap(1, 2);
        let r = verify_events(&evs);
        assert_eq!(r.breaks.len(), 1, "{:?}", r.breaks);
        assert_eq!(r.breaks[0].kind, BreakKind::OutOfOrder);
        assert_eq!(r.breaks[0].seq, Some(1));
    }

    #[test]
    fn streaming_finds_what_the_in_memory_check_finds() {
        let mut evs = run(6);
        evs.remove(2);
        let mut lines: Vec<String> = evs.iter().map(AuditEvent::to_canonical_json).collect();
        lines.insert(3, lines[3].clone());
        let parsed: Vec<AuditEvent> = lines
            .iter()
            .map(|l| AuditEvent::from_value(serde_json::from_str(l).unwrap()).unwrap())
            .collect();
        let whole = verify_events(&parsed);
        let mut s = StreamVerifier::new(None);
        for l in &lines {
            s.push_line(l);
        }
        let streamed = s.finish();
        let kinds = |r: &VerifyReport| r.breaks.iter().map(|b| (b.kind, b.seq)).collect::<Vec<_>>();
        assert_eq!(kinds(&streamed), kinds(&whole));
        assert_eq!(
            kinds(&whole),
            [
                (BreakKind::MissingSeq, Some(3)),
                (BreakKind::DuplicateSeq, Some(4))
            ]
        );
        assert_eq!((streamed.events, streamed.runs), (whole.events, whole.runs));

        // Lines are held to the canonical form, as in files.
        let mut s = StreamVerifier::new(None);
        s.push_line(&format!("{} ", lines[0]));
        let r = s.finish();
        assert_eq!(r.breaks.len(), 1, "{:?}", r.breaks);
        assert_eq!(r.breaks[0].kind, BreakKind::NotCanonical);
        assert_eq!(r.breaks[0].agent_id.as_deref(), Some("a"));
    }

    #[test]
    fn duplicate_is_reported() {
        let mut evs = run(3);
        evs.push(evs[1].clone());
        let r = verify_events(&evs);
        assert!(r.breaks.iter().any(|b| b.kind == BreakKind::DuplicateSeq));
    }
}
