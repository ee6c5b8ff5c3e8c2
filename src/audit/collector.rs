//! The audit collector behind `toolgate collect`: an HTTP server (axum) that stores audit events
//! shipped by [`super::HttpSink`]s.
//!
//! * `POST /v1/events` with `{"events": [...]}` validates every event (a malformed body gets a
//!   400, an oversized one a 413, and nothing of it is stored), skips events whose id it already
//!   has, appends the rest as canonical JSON lines to `OUT/<agentId>/<YYYY-MM-DD>.jsonl` (UTC date
//!   of the event's `ts`), fsyncs, and only then answers `{"accepted": N, "duplicates": M}`.
//! * Every run's chain is checked as events arrive (events may arrive out of order; breaks are
//!   logged and reported by `GET /v1/runs/{runId}` under `chain`).
//! * `GET /v1/runs/{runId}` answers `{"runId": ..., "events": [...], "chain": {...}}`, events in
//!   `seq` order.
//! * `GET /healthz` answers `{"status": "ok", "events": N, "runs": R}`.
//!
//! With a token configured, every route but `/healthz` needs `Authorization: Bearer <token>`.
//! On start the collector reads what is already in `OUT`, so a restarted collector still
//! deduplicates and serves old runs.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::future::Future;
use std::io::{BufRead, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use parking_lot::Mutex;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{AuditError, AuditEvent, canonical_json, expected_hash};

/// Configuration of a collector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectorConfig {
    /// Where events are stored: `out_dir/<agentId>/<YYYY-MM-DD>.jsonl`.
    pub out_dir: PathBuf,
    /// Bearer token required from clients, if set.
    pub token: Option<String>,
    /// Largest accepted request body in bytes (larger: 413). Default 16 MiB.
    pub max_body_bytes: usize,
    /// Most events in one request (more: 413). Default 10 000.
    pub max_batch_events: usize,
}

impl CollectorConfig {
    /// Defaults with the given output directory.
    pub fn new(out_dir: impl Into<PathBuf>) -> CollectorConfig {
        CollectorConfig {
            out_dir: out_dir.into(),
            token: None,
            max_body_bytes: 16 * 1024 * 1024,
            max_batch_events: 10_000,
        }
    }
}

/// Counters of a collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CollectorStats {
    /// Events stored (including those found on disk at start).
    pub events: u64,
    /// Runs seen.
    pub runs: usize,
    /// Events received again and skipped.
    pub duplicates: u64,
    /// Chain breaks found.
    pub breaks: usize,
}

#[derive(Debug, Clone)]
struct Loc {
    seq: u64,
    file: Arc<PathBuf>,
    offset: u64,
    len: usize,
}

/// A chain break seen by the collector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectorBreak {
    /// The event's seq.
    pub seq: u64,
    /// The event's id.
    pub id: Uuid,
    /// What is wrong.
    pub message: String,
}

#[derive(Debug, Default)]
struct ChainTracker {
    next_seq: u64,
    last_hash: Option<String>,
    /// Events that arrived ahead of a gap: seq -> (hash, prevHash, id).
    pending: BTreeMap<u64, (String, Option<String>, Uuid)>,
    /// (seq, hash) of every chained event, to tell duplicates from forks.
    breaks: Vec<CollectorBreak>,
}

impl ChainTracker {
    fn push(
        &mut self,
        seq: u64,
        id: Uuid,
        hash: &str,
        prev: Option<&str>,
        hash_ok: bool,
    ) -> Vec<CollectorBreak> {
        let mut found = Vec::new();
        if !hash_ok {
            found.push(CollectorBreak {
                seq,
                id,
                message: "hash does not match the event's content".into(),
            });
        }
        if seq < self.next_seq || self.pending.contains_key(&seq) {
            found.push(CollectorBreak {
                seq,
                id,
                message: format!("a different event with seq {seq} was already received"),
            });
        } else {
            self.pending
                .insert(seq, (hash.to_string(), prev.map(str::to_owned), id));
            while let Some((h, p, pid)) = self.pending.remove(&self.next_seq) {
                if p != self.last_hash {
                    found.push(CollectorBreak {
                        seq: self.next_seq,
                        id: pid,
                        message: match self.next_seq {
                            0 => "prevHash of seq 0 must be null".into(),
                            s => format!("prevHash does not match the hash of seq {}", s - 1),
                        },
                    });
                }
                self.last_hash = Some(h);
                self.next_seq += 1;
            }
        }
        self.breaks.extend(found.iter().cloned());
        found
    }

    fn to_json(&self) -> Value {
        json!({
            "ok": self.breaks.is_empty() && self.pending.is_empty(),
            "contiguousThrough": self.next_seq.checked_sub(1),
            "waitingForSeq": if self.pending.is_empty() { None } else { Some(self.next_seq) },
            "pending": self.pending.len(),
            "breaks": self.breaks.iter().map(|b| json!({
                "seq": b.seq, "id": b.id.to_string(), "message": b.message
            })).collect::<Vec<_>>(),
        })
    }
}

#[derive(Debug, Default)]
struct RunRecord {
    locs: Vec<Loc>,
    chain: ChainTracker,
}

struct OpenFile {
    file: File,
    len: u64,
    path: Arc<PathBuf>,
}

struct Store {
    dir: PathBuf,
    seen: HashSet<Uuid>,
    runs: HashMap<String, RunRecord>,
    open: HashMap<PathBuf, OpenFile>,
    events: u64,
    duplicates: u64,
    breaks: usize,
}

/// One validated incoming event.
struct Incoming {
    id: Uuid,
    run_id: String,
    seq: u64,
    hash: String,
    prev_hash: Option<String>,
    hash_ok: bool,
    rel_path: PathBuf,
    line: String,
}

impl Incoming {
    fn new(value: Value) -> Result<Incoming, AuditError> {
        let computed = expected_hash(&value);
        let line = canonical_json(&value);
        let ev = AuditEvent::from_value(value)?;
        Ok(Incoming {
            id: ev.id(),
            run_id: ev.run_id().to_string(),
            seq: ev.seq(),
            hash_ok: computed.as_deref() == Some(ev.hash()),
            hash: ev.hash().to_string(),
            prev_hash: ev.prev_hash().map(str::to_owned),
            rel_path: Path::new(&dir_name(ev.agent_id()))
                .join(format!("{}.jsonl", ev.ts().format("%Y-%m-%d"))),
            line,
        })
    }
}

/// A filesystem-safe directory name for an agent id (`[A-Za-z0-9._-]` kept, others `_`).
fn dir_name(agent_id: &str) -> String {
    let s: String = agent_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.chars().all(|c| c == '.') {
        format!("_{s}")
    } else {
        s
    }
}

impl Store {
    fn open(dir: &Path) -> Result<Store, AuditError> {
        std::fs::create_dir_all(dir).map_err(|e| AuditError::io(dir, e))?;
        let mut store = Store {
            dir: dir.to_path_buf(),
            seen: HashSet::new(),
            runs: HashMap::new(),
            open: HashMap::new(),
            events: 0,
            duplicates: 0,
            breaks: 0,
        };
        let mut files = Vec::new();
        for agent in std::fs::read_dir(dir).map_err(|e| AuditError::io(dir, e))? {
            let agent = agent.map_err(|e| AuditError::io(dir, e))?.path();
            if !agent.is_dir() {
                continue;
            }
            for f in std::fs::read_dir(&agent).map_err(|e| AuditError::io(&agent, e))? {
                let f = f.map_err(|e| AuditError::io(&agent, e))?.path();
                if f.extension().is_some_and(|x| x == "jsonl") {
                    files.push(f);
                }
            }
        }
        files.sort();
        for f in files {
            store.load_file(&f)?;
        }
        Ok(store)
    }

    fn load_file(&mut self, path: &Path) -> Result<(), AuditError> {
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)
            .map_err(|e| AuditError::io(path, e))?;
        let len = file.metadata().map_err(|e| AuditError::io(path, e))?.len();
        if len > 0 {
            // A torn last line (crash mid-write, never acknowledged): end it so later appends
            // start on a line of their own; the fragment is skipped below.
            let mut last = [0u8; 1];
            file.seek(SeekFrom::Start(len - 1))
                .and_then(|_| file.read_exact(&mut last))
                .map_err(|e| AuditError::io(path, e))?;
            if last[0] != b'\n' {
                tracing::warn!("{}: torn last line; terminating it", path.display());
                file.write_all(b"\n")
                    .and_then(|_| file.sync_data())
                    .map_err(|e| AuditError::io(path, e))?;
            }
        }
        file.seek(SeekFrom::Start(0))
            .map_err(|e| AuditError::io(path, e))?;
        let shared_path = Arc::new(path.to_path_buf());
        let mut reader = std::io::BufReader::new(&mut file);
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
            offset += n as u64;
            let text = match buf.strip_suffix(b"\n") {
                Some(t) => t,
                None => &buf[..],
            };
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let parsed = serde_json::from_slice::<Value>(text)
                .map_err(|e| AuditError::InvalidEvent(e.to_string()))
                .and_then(Incoming::new);
            let inc = match parsed {
                Ok(i) => i,
                Err(e) => {
                    tracing::warn!("{}:{line_no}: skipped: {e}", path.display());
                    continue;
                }
            };
            if !self.seen.insert(inc.id) {
                self.duplicates += 1;
                continue;
            }
            self.index(&inc, &shared_path, start, text.len());
        }
        Ok(())
    }

    fn index(&mut self, inc: &Incoming, file: &Arc<PathBuf>, offset: u64, len: usize) {
        self.events += 1;
        let run = self.runs.entry(inc.run_id.clone()).or_default();
        run.locs.push(Loc {
            seq: inc.seq,
            file: file.clone(),
            offset,
            len,
        });
        let found = run.chain.push(
            inc.seq,
            inc.id,
            &inc.hash,
            inc.prev_hash.as_deref(),
            inc.hash_ok,
        );
        for b in &found {
            tracing::warn!(
                run_id = %inc.run_id,
                seq = b.seq,
                "audit chain break: {}",
                b.message
            );
        }
        self.breaks += found.len();
    }

    fn file_for(&mut self, rel: &Path) -> Result<&mut OpenFile, AuditError> {
        let path = self.dir.join(rel);
        if !self.open.contains_key(&path) {
            if self.open.len() >= 64 {
                self.open.clear();
            }
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| AuditError::io(parent, e))?;
            }
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| AuditError::io(&path, e))?;
            let len = file.metadata().map_err(|e| AuditError::io(&path, e))?.len();
            self.open.insert(
                path.clone(),
                OpenFile {
                    file,
                    len,
                    path: Arc::new(path.clone()),
                },
            );
        }
        self.open
            .get_mut(&path)
            .ok_or_else(|| AuditError::Sink("collector: file handle vanished".into()))
    }

    /// Stores the new events of a batch durably; returns (accepted, duplicates).
    fn ingest(&mut self, batch: Vec<Incoming>) -> Result<(usize, usize), AuditError> {
        let mut dups = 0;
        let mut fresh: Vec<Incoming> = Vec::with_capacity(batch.len());
        let mut batch_ids = HashSet::with_capacity(batch.len());
        for inc in batch {
            if self.seen.contains(&inc.id) || !batch_ids.insert(inc.id) {
                dups += 1;
            } else {
                fresh.push(inc);
            }
        }
        // Group by file, keeping order within each file.
        let mut groups: Vec<(PathBuf, Vec<Incoming>)> = Vec::new();
        for inc in fresh {
            match groups.iter_mut().find(|(p, _)| *p == inc.rel_path) {
                Some((_, v)) => v.push(inc),
                None => groups.push((inc.rel_path.clone(), vec![inc])),
            }
        }
        let mut accepted = 0;
        let mut first_error = None;
        for (rel, incs) in groups {
            match self.append_group(&rel, &incs) {
                Ok((path, offsets)) => {
                    for (inc, off) in incs.iter().zip(offsets) {
                        self.seen.insert(inc.id);
                        self.index(inc, &path, off, inc.line.len());
                    }
                    accepted += incs.len();
                }
                Err(e) => {
                    tracing::error!("collector cannot store events: {e}");
                    // Forget the handle: the file may end in a torn line; reopening on the
                    // next write is not enough to fix that, a restart is (see `load_file`).
                    self.open.remove(&self.dir.join(&rel));
                    first_error.get_or_insert(e);
                }
            }
        }
        self.duplicates += dups as u64;
        match first_error {
            Some(e) => Err(e),
            None => Ok((accepted, dups)),
        }
    }

    fn append_group(
        &mut self,
        rel: &Path,
        incs: &[Incoming],
    ) -> Result<(Arc<PathBuf>, Vec<u64>), AuditError> {
        let of = self.file_for(rel)?;
        let mut buf = String::with_capacity(incs.iter().map(|i| i.line.len() + 1).sum());
        let mut offsets = Vec::with_capacity(incs.len());
        for inc in incs {
            offsets.push(of.len + buf.len() as u64);
            buf.push_str(&inc.line);
            buf.push('\n');
        }
        of.file
            .write_all(buf.as_bytes())
            .and_then(|_| of.file.sync_data())
            .map_err(|e| AuditError::io(&of.path, e))?;
        of.len += buf.len() as u64;
        Ok((of.path.clone(), offsets))
    }
}

struct Shared {
    config: CollectorConfig,
    store: Mutex<Store>,
}

/// A collector: its store (loaded from `out_dir`) and its routes.
#[derive(Clone)]
pub struct Collector {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collector")
            .field("out_dir", &self.shared.config.out_dir)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Collector {
    /// Opens the store: creates `out_dir` and reads every event already in it (rebuilding the
    /// deduplication index and chain state). Blocking; run it off the async threads for big
    /// stores.
    pub fn open(config: CollectorConfig) -> Result<Collector, AuditError> {
        let store = Store::open(&config.out_dir)?;
        Ok(Collector {
            shared: Arc::new(Shared {
                config,
                store: Mutex::new(store),
            }),
        })
    }

    /// Counters.
    pub fn stats(&self) -> CollectorStats {
        let s = self.shared.store.lock();
        CollectorStats {
            events: s.events,
            runs: s.runs.len(),
            duplicates: s.duplicates,
            breaks: s.breaks,
        }
    }

    /// Chain breaks seen so far in run `run_id` (`None`: unknown run).
    pub fn run_breaks(&self, run_id: &str) -> Option<Vec<CollectorBreak>> {
        let s = self.shared.store.lock();
        s.runs.get(run_id).map(|r| r.chain.breaks.clone())
    }

    /// The HTTP routes.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/v1/events", post(post_events))
            .route("/v1/runs/{run_id}", get(get_run))
            .route("/healthz", get(healthz))
            .layer(DefaultBodyLimit::max(self.shared.config.max_body_bytes))
            .with_state(self.clone())
    }

    fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(token) = &self.shared.config.token else {
            return true;
        };
        let Some(got) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return false;
        };
        let want = format!("Bearer {token}");
        // Constant-time comparison.
        got.len() == want.len()
            && got
                .bytes()
                .zip(want.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

/// Serves the collector on `listener` until `shutdown` completes, then finishes the requests in
/// flight (each answered only after its events are fsynced) and returns.
pub async fn serve(
    config: CollectorConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AuditError> {
    let collector = tokio::task::spawn_blocking(move || Collector::open(config))
        .await
        .map_err(|e| AuditError::Sink(format!("collector start failed: {e}")))??;
    serve_collector(collector, listener, shutdown).await
}

/// Like [`serve`] for a collector already opened (e.g. to keep a handle for its stats).
pub async fn serve_collector(
    collector: Collector,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AuditError> {
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    axum::serve(listener, collector.router())
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|e| AuditError::io(Path::new(&addr), e))
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let mut resp = (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        json!({"error": message.into()}).to_string(),
    )
        .into_response();
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    resp
}

fn json_response(body: String) -> Response {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

async fn post_events(
    State(c): State<Collector>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if !c.authorized(&headers) {
        return error(StatusCode::UNAUTHORIZED, "missing or invalid bearer token");
    }
    let body = match body {
        Ok(b) => b,
        Err(rej) => {
            let status = rej.status();
            let msg = if status == StatusCode::PAYLOAD_TOO_LARGE {
                format!("body larger than {} bytes", c.shared.config.max_body_bytes)
            } else {
                rej.body_text()
            };
            return error(status, msg);
        }
    };
    let value: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("body is not JSON: {e}")),
    };
    let events = match value {
        Value::Object(mut m) => match m.remove("events") {
            Some(Value::Array(a)) if m.is_empty() => a,
            Some(Value::Array(_)) => {
                let extra: Vec<&String> = m.keys().collect();
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("unknown fields in body: {extra:?}"),
                );
            }
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "body must be {\"events\": [...]} with an array",
                );
            }
        },
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "body must be {\"events\": [...]} with an array",
            );
        }
    };
    if events.len() > c.shared.config.max_batch_events {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "{} events in one batch; at most {} are accepted",
                events.len(),
                c.shared.config.max_batch_events
            ),
        );
    }
    let shared = c.shared.clone();
    let result = tokio::task::spawn_blocking(move || {
        let mut batch = Vec::with_capacity(events.len());
        for (i, v) in events.into_iter().enumerate() {
            match Incoming::new(v) {
                Ok(inc) => batch.push(inc),
                Err(e) => return Err((StatusCode::BAD_REQUEST, format!("events[{i}]: {e}"))),
            }
        }
        shared
            .store
            .lock()
            .ingest(batch)
            .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
    })
    .await;
    match result {
        Ok(Ok((accepted, duplicates))) => {
            json_response(json!({"accepted": accepted, "duplicates": duplicates}).to_string())
        }
        Ok(Err((status, msg))) => error(status, msg),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("ingest failed: {e}"),
        ),
    }
}

/// Parses and validates a `POST /v1/events` body the way the collector does before storing
/// anything: `{"events": [...]}` and nothing else, each event a well-formed audit event.
/// Returns the number of events, or the reason the body is rejected (a 4xx). Used by the
/// fuzz target `collector_body`.
pub fn check_events_body(body: &[u8]) -> Result<usize, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("body is not JSON: {e}"))?;
    let events = match value {
        Value::Object(mut m) => match m.remove("events") {
            Some(Value::Array(a)) if m.is_empty() => a,
            _ => return Err("body must be {\"events\": [...]} with an array".into()),
        },
        _ => return Err("body must be {\"events\": [...]} with an array".into()),
    };
    let n = events.len();
    for (i, v) in events.into_iter().enumerate() {
        Incoming::new(v).map_err(|e| format!("events[{i}]: {e}"))?;
    }
    Ok(n)
}

async fn get_run(
    State(c): State<Collector>,
    headers: HeaderMap,
    UrlPath(run_id): UrlPath<String>,
) -> Response {
    if !c.authorized(&headers) {
        return error(StatusCode::UNAUTHORIZED, "missing or invalid bearer token");
    }
    let (mut locs, chain) = {
        let s = c.shared.store.lock();
        match s.runs.get(&run_id) {
            None => return error(StatusCode::NOT_FOUND, format!("no run {run_id:?}")),
            Some(r) => (r.locs.clone(), r.chain.to_json()),
        }
    };
    locs.sort_by_key(|l| l.seq);
    let read = tokio::task::spawn_blocking(move || -> Result<Vec<String>, AuditError> {
        let mut files: HashMap<Arc<PathBuf>, File> = HashMap::new();
        let mut out = Vec::with_capacity(locs.len());
        for l in locs {
            if !files.contains_key(&l.file) {
                let f = File::open(l.file.as_path()).map_err(|e| AuditError::io(&l.file, e))?;
                files.insert(l.file.clone(), f);
            }
            let Some(f) = files.get_mut(&l.file) else {
                continue;
            };
            let mut buf = vec![0u8; l.len];
            f.seek(SeekFrom::Start(l.offset))
                .and_then(|_| f.read_exact(&mut buf))
                .map_err(|e| AuditError::io(&l.file, e))?;
            out.push(String::from_utf8(buf).map_err(|e| {
                AuditError::InvalidEvent(format!("{}: not UTF-8: {e}", l.file.display()))
            })?);
        }
        Ok(out)
    })
    .await;
    match read {
        Ok(Ok(lines)) => {
            let body = format!(
                "{{\"runId\":{},\"events\":[{}],\"chain\":{}}}",
                Value::String(run_id),
                lines.join(","),
                chain
            );
            json_response(body)
        }
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn healthz(State(c): State<Collector>) -> Response {
    let s = c.stats();
    json_response(json!({"status": "ok", "events": s.events, "runs": s.runs}).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_dir_names_are_safe() {
        assert_eq!(dir_name("support"), "support");
        assert_eq!(dir_name("../etc"), ".._etc");
        assert_eq!(dir_name(".."), "_..");
        assert_eq!(dir_name(""), "_");
        assert_eq!(dir_name("a/b c"), "a_b_c");
    }

    #[test]
    fn tracker_accepts_out_of_order_and_flags_forks() {
        let mut t = ChainTracker::default();
        let id = Uuid::nil();
        assert!(t.push(1, id, "h1", Some("h0"), true).is_empty());
        assert!(t.push(0, id, "h0", None, true).is_empty());
        assert_eq!(t.next_seq, 2);
        assert!(t.push(2, id, "h2", Some("bad"), true).len() == 1);
        assert!(t.push(1, id, "x", Some("h0"), true).len() == 1);
    }
}
