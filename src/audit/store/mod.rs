//! Collector stores: where `toolgate collect` keeps the events it accepts.
//!
//! Every store implements [`EventStore`] and applies the same acceptance rules ([`decide`],
//! design §9), per event of a batch:
//!
//! * same id and same hash as an event already stored → a duplicate (counted, not stored again);
//! * same id, other content → rejected ("id reused with different content");
//! * `(agentId, runId, seq)` held by another id → rejected ("fork");
//! * a chain link that contradicts a stored neighbour (this event's `prevHash` is not the stored
//!   `seq - 1`'s hash, or the stored `seq + 1` does not point at this event) → rejected ("fork").
//!   Links to neighbours not yet stored are checked when they arrive, so a store only ever holds
//!   chains that verify, whatever order events arrive in;
//! * a `hash` that does not match the content → rejected;
//! * `agentId` / `runId` empty or holding a NUL character → rejected ("invalid id: ..."),
//!   longer than 256 bytes → rejected ("id too long"), on every store alike and before any
//!   lookup (so such an id never reaches a database);
//! * otherwise stored.
//!
//! Stores: [`jsonl::JsonlStore`] (a folder of JSON Lines files, the default) and, with the
//! `postgres` feature, `postgres::PgStore`.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{AuditError, AuditEvent, EventKind, canonical_json, expected_hash, sha256_hex};

mod check;
pub mod jsonl;
#[cfg(feature = "postgres")]
pub mod postgres;

pub use check::{RunBreak, RunCheck};

/// Longest `agentId` / `runId` a store accepts, in bytes of UTF-8.
pub const MAX_ID_BYTES: usize = 256;

/// Default and largest page size of the read routes.
pub const DEFAULT_PAGE: usize = 1_000;

/// One incoming event, parsed and canonicalized.
#[derive(Debug, Clone)]
pub struct Incoming {
    /// The event id.
    pub id: Uuid,
    /// `agentId`.
    pub agent_id: String,
    /// `runId`.
    pub run_id: String,
    /// `seq`.
    pub seq: u64,
    /// `kind`.
    pub kind: EventKind,
    /// `ts`.
    pub ts: DateTime<Utc>,
    /// `hash` as sent.
    pub hash: String,
    /// `prevHash` as sent.
    pub prev_hash: Option<String>,
    /// Whether `hash` matches the content.
    pub hash_ok: bool,
    /// The canonical JSON line that is stored.
    pub line: String,
}

impl Incoming {
    /// Parses an event (an envelope error is an [`AuditError::InvalidEvent`]).
    pub fn from_value(value: Value) -> Result<Incoming, AuditError> {
        let computed = expected_hash(&value);
        let line = canonical_json(&value);
        let ev = AuditEvent::from_value(value)?;
        Ok(Incoming {
            id: ev.id(),
            agent_id: ev.agent_id().to_string(),
            run_id: ev.run_id().to_string(),
            seq: ev.seq(),
            kind: ev.kind(),
            ts: ev.ts(),
            hash_ok: computed.as_deref() == Some(ev.hash()),
            hash: ev.hash().to_string(),
            prev_hash: ev.prev_hash().map(str::to_owned),
            line,
        })
    }

    /// Parses a stored canonical line.
    pub fn from_line(line: &str) -> Result<Incoming, AuditError> {
        let value: Value =
            serde_json::from_str(line).map_err(|e| AuditError::InvalidEvent(e.to_string()))?;
        Incoming::from_value(value)
    }
}

/// An event the store refused, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The event's id.
    pub id: Uuid,
    /// Why, for people.
    pub reason: String,
}

/// The answer to one batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IngestOutcome {
    /// Events stored now.
    pub accepted: usize,
    /// Events already stored (same id, same hash).
    pub duplicates: usize,
    /// Events refused.
    pub rejected: Vec<Rejection>,
}

impl IngestOutcome {
    /// `{"accepted","duplicates","rejected":[{"id","reason"}]}`.
    pub fn to_json(&self) -> Value {
        json!({
            "accepted": self.accepted,
            "duplicates": self.duplicates,
            "rejected": self.rejected.iter()
                .map(|r| json!({"id": r.id.to_string(), "reason": r.reason}))
                .collect::<Vec<_>>(),
        })
    }
}

/// What the acceptance rules need to know of a stored event at a position of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// Its id.
    pub id: Uuid,
    /// Its hash.
    pub hash: String,
    /// Its prevHash.
    pub prev_hash: Option<String>,
}

/// A view of what a store holds, for [`decide`].
pub trait Known {
    /// The hash of the stored event with this id.
    fn hash_of(&self, id: &Uuid) -> Option<String>;
    /// The stored event at `(agent, run, seq)`.
    fn slot(&self, agent: &str, run: &str, seq: u64) -> Option<Slot>;
}

/// A [`Known`] built from rows a store looked up for one batch.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// id → hash.
    pub ids: HashMap<Uuid, String>,
    /// (agent, run, seq) → slot.
    pub slots: HashMap<(String, String, u64), Slot>,
}

impl Known for Snapshot {
    fn hash_of(&self, id: &Uuid) -> Option<String> {
        self.ids.get(id).cloned()
    }
    fn slot(&self, agent: &str, run: &str, seq: u64) -> Option<Slot> {
        self.slots
            .get(&(agent.to_string(), run.to_string(), seq))
            .cloned()
    }
}

/// The seqs whose stored events [`decide`] looks at for this batch, per (agent, run). Events
/// whose ids [`decide`] refuses before any lookup ([`ids_problem`]) are left out, so a store
/// never sends such an id to its database.
pub fn neighbour_seqs(batch: &[Incoming]) -> HashMap<(String, String), Vec<u64>> {
    let mut out: HashMap<(String, String), Vec<u64>> = HashMap::new();
    for inc in batch.iter().filter(|i| ids_problem(i).is_none()) {
        let v = out
            .entry((inc.agent_id.clone(), inc.run_id.clone()))
            .or_default();
        v.push(inc.seq);
        if let Some(p) = inc.seq.checked_sub(1) {
            v.push(p);
        }
        if let Some(n) = inc.seq.checked_add(1) {
            v.push(n);
        }
    }
    for v in out.values_mut() {
        v.sort_unstable();
        v.dedup();
    }
    out
}

/// What to do with a batch.
#[derive(Debug, Default)]
pub struct Plan {
    /// Events to store, ordered by (agentId, runId, seq).
    pub accept: Vec<Incoming>,
    /// Events already stored.
    pub duplicates: usize,
    /// Events refused.
    pub rejected: Vec<Rejection>,
}

fn id_problem(what: &str, id: &str) -> Option<String> {
    if id.is_empty() {
        Some(format!("invalid id: {what} is empty"))
    } else if id.contains('\0') {
        Some(format!("invalid id: {what} contains a NUL character"))
    } else if id.len() > MAX_ID_BYTES {
        Some(format!(
            "id too long: {what} has {} bytes, at most {MAX_ID_BYTES} are accepted",
            id.len()
        ))
    } else {
        None
    }
}

/// Why an event's `agentId` or `runId` cannot be stored (empty, a NUL character, longer than
/// [`MAX_ID_BYTES`]), the same on every store. [`decide`] checks this first, before looking
/// anything up, so such an id never reaches a database (PostgreSQL refuses NUL in text).
pub fn ids_problem(inc: &Incoming) -> Option<String> {
    id_problem("agentId", &inc.agent_id).or_else(|| id_problem("runId", &inc.run_id))
}

/// Applies the acceptance rules (module docs) to a batch against what is stored.
pub fn decide(batch: Vec<Incoming>, known: &dyn Known) -> Plan {
    let mut batch = batch;
    batch.sort_by(|a, b| {
        (a.agent_id.as_str(), a.run_id.as_str(), a.seq).cmp(&(
            b.agent_id.as_str(),
            b.run_id.as_str(),
            b.seq,
        ))
    });
    let mut plan = Plan::default();
    let mut ids: HashMap<Uuid, String> = HashMap::new();
    let mut slots: HashMap<(String, String, u64), Slot> = HashMap::new();
    for inc in batch {
        let slot_at = |slots: &HashMap<(String, String, u64), Slot>, seq: u64| {
            slots
                .get(&(inc.agent_id.clone(), inc.run_id.clone(), seq))
                .cloned()
                .or_else(|| known.slot(&inc.agent_id, &inc.run_id, seq))
        };
        let reject = |plan: &mut Plan, reason: String| {
            plan.rejected.push(Rejection { id: inc.id, reason });
        };
        if let Some(p) = ids_problem(&inc) {
            reject(&mut plan, p);
            continue;
        }
        let stored_hash = ids.get(&inc.id).cloned().or_else(|| known.hash_of(&inc.id));
        if let Some(h) = stored_hash {
            if h == inc.hash && inc.hash_ok {
                plan.duplicates += 1;
            } else {
                reject(&mut plan, "id reused with different content".into());
            }
            continue;
        }
        if inc.seq > i64::MAX as u64 {
            reject(&mut plan, format!("seq {} is out of range", inc.seq));
            continue;
        }
        if !inc.hash_ok {
            reject(&mut plan, "hash does not match the event's content".into());
            continue;
        }
        if let Some(s) = slot_at(&slots, inc.seq) {
            reject(
                &mut plan,
                format!(
                    "fork: seq {} of run {:?} is already held by event {}",
                    inc.seq, inc.run_id, s.id
                ),
            );
            continue;
        }
        match (inc.seq, &inc.prev_hash) {
            (0, Some(_)) => {
                reject(&mut plan, "prevHash of seq 0 must be null".into());
                continue;
            }
            (s, None) if s > 0 => {
                reject(&mut plan, format!("prevHash is null at seq {s}"));
                continue;
            }
            (_, Some(p)) if hex_digest(p).is_none() => {
                reject(&mut plan, "prevHash is not a SHA-256 hex digest".into());
                continue;
            }
            _ => {}
        }
        if let Some(prev_seq) = inc.seq.checked_sub(1)
            && let Some(prev) = slot_at(&slots, prev_seq)
            && inc.prev_hash.as_deref() != Some(prev.hash.as_str())
        {
            reject(
                &mut plan,
                format!("fork: prevHash is not the hash of the stored seq {prev_seq}"),
            );
            continue;
        }
        if let Some(next) = slot_at(&slots, inc.seq + 1)
            && next.prev_hash.as_deref() != Some(inc.hash.as_str())
        {
            reject(
                &mut plan,
                format!(
                    "fork: the stored seq {} does not follow this event",
                    inc.seq + 1
                ),
            );
            continue;
        }
        ids.insert(inc.id, inc.hash.clone());
        slots.insert(
            (inc.agent_id.clone(), inc.run_id.clone(), inc.seq),
            Slot {
                id: inc.id,
                hash: inc.hash.clone(),
                prev_hash: inc.prev_hash.clone(),
            },
        );
        plan.accept.push(inc);
    }
    plan
}

/// The 32 bytes of a lowercase SHA-256 hex digest.
pub fn hex_digest(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || text.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let mut out = [0u8; 32];
    hex::decode_to_slice(text, &mut out).ok()?;
    Some(out)
}

/// Errors of a store's reads and writes.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The run (or event) does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The request cannot be answered as asked (ambiguous run, bad cursor).
    #[error("{0}")]
    BadRequest(String),
    /// A server fault (I/O, database).
    #[error(transparent)]
    Fault(#[from] AuditError),
}

/// One page of a run's events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPage {
    /// The run's agent.
    pub agent_id: String,
    /// The stored canonical lines, in seq order.
    pub lines: Vec<String>,
    /// The `afterSeq` for the next page; `None` at the end.
    pub next: Option<u64>,
}

/// A filter of `GET /v1/events`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventQuery {
    /// Only this agent.
    pub agent_id: Option<String>,
    /// Only this kind.
    pub kind: Option<EventKind>,
    /// Only events with `ts >= since`.
    pub since: Option<DateTime<Utc>>,
    /// Only events with `ts < until`.
    pub until: Option<DateTime<Utc>>,
    /// The cursor of the previous page.
    pub after: Option<String>,
    /// Page size.
    pub limit: usize,
}

/// One page of events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventPage {
    /// Stored canonical lines, in store order.
    pub lines: Vec<String>,
    /// Opaque cursor for the next page; `None` at the end.
    pub next: Option<String>,
}

/// Which runs [`EventStore::run_heads`] lists: those with an event of this agent (when set)
/// at or after `since` (when set).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunHeadQuery {
    /// Only this agent.
    pub agent_id: Option<String>,
    /// Only events with `ts >= since` count.
    pub since: Option<DateTime<Utc>>,
    /// The (agent, run) the previous page ended with.
    pub after: Option<(String, String)>,
    /// Page size (a store may return the whole list in one page).
    pub limit: usize,
}

/// A run as [`EventStore::run_heads`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunHead {
    /// The run's agent.
    pub agent_id: String,
    /// The run.
    pub run_id: String,
    /// Its seq-0 event's kind and time, when that event is selected.
    pub first: Option<(EventKind, DateTime<Utc>)>,
}

/// One page of [`EventStore::run_heads`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunHeadPage {
    /// Runs in (agent, run id) order.
    pub runs: Vec<RunHead>,
    /// The `after` of the next page; `None` at the end.
    pub next: Option<(String, String)>,
}

/// Counts a store can give cheaply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Events stored, when known.
    pub events: Option<u64>,
    /// Runs stored, when known.
    pub runs: Option<u64>,
}

/// A collector store. Writes are durable when `ingest` returns `Ok`.
#[async_trait::async_trait]
pub trait EventStore: Send + Sync + 'static {
    /// Applies the acceptance rules to a batch and stores the accepted events durably (all of
    /// them or, on `Err`, none).
    async fn ingest(&self, batch: Vec<Incoming>) -> Result<IngestOutcome, AuditError>;
    /// A page of a run (`agent`: needed only when several agents use `run_id`).
    async fn run_page(
        &self,
        agent: Option<&str>,
        run_id: &str,
        after_seq: Option<u64>,
        limit: usize,
    ) -> Result<RunPage, StoreError>;
    /// Checks a run's stored chain, reading it page by page.
    async fn verify_run(&self, agent: Option<&str>, run_id: &str) -> Result<RunCheck, StoreError> {
        let mut check = RunCheck::default();
        let mut after = None;
        loop {
            let page = self.run_page(agent, run_id, after, DEFAULT_PAGE).await?;
            for line in &page.lines {
                check.push_line(line);
            }
            match page.next {
                Some(n) => after = Some(n),
                None => return Ok(check),
            }
        }
    }
    /// A page of events matching `query`.
    async fn events(&self, query: &EventQuery) -> Result<EventPage, StoreError>;
    /// A page of the runs `query` selects, in (agent, run id) order, each with its seq-0
    /// event's kind and time: what a what-if replay needs to choose and order runs without
    /// holding their events. This default reads every selected event (one page at a time)
    /// and answers in one page; stores override it with an indexed query.
    async fn run_heads(&self, query: &RunHeadQuery) -> Result<RunHeadPage, StoreError> {
        let mut runs: std::collections::BTreeMap<
            (String, String),
            Option<(EventKind, DateTime<Utc>)>,
        > = std::collections::BTreeMap::new();
        let mut events = EventQuery {
            agent_id: query.agent_id.clone(),
            since: query.since,
            limit: DEFAULT_PAGE,
            ..EventQuery::default()
        };
        loop {
            let page = self.events(&events).await?;
            for line in &page.lines {
                let Ok(e) = serde_json::from_str::<AuditEvent>(line) else {
                    continue;
                };
                let key = (e.agent_id().to_string(), e.run_id().to_string());
                if query.after.as_ref().is_some_and(|a| &key <= a) {
                    continue;
                }
                let first = runs.entry(key).or_default();
                if e.seq() == 0 && first.is_none() {
                    *first = Some((e.kind(), e.ts()));
                }
            }
            match page.next {
                Some(next) => events.after = Some(next),
                None => break,
            }
        }
        Ok(RunHeadPage {
            runs: runs
                .into_iter()
                .map(|((agent_id, run_id), first)| RunHead {
                    agent_id,
                    run_id,
                    first,
                })
                .collect(),
            next: None,
        })
    }
    /// Counts.
    async fn stats(&self) -> Result<StoreStats, AuditError>;
}

/// An injective, readable folder name for an agent id: letters, digits (any script), `-` and
/// `_` are kept, as is `.` except in first place; every other byte is `%XX`. Names that would be
/// longer than 200 bytes are cut and end in `~` and the SHA-256 of the id.
pub fn agent_dir_name(agent_id: &str) -> String {
    let mut out = String::with_capacity(agent_id.len());
    for (i, c) in agent_id.char_indices() {
        if c.is_alphanumeric() || c == '-' || c == '_' || (c == '.' && i > 0) {
            out.push(c);
        } else {
            let mut b = [0u8; 4];
            for byte in c.encode_utf8(&mut b).bytes() {
                out.push_str(&format!("%{byte:02X}"));
            }
        }
    }
    if out.is_empty() {
        return "%".into();
    }
    if out.len() > 200 {
        let mut cut = 120;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push('~');
        out.push_str(&sha256_hex(agent_id));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_dir_names_are_injective_and_readable() {
        assert_eq!(agent_dir_name("support"), "support");
        assert_eq!(agent_dir_name("агент"), "агент");
        assert_ne!(agent_dir_name("агент"), agent_dir_name("робот"));
        assert_eq!(agent_dir_name("../etc"), "%2E.%2Fetc");
        assert_eq!(agent_dir_name(".."), "%2E.");
        assert_eq!(agent_dir_name("a/b c"), "a%2Fb%20c");
        assert_ne!(agent_dir_name("a%2F"), agent_dir_name("a/"));
        let long_a = "ж".repeat(128);
        let long_b = format!("{}й", "ж".repeat(127));
        assert!(agent_dir_name(&long_a).len() <= 200);
        assert_ne!(agent_dir_name(&long_a), agent_dir_name(&long_b));
    }
}
