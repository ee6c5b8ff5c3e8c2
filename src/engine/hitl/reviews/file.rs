//! The review store in a JSON file, shared between processes.

use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use super::{Review, ReviewError, ReviewStore, ReviewVerdict, resolve};
use crate::engine::decide::decision::ReviewStatus;

/// Reviews in a JSON file, shared between processes (e.g. `toolgate review` and a running
/// agent). Every change is a read-modify-write under an advisory lock on a sidecar file
/// (`FILE.lock`), written to a temp file unique to the writer and renamed over the store, so
/// parallel processes never lose each other's changes and readers always see a whole file.
#[derive(Debug)]
pub struct FileReviewStore {
    path: PathBuf,
    lock: Mutex<()>,
}

impl FileReviewStore {
    /// A store in `path` (created on first write).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FileReviewStore {
            path: path.into(),
            lock: Mutex::new(()),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// All reviews, or the error that makes the file unreadable (unlike
    /// [`ReviewStore::list`], which logs the error and returns nothing).
    pub fn try_list(&self) -> Result<Vec<Review>, ReviewError> {
        self.read()
    }

    fn read(&self) -> Result<Vec<Review>, ReviewError> {
        match std::fs::read_to_string(&self.path) {
            Ok(s) if s.trim().is_empty() => Ok(Vec::new()),
            Ok(s) => crate::json::from_str_strict(&s)
                .map_err(|e| self.io(format!("not a review file: {e}"))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(self.io(e.to_string())),
        }
    }

    /// Runs `change` on the reviews while holding the store's lock across processes, and
    /// writes the result back when `change` says so.
    fn modify<T>(
        &self,
        change: impl FnOnce(&mut Vec<Review>) -> Result<(T, bool), ReviewError>,
    ) -> Result<T, ReviewError> {
        let _g = self.lock.lock();
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| self.io(e.to_string()))?;
        }
        let lock_path = sidecar(&self.path, ".lock");
        let lock_file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| {
                self.io(format!(
                    "cannot open lock file {}: {e}",
                    lock_path.display()
                ))
            })?;
        fs4::fs_std::FileExt::lock_exclusive(&lock_file)
            .map_err(|e| self.io(format!("cannot lock {}: {e}", lock_path.display())))?;
        let mut all = self.read()?;
        let (out, changed) = change(&mut all)?;
        if changed {
            self.write(&all)?;
        }
        // Dropping the file releases the lock.
        drop(lock_file);
        Ok(out)
    }

    fn write(&self, reviews: &[Review]) -> Result<(), ReviewError> {
        let tmp = sidecar(
            &self.path,
            &format!(
                ".{}.{}.tmp",
                std::process::id(),
                uuid::Uuid::now_v7().simple()
            ),
        );
        let text = serde_json::to_string_pretty(reviews).map_err(|e| self.io(e.to_string()))?;
        let written = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &self.path));
        written.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            self.io(e.to_string())
        })
    }

    fn io(&self, message: String) -> ReviewError {
        ReviewError::Io {
            path: self.path.clone(),
            message,
        }
    }
}

/// `path` with `suffix` appended to its file name.
fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

impl ReviewStore for FileReviewStore {
    fn get(&self, fingerprint: &str) -> Option<Review> {
        match self.read() {
            Ok(v) => v.into_iter().rev().find(|r| r.fingerprint == fingerprint),
            Err(e) => {
                tracing::warn!("{e}");
                None
            }
        }
    }

    fn insert_if_absent(&self, review: Review) -> Review {
        let result =
            self.modify(|all| {
                if let Some(r) = all.iter().rev().find(|r| {
                    r.fingerprint == review.fingerprint && r.status != ReviewStatus::Expired
                }) {
                    return Ok((r.clone(), false));
                }
                all.push(review.clone());
                Ok((review.clone(), true))
            });
        match result {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("{e}");
                review
            }
        }
    }

    fn list(&self) -> Vec<Review> {
        match self.read() {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!("{e}");
                Vec::new()
            }
        }
    }

    fn decide_with(&self, id: &str, verdict: &ReviewVerdict) -> Result<Review, ReviewError> {
        // A verdict that loses to a due expiry still writes the expiry's decision.
        self.modify(|all| {
            let i = resolve(all, id)?;
            let before = all[i].clone();
            let outcome = all[i].set_decision(verdict).map(|()| all[i].clone());
            let changed = all[i] != before;
            Ok((outcome, changed))
        })?
    }
}
