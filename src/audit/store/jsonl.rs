//! The JSONL folder store: `DIR/<agent>/<YYYY-MM-DD>[.N].jsonl`, one canonical event per line.
//!
//! * `<agent>` is [`agent_dir_name`](super::agent_dir_name) of the `agentId` (injective and
//!   readable); the date is the UTC date of the event's `ts`.
//! * Within one file the events of a run are in `seq` order: an event that arrives after a
//!   later event of its run went to that file goes to the next segment (`DATE.1.jsonl`, ...),
//!   so `toolgate verify DIR` passes whatever order events arrived in.
//! * A batch is written with one `write` per file, then `fsync`ed; only then is it answered.
//!   A failed write cuts every file of the batch back to its length before the batch (a file
//!   that cannot be cut back is not written to again: the next events go to a fresh segment),
//!   so a failure stores nothing and leaves no torn line for the next batch to be glued to.
//! * On open the whole folder is read into an in-memory index (id, run, seq, hash, where), so a
//!   restarted collector deduplicates and serves old runs. A torn last line (a crash mid-write,
//!   never acknowledged) is cut off.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use uuid::Uuid;

use super::{
    EventPage, EventQuery, EventStore, Incoming, IngestOutcome, Known, RunPage, Slot, StoreError,
    StoreStats, hex_digest,
};
use crate::audit::{AuditError, EventKind};

mod write;

/// Where a stored line is: file, offset, length.
type LineLoc = (PathBuf, u64, u32);

/// Most records one `GET /v1/events` page scans.
const MAX_SCAN: usize = 200_000;
/// The file in a store folder whose exclusive lock the store holds while open (one collector
/// per folder: two would truncate each other's files).
pub const LOCK_FILE: &str = ".toolgate-collector.lock";

/// Most files kept open for appending.
const MAX_OPEN: usize = 64;

#[derive(Debug, Clone)]
struct Rec {
    id: Uuid,
    run: u32,
    kind: EventKind,
    ts: DateTime<Utc>,
    file: u32,
    offset: u64,
    len: u32,
    hash: [u8; 32],
    prev: Option<[u8; 32]>,
}

#[derive(Debug)]
struct RunRec {
    agent: String,
    seqs: BTreeMap<u64, u32>,
}

#[derive(Debug)]
struct FileRec {
    /// Relative to the store folder.
    rel: PathBuf,
    /// Length of the good part.
    len: u64,
    /// Cannot be written to any more (a failed write could not be cut back).
    poisoned: bool,
}

#[derive(Debug, Default)]
struct Inner {
    dir: PathBuf,
    recs: Vec<Rec>,
    ids: HashMap<Uuid, u32>,
    runs: Vec<RunRec>,
    run_keys: HashMap<(String, String), u32>,
    by_run_id: HashMap<String, Vec<u32>>,
    files: Vec<FileRec>,
    file_ids: HashMap<PathBuf, u32>,
    /// (file, run) → highest seq of the run in the file.
    file_run_max: HashMap<(u32, u32), u64>,
    open: HashMap<u32, File>,
}

impl Known for Inner {
    fn hash_of(&self, id: &Uuid) -> Option<String> {
        let r = self.recs.get(*self.ids.get(id)? as usize)?;
        Some(hex::encode(r.hash))
    }

    fn slot(&self, agent: &str, run: &str, seq: u64) -> Option<Slot> {
        let run = self.run_keys.get(&(agent.to_string(), run.to_string()))?;
        let idx = *self.runs.get(*run as usize)?.seqs.get(&seq)?;
        let r = self.recs.get(idx as usize)?;
        Some(Slot {
            id: r.id,
            hash: hex::encode(r.hash),
            prev_hash: r.prev.map(hex::encode),
        })
    }
}

impl Inner {
    fn file_id(&mut self, rel: &Path) -> u32 {
        if let Some(id) = self.file_ids.get(rel) {
            return *id;
        }
        let id = self.files.len() as u32;
        self.files.push(FileRec {
            rel: rel.to_path_buf(),
            len: 0,
            poisoned: false,
        });
        self.file_ids.insert(rel.to_path_buf(), id);
        id
    }

    fn run_id(&self, agent: &str, run: &str) -> Option<u32> {
        self.run_keys
            .get(&(agent.to_string(), run.to_string()))
            .copied()
    }

    /// Adds an event found at `file`/`offset` to the index.
    fn index(&mut self, inc: &Incoming, file: u32, offset: u64) {
        let key = (inc.agent_id.clone(), inc.run_id.clone());
        let run = match self.run_keys.get(&key) {
            Some(r) => *r,
            None => {
                let r = self.runs.len() as u32;
                self.runs.push(RunRec {
                    agent: inc.agent_id.clone(),
                    seqs: BTreeMap::new(),
                });
                self.run_keys.insert(key, r);
                self.by_run_id
                    .entry(inc.run_id.clone())
                    .or_default()
                    .push(r);
                r
            }
        };
        let idx = self.recs.len() as u32;
        self.recs.push(Rec {
            id: inc.id,
            run,
            kind: inc.kind,
            ts: inc.ts,
            file,
            offset,
            len: inc.line.len() as u32,
            hash: hex_digest(&inc.hash).unwrap_or_default(),
            prev: inc.prev_hash.as_deref().and_then(hex_digest),
        });
        self.ids.insert(inc.id, idx);
        if let Some(r) = self.runs.get_mut(run as usize) {
            r.seqs.insert(inc.seq, idx);
        }
        let max = self.file_run_max.entry((file, run)).or_insert(inc.seq);
        *max = (*max).max(inc.seq);
    }

    fn load(&mut self) -> Result<(), AuditError> {
        let dir = self.dir.clone();
        let mut files = Vec::new();
        for agent in std::fs::read_dir(&dir).map_err(|e| AuditError::io(&dir, e))? {
            let agent = agent.map_err(|e| AuditError::io(&dir, e))?.path();
            if !agent.is_dir() {
                continue;
            }
            for f in std::fs::read_dir(&agent).map_err(|e| AuditError::io(&agent, e))? {
                let f = f.map_err(|e| AuditError::io(&agent, e))?.path();
                if f.extension().is_some_and(|x| x == "jsonl") && f.is_file() {
                    files.push(f);
                }
            }
        }
        files.sort();
        for f in files {
            self.load_file(&f)?;
        }
        Ok(())
    }

    fn load_file(&mut self, path: &Path) -> Result<(), AuditError> {
        let rel = path.strip_prefix(&self.dir).unwrap_or(path).to_path_buf();
        let file_id = self.file_id(&rel);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| AuditError::io(path, e))?;
        let mut reader = std::io::BufReader::new(&file);
        let mut buf = Vec::with_capacity(1024);
        let mut offset = 0u64;
        let mut line_no = 0usize;
        loop {
            buf.clear();
            let n = reader
                .read_until(b'\n', &mut buf)
                .map_err(|e| AuditError::io(path, e))?;
            if n == 0 {
                break;
            }
            line_no += 1;
            let start = offset;
            let Some(text) = buf.strip_suffix(b"\n") else {
                // A torn last line: never acknowledged (answers follow the fsync of whole
                // lines). Cut it off so the next append starts clean.
                tracing::warn!("{}: cutting off a torn last line", path.display());
                file.set_len(start)
                    .and_then(|_| file.sync_data())
                    .map_err(|e| AuditError::io(path, e))?;
                break;
            };
            offset += n as u64;
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let parsed = std::str::from_utf8(text)
                .map_err(|e| AuditError::InvalidEvent(e.to_string()))
                .and_then(Incoming::from_line);
            let mut inc = match parsed {
                Ok(i) => i,
                Err(e) => {
                    tracing::warn!("{}:{line_no}: skipped: {e}", path.display());
                    continue;
                }
            };
            if self.ids.contains_key(&inc.id) {
                continue;
            }
            if let Some(r) = self.run_id(&inc.agent_id, &inc.run_id)
                && self
                    .runs
                    .get(r as usize)
                    .is_some_and(|r| r.seqs.contains_key(&inc.seq))
            {
                tracing::warn!(
                    "{}:{line_no}: skipped: a second event at seq {} of run {:?}",
                    path.display(),
                    inc.seq,
                    inc.run_id
                );
                continue;
            }
            // Stored lines are served as they are on disk.
            inc.line = String::from_utf8_lossy(text).into_owned();
            self.index(&inc, file_id, start);
        }
        if let Some(f) = self.files.get_mut(file_id as usize) {
            f.len = offset;
        }
        Ok(())
    }

    /// Where the lines of a run page are: (file, offset, len), plus the page's `next`.
    fn run_locs(
        &self,
        agent: Option<&str>,
        run_id: &str,
        after_seq: Option<u64>,
        limit: usize,
    ) -> Result<(String, Vec<LineLoc>, Option<u64>), StoreError> {
        let run = match agent {
            Some(a) => self
                .run_id(a, run_id)
                .ok_or_else(|| StoreError::NotFound(format!("no run {run_id:?} of agent {a:?}")))?,
            None => match self.by_run_id.get(run_id).map(Vec::as_slice) {
                None | Some([]) => return Err(StoreError::NotFound(format!("no run {run_id:?}"))),
                Some([one]) => *one,
                Some(many) => {
                    let agents: Vec<&str> = many
                        .iter()
                        .filter_map(|r| self.runs.get(*r as usize).map(|r| r.agent.as_str()))
                        .collect();
                    return Err(StoreError::BadRequest(format!(
                        "run {run_id:?} is used by agents {agents:?}: pass agentId"
                    )));
                }
            },
        };
        let rec = self
            .runs
            .get(run as usize)
            .ok_or_else(|| StoreError::NotFound(format!("no run {run_id:?}")))?;
        let from = match after_seq {
            Some(s) => std::ops::Bound::Excluded(s),
            None => std::ops::Bound::Unbounded,
        };
        let mut locs = Vec::with_capacity(limit.min(rec.seqs.len()));
        let mut next = None;
        let mut last = None;
        for (seq, idx) in rec.seqs.range((from, std::ops::Bound::Unbounded)) {
            if locs.len() == limit {
                next = last;
                break;
            }
            if let Some(r) = self.recs.get(*idx as usize) {
                locs.push((self.path_of(r.file), r.offset, r.len));
                last = Some(*seq);
            }
        }
        Ok((rec.agent.clone(), locs, next))
    }
}

fn read_lines(locs: Vec<LineLoc>) -> Result<Vec<String>, AuditError> {
    let mut files: HashMap<PathBuf, File> = HashMap::new();
    let mut out = Vec::with_capacity(locs.len());
    for (path, offset, len) in locs {
        if !files.contains_key(&path) {
            let f = File::open(&path).map_err(|e| AuditError::io(&path, e))?;
            files.insert(path.clone(), f);
        }
        let Some(f) = files.get_mut(&path) else {
            continue;
        };
        let mut buf = vec![0u8; len as usize];
        f.seek(SeekFrom::Start(offset))
            .and_then(|_| f.read_exact(&mut buf))
            .map_err(|e| AuditError::io(&path, e))?;
        out.push(String::from_utf8(buf).map_err(|e| {
            AuditError::InvalidEvent(format!("{}: not UTF-8: {e}", path.display()))
        })?);
    }
    Ok(out)
}

/// The JSONL folder store (module docs).
#[derive(Clone)]
pub struct JsonlStore {
    inner: Arc<Mutex<Inner>>,
    /// The folder's lock file, locked while any clone of the store lives.
    _lock: Arc<File>,
}

impl std::fmt::Debug for JsonlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.lock();
        f.debug_struct("JsonlStore")
            .field("dir", &inner.dir)
            .field("events", &inner.recs.len())
            .finish()
    }
}

impl JsonlStore {
    /// Creates `dir` if needed, takes the folder's lock ([`LOCK_FILE`]: one store per folder,
    /// across processes) and reads every event in it. Blocking. A folder another store (another
    /// collector) holds is an [`AuditError::Config`] saying so.
    pub fn open(dir: impl Into<PathBuf>) -> Result<JsonlStore, AuditError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| AuditError::io(&dir, e))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| AuditError::io(&lock_path, e))?;
        match fs4::fs_std::FileExt::try_lock_exclusive(&lock) {
            Ok(true) => {}
            Ok(false) => {
                return Err(AuditError::Config(format!(
                    "{}: in use by another collector (it holds {}); one collector per folder \
                     — stop the other one, or share a PostgreSQL store between collectors",
                    dir.display(),
                    lock_path.display()
                )));
            }
            Err(e) => return Err(AuditError::io(&lock_path, e)),
        }
        let mut inner = Inner {
            dir,
            ..Inner::default()
        };
        inner.load()?;
        Ok(JsonlStore {
            inner: Arc::new(Mutex::new(inner)),
            _lock: Arc::new(lock),
        })
    }

    /// Events and runs stored.
    pub fn counts(&self) -> (u64, u64) {
        let inner = self.inner.lock();
        (inner.recs.len() as u64, inner.runs.len() as u64)
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&JsonlStore) -> T + Send + 'static,
    ) -> Result<T, AuditError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || f(&me))
            .await
            .map_err(|e| AuditError::Sink(format!("store task failed: {e}")))
    }
}

#[async_trait::async_trait]
impl EventStore for JsonlStore {
    async fn ingest(&self, batch: Vec<Incoming>) -> Result<IngestOutcome, AuditError> {
        self.blocking(move |s| s.inner.lock().ingest(batch)).await?
    }

    async fn run_page(
        &self,
        agent: Option<&str>,
        run_id: &str,
        after_seq: Option<u64>,
        limit: usize,
    ) -> Result<RunPage, StoreError> {
        let (agent_id, locs, next) =
            self.inner
                .lock()
                .run_locs(agent, run_id, after_seq, limit.max(1))?;
        let lines = self.blocking(move |_| read_lines(locs)).await??;
        Ok(RunPage {
            agent_id,
            lines,
            next,
        })
    }

    async fn events(&self, q: &EventQuery) -> Result<EventPage, StoreError> {
        let start = match &q.after {
            None => 0usize,
            Some(c) => c
                .parse::<usize>()
                .map_err(|_| StoreError::BadRequest(format!("bad cursor {c:?}")))?,
        };
        let (locs, next) = {
            let inner = self.inner.lock();
            let mut locs = Vec::new();
            let mut pos = start;
            let end = inner.recs.len();
            let mut scanned = 0;
            while pos < end && locs.len() < q.limit.max(1) && scanned < MAX_SCAN {
                if let Some(r) = inner.recs.get(pos) {
                    let agent_ok = q.agent_id.as_deref().is_none_or(|a| {
                        inner
                            .runs
                            .get(r.run as usize)
                            .is_some_and(|run| run.agent == a)
                    });
                    if agent_ok
                        && q.kind.is_none_or(|k| k == r.kind)
                        && q.since.is_none_or(|s| r.ts >= s)
                        && q.until.is_none_or(|u| r.ts < u)
                    {
                        locs.push((inner.path_of(r.file), r.offset, r.len));
                    }
                }
                pos += 1;
                scanned += 1;
            }
            (locs, (pos < end).then(|| pos.to_string()))
        };
        let lines = self.blocking(move |_| read_lines(locs)).await??;
        Ok(EventPage { lines, next })
    }

    async fn stats(&self) -> Result<StoreStats, AuditError> {
        let (events, runs) = self.counts();
        Ok(StoreStats {
            events: Some(events),
            runs: Some(runs),
        })
    }
}
