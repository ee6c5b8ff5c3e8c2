//! Reading recorded events for a what-if replay: from files and folders (walked as `toolgate
//! verify` walks them) or a collector store, with every run's chain verified.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::WhatIfFilter;
use crate::audit::AuditEvent;
use crate::audit::store::{DEFAULT_PAGE, EventQuery, EventStore, StoreError};

/// What reading an audit trail found (see [`read_audit_trail`]).
#[derive(Debug, Clone, Default)]
pub struct AuditRead {
    /// The events the filter keeps.
    pub events: Vec<AuditEvent>,
    /// Lines that are not audit events (or not UTF-8).
    pub bad: usize,
    /// Problems met while reading, for people: a line that is not UTF-8 or not an event with
    /// its file and line, a path skipped (the first 100).
    pub notes: Vec<String>,
    /// Runs whose hash chain does not verify, by (agent, run), with the first break.
    pub broken: BTreeMap<(String, String), String>,
}

impl AuditRead {
    fn note(&mut self, text: String) {
        if self.notes.len() < 100 {
            self.notes.push(text);
        }
    }

    /// Records the runs `report` finds broken.
    fn add_breaks(&mut self, report: &crate::audit::VerifyReport) {
        for b in &report.breaks {
            if let (Some(a), Some(r)) = (&b.agent_id, &b.run_id) {
                self.broken
                    .entry((a.clone(), r.clone()))
                    .or_insert_with(|| b.to_string());
            }
        }
    }
}

/// Reads the audit events `filter` selects from JSONL files and folders, walked as `toolgate
/// verify` walks them ([`crate::audit::audit_files`]: each real file once, symlink loops and
/// FIFOs skipped), line by line; the filter applies while reading, so events of other agents
/// or older than `since` are never held. A line that is not UTF-8 or not an audit event is
/// counted and noted with its file and line, and reading goes on; an unreadable path is an
/// error. Every run's chain is verified too ([`crate::audit::verify_paths`]): broken runs are
/// in [`AuditRead::broken`].
pub fn read_audit_trail<P: AsRef<Path>>(
    paths: &[P],
    filter: &WhatIfFilter,
) -> Result<AuditRead, (PathBuf, std::io::Error)> {
    use std::io::BufRead;
    let (files, unreadable, skipped) = crate::audit::audit_files(paths);
    if let Some((p, why)) = unreadable.into_iter().next() {
        return Err((p, std::io::Error::other(why)));
    }
    let mut out = AuditRead::default();
    for (p, why) in skipped {
        out.note(format!("{}: skipped: {why}", p.display()));
    }
    let mut buf = Vec::new();
    for f in &files {
        let file = std::fs::File::open(f).map_err(|e| (f.clone(), e))?;
        let mut reader = std::io::BufReader::new(file);
        let mut n = 0usize;
        loop {
            buf.clear();
            if reader
                .read_until(b'\n', &mut buf)
                .map_err(|e| (f.clone(), e))?
                == 0
            {
                break;
            }
            n += 1;
            if buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let Ok(line) = std::str::from_utf8(&buf) else {
                out.bad += 1;
                out.note(format!("{}:{n}: not UTF-8; line skipped", f.display()));
                continue;
            };
            match serde_json::from_str::<AuditEvent>(line) {
                Ok(e) if filter.keeps(&e) => out.events.push(e),
                Ok(_) => {}
                Err(e) => {
                    out.bad += 1;
                    out.note(format!(
                        "{}:{n}: not an audit event ({e}); line skipped",
                        f.display()
                    ));
                }
            }
        }
    }
    out.add_breaks(&crate::audit::verify_paths(&files));
    Ok(out)
}

/// Reads audit events from JSONL files and folders ([`read_audit_trail`] without a filter):
/// the events, and the number of lines that are not audit events.
pub fn read_audit_paths<P: AsRef<Path>>(
    paths: &[P],
) -> Result<(Vec<AuditEvent>, usize), (PathBuf, std::io::Error)> {
    read_audit_trail(paths, &WhatIfFilter::default()).map(|r| (r.events, r.bad))
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

/// [`read_store`], with every read run's chain verified ([`AuditRead::broken`]).
pub async fn read_store_verified(
    store: &dyn EventStore,
    filter: &WhatIfFilter,
) -> Result<AuditRead, StoreError> {
    let (events, bad) = read_store(store, filter).await?;
    let mut out = AuditRead {
        bad,
        ..AuditRead::default()
    };
    out.add_breaks(&crate::audit::verify_events(&events));
    out.events = events;
    Ok(out)
}
