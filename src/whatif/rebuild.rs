//! Rebuilding the replay trace: which runs are replayed, and a k-way merge by time over their
//! events, each run read lazily from its [`RunSource`], so only the runs under way at a moment
//! (a bounded window of each) are held.

use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};

use chrono::{DateTime, Utc};

use super::event_lines::{Events, RunLine};
use super::llm_lines::RunLines;
use super::{Recorded, SkippedRun, WhatIfFilter};
use crate::audit::{AuditEvent, EventKind};
use crate::trace::TraceLine;

/// A run as the first pass over the trail found it.
#[derive(Debug, Clone)]
pub(super) struct RunHead {
    pub(super) agent_id: String,
    pub(super) run_id: String,
    /// Its seq-0 event (the first one read): kind and time.
    pub(super) first: Option<(EventKind, DateTime<Utc>)>,
}

/// Where the runs' events are read from.
pub(super) trait RunSource {
    /// The runs, in (agent, run id) order.
    fn heads(&self) -> &[RunHead];
    /// Run `i`'s events in seq order, each seq once (the first read); called once per run.
    fn open(&mut self, i: usize) -> Events;
}

/// Runs held in memory (events handed in as a list).
pub(super) struct MemoryRuns {
    heads: Vec<RunHead>,
    events: Vec<BTreeMap<u64, AuditEvent>>,
}

impl MemoryRuns {
    /// Groups `events` by run (the agent filter applies; duplicates by seq are dropped, the
    /// first kept).
    pub(super) fn new(events: impl IntoIterator<Item = AuditEvent>, filter: &WhatIfFilter) -> Self {
        let mut runs: BTreeMap<(String, String), BTreeMap<u64, AuditEvent>> = BTreeMap::new();
        for e in events {
            if filter.agent.as_deref().is_some_and(|a| a != e.agent_id()) {
                continue;
            }
            runs.entry((e.agent_id().to_string(), e.run_id().to_string()))
                .or_default()
                .entry(e.seq())
                .or_insert(e);
        }
        let mut out = MemoryRuns {
            heads: Vec::with_capacity(runs.len()),
            events: Vec::with_capacity(runs.len()),
        };
        for ((agent_id, run_id), evs) in runs {
            out.heads.push(RunHead {
                agent_id,
                run_id,
                first: evs.get(&0).map(|e| (e.kind(), e.ts())),
            });
            out.events.push(evs);
        }
        out
    }
}

impl RunSource for MemoryRuns {
    fn heads(&self) -> &[RunHead] {
        &self.heads
    }

    fn open(&mut self, i: usize) -> Events {
        let evs = self
            .events
            .get_mut(i)
            .map(std::mem::take)
            .unwrap_or_default();
        Box::new(evs.into_values())
    }
}

/// A run's lines, lazily.
type Lines = Box<dyn Iterator<Item = RunLine> + Send>;

/// The rebuilt trace as a stream: each line with the recorded decision of a `tool.call`.
/// Runs are interleaved by time (ties by run, in (agent, run id) order); a run's own lines
/// stay in seq order. A run's events are read when the merge reaches its start and dropped
/// as they are replayed.
pub(super) struct Merge<S: RunSource> {
    source: S,
    /// Selected runs: index into the source's heads, by merge index.
    selected: Vec<usize>,
    /// Selected runs not yet opened: (start time, merge index), in that order, reversed.
    waiting: Vec<(DateTime<Utc>, usize)>,
    open: HashMap<usize, Lines>,
    heap: BinaryHeap<std::cmp::Reverse<Head>>,
    signals_seen: BTreeSet<String>,
    pending: std::collections::VecDeque<(TraceLine, Option<Recorded>)>,
    /// Runs rebuilt.
    pub(super) runs: usize,
    /// Runs left out, with the reason.
    pub(super) skipped: Vec<SkippedRun>,
}

impl<S: RunSource> Merge<S> {
    /// Chooses the runs of `source` to replay (see [`super::rebuild_trace`]).
    pub(super) fn new(source: S, filter: &WhatIfFilter) -> Self {
        let mut skipped = Vec::new();
        let mut selected = Vec::new();
        let mut waiting = Vec::new();
        let mut seen_run_ids: BTreeSet<&str> = BTreeSet::new();
        for (i, head) in source.heads().iter().enumerate() {
            let skip = |reason: &str| SkippedRun {
                agent_id: head.agent_id.clone(),
                run_id: head.run_id.clone(),
                reason: reason.to_string(),
                chain_broken: false,
            };
            let Some((kind, ts)) = head.first else {
                // With --since, a run that started earlier is cut: leave it out quietly.
                if filter.since.is_none() {
                    skipped.push(skip("its run.started (seq 0) is not in the trail"));
                }
                continue;
            };
            if let Some(why) = filter
                .exclude
                .get(&(head.agent_id.clone(), head.run_id.clone()))
            {
                skipped.push(SkippedRun {
                    chain_broken: true,
                    ..skip(&format!("its hash chain does not verify: {why}"))
                });
                continue;
            }
            if kind != EventKind::RunStarted {
                skipped.push(skip("seq 0 is not run.started"));
                continue;
            }
            if filter.since.is_some_and(|t| ts < t) {
                continue;
            }
            if !seen_run_ids.insert(&head.run_id) {
                skipped.push(skip("another agent's run has the same run id"));
                continue;
            }
            waiting.push((ts, selected.len()));
            selected.push(i);
        }
        // Popped from the end: latest last.
        waiting.sort_unstable_by(|a, b| b.cmp(a));
        let runs = selected.len();
        Merge {
            source,
            selected,
            waiting,
            open: HashMap::new(),
            heap: BinaryHeap::new(),
            signals_seen: BTreeSet::new(),
            pending: std::collections::VecDeque::new(),
            runs,
            skipped,
        }
    }

    /// Opens every waiting run that starts before the next line in the merge. A run's first
    /// line is its `run.started` (seq 0), at its start time.
    fn open_due(&mut self) {
        while let Some(&(ts, i)) = self.waiting.last() {
            if self
                .heap
                .peek()
                .is_some_and(|std::cmp::Reverse(h)| (h.0, h.1) < (ts, i))
            {
                return;
            }
            self.waiting.pop();
            let Some(&src) = self.selected.get(i) else {
                continue;
            };
            let run_id = self
                .source
                .heads()
                .get(src)
                .map(|h| h.run_id.clone())
                .unwrap_or_default();
            let mut lines: Lines = Box::new(RunLines::new(run_id, self.source.open(src)));
            if let Some(item) = lines.next() {
                self.heap.push(std::cmp::Reverse(Head(item.0, i, item)));
                self.open.insert(i, lines);
            }
        }
    }
}

impl<S: RunSource> Iterator for Merge<S> {
    type Item = (TraceLine, Option<Recorded>);

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(item) = self.pending.pop_front() {
            return Some(item);
        }
        self.open_due();
        let std::cmp::Reverse(Head(_, i, (_, line, meta))) = self.heap.pop()?;
        // The replayer's signal providers are global: before each call, set the signals its
        // recorded decision resolved and make every other signal set so far fail.
        let recorded = meta.map(|meta| {
            for key in &self.signals_seen {
                if !meta.signals.contains_key(key) {
                    self.pending.push_back((not_recorded(key), None));
                }
            }
            for (key, (value, error)) in meta.signals {
                self.signals_seen.insert(key.clone());
                self.pending.push_back((
                    TraceLine::Signal {
                        key,
                        value,
                        error,
                        delay_ms: None,
                        at: None,
                    },
                    None,
                ));
            }
            meta.recorded
        });
        self.pending.push_back((line, recorded));
        match self.open.get_mut(&i).and_then(Iterator::next) {
            Some(next) => self.heap.push(std::cmp::Reverse(Head(next.0, i, next))),
            None => {
                self.open.remove(&i);
            }
        }
        self.pending.pop_front()
    }
}

/// A run's next line in the merge: ordered by time, then by run.
struct Head(DateTime<Utc>, usize, RunLine);

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        (self.0, self.1) == (other.0, other.1)
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Head {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.0, self.1).cmp(&(other.0, other.1))
    }
}

fn not_recorded(key: &str) -> TraceLine {
    TraceLine::Signal {
        key: key.to_string(),
        value: None,
        error: Some("not called by the recorded decision".to_string()),
        delay_ms: None,
        at: None,
    }
}
