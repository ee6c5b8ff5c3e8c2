//! `toolgate eval`: run evaluations over JSONL inputs, or summarize stored results.
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use futures::StreamExt;

use crate::eval::{
    AggregatedEvaluationResult, EvaluationInput, EvaluationRunConfig, EvaluationRunner,
    RunErrorKind,
};

/// Output format of `toolgate eval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EvalFormat {
    /// A per-input table and a per-criterion summary.
    Table,
    /// One AggregatedEvaluationResult JSON object per line.
    Jsonl,
}

/// Arguments of `toolgate eval`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
#[command(
    after_help = "Exit status: 0 ok; 1 when no input line could be evaluated, an evaluator or the storage failed on an input (listed on stderr), or the mean is below --fail-under; 2 for usage and config errors.\n\nExample:\n  toolgate eval --config examples/eval/config.json --input examples/eval/inputs.jsonl --out results.jsonl\n  toolgate eval stats results.jsonl"
)]
pub struct EvalArgs {
    #[command(subcommand)]
    pub command: Option<EvalCommand>,
    /// Run config: {"criteria": [...], "evaluatorConfigs": [...], "storage": {...}?}.
    #[arg(long, value_name = "C.json")]
    pub config: Option<PathBuf>,
    /// Inputs: one EvaluationInput JSON object per line ("-" for stdin). Criteria given in a
    /// line replace the config's.
    #[arg(long, value_name = "I.jsonl")]
    pub input: Option<PathBuf>,
    /// Also write one AggregatedEvaluationResult per line to this file (overwritten).
    #[arg(long, value_name = "O.jsonl")]
    pub out: Option<PathBuf>,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = EvalFormat::Table)]
    pub format: EvalFormat,
    /// Exit with status 1 when the mean overall score is below this value, from 0 to 1 (for CI).
    #[arg(long, value_name = "X")]
    pub fail_under: Option<f64>,
    /// A result passes when its normalized score is at least this (for the pass rates).
    #[arg(long, default_value_t = 0.5, value_name = "X")]
    pub pass_threshold: f64,
    /// Inputs evaluated at the same time.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
}

/// Subcommands of `toolgate eval`.
#[derive(Debug, clap::Subcommand)]
pub enum EvalCommand {
    /// Summarize stored results (a JSONL file of AggregatedEvaluationResult).
    Stats(StatsArgs),
}

/// Arguments of `toolgate eval stats`.
#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// The results file (JSONL).
    pub file: PathBuf,
    /// `table` or `json`.
    #[arg(long, value_enum, default_value_t = StatsFormat::Table)]
    pub format: StatsFormat,
    /// A result passes when its normalized score is at least this.
    #[arg(long, default_value_t = 0.5, value_name = "X")]
    pub pass_threshold: f64,
}

/// Output format of `toolgate eval stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatsFormat {
    /// Human-readable tables.
    Table,
    /// One JSON object.
    Json,
}

/// Runs `toolgate eval`.
pub fn run(args: EvalArgs) -> ExitCode {
    if let Some(EvalCommand::Stats(s)) = args.command {
        return stats(&s);
    }
    let (Some(config_path), Some(input_path)) = (&args.config, &args.input) else {
        eprintln!(
            "toolgate eval: --config and --input are required (or use `toolgate eval stats FILE`)"
        );
        return ExitCode::from(2);
    };
    if !(args.pass_threshold.is_finite()) {
        eprintln!("toolgate eval: --pass-threshold must be a number");
        return ExitCode::from(2);
    }
    if let Some(x) = args.fail_under
        && !(0.0..=1.0).contains(&x)
    {
        eprintln!("toolgate eval: --fail-under must be a number from 0 to 1, got {x}");
        return ExitCode::from(2);
    }
    let config = match std::fs::read_to_string(config_path)
        .map_err(|e| format!("reading {}: {e}", config_path.display()))
        .and_then(|t| {
            EvaluationRunConfig::from_json(&t)
                .map_err(|e| format!("{}: {e}", config_path.display()))
        }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("toolgate eval: {e}");
            return ExitCode::from(2);
        }
    };
    let runner = match EvaluationRunner::from_config(&config) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("toolgate eval: {}: {e}", config_path.display());
            return ExitCode::from(2);
        }
    };
    let (inputs, bad) = match read_inputs(input_path) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("toolgate eval: {e}");
            return ExitCode::from(2);
        }
    };
    for (line, msg) in &bad {
        eprintln!(
            "toolgate eval: {}:{line}: skipped: {msg}",
            input_path.display()
        );
    }
    let rt = match super::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolgate eval: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let concurrency = args.concurrency.max(1);
    let outcomes: Vec<(usize, Result<AggregatedEvaluationResult, String>)> = rt.block_on(async {
        futures::stream::iter(inputs.into_iter().map(|(line, input)| {
            let runner = &runner;
            async move { (line, runner.run(input).await.map_err(|e| e.to_string())) }
        }))
        .buffered(concurrency)
        .collect()
        .await
    });
    let mut results = Vec::new();
    let mut skipped = bad.len();
    let mut faults = 0;
    for (line, r) in outcomes {
        match r {
            Ok(r) => {
                for e in &r.run_errors {
                    faults += 1;
                    let which = e
                        .evaluator_index
                        .map_or_else(String::new, |i| format!(" (evaluatorConfigs[{i}])"));
                    eprintln!(
                        "toolgate eval: {}:{line}: {} {}{which} failed: {}",
                        input_path.display(),
                        match e.kind {
                            RunErrorKind::Evaluator => "evaluator",
                            RunErrorKind::Storage => "storage",
                        },
                        e.source,
                        e.error
                    );
                }
                results.push((line, r));
            }
            Err(e) => {
                skipped += 1;
                eprintln!(
                    "toolgate eval: {}:{line}: skipped: {e}",
                    input_path.display()
                );
            }
        }
    }
    if let Some(out) = &args.out
        && let Err(e) = write_jsonl(out, results.iter().map(|r| &r.1))
    {
        eprintln!("toolgate eval: writing {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    let printed = match args.format {
        EvalFormat::Jsonl => results.iter().try_for_each(|(_, r)| {
            let line = serde_json::to_string(r).map_err(std::io::Error::other)?;
            writeln!(w, "{line}")
        }),
        EvalFormat::Table => print_table(&mut w, &results, args.pass_threshold),
    };
    if let Err(e) = printed
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("toolgate eval: writing output: {e}");
        return ExitCode::FAILURE;
    }
    let _ = w.flush();
    if skipped > 0 {
        eprintln!("toolgate eval: {skipped} line(s) skipped");
    }
    if results.is_empty() {
        eprintln!(
            "toolgate eval: no input evaluated ({} has no valid input line)",
            input_path.display()
        );
        return ExitCode::FAILURE;
    }
    if faults > 0 {
        eprintln!(
            "toolgate eval: {faults} evaluator or storage failure(s): results are incomplete"
        );
        return ExitCode::FAILURE;
    }
    if let Some(threshold) = args.fail_under {
        let mean = mean(results.iter().filter_map(|(_, r)| r.overall_score));
        match mean {
            Some(m) if m >= threshold => {}
            Some(m) => {
                eprintln!(
                    "toolgate eval: mean overall score {m:.4} is below --fail-under {threshold}"
                );
                return ExitCode::FAILURE;
            }
            None => {
                eprintln!(
                    "toolgate eval: no overall score to compare with --fail-under {threshold}"
                );
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

type Lines<T> = (Vec<(usize, T)>, Vec<(usize, String)>);

fn read_lines(path: &Path) -> Result<Vec<(usize, String)>, String> {
    let reader: Box<dyn BufRead> = if path.as_os_str() == "-" {
        Box::new(std::io::BufReader::new(std::io::stdin()))
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(path).map_err(|e| format!("reading {}: {e}", path.display()))?,
        ))
    };
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| format!("reading {}: {e}", path.display()))?;
        if !line.trim().is_empty() {
            out.push((i + 1, line));
        }
    }
    Ok(out)
}

fn parse_jsonl<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Lines<T>, String> {
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    for (n, line) in read_lines(path)? {
        match serde_json::from_str::<T>(&line) {
            Ok(v) => ok.push((n, v)),
            Err(e) => bad.push((n, format!("invalid JSON line: {e}"))),
        }
    }
    Ok((ok, bad))
}

fn read_inputs(path: &Path) -> Result<Lines<EvaluationInput>, String> {
    parse_jsonl(path)
}

fn write_jsonl<'a>(
    path: &Path,
    results: impl Iterator<Item = &'a AggregatedEvaluationResult>,
) -> std::io::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for r in results {
        serde_json::to_writer(&mut f, r).map_err(std::io::Error::other)?;
        f.write_all(b"\n")?;
    }
    f.flush()
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"))
}

/// Per-criterion tallies.
#[derive(Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct CriterionTally {
    results: usize,
    scored: usize,
    passed: usize,
    errors: usize,
    #[serde(skip)]
    sum: f64,
    pass_rate: Option<f64>,
    mean: Option<f64>,
}

fn tally<'a>(
    results: impl Iterator<Item = &'a AggregatedEvaluationResult>,
    pass_threshold: f64,
) -> BTreeMap<String, CriterionTally> {
    let mut m: BTreeMap<String, CriterionTally> = BTreeMap::new();
    for agg in results {
        for r in &agg.results {
            let t = m.entry(r.criterion_name.clone()).or_default();
            t.results += 1;
            if r.error.is_some() {
                t.errors += 1;
            }
            if let Some(n) = r.normalized_score {
                t.scored += 1;
                t.sum += n;
                if n >= pass_threshold {
                    t.passed += 1;
                }
            }
        }
    }
    for t in m.values_mut() {
        if t.scored > 0 {
            t.pass_rate = Some(t.passed as f64 / t.scored as f64);
            t.mean = Some(t.sum / t.scored as f64);
        }
    }
    m
}

fn write_criteria_table(
    w: &mut impl Write,
    tallies: &BTreeMap<String, CriterionTally>,
) -> std::io::Result<()> {
    let width = tallies
        .keys()
        .map(|k| k.chars().count())
        .max()
        .unwrap_or(9)
        .max(9);
    writeln!(
        w,
        "{:<width$}  {:>7}  {:>6}  {:>9}  {:>6}",
        "criterion", "results", "errors", "pass rate", "mean"
    )?;
    for (name, t) in tallies {
        writeln!(
            w,
            "{:<width$}  {:>7}  {:>6}  {:>9}  {:>6}",
            name,
            t.results,
            t.errors,
            t.pass_rate
                .map_or_else(|| "-".into(), |p| format!("{:.1}%", p * 100.0)),
            fmt_opt(t.mean)
        )?;
    }
    Ok(())
}

fn print_table(
    w: &mut impl Write,
    results: &[(usize, AggregatedEvaluationResult)],
    pass_threshold: f64,
) -> std::io::Result<()> {
    writeln!(
        w,
        "{:>5}  {:<24}  {:>7}  {:<8}  failed criteria",
        "line", "session", "overall", "errors"
    )?;
    for (line, r) in results {
        let failed: Vec<&str> = r
            .results
            .iter()
            .filter(|x| x.error.is_some() || x.normalized_score.is_some_and(|n| n < pass_threshold))
            .map(|x| x.criterion_name.as_str())
            .collect();
        let session = r
            .session_id
            .as_deref()
            .or(r.agent_id.as_deref())
            .unwrap_or("-");
        let session: String = session.chars().take(24).collect();
        writeln!(
            w,
            "{line:>5}  {session:<24}  {:>7}  {:<8}  {}",
            fmt_opt(r.overall_score),
            r.run_errors.len(),
            if failed.is_empty() {
                "-".to_string()
            } else {
                failed.join(", ")
            }
        )?;
    }
    writeln!(w)?;
    write_criteria_table(w, &tally(results.iter().map(|r| &r.1), pass_threshold))?;
    writeln!(w)?;
    let m = mean(results.iter().filter_map(|(_, r)| r.overall_score));
    writeln!(
        w,
        "inputs: {}   mean overall score: {}",
        results.len(),
        fmt_opt(m)
    )
}

/// Rule statistics (seed 001 `stats`): how often each rule was checked and violated.
#[derive(Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct RuleTally {
    checked: usize,
    violated: usize,
}

fn stats(args: &StatsArgs) -> ExitCode {
    let (results, bad) = match parse_jsonl::<AggregatedEvaluationResult>(&args.file) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("toolgate eval stats: {e}");
            return ExitCode::from(2);
        }
    };
    for (line, msg) in &bad {
        eprintln!(
            "toolgate eval stats: {}:{line}: skipped: {msg}",
            args.file.display()
        );
    }
    let criteria = tally(results.iter().map(|r| &r.1), args.pass_threshold);
    let mut rules: BTreeMap<String, RuleTally> = BTreeMap::new();
    for (_, agg) in &results {
        for r in &agg.results {
            let Some(list) = r
                .metadata
                .as_ref()
                .and_then(|m| m.get("rules"))
                .and_then(|v| v.as_array())
            else {
                continue;
            };
            for (i, rule) in list.iter().enumerate() {
                let ty = rule.get("type").and_then(|v| v.as_str()).unwrap_or("?");
                let key = match rule.get("id").and_then(|v| v.as_str()) {
                    Some(id) => format!("{} / {id} ({ty})", r.criterion_name),
                    None => format!("{} / #{i} ({ty})", r.criterion_name),
                };
                let t = rules.entry(key).or_default();
                t.checked += 1;
                if rule.get("passed").and_then(|v| v.as_bool()) == Some(false) {
                    t.violated += 1;
                }
            }
        }
    }
    let overall: Vec<f64> = results
        .iter()
        .filter_map(|(_, r)| r.overall_score)
        .collect();
    let run_errors: usize = results.iter().map(|(_, r)| r.run_errors.len()).sum();
    let mean_overall = mean(overall.iter().copied());
    let min = overall.iter().copied().reduce(f64::min);
    let max = overall.iter().copied().reduce(f64::max);
    let out = std::io::stdout();
    let mut w = out.lock();
    let res = match args.format {
        StatsFormat::Json => {
            let v = serde_json::json!({
                "results": results.len(),
                "skippedLines": bad.len(),
                "meanOverallScore": mean_overall,
                "minOverallScore": min,
                "maxOverallScore": max,
                "runErrors": run_errors,
                "passThreshold": args.pass_threshold,
                "criteria": criteria,
                "rules": rules,
            });
            writeln!(w, "{v:#}")
        }
        StatsFormat::Table => (|| {
            writeln!(
                w,
                "results: {}   mean overall: {}   min: {}   max: {}   run errors: {}",
                results.len(),
                fmt_opt(mean_overall),
                fmt_opt(min),
                fmt_opt(max),
                run_errors
            )?;
            writeln!(w)?;
            write_criteria_table(&mut w, &criteria)?;
            if !rules.is_empty() {
                writeln!(w)?;
                let width = rules
                    .keys()
                    .map(|k| k.chars().count())
                    .max()
                    .unwrap_or(4)
                    .max(4);
                writeln!(
                    w,
                    "{:<width$}  {:>7}  {:>8}  {:>6}",
                    "rule", "checked", "violated", "rate"
                )?;
                for (k, t) in &rules {
                    writeln!(
                        w,
                        "{k:<width$}  {:>7}  {:>8}  {:>5.1}%",
                        t.checked,
                        t.violated,
                        if t.checked > 0 {
                            t.violated as f64 * 100.0 / t.checked as f64
                        } else {
                            0.0
                        }
                    )?;
                }
            }
            Ok(())
        })(),
    };
    if let Err(e) = res
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("toolgate eval stats: writing output: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
