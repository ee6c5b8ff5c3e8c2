//! `toolgate replay`: replay a JSONL trace through policies and print each decision.
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

pub use super::replay_args::{Format, LONG_ABOUT, ReplayArgs};
use crate::trace::{ReplayRow, Replayer};

/// Runs `toolgate replay`.
pub fn run(args: ReplayArgs) -> ExitCode {
    let Some(trace) = args.trace.clone() else {
        return super::whatif::run(args);
    };
    let org_tz = match args
        .org_timezone
        .as_deref()
        .map(str::parse::<chrono_tz::Tz>)
        .transpose()
    {
        Ok(tz) => tz,
        Err(_) => {
            eprintln!("error: --org-timezone: not a known IANA timezone (e.g. Europe/London)");
            return ExitCode::from(2);
        }
    };
    // `-`: standard input, read line by line as it comes (each line decided and, with
    // `--format jsonl`, printed before the next is read), so a process can hold runs open for
    // as long as its input lasts.
    let streaming = trace.as_os_str() == "-";
    let text = if streaming {
        String::new()
    } else {
        match std::fs::read_to_string(&trace) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: cannot read the trace {}: {e}", trace.display());
                return ExitCode::from(2);
            }
        }
    };
    let rt = match super::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    rt.block_on(async move {
        let otel = match super::otel::start(args.otel, "replay") {
            Ok(o) => o,
            Err(code) => return code,
        };
        let mut builder = args
            .policies
            .iter()
            .fold(crate::engine::GovernanceEngine::builder(), |b, p| {
                b.policy_path(p.clone())
            });
        let mut audit = crate::audit::AuditConfig::default();
        if let Some(dir) = &args.audit {
            audit.sinks.push(crate::audit::SinkConfig::File(
                crate::audit::FileSinkConfig::in_dir(dir),
            ));
        }
        #[cfg(feature = "http")]
        if let Some(url) = &args.collector {
            let mut c = crate::audit::HttpSinkConfig::new(url.clone());
            c.token = args.token.clone();
            audit.sinks.push(crate::audit::SinkConfig::Http(c));
        }
        #[cfg(not(feature = "http"))]
        if args.collector.is_some() {
            eprintln!("error: --collector needs toolgate built with the `http` feature");
            return ExitCode::from(2);
        }
        if args.signing_key.is_some() && audit.sinks.is_empty() {
            eprintln!("error: --signing-key needs --audit or --collector (a trail to sign)");
            return ExitCode::from(2);
        }
        audit.signing_key = args.signing_key.clone();
        if !audit.sinks.is_empty() {
            builder = builder.audit(audit);
        }
        builder = super::otel::register(builder, &otel);
        builder = builder.failure_mode(args.failure_mode.into());
        builder = match args.state.apply(builder, args.failure_mode) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        };
        if let Some(file) = &args.reviews {
            builder = builder.review_store(std::sync::Arc::new(
                crate::engine::FileReviewStore::new(file),
            ));
        }
        match args.notify.config() {
            Ok(Some(n)) => builder = builder.notify(n),
            Ok(None) => {}
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
        let mut replayer = match Replayer::with_builder(builder, org_tz) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        };
        let mut printer = Printer::new(args.format);
        let mut bad = 0usize;
        let mut stdin = streaming.then(|| {
            tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(tokio::io::stdin()))
        });
        let mut file_lines = text.lines();
        loop {
            let raw = match &mut stdin {
                Some(lines) => match lines.next_line().await {
                    Ok(Some(l)) => l,
                    Ok(None) => break,
                    Err(e) => {
                        eprintln!("error: cannot read the trace from standard input: {e}");
                        return ExitCode::from(2);
                    }
                },
                None => match file_lines.next() {
                    Some(l) => l.to_string(),
                    None => break,
                },
            };
            for r in replayer.step_text(&raw).await {
                match r {
                    Ok(row) => printer.row(&row),
                    Err(e) => {
                        bad += 1;
                        printer.flush();
                        eprintln!("{}: {e}", trace.display());
                    }
                }
            }
            if streaming {
                printer.flush();
            }
        }
        replayer.finish().await;
        // Any event not written or delivered by the end is a failure: the trail is incomplete.
        let mut rejected = false;
        if let Err(e) = replayer.engine().shutdown().await {
            rejected = true;
            match &e {
                crate::audit::AuditError::Rejected(_) => eprintln!("error: audit trail: {e}"),
                _ if args.collector.is_some() => eprintln!(
                    "error: audit trail: events not delivered ({e}); the collector is \
                     unreachable or failing (see the log above). The undelivered events stay \
                     in the spool and are sent by the next process that uses it"
                ),
                _ => eprintln!("error: audit trail: events not written: {e}"),
            }
        }
        super::otel::finish(otel, "replay").await;
        printer.finish(bad);
        if bad > 0 || rejected {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        }
    })
}

struct Printer {
    format: Format,
    colour: bool,
    /// Table format: only what the table prints (never the whole decisions, whose
    /// `evaluated` lists grow with the number of rules).
    rows: Vec<TableRow>,
    out: std::io::Stdout,
}

/// One row of the table: its cells and the effect (for colour and the summary).
struct TableRow {
    cells: [String; 9],
    effect: String,
    before: bool,
    /// An `llm.before` decision (a model call).
    llm: bool,
}

impl TableRow {
    fn new(r: &ReplayRow) -> Self {
        TableRow {
            cells: [
                r.line.to_string(),
                r.run_id.clone(),
                r.call_id.clone(),
                r.phase.trim_start_matches("tool.").to_string(),
                r.tool.clone(),
                match &r.shadow_effect {
                    Some(s) => format!("{} (shadow: {s})", r.effect),
                    None => r.effect.clone(),
                },
                r.code.clone(),
                r.rule_id.clone().unwrap_or_else(|| "-".into()),
                r.reason.clone().unwrap_or_default(),
            ],
            effect: r.effect.clone(),
            before: r.phase == "tool.before",
            llm: r.phase == "llm.before",
        }
    }
}

impl Printer {
    fn new(format: Format) -> Self {
        let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Printer {
            format,
            colour,
            rows: Vec::new(),
            out: std::io::stdout(),
        }
    }

    fn row(&mut self, row: &ReplayRow) {
        match self.format {
            Format::Jsonl => {
                let line = serde_json::to_string(row).unwrap_or_default();
                let _ = writeln!(self.out, "{line}");
            }
            Format::Table => self.rows.push(TableRow::new(row)),
        }
    }

    fn flush(&mut self) {
        let _ = self.out.flush();
    }

    fn finish(&mut self, bad: usize) {
        if self.format == Format::Table {
            print_table(&mut self.out, &self.rows, self.colour);
            let before = self.rows.iter().filter(|r| r.before);
            let count = |e: &str| before.clone().filter(|r| r.effect == e).count();
            let calls = before.clone().count();
            let llm: Vec<&TableRow> = self.rows.iter().filter(|r| r.llm).collect();
            let after = self.rows.len() - calls - llm.len();
            let mut summary = format!(
                "{} calls: {} allowed, {} blocked, {} hitl",
                calls,
                count("allow"),
                count("block"),
                count("hitl")
            );
            if after > 0 {
                summary.push_str(&format!("; {after} after-phase decisions"));
            }
            if !llm.is_empty() {
                let n = |e: &str| llm.iter().filter(|r| r.effect == e).count();
                summary.push_str(&format!(
                    "; {} model calls (llm.before): {} allowed, {} blocked, {} hitl",
                    llm.len(),
                    n("allow"),
                    n("block"),
                    n("hitl")
                ));
            }
            if bad > 0 {
                summary.push_str(&format!("; {bad} bad trace lines skipped"));
            }
            let _ = writeln!(self.out, "{summary}");
        }
        self.flush();
    }
}

fn print_table(out: &mut impl Write, rows: &[TableRow], colour: bool) {
    let header = [
        "LINE", "RUN", "CALL", "PHASE", "TOOL", "EFFECT", "CODE", "RULE", "REASON",
    ];
    let mut widths = header.map(str::len);
    for r in rows {
        for (i, s) in r.cells.iter().enumerate() {
            widths[i] = widths[i].max(s.chars().count());
        }
    }
    let line = |cols: &[String], colour_code: Option<&str>| -> String {
        let mut s = String::new();
        for (i, c) in cols.iter().enumerate() {
            if i == cols.len() - 1 {
                s.push_str(c);
            } else {
                let pad = widths[i] - c.chars().count();
                if i == 5 {
                    if let Some(code) = colour_code {
                        s.push_str(&format!("\x1b[{code}m{c}\x1b[0m"));
                    } else {
                        s.push_str(c);
                    }
                } else {
                    s.push_str(c);
                }
                s.push_str(&" ".repeat(pad + 2));
            }
        }
        s.trim_end().to_string()
    };
    let h: Vec<String> = header.iter().map(|s| s.to_string()).collect();
    let _ = writeln!(out, "{}", line(&h, None));
    for r in rows {
        let code = colour.then_some(match r.effect.as_str() {
            "allow" => "32",
            "block" => "31",
            _ => "33",
        });
        let _ = writeln!(out, "{}", line(&r.cells, code));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::engine::{Decision, DecisionCode};
    use crate::policy::{EffectType, Phase};

    #[test]
    fn the_table_keeps_only_what_it_prints() {
        let rule: Arc<str> = Arc::from("rule-with-a-long-evaluated-list");
        let mut d = Decision::simple(
            Phase::Before,
            EffectType::Block,
            DecisionCode::BlockedRule,
            None,
        );
        d.rule_id = Some(rule.clone());
        let row = ReplayRow {
            line: 2,
            run_id: "r1".into(),
            call_id: "c1".into(),
            phase: "tool.before".into(),
            tool: "t".into(),
            effect: "block".into(),
            code: "BLOCKED_RULE".into(),
            rule_id: Some(rule.to_string()),
            reason: None,
            shadow_effect: None,
            abort_run: false,
            decision: Some(d),
        };
        let mut p = Printer::new(Format::Table);
        p.row(&row);
        drop(row);
        assert_eq!(Arc::strong_count(&rule), 1, "the decision was kept");
        assert_eq!(p.rows.len(), 1);
        assert_eq!(p.rows[0].cells[7], "rule-with-a-long-evaluated-list");
    }
}
