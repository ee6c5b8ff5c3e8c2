//! Reading recorded events for a what-if replay: from files and folders (walked as `toolgate
//! verify` walks them) or a collector store, with every run's chain verified.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::WhatIfFilter;
use super::event_lines::Events;
use super::rebuild::{RunHead, RunSource};
use crate::audit::AuditEvent;
use crate::audit::store::{DEFAULT_PAGE, EventQuery, EventStore, StoreError};

/// What reading an audit trail found (see [`read_audit_trail`]).
#[derive(Debug, Clone, Default)]
pub struct AuditRead {
    /// The events the filter keeps.
    pub events: Vec<AuditEvent>,
    /// Lines that are not audit events (or not UTF-8).
    pub bad: usize,
    /// Problems met while reading, for people: a line that is not UTF-8 or not an event with
    /// its file and line, a path skipped (the first 100).
    pub notes: Vec<String>,
    /// Runs whose hash chain does not verify, by (agent, run), with the first break.
    pub broken: BTreeMap<(String, String), String>,
}

impl AuditRead {
    fn note(&mut self, text: String) {
        if self.notes.len() < 100 {
            self.notes.push(text);
        }
    }

    /// Records the runs `report` finds broken.
    fn add_breaks(&mut self, report: &crate::audit::VerifyReport) {
        for b in &report.breaks {
            if let (Some(a), Some(r)) = (&b.agent_id, &b.run_id) {
                self.broken
                    .entry((a.clone(), r.clone()))
                    .or_insert_with(|| b.to_string());
            }
        }
    }
}

/// Reads the audit events `filter` selects from JSONL files and folders, walked as `toolgate
/// verify` walks them ([`crate::audit::audit_files`]: each real file once, symlink loops and
/// FIFOs skipped), line by line; the filter applies while reading, so events of other agents
/// or older than `since` are never held. A line that is not UTF-8 or not an audit event is
/// counted and noted with its file and line, and reading goes on; an unreadable path is an
/// error. Every run's chain is verified too ([`crate::audit::verify_paths`]): broken runs are
/// in [`AuditRead::broken`]. All selected events are held: [`index_audit_trail`] does not.
pub fn read_audit_trail<P: AsRef<Path>>(
    paths: &[P],
    filter: &WhatIfFilter,
) -> Result<AuditRead, (PathBuf, std::io::Error)> {
    let mut out = AuditRead::default();
    let mut events = Vec::new();
    let files = scan(paths, filter, &mut out, |_, _, _, e| events.push(e))?;
    out.events = events;
    out.add_breaks(&crate::audit::verify_paths(&files));
    Ok(out)
}

/// A trail of JSONL files indexed for a what-if replay ([`index_audit_trail`]): per run, its
/// agent, id, seq-0 event and where in which files its lines are — no events.
#[derive(Debug, Clone, Default)]
pub struct AuditTrail {
    /// Lines that are not audit events (or not UTF-8).
    pub bad: usize,
    /// Problems met while reading (as [`AuditRead::notes`]).
    pub notes: Vec<String>,
    /// Runs whose hash chain does not verify, by (agent, run), with the first break.
    pub broken: BTreeMap<(String, String), String>,
    files: Arc<[PathBuf]>,
    heads: Vec<RunHead>,
    runs: Vec<FileRun>,
}

/// Where one run's lines are: per file (in reading order), the byte range from its first line
/// to the end of its last.
#[derive(Debug, Clone, Default)]
struct FileRun {
    segments: Vec<Segment>,
    /// Every event read had a larger seq than the one before (so reading order is seq order
    /// and no seq repeats).
    ordered: bool,
    last_seq: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
struct Segment {
    file: usize,
    start: u64,
    end: u64,
}

/// Indexes the audit events `filter` selects in JSONL files and folders for
/// [`super::what_if_trail`]: walked, read, noted and verified as [`read_audit_trail`] does, but
/// only a small index per run is kept (agent, run id, its seq-0 event, and the byte range of
/// its lines in each file), never the events.
pub fn index_audit_trail<P: AsRef<Path>>(
    paths: &[P],
    filter: &WhatIfFilter,
) -> Result<AuditTrail, (PathBuf, std::io::Error)> {
    let mut read = AuditRead::default();
    let mut runs: BTreeMap<(String, String), (RunHead, FileRun)> = BTreeMap::new();
    let files = scan(paths, filter, &mut read, |file, start, len, e| {
        let (head, run) = runs
            .entry((e.agent_id().to_string(), e.run_id().to_string()))
            .or_insert_with(|| {
                (
                    RunHead {
                        agent_id: e.agent_id().to_string(),
                        run_id: e.run_id().to_string(),
                        first: None,
                    },
                    FileRun {
                        ordered: true,
                        ..FileRun::default()
                    },
                )
            });
        if e.seq() == 0 && head.first.is_none() {
            head.first = Some((e.kind(), e.ts()));
        }
        if run.last_seq.is_some_and(|l| e.seq() <= l) {
            run.ordered = false;
        }
        run.last_seq = Some(e.seq());
        let end = start + len;
        match run.segments.last_mut() {
            Some(s) if s.file == file => s.end = end,
            _ => run.segments.push(Segment { file, start, end }),
        }
    })?;
    read.add_breaks(&crate::audit::verify_paths(&files));
    let (heads, runs) = runs.into_values().unzip();
    Ok(AuditTrail {
        bad: read.bad,
        notes: read.notes,
        broken: read.broken,
        files: files.into(),
        heads,
        runs,
    })
}

impl AuditTrail {
    pub(super) fn into_source(self, filter: &WhatIfFilter) -> FileRuns {
        FileRuns {
            filter: WhatIfFilter {
                exclude: BTreeMap::new(),
                ..filter.clone()
            },
            trail: self,
        }
    }
}

/// An indexed trail as a [`RunSource`]: a run's events are read from its files when opened.
pub(super) struct FileRuns {
    trail: AuditTrail,
    filter: WhatIfFilter,
}

impl RunSource for FileRuns {
    fn heads(&self) -> &[RunHead] {
        &self.trail.heads
    }

    fn open(&mut self, i: usize) -> Events {
        let (Some(head), Some(run)) = (self.trail.heads.get(i), self.trail.runs.get_mut(i)) else {
            return Box::new(std::iter::empty());
        };
        let reader = RunReader {
            files: self.trail.files.clone(),
            agent_id: head.agent_id.clone(),
            run_id: head.run_id.clone(),
            filter: self.filter.clone(),
            segments: std::mem::take(&mut run.segments).into(),
            window: VecDeque::new(),
        };
        if run.ordered {
            Box::new(reader)
        } else {
            // Out of order or repeated seqs: the run is read whole and put in seq order (the
            // first of a repeated seq kept).
            let mut evs: BTreeMap<u64, AuditEvent> = BTreeMap::new();
            for e in reader {
                evs.entry(e.seq()).or_insert(e);
            }
            Box::new(evs.into_values())
        }
    }
}

/// Events a [`RunReader`] reads at a time (at most; and at most [`WINDOW_BYTES`] of lines).
const WINDOW_EVENTS: usize = 64;
/// Bytes of lines a [`RunReader`] reads at a time (at least one line).
const WINDOW_BYTES: u64 = 256 << 10;

/// One run's events from its segments, in reading order: a window at a time, the file
/// opened and sought to where the last window ended, then closed (so open files stay few
/// however many runs are under way).
struct RunReader {
    files: Arc<[PathBuf]>,
    agent_id: String,
    run_id: String,
    filter: WhatIfFilter,
    segments: VecDeque<Segment>,
    window: VecDeque<AuditEvent>,
}

impl RunReader {
    /// Reads the next window; false when the run is read.
    fn refill(&mut self) -> bool {
        use std::io::{BufRead, Read, Seek};
        let Some(seg) = self.segments.front_mut() else {
            return false;
        };
        let Some(path) = self.files.get(seg.file) else {
            self.segments.pop_front();
            return true;
        };
        let opened = std::fs::File::open(path).and_then(|mut f| {
            f.seek(std::io::SeekFrom::Start(seg.start))?;
            Ok(f)
        });
        let file = match opened {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(
                    "what-if: {}: {e}; the rest of run {} there is not read",
                    path.display(),
                    self.run_id
                );
                self.segments.pop_front();
                return true;
            }
        };
        let mut reader = std::io::BufReader::new(file).take(seg.end.saturating_sub(seg.start));
        // A line without the run id as a JSON string (`"r-1"`: an id without quotes,
        // backslashes or control characters is written so unless escapes are used) and
        // without any escape cannot name the run.
        let plain = !self
            .run_id
            .bytes()
            .any(|b| b == b'"' || b == b'\\' || b < 0x20);
        let quoted = format!("\"{}\"", self.run_id);
        let mut buf = Vec::new();
        let mut read = 0u64;
        while self.window.len() < WINDOW_EVENTS && read < WINDOW_BYTES {
            buf.clear();
            let n = match reader.read_until(b'\n', &mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!("what-if: {}: {e}", path.display());
                    seg.start = seg.end;
                    break;
                }
            };
            read += n as u64;
            if plain
                && memchr::memmem::find(&buf, quoted.as_bytes()).is_none()
                && memchr::memchr(b'\\', &buf).is_none()
            {
                continue;
            }
            let Ok(line) = std::str::from_utf8(&buf) else {
                continue;
            };
            if let Ok(e) = serde_json::from_str::<AuditEvent>(line)
                && e.agent_id() == self.agent_id
                && e.run_id() == self.run_id
                && self.filter.keeps(&e)
            {
                self.window.push_back(e);
            }
        }
        seg.start = (seg.start + read).min(seg.end);
        if read == 0 || seg.start >= seg.end {
            self.segments.pop_front();
        }
        true
    }
}

impl Iterator for RunReader {
    type Item = AuditEvent;

    fn next(&mut self) -> Option<AuditEvent> {
        loop {
            if let Some(e) = self.window.pop_front() {
                return Some(e);
            }
            if !self.refill() {
                return None;
            }
        }
    }
}

/// Walks `paths` as `toolgate verify` does and reads every line: a line that is not UTF-8 or
/// not an audit event is counted and noted in `out`; an event `filter` keeps is handed to
/// `keep` with its file (index into the files returned), byte offset and length.
fn scan<P: AsRef<Path>>(
    paths: &[P],
    filter: &WhatIfFilter,
    out: &mut AuditRead,
    mut keep: impl FnMut(usize, u64, u64, AuditEvent),
) -> Result<Vec<PathBuf>, (PathBuf, std::io::Error)> {
    use std::io::BufRead;
    let (files, unreadable, skipped) = crate::audit::audit_files(paths);
    if let Some((p, why)) = unreadable.into_iter().next() {
        return Err((p, std::io::Error::other(why)));
    }
    for (p, why) in skipped {
        out.note(format!("{}: skipped: {why}", p.display()));
    }
    let mut buf = Vec::new();
    for (fi, f) in files.iter().enumerate() {
        let file = std::fs::File::open(f).map_err(|e| (f.clone(), e))?;
        let mut reader = std::io::BufReader::new(file);
        let mut n = 0usize;
        let mut offset = 0u64;
        loop {
            buf.clear();
            let len = reader
                .read_until(b'\n', &mut buf)
                .map_err(|e| (f.clone(), e))? as u64;
            if len == 0 {
                break;
            }
            let start = offset;
            offset += len;
            n += 1;
            if buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let Ok(line) = std::str::from_utf8(&buf) else {
                out.bad += 1;
                out.note(format!("{}:{n}: not UTF-8; line skipped", f.display()));
                continue;
            };
            match serde_json::from_str::<AuditEvent>(line) {
                Ok(e) if filter.keeps(&e) => keep(fi, start, len, e),
                Ok(_) => {}
                Err(e) => {
                    out.bad += 1;
                    out.note(format!(
                        "{}:{n}: not an audit event ({e}); line skipped",
                        f.display()
                    ));
                }
            }
        }
    }
    Ok(files)
}

/// Reads audit events from JSONL files and folders ([`read_audit_trail`] without a filter):
/// the events, and the number of lines that are not audit events.
pub fn read_audit_paths<P: AsRef<Path>>(
    paths: &[P],
) -> Result<(Vec<AuditEvent>, usize), (PathBuf, std::io::Error)> {
    read_audit_trail(paths, &WhatIfFilter::default()).map(|r| (r.events, r.bad))
}

/// Reads the audit events `filter` selects from a collector store (e.g. the PostgreSQL store
/// of `toolgate collect --store postgres://...`), page by page. Stored lines that are not
/// audit events are counted, not fatal.
pub async fn read_store(
    store: &dyn EventStore,
    filter: &WhatIfFilter,
) -> Result<(Vec<AuditEvent>, usize), StoreError> {
    let mut query = EventQuery {
        agent_id: filter.agent.clone(),
        kind: None,
        since: filter.since,
        until: None,
        after: None,
        limit: DEFAULT_PAGE,
    };
    let mut events = Vec::new();
    let mut bad = 0usize;
    loop {
        let page = store.events(&query).await?;
        for line in &page.lines {
            match serde_json::from_str::<AuditEvent>(line) {
                Ok(e) => events.push(e),
                Err(_) => bad += 1,
            }
        }
        match page.next {
            Some(next) => query.after = Some(next),
            None => return Ok((events, bad)),
        }
    }
}

/// [`read_store`], with every read run's chain verified ([`AuditRead::broken`]).
pub async fn read_store_verified(
    store: &dyn EventStore,
    filter: &WhatIfFilter,
) -> Result<AuditRead, StoreError> {
    let (events, bad) = read_store(store, filter).await?;
    let mut out = AuditRead {
        bad,
        ..AuditRead::default()
    };
    out.add_breaks(&crate::audit::verify_events(&events));
    out.events = events;
    Ok(out)
}
