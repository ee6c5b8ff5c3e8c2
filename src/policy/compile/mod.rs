//! Compilation of validated policies into the form the engine's hot path works on: one
//! `GlobSet` per phase over every selector name glob, lowercased tags, compiled regexes and
//! globs, resolved timezones and times, and the counters and metric trackers rules need.

mod compiler;
mod cond;
mod counters;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use chrono_tz::Tz;
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use super::error::{PolicyError, PolicyErrors};
use super::types::*;
use compiler::{Compiler, CounterIndexBuilder};
pub(crate) use cond::*;
use cond::{glob_set, lower};
pub(crate) use counters::*;

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
