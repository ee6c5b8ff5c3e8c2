//! Audit events: the immutable, hash-chained [`AuditEvent`], the per-run [`RunChain`] that seals
//! them, and [`canonical_json`], the byte form their hashes are computed over.
//!
//! * `canonical` — the canonical JSON writer (for `Value`s and for an event's members);
//! * `ser` — a `serde::Serializer` that writes typed bodies straight to canonical text;
//! * `chain` — [`RunChain`], which seals events (id, `seq`, `prevHash`, `hash`, signatures).

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use uuid::Uuid;

use super::AuditError;

pub(crate) mod canonical;
mod chain;
pub(crate) mod ser;
#[cfg(test)]
mod tests;
mod text;
mod time_text;

pub(crate) use canonical::{Member, write_canonical_members};
pub(crate) use text::{HashText, RunIds, TsText};
pub(crate) use time_text::rfc3339;

/// The members of an event being written (envelope and body; on the stack for every event
/// the engine writes).
pub(crate) type Members<'a> = smallvec::SmallVec<[(&'a str, Member<'a>); 24]>;
pub use canonical::{canonical_json, expected_hash, sha256_hex};
pub use chain::{CHECKPOINT_EVERY_EVENTS, CHECKPOINT_EVERY_SECS, RunChain, may_follow_end};

/// The value of the `schema` field of every event this version writes.
pub const SCHEMA: &str = "toolgate.audit.v1";

/// Envelope keys. A body key with one of these names is dropped when the event is sealed.
pub const ENVELOPE_KEYS: [&str; 10] = [
    "schema",
    "id",
    "kind",
    "ts",
    "runId",
    "seq",
    "agentId",
    "enduserId",
    "prevHash",
    "hash",
];

/// The kind of an audit event (the `kind` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EventKind {
    /// `run.started`: a run began.
    #[serde(rename = "run.started")]
    RunStarted,
    /// `tool.decision`: a before- or after-phase decision about a tool call.
    #[serde(rename = "tool.decision")]
    ToolDecision,
    /// `tool.result`: the outcome of a tool call.
    #[serde(rename = "tool.result")]
    ToolResult,
    /// `llm.result`: tokens and cost of an LLM call.
    #[serde(rename = "llm.result")]
    LlmResult,
    /// `run.ended`: a run finished.
    #[serde(rename = "run.ended")]
    RunEnded,
    /// `error`: an engine fault.
    #[serde(rename = "error")]
    Error,
    /// `evaluation.result`: an evaluation that arrived after the event it belongs to.
    #[serde(rename = "evaluation.result")]
    EvaluationResult,
    /// `checkpoint`: a signed point written every so many events or seconds of a signed run.
    #[serde(rename = "checkpoint")]
    Checkpoint,
    /// `tool.changed`: an MCP tool's definition differs from its pinned one.
    #[serde(rename = "tool.changed")]
    ToolChanged,
    /// `review.decided`: a human review was approved or denied (by a reviewer, or by its
    /// `onExpire`).
    #[serde(rename = "review.decided")]
    ReviewDecided,
    /// `run.continued`: a run left open by a holder (another process, or this engine) was
    /// taken up again; the chain goes on from the head that holder left (design §16).
    #[serde(rename = "run.continued")]
    RunContinued,
    /// `run.resumed`: a run whose holder died (its lease lapsed), or whose chain head was
    /// lost with the store's state (`headLost`), was taken over (design §16).
    #[serde(rename = "run.resumed")]
    RunResumed,
    /// `llm.decision`: the `llm.before` decision about a model call (like `tool.decision`).
    #[serde(rename = "llm.decision")]
    LlmDecision,
    /// `llm.messages`: the messages of a model call (with the engine's `record_messages` on).
    #[serde(rename = "llm.messages")]
    LlmMessages,
}

impl EventKind {
    /// Every kind, in declaration order.
    pub const ALL: [EventKind; 14] = [
        EventKind::RunStarted,
        EventKind::ToolDecision,
        EventKind::ToolResult,
        EventKind::LlmResult,
        EventKind::RunEnded,
        EventKind::Error,
        EventKind::EvaluationResult,
        EventKind::Checkpoint,
        EventKind::ToolChanged,
        EventKind::ReviewDecided,
        EventKind::RunContinued,
        EventKind::RunResumed,
        EventKind::LlmDecision,
        EventKind::LlmMessages,
    ];

    /// The wire name, e.g. `"tool.decision"`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::RunStarted => "run.started",
            EventKind::ToolDecision => "tool.decision",
            EventKind::ToolResult => "tool.result",
            EventKind::LlmResult => "llm.result",
            EventKind::RunEnded => "run.ended",
            EventKind::Error => "error",
            EventKind::EvaluationResult => "evaluation.result",
            EventKind::Checkpoint => "checkpoint",
            EventKind::ToolChanged => "tool.changed",
            EventKind::ReviewDecided => "review.decided",
            EventKind::RunContinued => "run.continued",
            EventKind::RunResumed => "run.resumed",
            EventKind::LlmDecision => "llm.decision",
            EventKind::LlmMessages => "llm.messages",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventKind {
    type Err = AuditError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| AuditError::InvalidEvent(format!("unknown event kind {s:?}")))
    }
}

/// One audit event: envelope plus the kind's body fields.
///
/// An event is built once — by [`RunChain::seal`] or by parsing stored JSON — and never changes:
/// its fields are private and there are no setters. Its JSON form ([`AuditEvent::to_json`], also
/// its `Serialize` form) is the envelope with the body's fields beside it:
///
/// ```json
/// {"agentId":"support","hash":"…","id":"…","kind":"tool.result","prevHash":"…","runId":"r1",
///  "schema":"toolgate.audit.v1","seq":3,"ts":"2026-01-05T09:00:01Z","callId":"c1",…}
/// ```
///
/// A sealed event keeps the canonical line it was hashed from ([`AuditEvent::canonical_line`]);
/// sinks write that line as is. An event sealed from a typed body keeps only the line, and
/// parses its [`body`](AuditEvent::body) from it the first time the body is asked for.
#[derive(Debug, Clone)]
pub struct AuditEvent {
    id: Uuid,
    kind: EventKind,
    ts: DateTime<Utc>,
    /// The `ts` text exactly as sealed or read, so that re-serializing reproduces the hashed bytes.
    ts_text: TsText,
    /// The run, agent and end-user ids (one allocation per run, shared by its events).
    ids: Arc<RunIds>,
    seq: u64,
    prev_hash: Option<HashText>,
    hash: HashText,
    /// The body; set at construction, or parsed from `line` on first use.
    body: OnceLock<Map<String, Value>>,
    /// The canonical text with `hash`; set at sealing, or written from the fields on first use.
    line: OnceLock<Arc<str>>,
}

impl PartialEq for AuditEvent {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
            && self.kind == other.kind
            && self.ts == other.ts
            && self.ts_text == other.ts_text
            && *self.ids == *other.ids
            && self.seq == other.seq
            && self.prev_hash == other.prev_hash
            && self.hash == other.hash
            && self.body() == other.body()
    }
}

/// The envelope of an event being sealed (see [`RunChain`]).
pub(crate) struct Envelope {
    pub(crate) id: Uuid,
    pub(crate) kind: EventKind,
    pub(crate) ts: DateTime<Utc>,
    pub(crate) ts_text: TsText,
    pub(crate) ids: Arc<RunIds>,
    pub(crate) seq: u64,
    pub(crate) prev_hash: Option<HashText>,
}

impl AuditEvent {
    /// A sealed event: its envelope, `hash`, the canonical `line` (with `hash`) and, when the
    /// caller has it, the body (else it is parsed from `line` when asked for).
    pub(crate) fn sealed(
        env: Envelope,
        hash: HashText,
        line: Arc<str>,
        body: Option<Map<String, Value>>,
    ) -> AuditEvent {
        let event = AuditEvent {
            id: env.id,
            kind: env.kind,
            ts: env.ts,
            ts_text: env.ts_text,
            ids: env.ids,
            seq: env.seq,
            prev_hash: env.prev_hash,
            hash,
            body: OnceLock::new(),
            line: OnceLock::new(),
        };
        let _ = event.line.set(line);
        if let Some(b) = body {
            let _ = event.body.set(b);
        }
        event
    }

    /// The event id (UUID v7, time-ordered, derived from `ts`).
    pub fn id(&self) -> Uuid {
        self.id
    }
    /// The event kind.
    pub fn kind(&self) -> EventKind {
        self.kind
    }
    /// The id of the run this event belongs to.
    pub fn run_id(&self) -> &str {
        self.ids.run_id()
    }
    /// Position in the run's chain, from 0, without gaps.
    pub fn seq(&self) -> u64 {
        self.seq
    }
    /// SHA-256 (lowercase hex) of the canonical JSON of the event without `hash`.
    pub fn hash(&self) -> &str {
        self.hash.as_str()
    }
    /// The hash of the previous event of the run; `None` for `seq` 0.
    pub fn prev_hash(&self) -> Option<&str> {
        self.prev_hash.as_ref().map(HashText::as_str)
    }
    /// When the event happened (the engine's clock).
    pub fn ts(&self) -> DateTime<Utc> {
        self.ts
    }
    /// The `ts` text as sealed or read (RFC 3339).
    pub(crate) fn ts_text(&self) -> &str {
        self.ts_text.as_str()
    }
    /// The agent that ran.
    pub fn agent_id(&self) -> &str {
        self.ids.agent_id()
    }
    /// The end user the agent acted for, if any.
    pub fn enduser_id(&self) -> Option<&str> {
        self.ids.enduser_id()
    }
    /// The kind-specific fields.
    pub fn body(&self) -> &Map<String, Value> {
        self.body.get_or_init(|| {
            let Some(line) = self.line.get() else {
                return Map::new();
            };
            match serde_json::from_str::<Map<String, Value>>(line) {
                Ok(mut map) => {
                    for key in ENVELOPE_KEYS {
                        map.remove(key);
                    }
                    map
                }
                Err(e) => {
                    tracing::error!(run_id = %self.ids.run_id(), seq = self.seq, "audit event line does not parse: {e}");
                    Map::new()
                }
            }
        })
    }

    /// The full event (envelope and body) as JSON, as written to files and sent to collectors.
    pub fn to_json(&self) -> Value {
        let mut map = self.unhashed_map();
        map.insert("hash".into(), Value::String(self.hash.as_str().into()));
        Value::Object(map)
    }

    /// The event's canonical JSON text (see [`canonical_json`]), with `hash`, without a line
    /// break: one line of a JSONL trail. Shared: a sealed event hands out the text it was hashed
    /// from, without writing it again.
    pub fn canonical_line(&self) -> &Arc<str> {
        self.line
            .get_or_init(|| Arc::from(self.canonical_text(true)))
    }

    /// The event's canonical JSON text (see [`canonical_json`]): one line of a JSONL trail.
    pub fn to_canonical_json(&self) -> String {
        self.canonical_line().to_string()
    }

    /// Recomputes the hash from the event's content.
    pub fn compute_hash(&self) -> String {
        sha256_hex(&self.canonical_text(false))
    }

    /// Canonical JSON of the event (with or without `hash`), written straight from the fields:
    /// the same text as `canonical_json(&self.to_json())`, without building a `Value`.
    fn canonical_text(&self, with_hash: bool) -> String {
        let body = self.body();
        let mut id_buf = Uuid::encode_buffer();
        let id = self.id.hyphenated().encode_lower(&mut id_buf);
        let mut members: Members<'_> = Members::new();
        self.envelope_members(id, &mut members);
        if with_hash {
            members.push(("hash", Member::Str(self.hash.as_str())));
        }
        // Body keys never collide with envelope keys (dropped at sealing, removed when parsing).
        members.extend(body.iter().map(|(k, v)| (k.as_str(), Member::Json(v))));
        let mut out = String::with_capacity(512);
        canonical::write_members(&mut members, "", &mut out);
        out
    }

    /// The envelope's members without `hash`.
    fn envelope_members<'a>(&'a self, id: &'a str, members: &mut Members<'a>) {
        envelope_members(
            &EnvelopeRef {
                id,
                kind: self.kind,
                ts_text: self.ts_text.as_str(),
                run_id: Member::Str(self.ids.run_id()),
                seq: self.seq,
                agent_id: Member::Str(self.ids.agent_id()),
                enduser_id: self.ids.enduser_id().map(Member::Str),
                prev_hash: self
                    .prev_hash
                    .as_ref()
                    .map_or(Member::Null, |h| Member::Str(h.as_str())),
            },
            members,
        );
    }

    /// Whether `hash` matches the event's content (it does for every sealed event; a parsed
    /// event may have been edited).
    pub fn hash_is_valid(&self) -> bool {
        self.compute_hash() == self.hash.as_str()
    }

    /// Parses an event from its JSON form, checking the envelope (not the hash; see
    /// [`AuditEvent::hash_is_valid`]).
    pub fn from_value(value: Value) -> Result<AuditEvent, AuditError> {
        match value {
            Value::Object(map) => AuditEvent::from_map(map),
            _ => Err(invalid("an event must be a JSON object")),
        }
    }

    fn from_map(mut map: Map<String, Value>) -> Result<AuditEvent, AuditError> {
        match map.remove("schema") {
            Some(Value::String(s)) if s == SCHEMA => {}
            Some(other) => {
                return Err(invalid(format!("schema must be {SCHEMA:?}, found {other}")));
            }
            None => return Err(invalid("missing schema")),
        }
        let id_text = take_string(&mut map, "id")?;
        let id = Uuid::parse_str(&id_text)
            .map_err(|e| invalid(format!("id {id_text:?} is not a UUID: {e}")))?;
        let kind: EventKind = take_string(&mut map, "kind")?.parse()?;
        let ts_text = take_string(&mut map, "ts")?;
        let ts = DateTime::parse_from_rfc3339(&ts_text)
            .map_err(|e| invalid(format!("ts {ts_text:?} is not RFC 3339: {e}")))?
            .with_timezone(&Utc);
        let run_id = take_string(&mut map, "runId")?;
        if run_id.is_empty() {
            return Err(invalid("runId is empty"));
        }
        let seq = match map.remove("seq") {
            Some(Value::Number(n)) => n
                .as_u64()
                .ok_or_else(|| invalid(format!("seq {n} is not a non-negative integer")))?,
            Some(other) => return Err(invalid(format!("seq must be an integer, found {other}"))),
            None => return Err(invalid("missing seq")),
        };
        let agent_id = take_string(&mut map, "agentId")?;
        let enduser_id = match map.remove("enduserId") {
            None => None,
            Some(Value::String(s)) => Some(s),
            Some(other) => {
                return Err(invalid(format!(
                    "enduserId must be a string when present, found {other}"
                )));
            }
        };
        let prev_hash = match map.remove("prevHash") {
            Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(other) => {
                return Err(invalid(format!(
                    "prevHash must be a string or null, found {other}"
                )));
            }
            None => return Err(invalid("missing prevHash")),
        };
        let hash = take_string(&mut map, "hash")?;
        Ok(AuditEvent {
            id,
            kind,
            ts,
            ts_text: TsText::new(&ts_text),
            ids: RunIds::new(run_id, agent_id, enduser_id),
            seq,
            prev_hash: prev_hash.as_deref().map(HashText::new),
            hash: HashText::new(&hash),
            body: OnceLock::from(map),
            line: OnceLock::new(),
        })
    }

    /// The event as a JSON object without `hash`: what the hash is computed over.
    fn unhashed_map(&self) -> Map<String, Value> {
        let mut map = self.body().clone();
        map.insert("schema".into(), Value::String(SCHEMA.into()));
        map.insert("id".into(), Value::String(self.id.to_string()));
        map.insert("kind".into(), Value::String(self.kind.as_str().into()));
        map.insert("ts".into(), Value::String(self.ts_text.as_str().into()));
        map.insert("runId".into(), Value::String(self.ids.run_id().into()));
        map.insert("seq".into(), Value::from(self.seq));
        map.insert("agentId".into(), Value::String(self.ids.agent_id().into()));
        if let Some(e) = self.ids.enduser_id() {
            map.insert("enduserId".into(), Value::String(e.into()));
        }
        map.insert(
            "prevHash".into(),
            self.prev_hash
                .as_ref()
                .map_or(Value::Null, |h| Value::String(h.as_str().into())),
        );
        map
    }
}

fn invalid(msg: impl Into<String>) -> AuditError {
    AuditError::InvalidEvent(msg.into())
}

fn take_string(map: &mut Map<String, Value>, key: &str) -> Result<String, AuditError> {
    match map.remove(key) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(invalid(format!("{key} must be a string, found {other}"))),
        None => Err(invalid(format!("missing {key}"))),
    }
}

impl Serialize for AuditEvent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for AuditEvent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = Map::<String, Value>::deserialize(deserializer)?;
        AuditEvent::from_map(map).map_err(serde::de::Error::custom)
    }
}

/// The envelope fields of an event, borrowed, for writing its members.
pub(crate) struct EnvelopeRef<'a> {
    pub(crate) id: &'a str,
    pub(crate) kind: EventKind,
    pub(crate) ts_text: &'a str,
    /// The run id: [`Member::Str`], or [`Member::Raw`] when already written as a literal.
    pub(crate) run_id: Member<'a>,
    pub(crate) seq: u64,
    /// The agent id, as `run_id`.
    pub(crate) agent_id: Member<'a>,
    /// The end-user id, as `run_id`.
    pub(crate) enduser_id: Option<Member<'a>>,
    /// The previous event's hash: [`Member::Plain`] for a hash this process computed,
    /// [`Member::Str`] for one read from elsewhere, [`Member::Null`] for none.
    pub(crate) prev_hash: Member<'a>,
}

/// Pushes the envelope's members (all but `hash`), in byte order of their keys.
pub(crate) fn envelope_members<'a>(e: &EnvelopeRef<'a>, members: &mut Members<'a>) {
    members.push(("agentId", e.agent_id));
    if let Some(u) = e.enduser_id {
        members.push(("enduserId", u));
    }
    // A UUID's hyphenated form, an event kind and the schema never need an escape; `ts` is
    // RFC 3339 (digits, `-`, `:`, `T`, `.`, `Z`, `+`) wherever it came from.
    members.push(("id", Member::Plain(e.id)));
    members.push(("kind", Member::Plain(e.kind.as_str())));
    members.push(("prevHash", e.prev_hash));
    members.push(("runId", e.run_id));
    members.push(("schema", Member::Plain(SCHEMA)));
    members.push(("seq", Member::U64(e.seq)));
    members.push(("ts", Member::Str(e.ts_text)));
}
