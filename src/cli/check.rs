//! `toolgate check`: validate policy files.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::policy::{CompiledPolicies, Phase, Policy, PolicyError, load_policy_file, policy_files};

/// The long help of `toolgate check`. The `Check` variant in `cli/mod.rs` must name it too: the
/// variant's doc comment would otherwise replace it with its one-line summary.
pub const LONG_ABOUT: &str = "Validate policy files.\n\nEach PATH is a policy file or a folder; a folder is checked file by file (every `*.json` \
except `*.tests.json`). Prints one line per file: `ok: N rules`, or each error with its JSON path. \
Warns about rules that can never be evaluated (disabled, mode off, or no `tool` in the selector), \
and about block/hitl rules that fail open: their condition can be unknown (missing data such as a \
`timeGate` without the end user's timezone, an absent `toolArg`, a failing signal) while \
`onMissing`/`onMissingDefault` resolves unknown to allow. \
Also warns where toolgate reads Handlebar's current spec differently on purpose (a \
`metricWindow.filter`, which Handlebar now ignores; `windowSeconds` on a run-scoped \
`metricWindow`) and about `custom` conditions, which the host must register. \
Rule ids must be unique across all the files given, as they are when loaded into one engine.\n\n\
Exit status: 0 when every file is valid, 1 otherwise.";

/// Arguments of `toolgate check`.
#[derive(Debug, clap::Args)]
#[command(long_about = LONG_ABOUT)]
pub struct CheckArgs {
    /// Policy files or folders of policies.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Print errors and warnings only, not the `ok` lines.
    #[arg(short, long)]
    pub quiet: bool,
}

/// Runs `toolgate check`.
pub fn run(args: CheckArgs) -> ExitCode {
    let files = match policy_files(&args.paths) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if files.is_empty() {
        eprintln!(
            "error: no policy files found in {}",
            display_paths(&args.paths)
        );
        return ExitCode::FAILURE;
    }
    let mut failed = false;
    // Parse every file first, then compile the valid ones together (as one engine loads them:
    // rule ids must be unique across files), then print one verdict per file.
    let mut parsed: Vec<(PathBuf, Result<Policy, Vec<PolicyError>>)> = Vec::new();
    for f in &files {
        if !f.exists() {
            parsed.push((
                f.clone(),
                Err(vec![PolicyError {
                    file: Some(f.clone()),
                    path: String::new(),
                    message: "no such file".into(),
                }]),
            ));
            continue;
        }
        parsed.push((f.clone(), load_policy_file(f).map_err(|e| e.0)));
    }
    let valid: Vec<(&PathBuf, &Policy)> = parsed
        .iter()
        .filter_map(|(f, r)| r.as_ref().ok().map(|p| (f, p)))
        .collect();
    // Compile even a single file: loading does, and compiling can fail where parsing did not.
    let mut compile_errors: Vec<PolicyError> = Vec::new();
    if !valid.is_empty() {
        let names: Vec<Option<&Path>> = valid.iter().map(|(f, _)| Some(f.as_path())).collect();
        let policies = valid.iter().map(|(_, p)| (*p).clone()).collect();
        if let Err(errs) = CompiledPolicies::compile(policies, &names) {
            compile_errors = errs.0;
        }
    }
    for (f, result) in &parsed {
        let mut errors: Vec<&PolicyError> = match result {
            Err(errs) => errs.iter().collect(),
            Ok(_) => Vec::new(),
        };
        errors.extend(compile_errors.iter().filter(|e| e.file.as_ref() == Some(f)));
        if let Ok(p) = result {
            for w in warnings(p) {
                outln!("{}: warning: {w}", f.display());
            }
        }
        if !errors.is_empty() {
            failed = true;
            for e in errors {
                outln!(
                    "{}: error: {}{}",
                    f.display(),
                    path_prefix(&e.path),
                    e.message
                );
            }
        } else if let (Ok(p), false) = (result, args.quiet) {
            let n = p.rules.len();
            outln!(
                "{}: ok: {n} rule{}",
                f.display(),
                if n == 1 { "" } else { "s" }
            );
        }
    }
    for e in compile_errors.iter().filter(|e| e.file.is_none()) {
        failed = true;
        outln!("error: {}{}", path_prefix(&e.path), e.message);
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn path_prefix(p: &str) -> String {
    if p.is_empty() {
        String::new()
    } else {
        format!("{p}: ")
    }
}

fn display_paths(p: &[PathBuf]) -> String {
    p.iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Rules that can never be evaluated.
fn warnings(p: &Policy) -> Vec<String> {
    let mut out = Vec::new();
    for (i, r) in p.rules.iter().enumerate() {
        if r.selector.phase == Phase::LlmBefore {
            out.push(format!(
                "rules[{i}] \"{}\": selector.phase \"llm.before\" is a toolgate extension: \
                 Handlebar has no such phase (its engine would never evaluate this rule); \
                 toolgate decides it before each model call (run.before_llm)",
                r.id
            ));
        }
        if r.selector.tool.is_none() && r.selector.phase != Phase::LlmBefore {
            out.push(format!(
                "rules[{i}] \"{}\": the selector has no `tool`, so the rule is never evaluated (use \"tool\": {{}} to match every tool)",
                r.id
            ));
        } else if !r.enabled {
            out.push(format!(
                "rules[{i}] \"{}\": disabled, so never evaluated",
                r.id
            ));
        } else if r.mode.unwrap_or(p.meta.mode) == crate::policy::Mode::Off {
            out.push(format!(
                "rules[{i}] \"{}\": mode is off, so never evaluated",
                r.id
            ));
        } else {
            if let Some(w) = fails_open(p, r) {
                out.push(format!("rules[{i}] \"{}\": {w}", r.id));
            }
            differences(&r.condition, &format!("rules[{i}].condition"), &mut out);
        }
    }
    out
}

/// Where toolgate reads a condition differently from Handlebar on purpose, or needs the host
/// (design §11): one warning per place, with its JSON path.
fn differences(c: &crate::policy::Condition, path: &str, out: &mut Vec<String>) {
    use crate::policy::{Condition, Scope};
    match c {
        Condition::Custom { name, .. } => out.push(format!(
            "{path}: custom condition \"{name}\" is a host function: register it with \
             EngineBuilder::custom_condition or engine.register_condition (check cannot see \
             it); while none is registered the condition is missing data"
        )),
        Condition::MetricWindow {
            scope,
            window_seconds,
            filter,
            ..
        } => {
            if filter.is_some() {
                out.push(format!(
                    "{path}.filter: Handlebar now ignores metricWindow.filter; toolgate keeps \
                     applying it (only events of matching tools count)"
                ));
            }
            if *scope == Scope::Run && window_seconds.is_some() {
                out.push(format!(
                    "{path}.windowSeconds: Handlebar ignores windowSeconds for scope \"run\" \
                     (it aggregates since the run started); toolgate applies it as a sliding \
                     window within the run (remove it for Handlebar's meaning)"
                ));
            }
        }
        Condition::And(cs) => cs
            .iter()
            .enumerate()
            .for_each(|(i, c)| differences(c, &format!("{path}.all[{i}]"), out)),
        Condition::Or(cs) => cs
            .iter()
            .enumerate()
            .for_each(|(i, c)| differences(c, &format!("{path}.any[{i}]"), out)),
        Condition::Not(c) => differences(c, &format!("{path}.not"), out),
        _ => {}
    }
}

/// A block/hitl rule whose condition can be unknown (missing data) while unknown resolves to
/// allow by the policy's default (the rule has no `onMissing` of its own): the rule then does
/// not trigger, so it fails open. The semantics stay (design §3); the warning names the source
/// and the fix. An explicit `onMissing` (on the rule or the condition) is a decision and
/// silences the warning.
fn fails_open(p: &Policy, r: &crate::policy::Rule) -> Option<String> {
    use crate::policy::EffectType;
    let effect = r.effect.kind;
    if effect == EffectType::Allow
        || r.on_missing.is_some()
        || p.meta.on_missing_default != EffectType::Allow
    {
        return None;
    }
    let source = unknown_source(&r.condition, r.selector.phase, p.meta.timezone.is_some())?;
    let effect = effect.as_str();
    Some(format!(
        "the {effect} rule fails open on missing data: {source} can make the condition unknown, \
         and the policy's onMissingDefault is allow, so the rule does not trigger then; add \
         \"onMissing\": \"{effect}\" to the rule to fail closed (or \"onMissing\": \"allow\" to \
         say that allowing is intended)"
    ))
}

/// The first part of a condition that can be unknown (missing data), if any.
fn unknown_source(c: &crate::policy::Condition, phase: Phase, org_tz: bool) -> Option<String> {
    use crate::policy::{Aggregate, ArgTest, Condition, TimeScope, TimezoneSource};
    match c {
        Condition::ToolArg {
            path: Some(path),
            test: ArgTest::String(_) | ArgTest::Number(..) | ArgTest::Boolean(_),
            on_missing: None,
        } => Some(format!("toolArg \"{path}\" (absent or of another type)")),
        Condition::ExecutionTime {
            scope: TimeScope::Tool,
            on_missing: None,
            ..
        } if phase == Phase::Before => {
            Some("executionTime of the tool (unknown before the call)".into())
        }
        Condition::MetricWindow {
            aggregate: aggregate @ (Aggregate::Avg | Aggregate::Min | Aggregate::Max),
            on_missing: None,
            ..
        } => Some(format!(
            "metricWindow {} (an empty window)",
            format!("{aggregate:?}").to_lowercase()
        )),
        Condition::TimeGate {
            timezone: TimezoneSource::EnduserTag { tag, fallback_org },
            on_missing: None,
            ..
        } if !(*fallback_org && org_tz) => Some(format!(
            "timeGate (end-user tag \"{tag}\" absent or invalid, {})",
            if *fallback_org {
                "and the policy sets no timezone to fall back to"
            } else {
                "no fallback"
            }
        )),
        Condition::Signal {
            key,
            on_missing: None,
            ..
        } => Some(format!(
            "signal \"{key}\" (provider absent, failing or timing out)"
        )),
        Condition::And(cs) | Condition::Or(cs) => {
            cs.iter().find_map(|c| unknown_source(c, phase, org_tz))
        }
        Condition::Not(inner) => unknown_source(inner, phase, org_tz),
        _ => None,
    }
}
