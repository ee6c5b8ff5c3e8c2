//! The checker behind every verification: it takes events (lines of files, or values) and
//! finds the breaks of their runs.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;

use super::run::{Breaks, Entry, Loc, RunKey, RunStream};
use super::{BreakKind, ChainBreak, FileSummary, VerifyNote, VerifyReport};
use super::{strict, takeover};
use crate::audit::sign::{RunVerifier, SIGNATURE_FIELD};
use crate::audit::{AuditEvent, EventKind, expected_hash, may_follow_end};

/// Collects events and breaks. Files: every run's events are kept (a run may span files in any
/// order) and checked at the end, sorted by `seq`. Streaming ([`super::StreamVerifier`]): events come
/// run by run in `seq` order and are checked at once, keeping no events.
#[derive(Default)]
pub(super) struct Verifier {
    pub(super) files: Vec<Arc<PathBuf>>,
    /// Events by run, keyed by (agentId, runId): two agents may use one run id.
    pub(super) runs: BTreeMap<RunKey, Vec<Entry>>,
    pub(super) breaks: Vec<(Option<usize>, ChainBreak)>,
    pub(super) file_events: HashMap<usize, usize>,
    pub(super) file_runs: HashMap<usize, std::collections::HashSet<String>>,
    pub(super) events: usize,
    pub(super) runs_checked: usize,
    pub(super) key: Option<RunVerifier>,
    pub(super) streaming: bool,
    pub(super) allow_open: bool,
    pub(super) current: Option<RunStream>,
    pub(super) notes: Vec<VerifyNote>,
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
    pub(super) fn new(key: Option<RunVerifier>, streaming: bool) -> Verifier {
        Verifier {
            key,
            streaming,
            ..Verifier::default()
        }
    }

    pub(super) fn path(&self, file: Option<usize>) -> Option<PathBuf> {
        file.and_then(|f| self.files.get(f))
            .map(|p| p.to_path_buf())
    }

    pub(super) fn push_break(
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
    pub(super) fn add_line(&mut self, loc: Loc, text: &[u8]) {
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

    pub(super) fn add_value(&mut self, loc: Loc, value: Value) {
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
            is_end: event.kind() == EventKind::RunEnded,
            may_follow_end: may_follow_end(event.kind()),
            resumed: (event.kind() == EventKind::RunResumed)
                .then(|| event.body().get("headLost").and_then(Value::as_bool) == Some(true)),
            replaced: (event.kind() == EventKind::RunResumed)
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

    pub(super) fn end_run(&mut self, stream: RunStream) {
        stream.finish(self);
        self.runs_checked += 1;
    }

    /// Files: checks every collected run (within-file order in the order read, then the chain
    /// by `seq`).
    pub(super) fn check_runs(&mut self) {
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
    pub(super) fn check_parts(
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

    pub(super) fn finish(
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
