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

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::audit::AuditEvent;
use crate::engine::{EngineBuilder, EngineError};
use crate::trace::{Replayer, TraceLine};

/// Which recorded runs to replay.
#[derive(Debug, Clone, Default)]
pub struct WhatIfFilter {
    /// Only runs of this agent.
    pub agent: Option<String>,
    /// Only runs that started at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Runs not to replay, by (agent, run), with why (e.g. their chain does not verify: see
    /// [`AuditRead::broken`]). They are listed in [`WhatIfReport::skipped`] with
    /// `chain_broken` set.
    pub exclude: BTreeMap<(String, String), String>,
}

impl WhatIfFilter {
    /// Whether an event passes the agent filter and (its `ts`) the start-time filter. A run's
    /// events are never older than its `run.started`, so dropping older events while reading
    /// loses nothing of a selected run.
    pub fn keeps(&self, e: &AuditEvent) -> bool {
        self.agent.as_deref().is_none_or(|a| a == e.agent_id())
            && self.since.is_none_or(|t| e.ts() >= t)
    }
}

mod event_lines;
mod llm_lines;
mod read;
mod rebuild;
mod store;
pub use read::{
    AuditRead, AuditTrail, index_audit_trail, read_audit_paths, read_audit_trail, read_store,
    read_store_verified,
};
pub use store::{StoreTrail, index_store};

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
    /// The tool's name (the model's, for a model call).
    pub tool: String,
    /// `llm.before` for a model call (absent for a tool call).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
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
    /// Why the new policy cannot be decided from the trail for this call: a stand-in
    /// (`[redacted:<detector>]`) hides text a detector or sub-condition of the new policy
    /// would have to scan. The new effect is then only what the condition's `onMissing` made
    /// of it, and the call is counted apart (not as changed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undecidable: Option<String>,
}

impl WhatIfCall {
    /// Whether the call's effect would change (an undecidable call is not counted as one).
    pub fn changed(&self) -> bool {
        self.undecidable.is_none() && self.recorded_effect != self.new_effect
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
    /// Left out because its hash chain does not verify.
    pub chain_broken: bool,
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

    /// The calls the new policy cannot decide from the trail (see
    /// [`WhatIfCall::undecidable`]).
    pub fn undecidable(&self) -> impl Iterator<Item = &WhatIfCall> {
        self.calls.iter().filter(|c| c.undecidable.is_some())
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
    /// change`), then `; 3 undecidable from the trail` when some are.
    pub fn summary(&self) -> String {
        let mut s = self.changes();
        let stopped = self.stopped_runs();
        if !stopped.is_empty() {
            let shown: Vec<&str> = stopped.iter().take(5).map(String::as_str).collect();
            s.push_str(&format!(
                "; {} run(s) would be stopped before a model call (llm.before): {}{}",
                thousands(stopped.len()),
                shown.join(", "),
                if stopped.len() > 5 { ", …" } else { "" }
            ));
        }
        let u = self.undecidable().count();
        if u > 0 {
            s.push_str(&format!(
                "; {} undecidable from the trail (stand-ins hide what the new policy scans)",
                thousands(u)
            ));
        }
        s
    }

    /// The runs in which the new policy would stop a model call the recorded run made
    /// (`llm.before`: allowed before, blocked or held for review now), in replay order.
    pub fn stopped_runs(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for c in self.changed() {
            if c.phase.as_deref() == Some("llm.before")
                && c.recorded_effect == "allow"
                && !out.contains(&c.run_id)
            {
                out.push(c.run_id.clone());
            }
        }
        out
    }

    fn changes(&self) -> String {
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
    /// A model call the trail shows only by its usage (no `llm.decision` was recorded).
    usage_only: bool,
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
}

/// Rebuilds the replay trace of the recorded runs `filter` selects (see the module docs).
/// A run is rebuilt only when its trail starts with `run.started` (seq 0); runs are keyed by
/// (agent, run id), and each event is used once (duplicates by seq are dropped).
pub fn rebuild_trace(
    events: impl IntoIterator<Item = AuditEvent>,
    filter: &WhatIfFilter,
) -> RebuiltTrace {
    let mut merge = rebuild::Merge::new(rebuild::MemoryRuns::new(events, filter), filter);
    let mut out = RebuiltTrace {
        runs: merge.runs,
        skipped: std::mem::take(&mut merge.skipped),
        ..RebuiltTrace::default()
    };
    out.lines = merge.map(|(line, _)| line).collect();
    out
}

/// Replays the recorded runs of `events` that `filter` selects through an engine built from
/// `builder` (the new policy; its clock is replaced by the recorded times) and pairs each
/// call's new before-phase decision with the recorded one. All of `events` is held; for a
/// large trail, [`what_if_trail`] reads it run by run.
pub async fn what_if(
    builder: EngineBuilder,
    org_timezone: Option<chrono_tz::Tz>,
    events: impl IntoIterator<Item = AuditEvent>,
    filter: &WhatIfFilter,
) -> Result<WhatIfReport, EngineError> {
    let merge = rebuild::Merge::new(rebuild::MemoryRuns::new(events, filter), filter);
    replay(builder, org_timezone, merge).await
}

/// [`what_if`] over a trail of JSONL files indexed by [`index_audit_trail`]: each run's
/// events are read from its files when the replay reaches the run's start and dropped as
/// they are replayed, so memory is bounded by the runs under way at once (a bounded window of
/// each), not by the trail. `filter` must be the one the trail was indexed with (its
/// `exclude` may be added).
pub async fn what_if_trail(
    builder: EngineBuilder,
    org_timezone: Option<chrono_tz::Tz>,
    trail: AuditTrail,
    filter: &WhatIfFilter,
) -> Result<WhatIfReport, EngineError> {
    let merge = rebuild::Merge::new(trail.into_source(filter), filter);
    replay(builder, org_timezone, merge).await
}

/// [`what_if`] over a collector store's runs indexed by [`index_store`]: each run's events
/// are fetched a page at a time when the replay reaches the run's start and dropped as they
/// are replayed, so memory is bounded by the runs under way at once (a page of each), not by
/// the store. Must be awaited inside a multi-thread tokio runtime. `filter` must be the one
/// the store was indexed with (its `exclude` may be added).
pub async fn what_if_store(
    builder: EngineBuilder,
    org_timezone: Option<chrono_tz::Tz>,
    trail: StoreTrail,
    filter: &WhatIfFilter,
) -> Result<WhatIfReport, EngineError> {
    let handle = store::reading_runtime()
        .map_err(|e| EngineError::Audit(crate::audit::AuditError::Config(e.to_string())))?;
    let merge = rebuild::Merge::new(trail.into_source(filter, handle), filter);
    replay(builder, org_timezone, merge).await
}

async fn replay<S: rebuild::RunSource>(
    builder: EngineBuilder,
    org_timezone: Option<chrono_tz::Tz>,
    mut merge: rebuild::Merge<S>,
) -> Result<WhatIfReport, EngineError> {
    // Stand-ins are honoured here only (live calls are scanned whatever they hold).
    let mut replayer = Replayer::with_builder(builder.replaying_trail(), org_timezone)?;
    let mut report = WhatIfReport {
        runs: merge.runs,
        skipped: std::mem::take(&mut merge.skipped),
        ..WhatIfReport::default()
    };
    let new_policies = replayer.engine().policies();
    // Model calls seen only by their usage are listed when the new policy decides model calls.
    let gates_llm = new_policies.has_llm_rules();
    let scans_messages = new_policies.scans_llm_input();
    // Each `tool.call` comes with its own recorded decision (a retried call reuses its id and
    // is matched by position).
    for (line, rec) in merge {
        let unrecorded_messages =
            matches!(&line, TraceLine::LlmCall { messages, .. } if messages.is_null());
        let rows = match replayer.step(line).await {
            Ok(rows) => rows,
            Err(message) => {
                tracing::warn!("what-if: a rebuilt line was refused: {message}");
                continue;
            }
        };
        for row in rows
            .into_iter()
            .filter(|r| r.phase == "tool.before" || r.phase == "llm.before")
        {
            let Some(rec) = rec.as_ref() else {
                continue;
            };
            if rec.usage_only && !gates_llm {
                continue;
            }
            let undecidable = row
                .decision
                .as_ref()
                .and_then(|d| {
                    d.evaluated
                        .iter()
                        .flat_map(|e| e.missing.iter())
                        .find(|m| m.starts_with(crate::engine::conditions::UNDECIDABLE_NOTE))
                        .cloned()
                })
                .or_else(|| {
                    // A block stands whatever the messages hold; anything else might have
                    // been a block had the scan seen them.
                    let open = row.effect != "block";
                    (unrecorded_messages && scans_messages && open).then(|| {
                        format!(
                            "{}: its messages were not recorded (record_messages off) and the \
                             new policy scans them (sensitiveData, target llmInput)",
                            crate::engine::conditions::UNDECIDABLE_NOTE
                        )
                    })
                });
            report.calls.push(WhatIfCall {
                undecidable,
                phase: (row.phase == "llm.before").then(|| row.phase.clone()),
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
