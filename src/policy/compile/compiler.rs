//! The compiler of one condition: each condition kind to its compiled form, registering the
//! counters, trackers, sequence entries and redacting detectors it needs on the way.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use chrono_tz::Tz;
use globset::{GlobBuilder, GlobSetBuilder};
use serde_json::Value;

use super::cond::{
    CArgTest, CBinding, CCond, CSeqEntry, CTzSource, SignalValue, StrTest, glob_matcher, glob_set,
    lower,
};
use super::counters::{CounterSpec, RUN_WINDOW_SECONDS, TrackerSpec, stable_hash};
use crate::policy::error::PolicyError;
use crate::policy::types::*;

pub(super) struct Compiler<'a> {
    pub(super) counters: CounterIndexBuilder,
    pub(super) seq_entries: Vec<CSeqEntry>,
    pub(super) seq_ids: HashMap<String, u32>,
    pub(super) trackers: Vec<TrackerSpec>,
    pub(super) tracker_slots: HashMap<u64, usize>,
    pub(super) trackers_by_metric: HashMap<String, Vec<usize>>,
    pub(super) errors: Vec<PolicyError>,
    pub(super) file: Option<&'a Path>,
    /// The current policy's `redactDetected`.
    pub(super) redact_detected: bool,
    /// The current rule's own `onMissing` (not its policy's default).
    pub(super) rule_on_missing: Option<EffectType>,
    /// The current rule's phase.
    pub(super) phase: Phase,
    /// The detectors of the redacting `sensitiveData` conditions compiled so far.
    pub(super) redacting: Vec<Detector>,
}

pub(super) struct CounterIndexBuilder {
    pub(super) counters: Vec<CounterSpec>,
    pub(super) names: GlobSetBuilder,
    pub(super) glob_counter: Vec<u32>,
    pub(super) by_tag: HashMap<String, Vec<u32>>,
    pub(super) llm_names: GlobSetBuilder,
    pub(super) llm_glob_counter: Vec<u32>,
}

impl Default for CounterIndexBuilder {
    fn default() -> Self {
        CounterIndexBuilder {
            counters: Vec::new(),
            names: GlobSetBuilder::new(),
            glob_counter: Vec::new(),
            by_tag: HashMap::new(),
            llm_names: GlobSetBuilder::new(),
            llm_glob_counter: Vec::new(),
        }
    }
}

impl Compiler<'_> {
    pub(super) fn err(&mut self, path: String, msg: String) {
        self.errors.push(PolicyError {
            file: self.file.map(Path::to_path_buf),
            path,
            message: msg,
        });
    }

    pub(super) fn cond(
        &mut self,
        c: &Condition,
        rule_id: &str,
        path: &str,
        ordinal: &mut u32,
    ) -> Option<CCond> {
        *ordinal += 1;
        let n = *ordinal;
        Some(match c {
            Condition::ToolName(op) => match StrTest::compile(op, true) {
                Ok(t) => CCond::ToolName(t),
                Err(e) => {
                    self.err(path.into(), e);
                    return None;
                }
            },
            Condition::ToolTag(op) => CCond::ToolTag(match op {
                TagOp::Has(t) => TagOp::Has(t.to_lowercase()),
                TagOp::AnyOf(t) => TagOp::AnyOf(lower(t)),
                TagOp::AllOf(t) => TagOp::AllOf(lower(t)),
            }),
            Condition::ToolArg {
                path: p,
                test,
                on_missing,
            } => CCond::ToolArg {
                path: p
                    .as_deref()
                    .map(|p| p.split('.').map(str::to_string).collect()),
                test: match test {
                    ArgTest::String(op) => match StrTest::compile(op, false) {
                        Ok(t) => CArgTest::Str(t),
                        Err(e) => {
                            self.err(path.into(), e);
                            return None;
                        }
                    },
                    ArgTest::Number(op, v) => CArgTest::Num(*op, *v),
                    ArgTest::Boolean(b) => CArgTest::Bool(*b),
                    ArgTest::Exists => CArgTest::Exists(true),
                    ArgTest::NotExists => CArgTest::Exists(false),
                },
                on_missing: *on_missing,
            },
            Condition::EnduserTag(op) => CCond::EnduserTag(op.clone()),
            Condition::ExecutionTime {
                scope,
                op,
                ms,
                on_missing,
            } => CCond::ExecutionTime {
                scope: *scope,
                op: *op,
                ms: *ms,
                on_missing: *on_missing,
            },
            Condition::Sequence {
                must_have_called,
                must_not_have_called,
            } => {
                let mut conv = |l: &Option<Vec<SequenceEntry>>| -> Option<Vec<u32>> {
                    let mut out = Vec::new();
                    for e in l.iter().flatten() {
                        // Identical entries share one id (one bit per history entry).
                        let key = match e {
                            SequenceEntry::Glob(g) => format!("g\u{1f}{}", g.to_lowercase()),
                            SequenceEntry::Names(p) => {
                                format!("n\u{1f}{}", lower(p).join("\u{1f}"))
                            }
                            SequenceEntry::Tags { tags, all } => {
                                format!("t\u{1f}{all}\u{1f}{}", lower(tags).join("\u{1f}"))
                            }
                        };
                        if let Some(id) = self.seq_ids.get(&key) {
                            out.push(*id);
                            continue;
                        }
                        let entry = match e {
                            SequenceEntry::Glob(g) => match glob_matcher(g) {
                                Ok(m) => CSeqEntry::Glob(m),
                                Err(e) => {
                                    self.err(path.into(), e.to_string());
                                    return None;
                                }
                            },
                            SequenceEntry::Names(p) => match glob_set(p) {
                                Ok(m) => CSeqEntry::Names(m),
                                Err(e) => {
                                    self.err(path.into(), e.to_string());
                                    return None;
                                }
                            },
                            SequenceEntry::Tags { tags, all } => CSeqEntry::Tags {
                                tags: lower(tags),
                                all: *all,
                            },
                        };
                        let id = self.seq_entries.len() as u32;
                        self.seq_entries.push(entry);
                        self.seq_ids.insert(key, id);
                        out.push(id);
                    }
                    Some(out)
                };
                let must = conv(must_have_called)?;
                let must_not = conv(must_not_have_called)?;
                CCond::Sequence { must, must_not }
            }
            Condition::MaxCalls {
                selector,
                max,
                window_seconds,
                per,
                tag_filter,
            } => {
                let b = &mut self.counters;
                let idx = b.counters.len() as u32;
                let scope = per.unwrap_or(Scope::Run);
                let sig = format!(
                    "maxCalls|{rule_id}|{n}|{}|{:?}|{window_seconds:?}{}",
                    scope.as_str(),
                    selector,
                    // Absent from the signature when unset: existing counters keep their slot.
                    tag_filter
                        .as_deref()
                        .map(|t| format!("|{}", lower(t).join(",")))
                        .unwrap_or_default()
                );
                b.counters.push(CounterSpec {
                    slot: stable_hash(&sig),
                    scope,
                    window_seconds: *window_seconds,
                    tag_filter: tag_filter.as_deref().map(lower).unwrap_or_default(),
                });
                let llm = self.phase == Phase::LlmBefore;
                match selector {
                    CallSelector::ToolName(patterns) => {
                        for p in patterns {
                            match GlobBuilder::new(&p.to_lowercase()).build() {
                                Ok(g) if llm => {
                                    b.llm_names.add(g);
                                    b.llm_glob_counter.push(idx);
                                }
                                Ok(g) => {
                                    b.names.add(g);
                                    b.glob_counter.push(idx);
                                }
                                Err(e) => {
                                    let msg = e.to_string();
                                    self.err(path.into(), msg);
                                    return None;
                                }
                            }
                        }
                    }
                    // Models have no tags (the parser refuses this in llm.before).
                    CallSelector::ToolTag(_) if llm => {}
                    CallSelector::ToolTag(tags) => {
                        for t in tags {
                            b.by_tag.entry(t.to_lowercase()).or_default().push(idx);
                        }
                    }
                }
                CCond::MaxCalls {
                    counter: idx,
                    max: *max,
                }
            }
            Condition::MetricWindow {
                scope,
                metric,
                aggregate,
                window_seconds,
                op,
                value,
                filter,
                on_missing,
            } => {
                let sig = format!(
                    "metric|{}|{}|{window_seconds:?}|{filter:?}",
                    scope.as_str(),
                    metric.key()
                );
                let slot = stable_hash(&sig);
                let tracker = match self.tracker_slots.get(&slot) {
                    Some(t) => *t,
                    None => {
                        let (filter_names, filter_tags) = match filter {
                            None => (None, None),
                            Some(f) => {
                                let names = match f.tool_name.as_deref().map(glob_set).transpose() {
                                    Ok(n) => n,
                                    Err(e) => {
                                        self.err(path.into(), e.to_string());
                                        return None;
                                    }
                                };
                                (names, f.tool_tag.as_deref().map(lower))
                            }
                        };
                        let t = self.trackers.len();
                        self.trackers.push(TrackerSpec {
                            slot,
                            scope: *scope,
                            window_seconds: window_seconds.unwrap_or(RUN_WINDOW_SECONDS),
                            filter_names,
                            filter_tags,
                        });
                        self.tracker_slots.insert(slot, t);
                        self.trackers_by_metric
                            .entry(metric.key().to_string())
                            .or_default()
                            .push(t);
                        t
                    }
                };
                CCond::MetricWindow {
                    tracker: tracker as u32,
                    aggregate: *aggregate,
                    op: *op,
                    value: *value,
                    on_missing: *on_missing,
                }
            }
            Condition::TimeGate {
                timezone,
                windows,
                on_missing,
            } => CCond::TimeGate {
                tz: match timezone {
                    TimezoneSource::EnduserTag { tag, fallback_org } => CTzSource::Tag {
                        tag: tag.clone(),
                        fallback_org: *fallback_org,
                    },
                    TimezoneSource::Static { tz } => match tz.parse::<Tz>() {
                        Ok(tz) => CTzSource::Static(tz),
                        Err(_) => {
                            self.err(
                                path.into(),
                                format!("\"{tz}\" is not a known IANA timezone"),
                            );
                            return None;
                        }
                    },
                },
                windows: windows.clone(),
                on_missing: *on_missing,
            },
            Condition::RequireSubject(s) => CCond::RequireSubject(s.clone()),
            Condition::Signal {
                key,
                args,
                op,
                value,
                on_missing,
            } => CCond::Signal {
                key: Arc::from(key.as_str()),
                args: args
                    .iter()
                    .map(|(k, b)| {
                        (
                            k.clone(),
                            match b {
                                SignalBinding::EnduserId => CBinding::EnduserId,
                                SignalBinding::EnduserTag(t) => CBinding::EnduserTag(t.clone()),
                                SignalBinding::ToolName => CBinding::ToolName,
                                SignalBinding::ToolTag(t) => CBinding::ToolTag(t.to_lowercase()),
                                SignalBinding::ToolArg(p) => {
                                    CBinding::ToolArg(p.split('.').map(str::to_string).collect())
                                }
                                SignalBinding::Subject {
                                    subject_type,
                                    role,
                                    field,
                                } => CBinding::Subject {
                                    subject_type: subject_type.clone(),
                                    role: role.clone(),
                                    field: *field,
                                },
                                SignalBinding::Const(v) => CBinding::Const(match v {
                                    Value::String(s) => {
                                        serde_json::from_str(s).unwrap_or_else(|_| v.clone())
                                    }
                                    other => other.clone(),
                                }),
                            },
                        )
                    })
                    .collect(),
                op: *op,
                value: SignalValue {
                    raw: value.clone(),
                    parsed: match value {
                        Value::String(s) => serde_json::from_str(s).ok(),
                        _ => None,
                    },
                },
                on_missing: *on_missing,
            },
            Condition::Custom { name, args } => CCond::Custom {
                name: Arc::from(name.as_str()),
                args: args.clone().unwrap_or(Value::Null),
            },
            Condition::SensitiveData {
                target,
                path: p,
                all,
                detectors,
                on_missing,
            } => {
                if *target == SensitiveTarget::ToolOutput && self.phase != Phase::After {
                    self.err(
                        format!("{path}.target"),
                        "\"toolOutput\" scans the tool's result: only in a rule with \
                         selector.phase \"tool.after\""
                            .to_string(),
                    );
                    return None;
                }
                if self.redact_detected {
                    for d in detectors {
                        if !self.redacting.contains(&d.detector) {
                            self.redacting.push(d.detector);
                        }
                    }
                }
                CCond::SensitiveData(Box::new(crate::engine::conditions::CSensitive::compile(
                    *target,
                    p.as_deref(),
                    *all,
                    detectors,
                    self.redact_detected,
                    on_missing
                        .or(self.rule_on_missing)
                        .unwrap_or(EffectType::Block),
                )))
            }
            Condition::And(cs) | Condition::Or(cs) => {
                let mut out = Vec::with_capacity(cs.len());
                let key = if matches!(c, Condition::And(_)) {
                    "all"
                } else {
                    "any"
                };
                for (i, child) in cs.iter().enumerate() {
                    out.push(self.cond(child, rule_id, &format!("{path}.{key}[{i}]"), ordinal)?);
                }
                if matches!(c, Condition::And(_)) {
                    CCond::And(out)
                } else {
                    CCond::Or(out)
                }
            }
            Condition::Not(inner) => CCond::Not(Box::new(self.cond(
                inner,
                rule_id,
                &format!("{path}.not"),
                ordinal,
            )?)),
        })
    }
}
