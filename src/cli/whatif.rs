//! `toolgate replay --from-audit`: what-if replay of recorded runs under another policy.
use std::io::Write;
use std::process::ExitCode;

use super::replay_args::{Format, ReplayArgs};
use crate::whatif::{
    AuditTrail, StoreTrail, WhatIfCall, WhatIfFilter, index_audit_trail, what_if_store,
    what_if_trail,
};

/// Where the recorded events come from.
enum Source {
    /// A collector store's runs, listed, each read a page at a time.
    Store(StoreTrail),
    /// An indexed folder, read run by run.
    Trail(AuditTrail),
}

/// Runs the what-if replay described by `args` (`--from-audit` is set).
pub fn run(args: ReplayArgs) -> ExitCode {
    let Some(source) = args.from_audit.as_deref() else {
        eprintln!("error: give --trace FILE or --from-audit DIR");
        return ExitCode::from(2);
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
    let since = match args
        .since
        .as_deref()
        .map(chrono::DateTime::parse_from_rfc3339)
    {
        None => None,
        Some(Ok(t)) => Some(t.with_timezone(&chrono::Utc)),
        Some(Err(e)) => {
            eprintln!("error: --since: not an RFC 3339 time (e.g. 2026-01-05T00:00:00Z): {e}");
            return ExitCode::from(2);
        }
    };
    let mut filter = WhatIfFilter {
        agent: args.agent.clone(),
        since,
        ..WhatIfFilter::default()
    };
    let rt = match super::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    // A folder is indexed (a small record per run) and each run read from its files when the
    // replay reaches it; a store's runs are listed and each run read a page at a time.
    let read = if source.starts_with("postgres://") || source.starts_with("postgresql://") {
        rt.block_on(index_postgres(source, &filter)).map(|mut t| {
            let (notes, broken) = (std::mem::take(&mut t.notes), std::mem::take(&mut t.broken));
            (0, notes, broken, Source::Store(t))
        })
    } else {
        index_audit_trail(&[source], &filter)
            .map(|mut t| {
                let (bad, notes, broken) = (
                    t.bad,
                    std::mem::take(&mut t.notes),
                    std::mem::take(&mut t.broken),
                );
                (bad, notes, broken, Source::Trail(t))
            })
            .map_err(|(path, e)| format!("{}: {e}", path.display()))
    };
    let (bad, notes, broken, events) = match read {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: --from-audit: {e}");
            return ExitCode::from(2);
        }
    };
    for note in &notes {
        eprintln!("warning: {note}");
    }
    if bad > 0 {
        eprintln!("warning: {bad} stored line(s) are not audit events; skipped");
    }
    if !args.no_verify {
        filter.exclude = broken;
    }
    let builder = args
        .policies
        .iter()
        .fold(crate::engine::GovernanceEngine::builder(), |b, p| {
            b.policy_path(p.clone())
        });
    let replayed = match events {
        Source::Store(trail) => rt.block_on(what_if_store(builder, org_tz, trail, &filter)),
        Source::Trail(trail) => rt.block_on(what_if_trail(builder, org_tz, trail, &filter)),
    };
    let report = match replayed {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    for s in &report.skipped {
        eprintln!(
            "warning: run {} (agent {}) not replayed: {}",
            s.run_id, s.agent_id, s.reason
        );
    }
    let shown: Vec<&WhatIfCall> = report
        .calls
        .iter()
        .filter(|c| args.all || c.changed() || c.undecidable.is_some())
        .collect();
    let mut out = std::io::stdout().lock();
    match args.format {
        Format::Jsonl => {
            for c in shown {
                let line = serde_json::to_string(c).unwrap_or_default();
                let _ = writeln!(out, "{line}");
            }
            eprintln!("{}", report.summary());
        }
        Format::Table => {
            print_table(&mut out, &shown);
            let _ = writeln!(out, "{}", report.summary());
        }
    }
    let _ = out.flush();
    let broken = report.skipped.iter().filter(|s| s.chain_broken).count();
    if broken > 0 {
        eprintln!(
            "error: {broken} run(s) not replayed because their hash chain does not verify (listed \
             above); `toolgate verify` shows every break, --no-verify replays them anyway"
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn print_table(out: &mut impl Write, calls: &[&WhatIfCall]) {
    if calls.is_empty() {
        return;
    }
    let header = [
        "TIME",
        "RUN",
        "CALL",
        "TOOL",
        "RECORDED → NEW",
        "NEW CODE",
        "RECORDED RULE",
        "NEW RULE",
    ];
    let dash = |r: &Option<String>| r.clone().unwrap_or_else(|| "-".to_string());
    let cells: Vec<[String; 8]> = calls
        .iter()
        .map(|c| {
            [
                c.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                c.run_id.clone(),
                c.call_id.clone(),
                match c.phase.as_deref() {
                    Some("llm.before") => format!("llm:{}", c.tool),
                    _ => c.tool.clone(),
                },
                if c.undecidable.is_some() {
                    format!("{} → undecidable", c.recorded_effect)
                } else if c.changed() {
                    format!("{} → {}", c.recorded_effect, c.new_effect)
                } else {
                    format!("{} (same)", c.new_effect)
                },
                c.new_code.clone(),
                dash(&c.recorded_rule_id),
                dash(&c.new_rule_id),
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &cells {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cols: &[String]| {
        let mut s = String::new();
        for (i, (c, w)) in cols.iter().zip(widths).enumerate() {
            if i + 1 == cols.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        s.trim_end().to_string()
    };
    let _ = writeln!(out, "{}", line(&header.map(str::to_string)));
    for row in &cells {
        let _ = writeln!(out, "{}", line(row));
    }
}

#[cfg(feature = "postgres")]
async fn index_postgres(url: &str, filter: &WhatIfFilter) -> Result<StoreTrail, String> {
    let shown = crate::audit::collector::redact_url(url);
    let store = crate::audit::store::postgres::PgStore::open_existing(url)
        .await
        .map_err(|e| format!("{shown}: {e}"))?;
    crate::whatif::index_store(std::sync::Arc::new(store), filter)
        .await
        .map_err(|e| format!("{shown}: {e}"))
}

#[cfg(not(feature = "postgres"))]
async fn index_postgres(_url: &str, _filter: &WhatIfFilter) -> Result<StoreTrail, String> {
    Err("toolgate was built without the `postgres` feature".to_string())
}
