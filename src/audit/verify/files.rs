//! Reading files and folders for [`super::verify_paths`].

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::run::Loc;
use super::{BreakKind, MAX_LINE_BYTES, RunVerifier, Verifier, VerifyReport};

pub(super) fn verify_paths_inner<P: AsRef<Path>>(
    paths: &[P],
    key: Option<RunVerifier>,
    allow_open: bool,
) -> VerifyReport {
    let (files, mut unreadable, skipped) = audit_files(paths);
    let mut v = Verifier::new(key, false);
    v.allow_open = allow_open;
    for path in files {
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) => {
                unreadable.push((path, e.to_string()));
                continue;
            }
        };
        let idx = v.files.len();
        v.files.push(Arc::new(path.clone()));
        if let Err(e) = add_reader(&mut v, idx, std::io::BufReader::new(file)) {
            unreadable.push((path, e.to_string()));
        }
    }
    v.finish(unreadable, skipped)
}

/// The audit files `paths` name, walked as `toolgate verify` walks them: folders searched
/// recursively for `*.jsonl` in name order, each real file once however many paths lead to
/// it, symlink loops and (in folders) non-regular files skipped. Returns (files, unreadable
/// paths with why, skipped paths with why).
pub fn audit_files<P: AsRef<Path>>(paths: &[P]) -> AuditFiles {
    let mut files = Vec::new();
    let mut unreadable = Vec::new();
    let mut skipped = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for p in paths {
        let p = p.as_ref();
        match std::fs::metadata(p) {
            Err(e) => unreadable.push((p.to_path_buf(), e.to_string())),
            Ok(m) if m.is_dir() => {
                collect_jsonl(p, &mut files, &mut seen, &mut unreadable, &mut skipped)
            }
            Ok(_) => {
                if first_visit(&mut seen, p) {
                    files.push(p.to_path_buf());
                } else {
                    skipped.push((p.to_path_buf(), "already read by another path".into()));
                }
            }
        }
    }
    (files, unreadable, skipped)
}

/// What [`audit_files`] finds: (files, unreadable paths with why, skipped paths with why).
pub type AuditFiles = (Vec<PathBuf>, Vec<(PathBuf, String)>, Vec<(PathBuf, String)>);

/// True the first time a real file (by canonical path) is met.
fn first_visit(seen: &mut std::collections::HashSet<PathBuf>, p: &Path) -> bool {
    let real = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    seen.insert(real)
}

fn collect_jsonl(
    dir: &Path,
    out: &mut Vec<PathBuf>,
    seen: &mut std::collections::HashSet<PathBuf>,
    unreadable: &mut Vec<(PathBuf, String)>,
    skipped: &mut Vec<(PathBuf, String)>,
) {
    let walk = walkdir::WalkDir::new(dir)
        .follow_links(true)
        .sort_by_file_name();
    for entry in walk {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                let path = e.path().unwrap_or(dir).to_path_buf();
                if e.loop_ancestor().is_some() {
                    skipped.push((path, "symlink loop".into()));
                } else if e.depth() > 0 && path.extension().is_none_or(|x| x != "jsonl") {
                    skipped.push((path, format!("cannot search: {e}")));
                } else {
                    let reason = e
                        .io_error()
                        .map_or_else(|| e.to_string(), ToString::to_string);
                    unreadable.push((path, reason));
                }
                continue;
            }
        };
        let path = entry.path();
        if entry.file_type().is_dir() || path.extension().is_none_or(|x| x != "jsonl") {
            continue;
        }
        if !entry.file_type().is_file() {
            skipped.push((path.to_path_buf(), "not a regular file".into()));
        } else if first_visit(seen, path) {
            out.push(path.to_path_buf());
        } else {
            skipped.push((path.to_path_buf(), "already read by another path".into()));
        }
    }
}

/// Reads one file's lines into `v`, up to the first line longer than [`MAX_LINE_BYTES`].
fn add_reader(v: &mut Verifier, file: usize, reader: impl BufRead) -> Result<(), std::io::Error> {
    let mut reader = reader;
    let mut buf = Vec::with_capacity(1024);
    let mut line = 0usize;
    loop {
        buf.clear();
        let limit = MAX_LINE_BYTES as u64 + 1;
        if (&mut reader).take(limit).read_until(b'\n', &mut buf)? == 0 {
            return Ok(());
        }
        line += 1;
        let loc = Loc {
            file: Some(file),
            line,
        };
        if buf.len() > MAX_LINE_BYTES && buf.last() != Some(&b'\n') {
            v.push_break(
                loc,
                None,
                None,
                BreakKind::Malformed,
                format!(
                    "line longer than {} MiB; the rest of the file is not read",
                    MAX_LINE_BYTES >> 20
                ),
            );
            return Ok(());
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        v.add_line(loc, &buf);
    }
}
