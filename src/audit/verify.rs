//! Chain verification: finds missing, reordered, edited, deleted or forged events.
//!
//! For every run (events grouped by `runId`, across all files given):
//!
//! * each event's `hash` must equal the SHA-256 of its canonical JSON without `hash`
//!   (else it was edited);
//! * sorted by `seq`, the run must go 0, 1, 2, ... without gaps (else events were deleted) or
//!   repeats;
//! * each event's `prevHash` must equal the `hash` of the event before it (null for seq 0) —
//!   this catches an edited event whose hash was recomputed ("forged"): the break is reported
//!   at the event after it;
//! * within one file, a run's events must appear in `seq` order (else lines were reordered);
//! * after a run's `run.ended` come only the end's own events (`evaluation.result`,
//!   `checkpoint`, `error`): anything else means the run went on after it ended;
//! * each line of a file must be byte for byte the canonical JSON of its content ("not
//!   canonical": whitespace, key order, escapes, number forms, duplicate keys).
//!
//! With a public key ([`verify_paths_signed`], [`verify_events_signed`]) every run must also
//! be signed: each `run.ended` / `checkpoint` event (and any event carrying `signature`) must
//! bear a good signature by that key (see [`super::sign`]), a run with none is "unsigned", and
//! events after a run's last good signature are reported. Without a key, a run's tail can be
//! rewritten and re-hashed unnoticed; with it, it cannot.
//!
//! The chain cannot show that events were cut off the *end* of a run; keep the last hash
//! somewhere else (e.g. a collector) to detect that.

use std::path::Path;

use super::AuditEvent;
use super::sign::RunVerifier;
use checker::Verifier;
use run::Loc;

mod checker;
mod files;
mod report;
mod run;
mod stream;
mod takeover;

pub use files::{AuditFiles, audit_files};
pub use report::{BreakKind, ChainBreak, FileSummary, VerifyNote, VerifyReport};
pub use stream::StreamVerifier;
mod strict;

/// Verifies events held in memory (e.g. from a [`super::MemorySink`]). Breaks are located by
/// position in the input (1-based `line`, no `path`).
pub fn verify_events<'a>(events: impl IntoIterator<Item = &'a AuditEvent>) -> VerifyReport {
    verify_events_inner(events, None)
}

/// [`verify_events`], and every run must be signed by `key` (see the module docs).
pub fn verify_events_signed<'a>(
    events: impl IntoIterator<Item = &'a AuditEvent>,
    key: &RunVerifier,
) -> VerifyReport {
    verify_events_inner(events, Some(key.clone()))
}

fn verify_events_inner<'a>(
    events: impl IntoIterator<Item = &'a AuditEvent>,
    key: Option<RunVerifier>,
) -> VerifyReport {
    let mut v = Verifier::new(key, false);
    for (i, e) in events.into_iter().enumerate() {
        let loc = Loc {
            file: None,
            line: i + 1,
        };
        v.add_value(loc, e.to_json());
    }
    v.finish(Vec::new(), Vec::new())
}

/// The longest line [`verify_paths`] reads (128 MiB: an event holding a result at the MCP
/// gateway's default 64 MiB message limit, its escapes included); a longer line is a break and ends the
/// reading of its file, so memory stays bounded whatever the input.
pub const MAX_LINE_BYTES: usize = 128 << 20;

/// Verifies JSONL files and directories (searched recursively for `*.jsonl`, in name order).
/// All runs are checked across all files, so a run may span files.
///
/// Each real file is read once, however many paths (symlinks, repeated arguments) lead to it;
/// symlink loops end the search of that branch; in folders only regular files are read (a FIFO
/// or device named `*.jsonl` is skipped with a note in [`VerifyReport::skipped`]). Files named
/// on the command line are read whatever they are, up to the first line longer than
/// [`MAX_LINE_BYTES`].
pub fn verify_paths<P: AsRef<Path>>(paths: &[P]) -> VerifyReport {
    files::verify_paths_inner(paths, None, false)
}

/// [`verify_paths`], and every run must be signed by `key` (see the module docs); a signed
/// run without a signed `run.ended` is a break ([`BreakKind::Incomplete`]).
pub fn verify_paths_signed<P: AsRef<Path>>(paths: &[P], key: &RunVerifier) -> VerifyReport {
    files::verify_paths_inner(paths, Some(key.clone()), false)
}

/// [`verify_paths_signed`] where open runs are expected (`toolgate verify --allow-open`): a
/// run without `run.ended` is checked up to its last signature, and the events after it are
/// not breaks (nothing signs them yet).
pub fn verify_paths_signed_open<P: AsRef<Path>>(paths: &[P], key: &RunVerifier) -> VerifyReport {
    files::verify_paths_inner(paths, Some(key.clone()), true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{EventKind, RunChain};
    use chrono::Utc;
    use serde_json::{Map, json};

    fn run(n: usize) -> Vec<AuditEvent> {
        let mut c = RunChain::new("r", "a", None);
        (0..n)
            .map(|i| {
                let mut b = Map::new();
                b.insert("i".into(), json!(i));
                c.seal(EventKind::ToolResult, Utc::now(), b)
            })
            .collect()
    }

    #[test]
    fn intact_chain_is_ok() {
        let r = verify_events(&run(5));
        assert!(r.is_ok(), "{:?}", r.breaks);
        assert_eq!((r.events, r.runs), (5, 1));
    }

    #[test]
    fn deleted_event_is_missing_seq() {
        let mut evs = run(5);
        evs.remove(2);
        let r = verify_events(&evs);
        assert_eq!(r.breaks.len(), 1);
        assert_eq!(r.breaks[0].kind, BreakKind::MissingSeq);
        assert_eq!(r.breaks[0].seq, Some(3));
    }

    #[test]
    fn swapped_events_are_out_of_order() {
        let mut evs = run(5);
        evs.swap(1, 2);
        let r = verify_events(&evs);
        assert_eq!(r.breaks.len(), 1, "{:?}", r.breaks);
        assert_eq!(r.breaks[0].kind, BreakKind::OutOfOrder);
        assert_eq!(r.breaks[0].seq, Some(1));
    }

    #[test]
    fn streaming_finds_what_the_in_memory_check_finds() {
        let mut evs = run(6);
        evs.remove(2);
        let mut lines: Vec<String> = evs.iter().map(AuditEvent::to_canonical_json).collect();
        lines.insert(3, lines[3].clone());
        let parsed: Vec<AuditEvent> = lines
            .iter()
            .map(|l| AuditEvent::from_value(serde_json::from_str(l).unwrap()).unwrap())
            .collect();
        let whole = verify_events(&parsed);
        let mut s = StreamVerifier::new(None);
        for l in &lines {
            s.push_line(l);
        }
        let streamed = s.finish();
        let kinds = |r: &VerifyReport| r.breaks.iter().map(|b| (b.kind, b.seq)).collect::<Vec<_>>();
        assert_eq!(kinds(&streamed), kinds(&whole));
        assert_eq!(
            kinds(&whole),
            [
                (BreakKind::MissingSeq, Some(3)),
                (BreakKind::DuplicateSeq, Some(4))
            ]
        );
        assert_eq!((streamed.events, streamed.runs), (whole.events, whole.runs));

        // Lines are held to the canonical form, as in files.
        let mut s = StreamVerifier::new(None);
        s.push_line(&format!("{} ", lines[0]));
        let r = s.finish();
        assert_eq!(r.breaks.len(), 1, "{:?}", r.breaks);
        assert_eq!(r.breaks[0].kind, BreakKind::NotCanonical);
        assert_eq!(r.breaks[0].agent_id.as_deref(), Some("a"));
    }

    #[test]
    fn duplicate_is_reported() {
        let mut evs = run(3);
        evs.push(evs[1].clone());
        let r = verify_events(&evs);
        assert!(r.breaks.iter().any(|b| b.kind == BreakKind::DuplicateSeq));
    }
}
