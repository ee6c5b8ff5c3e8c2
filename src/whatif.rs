//! What-if replay: decide recorded traffic again under another policy.
//!
//! [`rebuild_trace`] turns audit events (as a folder of JSONL trails holds them) back into a
//! replay trace (see [`crate::trace`]): each run's start (agent, end user and tags), its calls
//! (tool, tags, args, subjects), their results (output, error, duration, so the inbuilt
//! metrics), its LLM calls and its end, all at their recorded times, the runs interleaved by
//! time as they happened. The signal values a call saw are taken from its recorded decision
//! (`decision.signals`): before each call, every signal the recorded decision resolved is set
//! to the recorded value (or error), and every other signal seen so far is set to fail, so a
//! signal the new policy asks for and the recorded decision did not is missing data.
//!
//! [`what_if`] replays that trace through an engine built with the new policy and pairs each
//! call's new before-phase decision with the recorded one. See `docs/what-if.md` for what it
//! cannot reproduce.

use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::audit::store::{DEFAULT_PAGE, EventQuery, EventStore, StoreError};
use crate::audit::{AuditEvent, EventKind};
use crate::engine::{Enduser, EngineBuilder, EngineError, RunContext, SubjectRef};
use crate::trace::{Replayer, TraceLine, TraceTool};

/// Which recorded runs to replay.
#[derive(Debug, Clone, Default)]
pub struct WhatIfFilter {
    /// Only runs of this agent.
    pub agent: Option<String>,
    /// Only runs that started at or after this time.
    pub since: Option<DateTime<Utc>>,
}

/// A recorded call decided again.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WhatIfCall {
    /// The run.
    pub run_id: String,
    /// The call.
    pub call_id: String,
    /// The agent.
    #[serde(skip)]
    pub agent_id: String,
    /// The tool's name.
    pub tool: String,
    /// When the call was made.
    #[serde(skip)]
    pub at: DateTime<Utc>,
    /// The recorded effect (`allow`, `block`, `hitl`).
    pub recorded_effect: String,
    /// The new effect.
    pub new_effect: String,
    /// The recorded deciding rule.
    pub recorded_rule_id: Option<String>,
    /// The new deciding rule.
    pub new_rule_id: Option<String>,
    /// The recorded decision code.
    #[serde(skip)]
    pub recorded_code: String,
    /// The new decision code.
    pub new_code: String,
}

impl WhatIfCall {
    /// Whether the call's effect would change.
    pub fn changed(&self) -> bool {
        self.recorded_effect != self.new_effect
    }
}

/// A run that could not be replayed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedRun {
    /// The agent.
    pub agent_id: String,
    /// The run.
    pub run_id: String,
    /// Why.
    pub reason: String,
}

/// The outcome of a what-if replay.
#[derive(Debug, Clone, Default)]
pub struct WhatIfReport {
    /// Every replayed call, in the order replayed.
    pub calls: Vec<WhatIfCall>,
    /// Runs replayed.
    pub runs: usize,
    /// Runs left out (incomplete in the trail, or a line the replay refused).
    pub skipped: Vec<SkippedRun>,
}

impl WhatIfReport {
    /// The calls whose effect would change.
    pub fn changed(&self) -> impl Iterator<Item = &WhatIfCall> {
        self.calls.iter().filter(|c| c.changed())
    }

    /// Counts of each change (`(recorded, new)` effect), most frequent first.
    pub fn transitions(&self) -> Vec<((String, String), usize)> {
        let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
        for c in self.changed() {
            *counts
                .entry((c.recorded_effect.clone(), c.new_effect.clone()))
                .or_default() += 1;
        }
        let mut v: Vec<_> = counts.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// `1,204 calls: 37 would change: 30 allow→block, 7 block→allow` (or `…: none would
    /// change`).
    pub fn summary(&self) -> String {
        let n = self.changed().count();
        let calls = thousands(self.calls.len());
        if n == 0 {
            return format!("{calls} calls: none would change");
        }
        let parts: Vec<String> = self
            .transitions()
            .into_iter()
            .map(|((from, to), k)| format!("{} {from}→{to}", thousands(k)))
            .collect();
        format!(
            "{calls} calls: {} would change: {}",
            thousands(n),
            parts.join(", ")
        )
    }
}

/// `1234567` → `1,234,567`.
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// What was recorded for a call: its before-phase decision.
#[derive(Debug, Clone)]
struct Recorded {
    agent_id: String,
    tool: String,
    at: DateTime<Utc>,
    effect: String,
    rule_id: Option<String>,
    code: String,
}

/// A trace rebuilt from audit events.
#[derive(Debug, Clone, Default)]
pub struct RebuiltTrace {
    /// The trace lines, in replay order.
    pub lines: Vec<TraceLine>,
    /// Runs rebuilt.
    pub runs: usize,
    /// Runs left out, with the reason.
    pub skipped: Vec<SkippedRun>,
    recorded: HashMap<(String, String), Recorded>,
}

/// Reads audit events from JSONL files and folders (searched recursively for `*.jsonl`).
/// Lines that are not audit events are counted, not fatal; unreadable paths are errors.
pub fn read_audit_paths<P: AsRef<Path>>(
    paths: &[P],
) -> Result<(Vec<AuditEvent>, usize), (PathBuf, std::io::Error)> {
    let mut files = Vec::new();
    for p in paths {
        collect_jsonl(p.as_ref(), &mut files)?;
    }
    let mut events = Vec::new();
    let mut bad = 0usize;
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| (f.clone(), e))?;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            match serde_json::from_str::<AuditEvent>(line) {
                Ok(e) => events.push(e),
                Err(_) => bad += 1,
            }
        }
    }
    Ok((events, bad))
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

fn collect_jsonl(p: &Path, out: &mut Vec<PathBuf>) -> Result<(), (PathBuf, std::io::Error)> {
    let meta = std::fs::metadata(p).map_err(|e| (p.to_path_buf(), e))?;
    if !meta.is_dir() {
        out.push(p.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
        .map_err(|e| (p.to_path_buf(), e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for e in entries {
        if e.is_dir() {
            collect_jsonl(&e, out)?;
        } else if e.extension().is_some_and(|x| x == "jsonl") {
            out.push(e);
        }
    }
    Ok(())
}

/// Rebuilds the replay trace of the recorded runs `filter` selects (see the module docs).
/// A run is rebuilt only when its trail starts with `run.started` (seq 0); runs are keyed by
/// (agent, run id), and each event is used once (duplicates by seq are dropped).
pub fn rebuild_trace(
    events: impl IntoIterator<Item = AuditEvent>,
    filter: &WhatIfFilter,
) -> RebuiltTrace {
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
    let mut out = RebuiltTrace::default();
    let mut seen_run_ids: BTreeSet<String> = BTreeSet::new();
    // Per run: its lines with their times, in seq order.
    let mut per_run: Vec<Vec<RunLine>> = Vec::new();
    for ((agent_id, run_id), evs) in runs {
        let skip = |reason: &str| SkippedRun {
            agent_id: agent_id.clone(),
            run_id: run_id.clone(),
            reason: reason.to_string(),
        };
        let Some(first) = evs.get(&0) else {
            // With --since, a run that started earlier is cut: leave it out quietly.
            if filter.since.is_none() {
                out.skipped
                    .push(skip("its run.started (seq 0) is not in the trail"));
            }
            continue;
        };
        if first.kind() != EventKind::RunStarted {
            out.skipped.push(skip("seq 0 is not run.started"));
            continue;
        }
        if filter.since.is_some_and(|t| first.ts() < t) {
            continue;
        }
        if !seen_run_ids.insert(run_id.clone()) {
            out.skipped
                .push(skip("another agent's run has the same run id"));
            continue;
        }
        per_run.push(run_lines(&run_id, evs.into_values()));
        out.runs += 1;
    }
    // Interleave the runs by time (a run's own lines stay in seq order).
    let mut heap = BinaryHeap::new();
    let mut iters: Vec<_> = per_run.into_iter().map(|v| v.into_iter()).collect();
    for (i, it) in iters.iter_mut().enumerate() {
        if let Some(item) = it.next() {
            heap.push(std::cmp::Reverse(Head(item.0, i, item)));
        }
    }
    // The replayer's signal providers are global: before each call, set the signals its
    // recorded decision resolved and make every other signal set so far fail.
    let mut signals_seen: BTreeSet<String> = BTreeSet::new();
    while let Some(std::cmp::Reverse(Head(_, i, (_, line, meta)))) = heap.pop() {
        if let Some(meta) = meta {
            for key in &signals_seen {
                if !meta.signals.contains_key(key) {
                    out.lines.push(not_recorded(key));
                }
            }
            for (key, (value, error)) in meta.signals {
                signals_seen.insert(key.clone());
                out.lines.push(TraceLine::Signal {
                    key,
                    value,
                    error,
                    delay_ms: None,
                    at: None,
                });
            }
            let run_id = match &line {
                TraceLine::ToolCall { run_id, .. } => run_id.clone().unwrap_or_default(),
                _ => String::new(),
            };
            out.recorded.insert((run_id, meta.call_id), meta.recorded);
        }
        out.lines.push(line);
        if let Some(next) = iters.get_mut(i).and_then(Iterator::next) {
            heap.push(std::cmp::Reverse(Head(next.0, i, next)));
        }
    }
    out
}

type RunLine = (DateTime<Utc>, TraceLine, Option<CallMeta>);

/// What goes with a rebuilt `tool.call`: the recorded decision and the signals it saw.
struct CallMeta {
    call_id: String,
    recorded: Recorded,
    signals: BTreeMap<String, (Option<Value>, Option<String>)>,
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

fn str_field(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::to_owned)
}

/// One run's trace lines (with the recorded before-phase decisions), in seq order.
fn run_lines(run_id: &str, events: impl Iterator<Item = AuditEvent>) -> Vec<RunLine> {
    let mut lines: Vec<RunLine> = Vec::new();
    let run = Some(run_id.to_string());
    for e in events {
        let b = e.body();
        let at = e.ts();
        match e.kind() {
            EventKind::RunStarted => {
                let ctx: Option<RunContext> = b
                    .get("runContext")
                    .and_then(|c| serde_json::from_value(c.clone()).ok());
                let enduser: Option<Enduser> = ctx.as_ref().and_then(|c| c.enduser.clone());
                let enduser = enduser.or_else(|| {
                    e.enduser_id().map(|id| Enduser {
                        id: id.to_string(),
                        tags: BTreeMap::new(),
                    })
                });
                lines.push((
                    at,
                    TraceLine::RunStart {
                        run_id: run_id.to_string(),
                        agent_id: e.agent_id().to_string(),
                        agent_tags: ctx
                            .as_ref()
                            .map(|c| c.agent_tags.clone())
                            .unwrap_or_default(),
                        session_id: ctx.and_then(|c| c.session_id),
                        enduser,
                        at: Some(at),
                    },
                    None,
                ));
            }
            EventKind::ToolDecision
                if b.get("phase").and_then(Value::as_str) == Some("tool.before") =>
            {
                let Some(call_id) = str_field(b.get("callId")) else {
                    continue;
                };
                let tool: TraceTool = match b.get("tool").map(|t| serde_json::from_value(t.clone()))
                {
                    Some(Ok(t)) => t,
                    _ => continue,
                };
                let decision = b.get("decision");
                // The signal values the recorded decision saw.
                let mut resolved: BTreeMap<String, (Option<Value>, Option<String>)> =
                    BTreeMap::new();
                for s in decision
                    .and_then(|d| d.get("signals"))
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let Some(key) = str_field(s.get("key")) else {
                        continue;
                    };
                    let value = s.get("value").cloned();
                    let error = match &value {
                        Some(_) => None,
                        None => Some(
                            str_field(s.get("error"))
                                .unwrap_or_else(|| "no value recorded".to_string()),
                        ),
                    };
                    resolved.insert(key, (value, error));
                }
                let subjects: Vec<SubjectRef> = b
                    .get("subjects")
                    .and_then(|s| serde_json::from_value(s.clone()).ok())
                    .unwrap_or_default();
                let recorded = Recorded {
                    agent_id: e.agent_id().to_string(),
                    tool: tool.name.clone(),
                    at,
                    effect: decision
                        .and_then(|d| str_field(d.get("effect")))
                        .unwrap_or_default(),
                    rule_id: decision.and_then(|d| str_field(d.get("ruleId"))),
                    code: decision
                        .and_then(|d| str_field(d.get("code")))
                        .unwrap_or_default(),
                };
                lines.push((
                    at,
                    TraceLine::ToolCall {
                        run_id: run.clone(),
                        id: call_id.clone(),
                        tool,
                        args: b.get("args").cloned().unwrap_or(Value::Null),
                        subjects,
                        at: Some(at),
                    },
                    Some(CallMeta {
                        call_id,
                        recorded,
                        signals: resolved,
                    }),
                ));
            }
            EventKind::ToolResult => {
                let Some(call_id) = str_field(b.get("callId")) else {
                    continue;
                };
                lines.push((
                    at,
                    TraceLine::ToolResult {
                        run_id: run.clone(),
                        id: call_id,
                        output: b.get("output").cloned(),
                        duration_ms: b.get("durationMs").and_then(Value::as_f64),
                        error: str_field(b.get("error")),
                        at: Some(at),
                    },
                    None,
                ));
            }
            EventKind::LlmResult => lines.push((
                at,
                TraceLine::Llm {
                    run_id: run.clone(),
                    tokens_in: b.get("tokensIn").and_then(Value::as_u64).unwrap_or(0),
                    tokens_out: b.get("tokensOut").and_then(Value::as_u64).unwrap_or(0),
                    cost_usd: b.get("costUsd").and_then(Value::as_f64).unwrap_or(0.0),
                    at: Some(at),
                },
                None,
            )),
            EventKind::RunEnded => lines.push((
                at,
                TraceLine::RunEnd {
                    run_id: run.clone(),
                    status: str_field(b.get("status")),
                    final_response: str_field(b.get("finalResponse")),
                    at: Some(at),
                },
                None,
            )),
            _ => {}
        }
    }
    lines
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

/// Replays the recorded runs of `events` that `filter` selects through an engine built from
/// `builder` (the new policy; its clock is replaced by the recorded times) and pairs each
/// call's new before-phase decision with the recorded one.
pub async fn what_if(
    builder: EngineBuilder,
    org_timezone: Option<chrono_tz::Tz>,
    events: impl IntoIterator<Item = AuditEvent>,
    filter: &WhatIfFilter,
) -> Result<WhatIfReport, EngineError> {
    let trace = rebuild_trace(events, filter);
    let mut replayer = Replayer::with_builder(builder, org_timezone)?;
    let mut report = WhatIfReport {
        runs: trace.runs,
        skipped: trace.skipped,
        ..WhatIfReport::default()
    };
    let recorded = trace.recorded;
    for line in trace.lines {
        let rows = match replayer.step(line).await {
            Ok(rows) => rows,
            Err(message) => {
                tracing::warn!("what-if: a rebuilt line was refused: {message}");
                continue;
            }
        };
        for row in rows.into_iter().filter(|r| r.phase == "tool.before") {
            let Some(rec) = recorded.get(&(row.run_id.clone(), row.call_id.clone())) else {
                continue;
            };
            report.calls.push(WhatIfCall {
                run_id: row.run_id,
                call_id: row.call_id,
                agent_id: rec.agent_id.clone(),
                tool: rec.tool.clone(),
                at: rec.at,
                recorded_effect: rec.effect.clone(),
                new_effect: row.effect,
                recorded_rule_id: rec.rule_id.clone(),
                new_rule_id: row.rule_id,
                recorded_code: rec.code.clone(),
                new_code: row.code,
            });
        }
    }
    replayer.finish().await;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1204), "1,204");
        assert_eq!(thousands(1234567), "1,234,567");
    }
}
