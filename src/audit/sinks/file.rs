//! [`FileSink`]: appends events as JSON Lines to `DIR/<YYYY-MM-DD>.jsonl`, rotating by size.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::audit::{AuditError, AuditEvent, AuditSink, EventKind};

/// The directory the default sink writes to: `./toolgate-audit`.
pub const DEFAULT_AUDIT_DIR: &str = "toolgate-audit";

/// Configuration of a [`FileSink`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileSinkConfig {
    /// Directory of the trail (created if missing). Default `./toolgate-audit`.
    #[serde(default = "default_dir")]
    pub dir: PathBuf,
    /// A file that would grow past this many bytes is closed and the next segment
    /// (`<date>.1.jsonl`, `<date>.2.jsonl`, ...) started. Default 100 MiB.
    #[serde(default = "default_max_file_bytes")]
    pub max_file_bytes: u64,
    /// fsync the file when a run ends (`run.ended`), on flush and on shutdown. Default true.
    #[serde(default = "default_true")]
    pub fsync: bool,
}

fn default_dir() -> PathBuf {
    PathBuf::from(DEFAULT_AUDIT_DIR)
}
fn default_max_file_bytes() -> u64 {
    100 * 1024 * 1024
}
fn default_true() -> bool {
    true
}

impl Default for FileSinkConfig {
    fn default() -> Self {
        FileSinkConfig {
            dir: default_dir(),
            max_file_bytes: default_max_file_bytes(),
            fsync: true,
        }
    }
}

impl FileSinkConfig {
    /// The default configuration with another directory.
    pub fn in_dir(dir: impl Into<PathBuf>) -> FileSinkConfig {
        FileSinkConfig {
            dir: dir.into(),
            ..FileSinkConfig::default()
        }
    }
}

struct Current {
    date: String,
    segment: u32,
    path: PathBuf,
    writer: BufWriter<File>,
    size: u64,
}

struct State {
    config: FileSinkConfig,
    current: Option<Current>,
}

/// Appends each event's canonical JSON (the line it was sealed with) as one line to `DIR/<YYYY-MM-DD>.jsonl` (the UTC date of
/// the event's `ts`). Lines are handed to the OS after every batch; the file is fsynced on
/// `run.ended`, flush and shutdown. This is the default sink.
pub struct FileSink {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for FileSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSink")
            .field("dir", &self.state.lock().config.dir)
            .finish()
    }
}

impl FileSink {
    /// Creates the directory if needed.
    pub fn new(config: FileSinkConfig) -> Result<FileSink, AuditError> {
        std::fs::create_dir_all(&config.dir).map_err(|e| AuditError::io(&config.dir, e))?;
        Ok(FileSink {
            state: Arc::new(Mutex::new(State {
                config,
                current: None,
            })),
        })
    }

    /// The directory written to.
    pub fn dir(&self) -> PathBuf {
        self.state.lock().config.dir.clone()
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut State) -> Result<T, AuditError> + Send + 'static,
    ) -> Result<T, AuditError> {
        let state = self.state.clone();
        tokio::task::spawn_blocking(move || f(&mut state.lock()))
            .await
            .map_err(|e| AuditError::Sink(format!("file sink task failed: {e}")))?
    }
}

/// The UTC date of the event's `ts` (`YYYY-MM-DD`): the start of its text when that is in UTC,
/// as every sealed event's is.
fn date_of(e: &AuditEvent) -> std::borrow::Cow<'_, str> {
    let text = e.ts_text();
    match text.get(..10) {
        Some(date) if text.ends_with('Z') => std::borrow::Cow::Borrowed(date),
        _ => std::borrow::Cow::Owned(e.ts().format("%Y-%m-%d").to_string()),
    }
}

fn segment_path(dir: &Path, date: &str, segment: u32) -> PathBuf {
    if segment == 0 {
        dir.join(format!("{date}.jsonl"))
    } else {
        dir.join(format!("{date}.{segment}.jsonl"))
    }
}

/// The highest existing segment number for `date` in `dir` (0 if none).
fn last_segment(dir: &Path, date: &str) -> u32 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let rest = name.strip_prefix(date)?.strip_suffix(".jsonl")?;
            if rest.is_empty() {
                Some(0)
            } else {
                rest.strip_prefix('.')?.parse::<u32>().ok()
            }
        })
        .max()
        .unwrap_or(0)
}

fn open_segment(dir: &Path, date: &str, segment: u32) -> Result<Current, AuditError> {
    let path = segment_path(dir, date, segment);
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| AuditError::io(&path, e))?;
    let size = file.metadata().map_err(|e| AuditError::io(&path, e))?.len();
    Ok(Current {
        date: date.to_string(),
        segment,
        path,
        writer: BufWriter::with_capacity(64 * 1024, file),
        size,
    })
}

impl State {
    fn finish_current(&mut self, sync: bool) -> Result<(), AuditError> {
        if let Some(cur) = self.current.as_mut() {
            cur.writer
                .flush()
                .map_err(|e| AuditError::io(&cur.path, e))?;
            if sync {
                cur.writer
                    .get_ref()
                    .sync_data()
                    .map_err(|e| AuditError::io(&cur.path, e))?;
            }
        }
        Ok(())
    }

    /// Appends `line` and a line break to the file of `date`.
    fn write_line(&mut self, date: &str, line: &[u8]) -> Result<(), AuditError> {
        let needs_open = match &self.current {
            None => true,
            Some(cur) => cur.date != date,
        };
        if needs_open {
            self.finish_current(self.config.fsync)?;
            self.current = None;
            let seg = last_segment(&self.config.dir, date);
            self.current = Some(open_segment(&self.config.dir, date, seg)?);
        }
        let max = self.config.max_file_bytes;
        let fsync = self.config.fsync;
        if let Some(cur) = &self.current
            && cur.size > 0
            && cur.size + line.len() as u64 + 1 > max
        {
            let next = cur.segment + 1;
            self.finish_current(fsync)?;
            self.current = Some(open_segment(&self.config.dir, date, next)?);
        }
        match self.current.as_mut() {
            Some(cur) => {
                cur.writer
                    .write_all(line)
                    .and_then(|()| cur.writer.write_all(b"\n"))
                    .map_err(|e| AuditError::io(&cur.path, e))?;
                cur.size += line.len() as u64 + 1;
                Ok(())
            }
            None => Err(AuditError::Sink("file sink has no open file".into())),
        }
    }
}

#[async_trait]
impl AuditSink for FileSink {
    async fn write_batch(&self, events: &[Arc<AuditEvent>]) -> Result<(), AuditError> {
        let events: Vec<Arc<AuditEvent>> = events.to_vec();
        self.blocking(move |st| {
            let mut run_ended = false;
            for e in &events {
                // The line the event was sealed with, as is.
                st.write_line(&date_of(e), e.canonical_line().as_bytes())?;
                run_ended |= e.kind() == EventKind::RunEnded;
            }
            let sync = run_ended && st.config.fsync;
            st.finish_current(sync)
        })
        .await
    }

    async fn flush(&self) -> Result<(), AuditError> {
        self.blocking(|st| {
            let sync = st.config.fsync;
            st.finish_current(sync)
        })
        .await
    }

    async fn shutdown(&self) -> Result<(), AuditError> {
        self.blocking(|st| {
            let sync = st.config.fsync;
            let r = st.finish_current(sync);
            st.current = None;
            r
        })
        .await
    }
}
