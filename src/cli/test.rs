//! `toolgate test`: run policy test files.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Deserialize;
use serde_json::Value;

use crate::policy::load_policy_file;
use crate::trace::{ReplayRow, Replayer};

/// The long help of `toolgate test`.
pub const LONG_ABOUT: &str = "Run policy test files and report each case.\n\n\
A test file (`<name>.tests.json`) is {\"policy\": \"<name>.json\", \"cases\": [{\"name\", \"trace\": [...], \
\"expect\": [{\"callId\", \"phase\"?, \"effect\", \"ruleId\"?, \"code\"?, \"shadowEffect\"?, \"abortRun\"?}]}]}. \
Each case replays its trace on a fresh engine and checks each expectation against the decision for that call \
(phase `tool.before` unless given, or `llm.before` for the id of an `llm.call` line). Keys left out are not checked; `\"ruleId\": null` checks that no rule decided.\n\n\
PATH is a test file or a folder (every `*.tests.json` in it); default: `policies/`.\n\n\
Exit status: 0 when every case passes, 1 when one fails, 2 when a file cannot be read.";

/// Arguments of `toolgate test`.
#[derive(Debug, clap::Args)]
#[command(long_about = LONG_ABOUT)]
pub struct TestArgs {
    /// Test files or folders.
    #[arg(value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Only run cases whose name contains this text.
    #[arg(long, value_name = "TEXT")]
    pub filter: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestFile {
    policy: PathBuf,
    #[serde(default, rename = "orgTimezone")]
    org_timezone: Option<String>,
    cases: Vec<TestCase>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestCase {
    name: String,
    trace: Vec<Value>,
    expect: Vec<Expectation>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Expectation {
    call_id: String,
    #[serde(default)]
    phase: Option<String>,
    effect: String,
    #[serde(default, deserialize_with = "some_value")]
    rule_id: Option<Option<String>>,
    #[serde(default)]
    code: Option<String>,
    #[serde(default, deserialize_with = "some_value")]
    shadow_effect: Option<Option<String>>,
    #[serde(default)]
    abort_run: Option<bool>,
}

/// Distinguishes an absent key (None) from `null` (Some(None)).
fn some_value<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

fn test_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let paths = if paths.is_empty() {
        vec![PathBuf::from("policies")]
    } else {
        paths.to_vec()
    };
    crate::policy::expand_folders(&paths, |name| name.ends_with(".tests.json"))
        .map_err(|(p, e)| format!("{}: {e}", p.display()))
}

/// Runs `toolgate test`.
pub fn run(args: TestArgs) -> ExitCode {
    let files = match test_files(&args.paths) {
        Ok(f) if !f.is_empty() => f,
        Ok(_) => {
            eprintln!("error: no test files (*.tests.json) found");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match super::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let (mut passed, mut failed, mut broken) = (0usize, 0usize, 0usize);
    for file in &files {
        match rt.block_on(run_file(file, args.filter.as_deref())) {
            Ok((p, f)) => {
                passed += p;
                failed += f;
            }
            Err(e) => {
                broken += 1;
                outln!("{}: error: {e}", file.display());
            }
        }
    }
    outln!(
        "\n{} passed, {} failed{} ({} file{})",
        passed,
        failed,
        if broken > 0 {
            format!(", {broken} files unreadable")
        } else {
            String::new()
        },
        files.len(),
        if files.len() == 1 { "" } else { "s" }
    );
    if broken > 0 {
        ExitCode::from(2)
    } else if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

async fn run_file(file: &Path, filter: Option<&str>) -> Result<(usize, usize), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read: {e}"))?;
    let tf: TestFile =
        crate::json::from_str_strict(&text).map_err(|e| format!("not a policy test file: {e}"))?;
    let policy_path = file.parent().unwrap_or(Path::new(".")).join(&tf.policy);
    let policy = load_policy_file(&policy_path).map_err(|e| e.to_string())?;
    let org_tz = match &tf.org_timezone {
        Some(t) => Some(
            t.parse::<chrono_tz::Tz>()
                .map_err(|_| format!("orgTimezone \"{t}\" is not a known IANA timezone"))?,
        ),
        None => None,
    };
    outln!("{} ({})", file.display(), policy_path.display());
    let (mut passed, mut failed) = (0, 0);
    for case in &tf.cases {
        if filter.is_some_and(|f| !case.name.contains(f)) {
            continue;
        }
        let mut replayer =
            Replayer::new(vec![policy.clone()], org_tz).map_err(|e| e.to_string())?;
        let mut rows: Vec<ReplayRow> = Vec::new();
        let mut problems: Vec<String> = Vec::new();
        for line in &case.trace {
            for r in replayer.step_value(line.clone()).await {
                match r {
                    Ok(row) => rows.push(row),
                    Err(e) => problems.push(format!("trace {e}")),
                }
            }
        }
        replayer.finish().await;
        for exp in &case.expect {
            // Without a phase: the call's tool.before decision, else its llm.before one (a
            // model call of an `llm.call` line).
            let phase = exp.phase.as_deref().unwrap_or_else(|| {
                let llm_only = rows.iter().any(|r| r.call_id == exp.call_id)
                    && rows
                        .iter()
                        .filter(|r| r.call_id == exp.call_id)
                        .all(|r| r.phase == "llm.before");
                if llm_only {
                    "llm.before"
                } else {
                    "tool.before"
                }
            });
            match rows
                .iter()
                .find(|r| r.call_id == exp.call_id && r.phase == phase)
            {
                None => problems.push(format!(
                    "call {} ({phase}): expected a decision, got none",
                    exp.call_id
                )),
                Some(row) => {
                    if let Some(diff) = diff(exp, row) {
                        problems.push(format!("call {} ({phase}):\n{diff}", exp.call_id));
                    }
                }
            }
        }
        if problems.is_empty() {
            passed += 1;
            outln!("  pass  {}", case.name);
        } else {
            failed += 1;
            outln!("  FAIL  {}", case.name);
            for p in problems {
                for (i, l) in p.lines().enumerate() {
                    outln!("        {}{l}", if i == 0 { "" } else { "  " });
                }
            }
        }
    }
    Ok((passed, failed))
}

fn diff(exp: &Expectation, row: &ReplayRow) -> Option<String> {
    let mut lines = Vec::new();
    let mut check = |field: &str, want: Option<String>, got: Option<String>| {
        let show =
            |v: &Option<String>| v.clone().map_or("null".to_string(), |s| format!("\"{s}\""));
        if want != got {
            lines.push(format!(
                "- {field}: {}\n+ {field}: {}",
                show(&want),
                show(&got)
            ));
        }
    };
    check("effect", Some(exp.effect.clone()), Some(row.effect.clone()));
    if let Some(code) = &exp.code {
        check("code", Some(code.clone()), Some(row.code.clone()));
    }
    if let Some(rule) = &exp.rule_id {
        check("ruleId", rule.clone(), row.rule_id.clone());
    }
    if let Some(s) = &exp.shadow_effect {
        check("shadowEffect", s.clone(), row.shadow_effect.clone());
    }
    if let Some(a) = exp.abort_run {
        check(
            "abortRun",
            Some(a.to_string()),
            Some(row.abort_run.to_string()),
        );
    }
    (!lines.is_empty()).then(|| lines.join("\n"))
}
