//! Compilation of validated policies into the form the engine's hot path works on: one
//! `GlobSet` per phase over every selector name glob, lowercased tags, compiled regexes and
//! globs, resolved timezones and times, and the counters and metric trackers rules need.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use chrono_tz::Tz;
use globset::{GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use regex::Regex;
use serde_json::Value;

use super::error::{PolicyError, PolicyErrors};
use super::types::*;

/// Builds a case-insensitive glob matcher (patterns and names are lowercased).
pub(crate) fn glob_matcher(pattern: &str) -> Result<GlobMatcher, globset::Error> {
    Ok(GlobBuilder::new(&pattern.to_lowercase())
        .literal_separator(false)
        .build()?
        .compile_matcher())
}

fn glob_set(patterns: &[String]) -> Result<GlobSet, globset::Error> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        b.add(GlobBuilder::new(&p.to_lowercase()).build()?);
    }
    b.build()
}

fn lower(v: &[String]) -> Vec<String> {
    v.iter().map(|s| s.to_lowercase()).collect()
}

/// A set of policies compiled for evaluation. Cheap to share (`Arc`); immutable.
#[derive(Debug)]
pub struct CompiledPolicies {
    pub(crate) policies: Vec<PolicyInfo>,
    /// Rules in evaluation order: priority descending, then load order.
    pub(crate) rules: Vec<CompiledRule>,
    /// Per phase slot ([`phase_slot`]): tool.before, tool.after, llm.before.
    pub(crate) phases: [PhaseIndex; 3],
    pub(crate) counters: CounterIndex,
    /// Every distinct `sequence` entry; conditions refer to them by index.
    pub(crate) seq_entries: Vec<CSeqEntry>,
    /// What the engine learned about each tool seen (rules in play, counters, sequence bits).
    pub(crate) tools: crate::engine::ToolCache,
    /// What the engine learned about each model seen (`llm.before` rules and counters).
    pub(crate) models: crate::engine::ToolCache,
    pub(crate) trackers: Vec<TrackerSpec>,
    /// Trackers by metric key.
    pub(crate) trackers_by_metric: HashMap<String, Vec<usize>>,
    /// The org timezone of the first policy that sets one.
    pub(crate) org_timezone: Option<Tz>,
    /// Some policy has an `agentSelector`: decisions skip the rules of policies that do not
    /// select the run's agent.
    pub(crate) agent_gated: bool,
    /// The detectors of the policies' redacting `sensitiveData` conditions (enabled rules,
    /// shadow ones included): whatever they find in any event of a run is redacted, wherever
    /// it lies, whether or not its condition was evaluated.
    pub(crate) redacting: Arc<[Detector]>,
    pub(crate) source: Vec<Policy>,
}

#[derive(Debug)]
pub(crate) struct PolicyInfo {
    pub(crate) combine: Combine,
    /// The policy's `agentSelector`, compiled.
    pub(crate) agents: Option<CAgentSelector>,
}

/// A compiled `agentSelector` (tags lowercased, slugs as one case-insensitive glob set).
#[derive(Debug)]
pub(crate) struct CAgentSelector {
    slugs: Option<GlobSet>,
    any_of_tags: Option<Vec<String>>,
    all_of_tags: Vec<String>,
}

impl CAgentSelector {
    fn compile(a: &AgentSelector) -> Result<CAgentSelector, globset::Error> {
        Ok(CAgentSelector {
            slugs: a.any_of_slugs.as_deref().map(glob_set).transpose()?,
            any_of_tags: a.any_of_tags.as_deref().map(lower),
            all_of_tags: a.all_of_tags.as_deref().map(lower).unwrap_or_default(),
        })
    }

    /// Whether a run of this agent (id and tags) is selected: the parts present all hold.
    pub(crate) fn selects(&self, agent_id: &str, tags: &[String]) -> bool {
        let has = |t: &String| tags.iter().any(|x| x.eq_ignore_ascii_case(t));
        self.slugs
            .as_ref()
            .is_none_or(|g| g.is_match(agent_id.to_lowercase()))
            && self.any_of_tags.as_ref().is_none_or(|a| a.iter().any(has))
            && self.all_of_tags.iter().all(has)
    }
}

/// Rules of one phase, indexed by tool name.
#[derive(Debug, Default)]
pub(crate) struct PhaseIndex {
    pub(crate) names: GlobSet,
    /// For each glob of `names`, the rule index it belongs to.
    pub(crate) glob_rule: Vec<u32>,
    /// Rules without a name selector (tags only or `tool: {}`), always candidates.
    pub(crate) always: Vec<u32>,
    /// Whether any rule of the phase exists at all.
    pub(crate) any: bool,
}

/// A rule ready for evaluation.
#[derive(Debug)]
pub(crate) struct CompiledRule {
    pub(crate) id: Arc<str>,
    /// The rule's Handlebar `policyId`, if any.
    pub(crate) policy_id: Option<Arc<str>>,
    pub(crate) policy: u32,
    pub(crate) tags_all: Vec<String>,
    pub(crate) tags_any: Vec<String>,
    pub(crate) condition: CCond,
    pub(crate) effect: EffectType,
    pub(crate) reason: Option<Arc<str>>,
    /// The rule's `onMissing`, else its policy's `onMissingDefault`.
    pub(crate) on_missing: EffectType,
    pub(crate) shadow: bool,
    pub(crate) needs_subjects: bool,
    /// The condition asks a signal provider: it is evaluated by the async evaluator.
    pub(crate) has_signal: bool,
    /// The rule's `reviewTtlSeconds`, else its policy's.
    pub(crate) review_ttl_seconds: Option<u64>,
    /// The rule's `onExpire`, else its policy's, else deny (used only with a ttl).
    pub(crate) on_expire: crate::policy::OnExpire,
}

/// A compiled string test.
#[derive(Debug)]
pub(crate) enum StrTest {
    Eq(String),
    Neq(String),
    Contains(String),
    StartsWith(String),
    EndsWith(String),
    Glob(GlobMatcher),
    In(Vec<String>),
    Regex(Regex),
}

impl StrTest {
    pub(crate) fn matches(&self, s: &str) -> bool {
        match self {
            StrTest::Eq(v) => s == v,
            StrTest::Neq(v) => s != v,
            StrTest::Contains(v) => s.contains(v.as_str()),
            StrTest::StartsWith(v) => s.starts_with(v.as_str()),
            StrTest::EndsWith(v) => s.ends_with(v.as_str()),
            StrTest::Glob(g) => g.is_match(s),
            StrTest::In(vs) => vs.iter().any(|v| v == s),
            StrTest::Regex(r) => r.is_match(s),
        }
    }

    fn compile(op: &StringOp, lowercase: bool) -> Result<StrTest, String> {
        let l = |s: &String| {
            if lowercase {
                s.to_lowercase()
            } else {
                s.clone()
            }
        };
        Ok(match op {
            StringOp::Eq(s) => StrTest::Eq(l(s)),
            StringOp::Neq(s) => StrTest::Neq(l(s)),
            StringOp::Contains(s) => StrTest::Contains(l(s)),
            StringOp::StartsWith(s) => StrTest::StartsWith(l(s)),
            StringOp::EndsWith(s) => StrTest::EndsWith(l(s)),
            StringOp::Glob(g) => match simple_glob(&g.to_lowercase()) {
                Some(t) => t,
                None => StrTest::Glob(glob_matcher(g).map_err(|e| e.to_string())?),
            },
            StringOp::In(v) => StrTest::In(v.iter().map(l).collect()),
            StringOp::Regex(r) => StrTest::Regex(
                regex::RegexBuilder::new(r)
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| e.to_string())?,
            ),
        })
    }
}

/// A glob that is a literal or `prefix*` as the equivalent plain string test (no glob
/// machinery on the decision path). `None` for any other glob.
fn simple_glob(g: &str) -> Option<StrTest> {
    let special = |c: char| matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\' | '!');
    match g.strip_suffix('*') {
        Some(prefix) if !prefix.contains(special) => Some(StrTest::StartsWith(prefix.to_string())),
        None if !g.contains(special) => Some(StrTest::Eq(g.to_string())),
        _ => None,
    }
}

/// A compiled argument test.
#[derive(Debug)]
pub(crate) enum CArgTest {
    Str(StrTest),
    Num(CmpOp, f64),
    Bool(bool),
    /// `exists` (true) / `notExists` (false).
    Exists(bool),
}

/// A compiled sequence entry.
#[derive(Debug)]
pub(crate) enum CSeqEntry {
    Glob(GlobMatcher),
    Names(GlobSet),
    Tags { tags: Vec<String>, all: bool },
}

/// A compiled time-gate timezone source.
#[derive(Debug)]
pub(crate) enum CTzSource {
    Tag { tag: String, fallback_org: bool },
    Static(Tz),
}

/// A compiled signal binding.
#[derive(Debug)]
pub(crate) enum CBinding {
    EnduserId,
    EnduserTag(String),
    ToolName,
    ToolTag(String),
    ToolArg(Vec<String>),
    Subject {
        subject_type: String,
        role: Option<String>,
        field: SubjectField,
    },
    Const(Value),
}

/// The value a signal's result is compared with.
#[derive(Debug)]
pub(crate) struct SignalValue {
    /// The value as written.
    pub(crate) raw: Value,
    /// For a string value: the string parsed as JSON, if it parses.
    pub(crate) parsed: Option<Value>,
}

/// A compiled condition.
#[derive(Debug)]
pub(crate) enum CCond {
    ToolName(StrTest),
    ToolTag(TagOp),
    ToolArg {
        /// Empty: scan mode (every leaf of the test's type).
        path: Option<Vec<String>>,
        test: CArgTest,
        on_missing: Option<EffectType>,
    },
    EnduserTag(EnduserTagOp),
    ExecutionTime {
        scope: TimeScope,
        op: CmpOp,
        ms: f64,
        on_missing: Option<EffectType>,
    },
    /// Ids into [`CompiledPolicies::seq_entries`].
    Sequence {
        must: Vec<u32>,
        must_not: Vec<u32>,
    },
    MaxCalls {
        counter: u32,
        max: u64,
    },
    MetricWindow {
        tracker: u32,
        aggregate: Aggregate,
        op: CmpOp,
        value: f64,
        on_missing: Option<EffectType>,
    },
    TimeGate {
        tz: CTzSource,
        windows: Vec<TimeWindow>,
        on_missing: Option<EffectType>,
    },
    RequireSubject(SubjectTest),
    Signal {
        key: Arc<str>,
        args: Vec<(String, CBinding)>,
        op: SignalOp,
        value: SignalValue,
        on_missing: Option<EffectType>,
    },
    SensitiveData(Box<super::sensitive_compiled::CSensitive>),
    Custom {
        name: Arc<str>,
        args: Value,
    },
    And(Vec<CCond>),
    Or(Vec<CCond>),
    Not(Box<CCond>),
}

/// Every maxCalls counter of the policies, indexed so that one match call finds the counters a
/// tool call increments.
#[derive(Debug, Default)]
pub(crate) struct CounterIndex {
    pub(crate) counters: Vec<CounterSpec>,
    pub(crate) names: GlobSet,
    pub(crate) glob_counter: Vec<u32>,
    /// Counters selected by tag: (tag lowercased, counter).
    pub(crate) by_tag: HashMap<String, Vec<u32>>,
    /// The counters of `llm.before` rules, by model-name glob: they count model calls only
    /// (never tool calls, which `names` and `by_tag` select).
    pub(crate) llm_names: GlobSet,
    /// For each glob of `llm_names`, the counter it belongs to.
    pub(crate) llm_glob_counter: Vec<u32>,
}

/// One maxCalls counter.
#[derive(Debug)]
pub(crate) struct CounterSpec {
    /// Stable identity of the counter (same across reloads when the rule is unchanged).
    pub(crate) slot: u64,
    pub(crate) scope: Scope,
    pub(crate) window_seconds: Option<u64>,
    /// `tagFilter`, lowercased: a call of a tool lacking one of these is neither counted nor
    /// limited.
    pub(crate) tag_filter: Vec<String>,
}

impl CounterSpec {
    /// Whether a tool with these (lowercased) tags passes the counter's `tagFilter`.
    pub(crate) fn passes(&self, tags_lc: &[String]) -> bool {
        self.tag_filter.iter().all(|t| tags_lc.contains(t))
    }
}

/// The window of a run-scoped `metricWindow` without `windowSeconds` ("since the run
/// started"): 7 days, longer than any run is expected to last.
pub(crate) const RUN_WINDOW_SECONDS: u64 = 7 * 24 * 3600;

/// One metric tracker (scope, metric, window, filter).
#[derive(Debug)]
pub(crate) struct TrackerSpec {
    pub(crate) slot: u64,
    pub(crate) scope: Scope,
    pub(crate) window_seconds: u64,
    pub(crate) filter_names: Option<GlobSet>,
    pub(crate) filter_tags: Option<Vec<String>>,
}

impl TrackerSpec {
    pub(crate) fn accepts(&self, tool_lc: Option<&str>, tags_lc: &[String]) -> bool {
        if self.filter_names.is_none() && self.filter_tags.is_none() {
            return true;
        }
        let Some(name) = tool_lc else {
            return false;
        };
        if let Some(g) = &self.filter_names
            && !g.is_match(name)
        {
            return false;
        }
        if let Some(t) = &self.filter_tags
            && !t.iter().any(|t| tags_lc.contains(t))
        {
            return false;
        }
        true
    }
}

fn stable_hash(s: &str) -> u64 {
    // FNV-1a: stable across processes and releases, unlike std's SipHash keys.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

struct Compiler<'a> {
    counters: CounterIndexBuilder,
    seq_entries: Vec<CSeqEntry>,
    seq_ids: HashMap<String, u32>,
    trackers: Vec<TrackerSpec>,
    tracker_slots: HashMap<u64, usize>,
    trackers_by_metric: HashMap<String, Vec<usize>>,
    errors: Vec<PolicyError>,
    file: Option<&'a Path>,
    /// The current policy's `redactDetected`.
    redact_detected: bool,
    /// The current rule's own `onMissing` (not its policy's default).
    rule_on_missing: Option<EffectType>,
    /// The current rule's phase.
    phase: Phase,
    /// The detectors of the redacting `sensitiveData` conditions compiled so far.
    redacting: Vec<Detector>,
}

struct CounterIndexBuilder {
    counters: Vec<CounterSpec>,
    names: GlobSetBuilder,
    glob_counter: Vec<u32>,
    by_tag: HashMap<String, Vec<u32>>,
    llm_names: GlobSetBuilder,
    llm_glob_counter: Vec<u32>,
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
    fn err(&mut self, path: String, msg: String) {
        self.errors.push(PolicyError {
            file: self.file.map(Path::to_path_buf),
            path,
            message: msg,
        });
    }

    fn cond(
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
                CCond::SensitiveData(Box::new(super::sensitive_compiled::CSensitive::compile(
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

impl CompiledPolicies {
    /// Compiles parsed policies (in load order) into one rule set.
    ///
    /// `files` names the source of each policy for error messages (may be shorter than
    /// `policies`). Rule ids must be unique across all policies.
    pub fn compile(
        policies: Vec<Policy>,
        files: &[Option<&Path>],
    ) -> Result<CompiledPolicies, PolicyErrors> {
        let mut errors = Vec::new();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (pi, p) in policies.iter().enumerate() {
            for (ri, r) in p.rules.iter().enumerate() {
                if let Some(first) = seen.get(r.id.as_str()) {
                    errors.push(PolicyError {
                        file: files.get(pi).copied().flatten().map(Path::to_path_buf),
                        path: format!("rules[{ri}].id"),
                        message: format!(
                            "duplicate rule id \"{}\": already defined by policy \"{}\"",
                            r.id, policies[*first].meta.name
                        ),
                    });
                } else {
                    seen.insert(&r.id, pi);
                }
            }
        }
        if !errors.is_empty() {
            return Err(PolicyErrors(errors));
        }

        // Evaluation order: priority descending, then load order (stable sort).
        let mut order: Vec<(usize, usize)> = policies
            .iter()
            .enumerate()
            .flat_map(|(pi, p)| (0..p.rules.len()).map(move |ri| (pi, ri)))
            .collect();
        order.sort_by_key(|(pi, ri)| std::cmp::Reverse(policies[*pi].rules[*ri].priority));

        let mut rules = Vec::new();
        let mut phase_builders: [(GlobSetBuilder, Vec<u32>, Vec<u32>, bool); 3] = [
            (GlobSetBuilder::new(), Vec::new(), Vec::new(), false),
            (GlobSetBuilder::new(), Vec::new(), Vec::new(), false),
            (GlobSetBuilder::new(), Vec::new(), Vec::new(), false),
        ];
        let mut c = Compiler {
            counters: CounterIndexBuilder::default(),
            seq_entries: Vec::new(),
            seq_ids: HashMap::new(),
            trackers: Vec::new(),
            tracker_slots: HashMap::new(),
            trackers_by_metric: HashMap::new(),
            errors: Vec::new(),
            file: None,
            redact_detected: true,
            rule_on_missing: None,
            phase: Phase::Before,
            redacting: Vec::new(),
        };
        for (pi, ri) in order {
            let policy = &policies[pi];
            let rule = &policy.rules[ri];
            c.file = files.get(pi).copied().flatten();
            c.redact_detected = policy.meta.redact_detected;
            c.rule_on_missing = rule.on_missing;
            c.phase = rule.selector.phase;
            let mode = rule.mode.unwrap_or(policy.meta.mode);
            // An llm.before rule without `tool` is in play for every model.
            let every_model = ToolSelector::default();
            let tool = match &rule.selector.tool {
                Some(t) => t,
                None if rule.selector.phase == Phase::LlmBefore => &every_model,
                None => continue,
            };
            if !rule.enabled || mode == Mode::Off || !policy.meta.enabled {
                continue;
            }
            let mut ordinal = 0;
            let path = format!("rules[{ri}].condition");
            let Some(condition) = c.cond(&rule.condition, &rule.id, &path, &mut ordinal) else {
                continue;
            };
            let mut needs_subjects = false;
            let mut has_signal = false;
            rule.condition.walk(&mut |c| {
                // Custom conditions are awaited like signals.
                has_signal |= matches!(c, Condition::Signal { .. } | Condition::Custom { .. });
                needs_subjects |= match c {
                    Condition::RequireSubject(_) => true,
                    Condition::Signal { args, .. } => args
                        .values()
                        .any(|b| matches!(b, SignalBinding::Subject { .. })),
                    _ => false,
                }
            });
            let index = rules.len() as u32;
            let pb = &mut phase_builders[phase_slot(rule.selector.phase)];
            pb.3 = true;
            match &tool.name {
                Some(names) => {
                    for n in names {
                        match GlobBuilder::new(&n.to_lowercase()).build() {
                            Ok(g) => {
                                pb.0.add(g);
                                pb.1.push(index);
                            }
                            Err(e) => {
                                c.err(format!("rules[{ri}].selector.tool.name"), e.to_string())
                            }
                        }
                    }
                }
                None => pb.2.push(index),
            }
            rules.push(CompiledRule {
                id: Arc::from(rule.id.as_str()),
                policy_id: rule.policy_id.as_deref().map(Arc::from),
                policy: pi as u32,
                tags_all: tool.tags_all.as_deref().map(lower).unwrap_or_default(),
                tags_any: tool.tags_any.as_deref().map(lower).unwrap_or_default(),
                condition,
                effect: rule.effect.kind,
                reason: rule.effect.reason.as_deref().map(Arc::from),
                on_missing: rule.on_missing.unwrap_or(policy.meta.on_missing_default),
                shadow: mode == Mode::Shadow,
                needs_subjects,
                has_signal,
                review_ttl_seconds: rule.review_ttl_seconds.or(policy.meta.review_ttl_seconds),
                on_expire: rule.on_expire.or(policy.meta.on_expire).unwrap_or_default(),
            });
        }
        let mut phases: [PhaseIndex; 3] = Default::default();
        for (i, (b, glob_rule, always, any)) in phase_builders.into_iter().enumerate() {
            match b.build() {
                Ok(names) => {
                    phases[i] = PhaseIndex {
                        names,
                        glob_rule,
                        always,
                        any,
                    }
                }
                Err(e) => c.err(
                    String::new(),
                    format!("cannot build the selector index: {e}"),
                ),
            }
        }
        let cb = std::mem::take(&mut c.counters);
        let mut build_names = |b: GlobSetBuilder| match b.build() {
            Ok(n) => n,
            Err(e) => {
                c.err(
                    String::new(),
                    format!("cannot build the maxCalls index: {e}"),
                );
                GlobSet::empty()
            }
        };
        let counter_names = build_names(cb.names);
        let llm_counter_names = build_names(cb.llm_names);
        if !c.errors.is_empty() {
            return Err(PolicyErrors(c.errors));
        }
        let mut infos = Vec::with_capacity(policies.len());
        for (pi, p) in policies.iter().enumerate() {
            let agents = match p.meta.agent_selector.as_ref().map(CAgentSelector::compile) {
                None => None,
                Some(Ok(a)) => Some(a),
                Some(Err(e)) => {
                    errors.push(PolicyError {
                        file: files.get(pi).copied().flatten().map(Path::to_path_buf),
                        path: "policy.agentSelector.anyOfSlugs".into(),
                        message: e.to_string(),
                    });
                    None
                }
            };
            infos.push(PolicyInfo {
                combine: p.meta.combine,
                agents,
            });
        }
        if !errors.is_empty() {
            return Err(PolicyErrors(errors));
        }
        let agent_gated = infos.iter().any(|i| i.agents.is_some());
        let mut org_timezone = None;
        for p in &policies {
            if let Some(tz) = p
                .meta
                .timezone
                .as_deref()
                .and_then(|t| t.parse::<Tz>().ok())
            {
                org_timezone = Some(tz);
                break;
            }
        }
        Ok(CompiledPolicies {
            policies: infos,
            redacting: c.redacting.into(),
            agent_gated,
            rules,
            phases,
            counters: CounterIndex {
                counters: cb.counters,
                names: counter_names,
                glob_counter: cb.glob_counter,
                by_tag: cb.by_tag,
                llm_names: llm_counter_names,
                llm_glob_counter: cb.llm_glob_counter,
            },
            seq_entries: c.seq_entries,
            tools: crate::engine::ToolCache::default(),
            models: crate::engine::ToolCache::for_models(),
            trackers: c.trackers,
            trackers_by_metric: c.trackers_by_metric,
            org_timezone,
            source: policies,
        })
    }

    /// The policies this set was compiled from, in load order.
    pub fn policies(&self) -> &[Policy] {
        &self.source
    }

    /// Number of rules that can be evaluated (enabled, with a tool selector, not `off`).
    pub fn active_rules(&self) -> usize {
        self.rules.len()
    }
}

pub(crate) fn phase_slot(p: Phase) -> usize {
    match p {
        Phase::Before => 0,
        Phase::After => 1,
        Phase::LlmBefore => 2,
    }
}

impl CompiledPolicies {
    /// Whether some rule is in play before model calls (`llm.before`): without one,
    /// [`Run::before_llm`](crate::engine::Run::before_llm) returns at once.
    pub fn has_llm_rules(&self) -> bool {
        self.phases[2].any
    }

    /// Whether some rule scans the messages sent to a model (`sensitiveData`, `llmInput`).
    pub fn scans_llm_input(&self) -> bool {
        self.rules.iter().any(|r| scans_llm_input(&r.condition))
    }
}

fn scans_llm_input(c: &CCond) -> bool {
    match c {
        CCond::SensitiveData(s) => s.scans_llm_input(),
        CCond::And(cs) | CCond::Or(cs) => cs.iter().any(scans_llm_input),
        CCond::Not(c) => scans_llm_input(c),
        _ => false,
    }
}
