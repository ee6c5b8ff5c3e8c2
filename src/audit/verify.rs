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
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::sign::{RunVerifier, SIGNATURE_FIELD, SignatureError};
use super::{AuditEvent, expected_hash};

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
}

/// One place where a chain breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainBreak {
    /// The file, when verifying files.
    pub path: Option<PathBuf>,
    /// 1-based line in the file (or position in the input when verifying events).
    pub line: Option<usize>,
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
}

impl VerifyReport {
    /// No breaks and nothing unreadable.
    pub fn is_ok(&self) -> bool {
        self.breaks.is_empty() && self.unreadable.is_empty()
    }
}

struct Entry {
    file: Option<usize>,
    line: usize,
    seq: u64,
    hash: String,
    prev_hash: Option<String>,
    hash_ok: bool,
    /// With a key: the result of checking the event's signature, if it is a signed point
    /// (`run.ended`, `checkpoint`, or any event carrying `signature`).
    signature: Option<Result<(), SignatureError>>,
}

#[derive(Default)]
struct Verifier {
    files: Vec<Arc<PathBuf>>,
    /// Events by run, keyed by (agentId, runId): two agents may use one run id.
    runs: BTreeMap<(String, String), Vec<Entry>>,
    breaks: Vec<(Option<usize>, ChainBreak)>,
    file_events: HashMap<usize, usize>,
    file_runs: HashMap<usize, std::collections::HashSet<String>>,
    events: usize,
    key: Option<RunVerifier>,
}

impl Verifier {
    fn path(&self, file: Option<usize>) -> Option<PathBuf> {
        file.and_then(|f| self.files.get(f))
            .map(|p| p.to_path_buf())
    }

    fn push_break(
        &mut self,
        file: Option<usize>,
        line: usize,
        run_id: Option<&str>,
        seq: Option<u64>,
        kind: BreakKind,
        message: String,
    ) {
        let b = ChainBreak {
            path: self.path(file),
            line: Some(line),
            run_id: run_id.map(str::to_owned),
            seq,
            kind,
            message,
        };
        self.breaks.push((file, b));
    }

    fn add_value(&mut self, file: Option<usize>, line: usize, value: Value) {
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
                self.push_break(file, line, None, None, BreakKind::Malformed, e.to_string());
                return;
            }
        };
        self.events += 1;
        if let Some(f) = file {
            *self.file_events.entry(f).or_default() += 1;
            self.file_runs.entry(f).or_default().insert(format!(
                "{}\u{1f}{}",
                event.agent_id(),
                event.run_id()
            ));
        }
        let entry = Entry {
            file,
            line,
            seq: event.seq(),
            hash: event.hash().to_string(),
            prev_hash: event.prev_hash().map(str::to_owned),
            hash_ok: computed.as_deref() == Some(event.hash()),
            signature,
        };
        self.runs
            .entry((event.agent_id().to_string(), event.run_id().to_string()))
            .or_default()
            .push(entry);
    }

    fn add_reader(&mut self, file: usize, reader: impl BufRead) -> Result<(), std::io::Error> {
        let mut reader = reader;
        let mut buf = Vec::with_capacity(1024);
        let mut line = 0usize;
        loop {
            buf.clear();
            let limit = MAX_LINE_BYTES as u64 + 1;
            if (&mut reader).take(limit).read_until(b'\n', &mut buf)? == 0 {
                return Ok(());
            }
            line += 1;
            if buf.len() > MAX_LINE_BYTES && buf.last() != Some(&b'\n') {
                self.push_break(
                    Some(file),
                    line,
                    None,
                    None,
                    BreakKind::Malformed,
                    format!(
                        "line longer than {} MiB; the rest of the file is not read",
                        MAX_LINE_BYTES >> 20
                    ),
                );
                return Ok(());
            }
            if buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<Value>(&buf) {
                Ok(v) => {
                    let text = buf.strip_suffix(b"\n").unwrap_or(&buf);
                    if let Some(msg) = strict::not_canonical(text, &v) {
                        let run = v.get("runId").and_then(Value::as_str).map(str::to_owned);
                        let seq = v.get("seq").and_then(Value::as_u64);
                        self.push_break(
                            Some(file),
                            line,
                            run.as_deref(),
                            seq,
                            BreakKind::NotCanonical,
                            msg,
                        );
                    }
                    self.add_value(Some(file), line, v)
                }
                Err(e) => self.push_break(
                    Some(file),
                    line,
                    None,
                    None,
                    BreakKind::Malformed,
                    format!("not valid JSON: {e}"),
                ),
            }
        }
    }

    fn where_(&self, e: &Entry) -> String {
        match self.path(e.file) {
            Some(p) => format!("{}:{}", p.display(), e.line),
            None => format!("event {}", e.line),
        }
    }

    fn check_runs(&mut self) -> usize {
        let runs = std::mem::take(&mut self.runs);
        let n = runs.len();
        for ((_agent_id, run_id), mut entries) in runs {
            let run = Some(run_id.as_str());
            // Edited events and within-file reordering, in the order read.
            let mut last_in_file: HashMap<Option<usize>, u64> = HashMap::new();
            for e in &entries {
                if !e.hash_ok {
                    self.push_break(
                        e.file,
                        e.line,
                        run,
                        Some(e.seq),
                        BreakKind::HashMismatch,
                        "hash does not match the event's content (the event was edited)".into(),
                    );
                }
                if let Some(&prev) = last_in_file.get(&e.file) {
                    if e.seq < prev {
                        self.push_break(
                            e.file,
                            e.line,
                            run,
                            Some(e.seq),
                            BreakKind::OutOfOrder,
                            format!("out of order: appears after seq {prev}"),
                        );
                    }
                }
                let slot = last_in_file.entry(e.file).or_insert(e.seq);
                *slot = (*slot).max(e.seq);
            }
            // The chain, by seq.
            entries.sort_by_key(|e| e.seq);
            let mut expected: u64 = 0;
            let mut prev: Option<usize> = None;
            for i in 0..entries.len() {
                let e = &entries[i];
                if let Some(p) = prev.filter(|_| e.seq + 1 == expected) {
                    let msg = if entries[p].hash == e.hash {
                        format!("duplicate of the event at {}", self.where_(&entries[p]))
                    } else {
                        format!(
                            "another event with this seq is at {}",
                            self.where_(&entries[p])
                        )
                    };
                    let (f, l, s) = (e.file, e.line, e.seq);
                    self.push_break(f, l, run, Some(s), BreakKind::DuplicateSeq, msg);
                    continue;
                }
                if e.seq > expected {
                    let missing = if e.seq - expected == 1 {
                        format!("seq {expected} is missing (deleted?)")
                    } else {
                        format!("seq {expected}..{} are missing (deleted?)", e.seq - 1)
                    };
                    let (f, l, s) = (e.file, e.line, e.seq);
                    self.push_break(f, l, run, Some(s), BreakKind::MissingSeq, missing);
                } else {
                    let want = prev.map(|p| entries[p].hash.as_str());
                    if e.prev_hash.as_deref() != want {
                        let msg = match prev {
                            None => "prevHash of seq 0 must be null".to_string(),
                            Some(p) => format!(
                                "prevHash does not match the hash of seq {} at {} (that event was \
                                 edited and re-hashed, or this one was)",
                                entries[p].seq,
                                self.where_(&entries[p])
                            ),
                        };
                        let (f, l, s) = (e.file, e.line, e.seq);
                        self.push_break(f, l, run, Some(s), BreakKind::PrevHashMismatch, msg);
                    }
                }
                expected = e.seq + 1;
                prev = Some(i);
            }
            if self.key.is_some() {
                self.check_signatures(&run_id, &entries);
            }
        }
        n
    }

    /// With a key: bad signatures, unsigned runs, and events after the last good signature.
    /// `entries` are sorted by `seq`.
    fn check_signatures(&mut self, run_id: &str, entries: &[Entry]) {
        let run = Some(run_id);
        let mut last_good: Option<usize> = None;
        let any_signed = entries
            .iter()
            .any(|e| matches!(&e.signature, Some(r) if *r != Err(SignatureError::Missing)));
        for (i, e) in entries.iter().enumerate() {
            match &e.signature {
                None => {}
                Some(Ok(())) => last_good = Some(i),
                Some(Err(_)) if !any_signed => {}
                Some(Err(err)) => {
                    let msg = match err {
                        SignatureError::Missing => {
                            "unsigned run.ended/checkpoint: signature or keyId missing".to_string()
                        }
                        other => other.to_string(),
                    };
                    let (f, l, s) = (e.file, e.line, e.seq);
                    self.push_break(f, l, run, Some(s), BreakKind::BadSignature, msg);
                }
            }
        }
        let Some(first) = entries.first() else {
            return;
        };
        if !any_signed {
            let (f, l, s) = (first.file, first.line, first.seq);
            self.push_break(
                f,
                l,
                run,
                Some(s),
                BreakKind::UnsignedRun,
                format!("run {run_id} is not signed ({} events)", entries.len()),
            );
            return;
        }
        let tail_from = last_good.map_or(0, |i| i + 1);
        if let Some(t) = entries.get(tail_from) {
            let after = match last_good {
                Some(i) => format!("the last good signature (seq {})", entries[i].seq),
                None => "no good signature".to_string(),
            };
            let msg = format!(
                "{} event(s) of run {run_id} after {after}: not covered by a signature",
                entries.len() - tail_from
            );
            let (f, l, s) = (t.file, t.line, t.seq);
            self.push_break(f, l, run, Some(s), BreakKind::AfterLastSigned, msg);
        }
    }

    fn finish(
        mut self,
        unreadable: Vec<(PathBuf, String)>,
        skipped: Vec<(PathBuf, String)>,
    ) -> VerifyReport {
        let runs = self.check_runs();
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
            runs,
        }
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
    let mut v = Verifier {
        key,
        ..Verifier::default()
    };
    for (i, e) in events.into_iter().enumerate() {
        v.add_value(None, i + 1, e.to_json());
    }
    v.finish(Vec::new(), Vec::new())
}

/// The longest line [`verify_paths`] reads (16 MiB); a longer line is a break and ends the
/// reading of its file, so memory stays bounded whatever the input.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// Verifies JSONL files and directories (searched recursively for `*.jsonl`, in name order).
/// All runs are checked across all files, so a run may span files.
///
/// Each real file is read once, however many paths (symlinks, repeated arguments) lead to it;
/// symlink loops end the search of that branch; in folders only regular files are read (a FIFO
/// or device named `*.jsonl` is skipped with a note in [`VerifyReport::skipped`]). Files named
/// on the command line are read whatever they are, up to the first line longer than
/// [`MAX_LINE_BYTES`].
pub fn verify_paths<P: AsRef<Path>>(paths: &[P]) -> VerifyReport {
    verify_paths_inner(paths, None)
}

/// [`verify_paths`], and every run must be signed by `key` (see the module docs).
pub fn verify_paths_signed<P: AsRef<Path>>(paths: &[P], key: &RunVerifier) -> VerifyReport {
    verify_paths_inner(paths, Some(key.clone()))
}

fn verify_paths_inner<P: AsRef<Path>>(paths: &[P], key: Option<RunVerifier>) -> VerifyReport {
    let mut files = Vec::new();
    let mut unreadable = Vec::new();
    let mut skipped = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for p in paths {
        let p = p.as_ref();
        match std::fs::metadata(p) {
            Err(e) => unreadable.push((p.to_path_buf(), e.to_string())),
            Ok(m) if m.is_dir() => {
                collect_jsonl(p, &mut files, &mut seen, &mut unreadable, &mut skipped)
            }
            Ok(_) => {
                if first_visit(&mut seen, p) {
                    files.push(p.to_path_buf());
                } else {
                    skipped.push((p.to_path_buf(), "already read by another path".into()));
                }
            }
        }
    }
    let mut v = Verifier {
        key,
        ..Verifier::default()
    };
    for path in files {
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) => {
                unreadable.push((path, e.to_string()));
                continue;
            }
        };
        let idx = v.files.len();
        v.files.push(Arc::new(path.clone()));
        if let Err(e) = v.add_reader(idx, std::io::BufReader::new(file)) {
            unreadable.push((path, e.to_string()));
        }
    }
    v.finish(unreadable, skipped)
}

/// True the first time a real file (by canonical path) is met.
fn first_visit(seen: &mut std::collections::HashSet<PathBuf>, p: &Path) -> bool {
    let real = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    seen.insert(real)
}

fn collect_jsonl(
    dir: &Path,
    out: &mut Vec<PathBuf>,
    seen: &mut std::collections::HashSet<PathBuf>,
    unreadable: &mut Vec<(PathBuf, String)>,
    skipped: &mut Vec<(PathBuf, String)>,
) {
    let walk = walkdir::WalkDir::new(dir)
        .follow_links(true)
        .sort_by_file_name();
    for entry in walk {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                let path = e.path().unwrap_or(dir).to_path_buf();
                if e.loop_ancestor().is_some() {
                    skipped.push((path, "symlink loop".into()));
                } else if e.depth() > 0 && path.extension().is_none_or(|x| x != "jsonl") {
                    skipped.push((path, format!("cannot search: {e}")));
                } else {
                    let reason = e
                        .io_error()
                        .map_or_else(|| e.to_string(), ToString::to_string);
                    unreadable.push((path, reason));
                }
                continue;
            }
        };
        let path = entry.path();
        if entry.file_type().is_dir() || path.extension().is_none_or(|x| x != "jsonl") {
            continue;
        }
        if !entry.file_type().is_file() {
            skipped.push((path.to_path_buf(), "not a regular file".into()));
        } else if first_visit(seen, path) {
            out.push(path.to_path_buf());
        } else {
            skipped.push((path.to_path_buf(), "already read by another path".into()));
        }
    }
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
    fn duplicate_is_reported() {
        let mut evs = run(3);
        evs.push(evs[1].clone());
        let r = verify_events(&evs);
        assert!(r.breaks.iter().any(|b| b.kind == BreakKind::DuplicateSeq));
    }
}
