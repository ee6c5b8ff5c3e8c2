//! [`FileSink`]: appends events as JSON Lines to `DIR/<YYYY-MM-DD>.jsonl`, rotating by size.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::audit::bus::on_sink_thread;
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
    /// Group commit: the fsyncs that written `run.ended` events call for are done at most once
    /// per this many milliseconds (one sync then covers every batch written meanwhile, and one
    /// falls due at the latest this long after the batch that asked for it, whether or not
    /// more batches come). Flush and shutdown (and so `Run::end`, which awaits a flush) sync
    /// at once whatever this says. `0`: every batch holding a `run.ended` is synced before the
    /// next is written. Default 10.
    #[serde(default = "default_sync_interval_ms")]
    pub sync_interval_ms: u64,
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
fn default_sync_interval_ms() -> u64 {
    10
}

impl Default for FileSinkConfig {
    fn default() -> Self {
        FileSinkConfig {
            dir: default_dir(),
            max_file_bytes: default_max_file_bytes(),
            fsync: true,
            sync_interval_ms: default_sync_interval_ms(),
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
    /// The file's length after the last batch written whole (handed to the OS): a failed
    /// batch is cut back to it, so no torn line stays in the file.
    whole: u64,
}

struct State {
    config: FileSinkConfig,
    current: Option<Current>,
    /// When the file was last fsynced (by this sink).
    last_sync: Option<Instant>,
    /// A written `run.ended` awaits a sync (group commit).
    sync_due: bool,
    /// A timer is set to do the due sync (set and cleared under this state's lock, so a sync
    /// that falls due always has a timer or a batch to do it).
    timer_armed: bool,
    /// Syncs done, for tests.
    syncs: u64,
}

/// Appends each event's canonical JSON (the line it was sealed with) as one line to `DIR/<YYYY-MM-DD>.jsonl` (the UTC date of
/// the event's `ts`). Lines are handed to the OS after every batch; the file is fsynced when
/// runs end (`run.ended`, grouped: at most once per [`FileSinkConfig::sync_interval_ms`]), on
/// flush and on shutdown. This is the default sink.
pub struct FileSink {
    state: Arc<Mutex<State>>,
    /// The timer that does a due sync when no batch comes to do it.
    deferred: Mutex<Option<tokio::task::JoinHandle<()>>>,
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
                last_sync: None,
                sync_due: false,
                timer_armed: false,
                syncs: 0,
            })),
            deferred: Mutex::new(None),
        })
    }

    /// The directory written to.
    pub fn dir(&self) -> PathBuf {
        self.state.lock().config.dir.clone()
    }

    /// Starts the timer that does the due sync in `wait` (the state says one is armed).
    fn schedule_sync(&self, wait: Duration) {
        let mut deferred = self.deferred.lock();
        let state = self.state.clone();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // Never from `write_batch` (it runs on a runtime): sync at once.
            state.lock().deferred_sync();
            return;
        };
        *deferred = Some(runtime.spawn(async move {
            tokio::time::sleep(wait).await;
            let _ = with_state(state, |st| {
                st.deferred_sync();
                Ok(())
            })
            .await;
        }));
    }

    /// fsyncs done so far (tests).
    #[cfg(test)]
    fn syncs(&self) -> u64 {
        self.state.lock().syncs
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut State) -> Result<T, AuditError> + Send + 'static,
    ) -> Result<T, AuditError> {
        with_state(self.state.clone(), f).await
    }
}

/// Runs `f` on the state where blocking I/O may run: right here on a thread the bus started
/// for this sink alone, else on tokio's blocking pool.
async fn with_state<T: Send + 'static>(
    state: Arc<Mutex<State>>,
    f: impl FnOnce(&mut State) -> Result<T, AuditError> + Send + 'static,
) -> Result<T, AuditError> {
    if on_sink_thread() {
        return f(&mut state.lock());
    }
    tokio::task::spawn_blocking(move || f(&mut state.lock()))
        .await
        .map_err(|e| AuditError::Sink(format!("file sink task failed: {e}")))?
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
        whole: size,
    })
}

impl State {
    fn finish_current(&mut self, sync: bool) -> Result<(), AuditError> {
        if let Some(cur) = self.current.as_mut() {
            cur.writer
                .flush()
                .map_err(|e| AuditError::io(&cur.path, e))?;
            cur.whole = cur.size;
            if sync {
                cur.writer
                    .get_ref()
                    .sync_data()
                    .map_err(|e| AuditError::io(&cur.path, e))?;
                self.sync_due = false;
                self.last_sync = Some(Instant::now());
                self.syncs += 1;
            }
        }
        Ok(())
    }

    /// Writes a batch (each event's line as it was sealed) and hands it to the OS; syncs as
    /// the group commit says. Returns how long until a timer should do a due sync, when one
    /// must be set.
    fn write_events(&mut self, events: &[Arc<AuditEvent>]) -> Result<Option<Duration>, AuditError> {
        let mut run_ended = false;
        let written = events.iter().try_for_each(|e| {
            run_ended |= e.kind() == EventKind::RunEnded;
            self.write_line(&date_of(e), e.canonical_line().as_bytes())
        });
        // A sync left due by an earlier batch is done with this one's when it can be.
        if let Err(e) = written.and_then(|()| self.finish_current(false)) {
            self.cut_back();
            return Err(e);
        }
        if (run_ended || self.sync_due) && self.config.fsync {
            self.sync_for_run_end()
        } else {
            Ok(None)
        }
    }

    /// After a batch holding a `run.ended` was written: syncs now if the last sync is at
    /// least the interval old, else marks a sync due; returns how long until a timer should do
    /// it when no timer is set yet (the caller then sets one).
    fn sync_for_run_end(&mut self) -> Result<Option<Duration>, AuditError> {
        let interval = Duration::from_millis(self.config.sync_interval_ms);
        let wait = self.last_sync.map_or(Duration::ZERO, |last| {
            interval.saturating_sub(last.elapsed())
        });
        if wait.is_zero() {
            self.finish_current(true)?;
            return Ok(None);
        }
        self.sync_due = true;
        if self.timer_armed {
            return Ok(None);
        }
        self.timer_armed = true;
        Ok(Some(wait))
    }

    /// The timer's sync: done if still due (a later batch, flush or shutdown may have done it
    /// meanwhile); disarms the timer.
    fn deferred_sync(&mut self) {
        self.timer_armed = false;
        if !self.sync_due {
            return;
        }
        if let Err(e) = self.finish_current(true) {
            // Still due: the next batch, flush or shutdown tries again and reports it.
            tracing::error!("audit file sink: deferred fsync failed: {e}");
        }
    }

    /// After a batch failed (a full disk, a file size limit): drops what is still buffered and
    /// cuts the file back to its last whole batch, so the part of the batch that did reach the
    /// disk leaves no torn line for the next batch to be appended to. The batch counts as not
    /// written (the bus reports its events as lost).
    fn cut_back(&mut self) {
        let Some(cur) = self.current.take() else {
            return;
        };
        let (file, _unwritten) = cur.writer.into_parts();
        match file.set_len(cur.whole) {
            Ok(()) => {
                self.current = Some(Current {
                    writer: BufWriter::with_capacity(64 * 1024, file),
                    size: cur.whole,
                    ..cur
                });
            }
            Err(e) => tracing::error!(
                "audit file sink: could not cut {} back to its last whole batch ({e}): it may \
                 end in a partial line",
                cur.path.display()
            ),
        }
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
        let wait = if on_sink_thread() {
            // The bus gave this sink a thread of its own: no hop, no copy of the batch.
            self.state.lock().write_events(events)?
        } else {
            let events: Vec<Arc<AuditEvent>> = events.to_vec();
            self.blocking(move |st| st.write_events(&events)).await?
        };
        if let Some(wait) = wait {
            self.schedule_sync(wait);
        }
        Ok(())
    }

    async fn flush(&self) -> Result<(), AuditError> {
        self.blocking(|st| {
            let sync = st.config.fsync;
            st.finish_current(sync)
        })
        .await
    }

    async fn shutdown(&self) -> Result<(), AuditError> {
        if let Some(timer) = self.deferred.lock().take() {
            timer.abort();
        }
        self.blocking(|st| {
            let sync = st.config.fsync;
            let r = st.finish_current(sync);
            st.current = None;
            r
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::RunChain;

    /// `n` events of one run, the last a `run.ended` when `ends`.
    fn batch(chain: &mut RunChain, n: usize, ends: bool) -> Vec<Arc<AuditEvent>> {
        let ts = chrono::DateTime::from_timestamp(1_767_600_000, 0).unwrap_or_default();
        (0..n)
            .map(|i| {
                let kind = if ends && i + 1 == n {
                    EventKind::RunEnded
                } else {
                    EventKind::ToolResult
                };
                Arc::new(chain.seal(kind, ts, serde_json::Map::new()))
            })
            .collect()
    }

    fn sink(dir: &Path, sync_interval_ms: u64) -> FileSink {
        FileSink::new(FileSinkConfig {
            sync_interval_ms,
            ..FileSinkConfig::in_dir(dir)
        })
        .unwrap()
    }

    fn lines(dir: &Path) -> usize {
        std::fs::read_to_string(dir.join("2026-01-05.jsonl"))
            .unwrap()
            .lines()
            .count()
    }

    #[tokio::test]
    async fn run_ends_are_synced_at_most_once_per_interval_and_flush_syncs_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let sink = sink(dir.path(), 3_600_000);
        let mut chain = RunChain::new("r", "a", None);
        // Events that end no run are handed to the OS, not synced.
        sink.write_batch(&batch(&mut chain, 3, false))
            .await
            .unwrap();
        assert_eq!(sink.syncs(), 0);
        // The first run end syncs at once; the next ones within the interval are grouped.
        sink.write_batch(&batch(&mut chain, 2, true)).await.unwrap();
        assert_eq!(sink.syncs(), 1);
        for _ in 0..5 {
            sink.write_batch(&batch(&mut chain, 2, true)).await.unwrap();
        }
        assert_eq!(sink.syncs(), 1);
        assert_eq!(lines(dir.path()), 15, "every line is written at once");
        // A flush (what `Run::end` awaits) syncs at once, whatever the interval.
        sink.flush().await.unwrap();
        assert_eq!(sink.syncs(), 2);
        sink.flush().await.unwrap();
        sink.shutdown().await.unwrap();
        assert_eq!(sink.syncs(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_due_sync_is_done_by_its_timer_when_no_batch_comes() {
        let dir = tempfile::tempdir().unwrap();
        let sink = sink(dir.path(), 50);
        let mut chain = RunChain::new("r", "a", None);
        sink.write_batch(&batch(&mut chain, 2, true)).await.unwrap();
        sink.write_batch(&batch(&mut chain, 2, true)).await.unwrap();
        sink.write_batch(&batch(&mut chain, 2, true)).await.unwrap();
        assert_eq!(sink.syncs(), 1, "the later run ends wait for the interval");
        let timer = sink.deferred.lock().take().expect("a timer is set");
        tokio::time::advance(Duration::from_millis(50)).await;
        timer.await.unwrap();
        assert_eq!(sink.syncs(), 2, "one sync covers both waiting batches");
        assert!(!sink.state.lock().sync_due);
        // The timer disarmed itself: the next grouped run end sets a new one.
        sink.write_batch(&batch(&mut chain, 1, true)).await.unwrap();
        let timer = sink.deferred.lock().take().expect("a new timer is set");
        tokio::time::advance(Duration::from_millis(50)).await;
        timer.await.unwrap();
        assert_eq!(sink.syncs(), 3);
    }

    #[tokio::test]
    async fn interval_zero_syncs_every_batch_that_ends_a_run() {
        let dir = tempfile::tempdir().unwrap();
        let sink = sink(dir.path(), 0);
        let mut chain = RunChain::new("r", "a", None);
        for _ in 0..4 {
            sink.write_batch(&batch(&mut chain, 2, true)).await.unwrap();
        }
        assert_eq!(sink.syncs(), 4);
        assert!(sink.deferred.lock().is_none());
    }

    #[test]
    fn the_interval_is_read_from_json_and_defaults_to_10_ms() {
        let c: FileSinkConfig = serde_json::from_str(r#"{"dir":"t"}"#).unwrap();
        assert_eq!(c.sync_interval_ms, 10);
        let c: FileSinkConfig = serde_json::from_str(r#"{"dir":"t","syncIntervalMs":0}"#).unwrap();
        assert_eq!(c.sync_interval_ms, 0);
    }
}
