//! Audit events: the immutable, hash-chained [`AuditEvent`], the per-run [`RunChain`] that seals
//! them, and [`canonical_json`], the byte form their hashes are computed over.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::AuditError;
use super::sign::{KEY_ID_FIELD, RunSigner, SIGNATURE_FIELD};

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
}

impl EventKind {
    /// Every kind, in declaration order.
    pub const ALL: [EventKind; 9] = [
        EventKind::RunStarted,
        EventKind::ToolDecision,
        EventKind::ToolResult,
        EventKind::LlmResult,
        EventKind::RunEnded,
        EventKind::Error,
        EventKind::EvaluationResult,
        EventKind::Checkpoint,
        EventKind::ToolChanged,
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
/// its fields are private, there are no setters and no interior mutability. Its JSON form
/// ([`AuditEvent::to_json`], also its `Serialize` form) is the envelope with the body's fields
/// beside it:
///
/// ```json
/// {"agentId":"support","hash":"…","id":"…","kind":"tool.result","prevHash":"…","runId":"r1",
///  "schema":"toolgate.audit.v1","seq":3,"ts":"2026-01-05T09:00:01Z","callId":"c1",…}
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEvent {
    id: Uuid,
    kind: EventKind,
    ts: DateTime<Utc>,
    /// The `ts` text exactly as sealed or read, so that re-serializing reproduces the hashed bytes.
    ts_text: String,
    run_id: String,
    seq: u64,
    agent_id: String,
    enduser_id: Option<String>,
    prev_hash: Option<String>,
    hash: String,
    body: Map<String, Value>,
}

impl AuditEvent {
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
        &self.run_id
    }
    /// Position in the run's chain, from 0, without gaps.
    pub fn seq(&self) -> u64 {
        self.seq
    }
    /// SHA-256 (lowercase hex) of the canonical JSON of the event without `hash`.
    pub fn hash(&self) -> &str {
        &self.hash
    }
    /// The hash of the previous event of the run; `None` for `seq` 0.
    pub fn prev_hash(&self) -> Option<&str> {
        self.prev_hash.as_deref()
    }
    /// When the event happened (the engine's clock).
    pub fn ts(&self) -> DateTime<Utc> {
        self.ts
    }
    /// The agent that ran.
    pub fn agent_id(&self) -> &str {
        &self.agent_id
    }
    /// The end user the agent acted for, if any.
    pub fn enduser_id(&self) -> Option<&str> {
        self.enduser_id.as_deref()
    }
    /// The kind-specific fields.
    pub fn body(&self) -> &Map<String, Value> {
        &self.body
    }

    /// The full event (envelope and body) as JSON, as written to files and sent to collectors.
    pub fn to_json(&self) -> Value {
        let mut map = self.unhashed_map();
        map.insert("hash".into(), Value::String(self.hash.clone()));
        Value::Object(map)
    }

    /// The event's canonical JSON text (see [`canonical_json`]): one line of a JSONL trail.
    pub fn to_canonical_json(&self) -> String {
        self.canonical_text(true)
    }

    /// Recomputes the hash from the event's content.
    pub fn compute_hash(&self) -> String {
        sha256_hex(&self.canonical_text(false))
    }

    /// Canonical JSON of the event (with or without `hash`), written straight from the fields:
    /// the same text as `canonical_json(&self.to_json())`, without building a `Value`.
    fn canonical_text(&self, with_hash: bool) -> String {
        enum V<'a> {
            Str(&'a str),
            Owned(String),
            U64(u64),
            Null,
            Json(&'a Value),
        }
        let id = self.id.to_string();
        let mut entries: Vec<(&str, V<'_>)> = Vec::with_capacity(self.body.len() + 10);
        entries.push(("schema", V::Str(SCHEMA)));
        entries.push(("id", V::Owned(id)));
        entries.push(("kind", V::Str(self.kind.as_str())));
        entries.push(("ts", V::Str(&self.ts_text)));
        entries.push(("runId", V::Str(&self.run_id)));
        entries.push(("seq", V::U64(self.seq)));
        entries.push(("agentId", V::Str(&self.agent_id)));
        if let Some(e) = &self.enduser_id {
            entries.push(("enduserId", V::Str(e)));
        }
        entries.push((
            "prevHash",
            self.prev_hash.as_deref().map_or(V::Null, V::Str),
        ));
        if with_hash {
            entries.push(("hash", V::Str(&self.hash)));
        }
        // Body keys never collide with envelope keys (dropped at sealing, removed when parsing).
        entries.extend(self.body.iter().map(|(k, v)| (k.as_str(), V::Json(v))));
        entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        let mut out = String::with_capacity(512);
        out.push('{');
        for (i, (k, v)) in entries.into_iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_string(k, &mut out);
            out.push(':');
            match v {
                V::Str(s) => write_string(s, &mut out),
                V::Owned(s) => write_string(&s, &mut out),
                V::U64(n) => {
                    use std::fmt::Write as _;
                    let _ = write!(out, "{n}");
                }
                V::Null => out.push_str("null"),
                V::Json(v) => write_canonical(v, &mut out),
            }
        }
        out.push('}');
        out
    }

    /// Whether `hash` matches the event's content (it does for every sealed event; a parsed
    /// event may have been edited).
    pub fn hash_is_valid(&self) -> bool {
        self.compute_hash() == self.hash
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
            ts_text,
            run_id,
            seq,
            agent_id,
            enduser_id,
            prev_hash,
            hash,
            body: map,
        })
    }

    /// The event as a JSON object without `hash`: what the hash is computed over.
    fn unhashed_map(&self) -> Map<String, Value> {
        let mut map = self.body.clone();
        map.insert("schema".into(), Value::String(SCHEMA.into()));
        map.insert("id".into(), Value::String(self.id.to_string()));
        map.insert("kind".into(), Value::String(self.kind.as_str().into()));
        map.insert("ts".into(), Value::String(self.ts_text.clone()));
        map.insert("runId".into(), Value::String(self.run_id.clone()));
        map.insert("seq".into(), Value::from(self.seq));
        map.insert("agentId".into(), Value::String(self.agent_id.clone()));
        if let Some(e) = &self.enduser_id {
            map.insert("enduserId".into(), Value::String(e.clone()));
        }
        map.insert(
            "prevHash".into(),
            self.prev_hash
                .as_ref()
                .map_or(Value::Null, |h| Value::String(h.clone())),
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

/// The chain state of one run: hands out `seq` numbers and links each event to the previous
/// one's hash. One `RunChain` per run; sealing takes `&mut self`, so a run's events are sealed one
/// at a time.
#[derive(Debug, Clone)]
pub struct RunChain {
    run_id: String,
    agent_id: String,
    enduser_id: Option<String>,
    next_seq: u64,
    last_hash: Option<String>,
    signing: Option<Signing>,
}

/// A signed chain's key and its progress since the last signed event.
#[derive(Debug, Clone)]
struct Signing {
    signer: Arc<RunSigner>,
    /// Events sealed since the last signed one.
    since_signed: u64,
    /// When the last signed event (or the run's first event) was sealed.
    last_signed_at: Option<DateTime<Utc>>,
}

/// A signed run gets a `checkpoint` event after this many events without a signed one.
pub const CHECKPOINT_EVERY_EVENTS: u64 = 1000;
/// A signed run gets a `checkpoint` event with the first event sealed this long (seconds)
/// after its last signed one (or its start).
pub const CHECKPOINT_EVERY_SECS: i64 = 60;

impl RunChain {
    /// Starts the chain of a new run (the first sealed event gets `seq` 0 and `prevHash` null).
    pub fn new(
        run_id: impl Into<String>,
        agent_id: impl Into<String>,
        enduser_id: Option<String>,
    ) -> RunChain {
        RunChain {
            run_id: run_id.into(),
            agent_id: agent_id.into(),
            enduser_id,
            next_seq: 0,
            last_hash: None,
            signing: None,
        }
    }

    /// Signs this chain's `run.ended` and `checkpoint` events with `signer` (see
    /// [`super::sign`]); `None` leaves it unsigned.
    pub fn with_signer(mut self, signer: Option<Arc<RunSigner>>) -> RunChain {
        self.signing = signer.map(|signer| Signing {
            signer,
            since_signed: 0,
            last_signed_at: None,
        });
        self
    }

    /// Seals a signed `checkpoint` event if the chain is signed and one is due: at least
    /// [`CHECKPOINT_EVERY_EVENTS`] events, or [`CHECKPOINT_EVERY_SECS`] seconds by `ts`, since
    /// the last signed event (or the run's start). Call it after sealing each event.
    pub fn checkpoint_if_due(&mut self, ts: DateTime<Utc>) -> Option<AuditEvent> {
        let s = self.signing.as_ref()?;
        if s.since_signed == 0 {
            return None;
        }
        let by_time = s
            .last_signed_at
            .is_some_and(|t| (ts - t).num_seconds() >= CHECKPOINT_EVERY_SECS);
        if s.since_signed >= CHECKPOINT_EVERY_EVENTS || by_time {
            Some(self.seal(EventKind::Checkpoint, ts, Map::new()))
        } else {
            None
        }
    }

    /// Continues an existing chain after its last event `last` (e.g. in another process).
    pub fn resume_after(last: &AuditEvent) -> RunChain {
        RunChain {
            run_id: last.run_id.clone(),
            agent_id: last.agent_id.clone(),
            enduser_id: last.enduser_id.clone(),
            next_seq: last.seq.saturating_add(1),
            last_hash: Some(last.hash.clone()),
            signing: None,
        }
    }

    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }
    /// The agent id.
    pub fn agent_id(&self) -> &str {
        &self.agent_id
    }
    /// The end-user id, if any.
    pub fn enduser_id(&self) -> Option<&str> {
        self.enduser_id.as_deref()
    }
    /// The `seq` the next sealed event gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }
    /// The hash of the last sealed event, `None` before the first.
    pub fn last_hash(&self) -> Option<&str> {
        self.last_hash.as_deref()
    }

    /// Seals an event: assigns its id (UUID v7 from `ts`), `seq`, `prevHash` and `hash`.
    ///
    /// Redaction (see [`super::Redactor`]) must be applied to `body` before sealing. Body keys
    /// that collide with envelope keys ([`ENVELOPE_KEYS`]) are dropped with a warning.
    pub fn seal(
        &mut self,
        kind: EventKind,
        ts: DateTime<Utc>,
        body: Map<String, Value>,
    ) -> AuditEvent {
        let secs = u64::try_from(ts.timestamp()).unwrap_or(0);
        let id = Uuid::new_v7(uuid::Timestamp::from_unix(
            uuid::NoContext,
            secs,
            ts.timestamp_subsec_nanos(),
        ));
        self.seal_with_id(kind, ts, id, body)
    }

    /// [`seal`](RunChain::seal) with an id chosen earlier (a UUID v7 from `ts`), for events
    /// whose id is handed out before they are sealed.
    pub fn seal_with_id(
        &mut self,
        kind: EventKind,
        ts: DateTime<Utc>,
        id: Uuid,
        mut body: Map<String, Value>,
    ) -> AuditEvent {
        for key in ENVELOPE_KEYS {
            if body.remove(key).is_some() {
                tracing::warn!(
                    run_id = %self.run_id,
                    kind = %kind,
                    "audit event body key {key:?} collides with an envelope field; dropped"
                );
            }
        }
        let mut event = AuditEvent {
            id,
            kind,
            ts,
            ts_text: ts.to_rfc3339_opts(SecondsFormat::AutoSi, true),
            run_id: self.run_id.clone(),
            seq: self.next_seq,
            agent_id: self.agent_id.clone(),
            enduser_id: self.enduser_id.clone(),
            prev_hash: self.last_hash.clone(),
            hash: String::new(),
            body,
        };
        // Only the chain writes `signature` and `keyId`.
        event.body.remove(SIGNATURE_FIELD);
        event.body.remove(KEY_ID_FIELD);
        event.hash = event.compute_hash();
        if let Some(signing) = &mut self.signing {
            if signing.last_signed_at.is_none() {
                signing.last_signed_at = Some(ts);
            }
            if matches!(kind, EventKind::RunEnded | EventKind::Checkpoint) {
                // The hash computed so far, without the two fields, is the signing hash.
                let signature = signing.signer.sign_hash(&event.hash);
                event
                    .body
                    .insert(SIGNATURE_FIELD.into(), Value::String(signature));
                event.body.insert(
                    KEY_ID_FIELD.into(),
                    Value::String(signing.signer.key_id().to_string()),
                );
                event.hash = event.compute_hash();
                signing.since_signed = 0;
                signing.last_signed_at = Some(ts);
            } else {
                signing.since_signed += 1;
            }
        }
        self.next_seq += 1;
        self.last_hash = Some(event.hash.clone());
        event
    }
}

/// The canonical JSON text of a value, the form event hashes are computed over:
///
/// * no whitespace anywhere outside strings;
/// * object members sorted by key, comparing the keys' UTF-8 bytes (no duplicate keys);
/// * strings as serde_json writes them: `"` and `\` escaped as `\"` and `\\`; U+0008, U+0009,
///   U+000A, U+000C, U+000D as `\b`, `\t`, `\n`, `\f`, `\r`; every other code point below
///   U+0020 as `\u00xx` (lowercase hex); everything else, non-ASCII included, as raw UTF-8;
/// * numbers that serde_json holds as integers (no fraction or exponent in the source text,
///   within `i64`/`u64`) in plain decimal; every other number as ECMAScript's
///   `Number.prototype.toString` writes it (shortest round-trip digits; `1`, `0.5`, `1e+21`,
///   `1.5e-7`; `-0` as `0`), as in RFC 8785.
pub fn canonical_json(v: &Value) -> String {
    let mut out = String::with_capacity(256);
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // serde_json's map is a BTreeMap, already in byte order of the keys; but a crate in
            // the build may turn on serde_json's `preserve_order` (insertion order), so check,
            // and sort only when needed.
            let sorted = map
                .keys()
                .zip(map.keys().skip(1))
                .all(|(a, b)| a.as_bytes() < b.as_bytes());
            out.push('{');
            if sorted {
                write_members(map.iter(), out);
            } else {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                write_members(entries.into_iter(), out);
            }
            out.push('}');
        }
    }
}

fn write_members<'a>(members: impl Iterator<Item = (&'a String, &'a Value)>, out: &mut String) {
    for (i, (k, item)) in members.enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(k, out);
        out.push(':');
        write_canonical(item, out);
    }
}

/// Writes a number: integers held as `i64`/`u64` in decimal, every other number as ECMAScript's
/// `Number.prototype.toString` writes it (the form RFC 8785 uses).
fn write_number(n: &serde_json::Number, out: &mut String) {
    use std::fmt::Write as _;
    if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(f) = n.as_f64() {
        write_es_number(f, out);
    } else {
        out.push_str("null");
    }
}

/// ECMAScript `Number::toString(x)` (radix 10), built on Rust's shortest round-trip digits.
fn write_es_number(x: f64, out: &mut String) {
    if x == 0.0 {
        out.push('0');
        return;
    }
    if !x.is_finite() {
        out.push_str("null");
        return;
    }
    if x < 0.0 {
        out.push('-');
    }
    // "d.ddddde[-]x": shortest digits that round-trip.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let k = digits.len() as i64;
    // x = 0.d1d2...dk * 10^n
    let n = exp.parse::<i64>().unwrap_or(0) + 1;
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if n > 0 { '+' } else { '-' });
        out.push_str(&(n - 1).abs().to_string());
    }
}

/// Writes a JSON string literal with serde_json's escaping (documented on [`canonical_json`]).
fn write_string(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    // Copy runs of bytes that need no escape in one go; every byte that needs one is ASCII,
    // so slicing at it stays on a char boundary.
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &str = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            b'\t' => "\\t",
            b'\n' => "\\n",
            0x0c => "\\f",
            b'\r' => "\\r",
            0x00..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if escape.is_empty() {
            out.push_str("\\u00");
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 0xf)] as char);
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// SHA-256 of `text`'s UTF-8 bytes, lowercase hex.
pub fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The hash an event's JSON ought to carry: SHA-256 of the canonical JSON of `event` without
/// its `hash` member. `None` if `event` is not an object.
pub fn expected_hash(event: &Value) -> Option<String> {
    let map = event.as_object()?;
    let mut text = String::with_capacity(512);
    // Same as canonical_json over the map minus "hash", without cloning it.
    write_canonical_members(map.iter().filter(|(k, _)| *k != "hash"), &mut text);
    Some(sha256_hex(&text))
}

/// Writes the canonical JSON object made of `members` (sorted here by key bytes).
pub(crate) fn write_canonical_members<'a>(
    members: impl Iterator<Item = (&'a String, &'a Value)>,
    out: &mut String,
) {
    let mut entries: Vec<(&String, &Value)> = members.collect();
    entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out.push('{');
    write_members(entries.into_iter(), out);
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn canonical_form_sorts_keys_by_bytes_and_has_no_whitespace() {
        let v =
            json!({"b": 1, "a": [1, 2.5, {"z": null, "Z": true}], "é": "x", "aa": "q\"\n\u{1}/é"});
        assert_eq!(
            canonical_json(&v),
            r#"{"a":[1,2.5,{"Z":true,"z":null}],"aa":"q\"\n\u0001/é","b":1,"é":"x"}"#
        );
    }

    #[test]
    fn string_escaping_matches_serde_json() {
        let mut all: String = (0u32..0x80).filter_map(char::from_u32).collect();
        all.push_str("é\u{2028}\u{1F600}");
        let mut mine = String::new();
        write_string(&all, &mut mine);
        assert_eq!(mine, serde_json::to_string(&all).unwrap());
    }

    #[test]
    fn canonical_numbers() {
        let v = json!([
            1.0,
            100.0,
            0.001,
            1e-7,
            1e16,
            1e21,
            -0.0,
            12345678901234567890u64,
            -5,
            1.5,
            0.000001,
            1.5e-7,
            5e-324,
            1.7976931348623157e308,
            123456789012345680000.0,
            -2.5e-3,
            0.1
        ]);
        assert_eq!(
            canonical_json(&v),
            "[1,100,0.001,1e-7,10000000000000000,1e+21,0,12345678901234567890,-5,1.5,\
             0.000001,1.5e-7,5e-324,1.7976931348623157e+308,123456789012345680000,-0.0025,0.1]"
        );
        // Canonical text re-parses to the same canonical text.
        let text = canonical_json(&v);
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(canonical_json(&back), text);
    }

    #[test]
    fn seal_chains_and_roundtrips() {
        let mut chain = RunChain::new("r1", "agent", Some("u1".into()));
        let ts = DateTime::parse_from_rfc3339("2026-01-05T09:00:00.123Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap();
        let e0 = chain.seal(EventKind::RunStarted, ts, body(json!({"runContext": {}})));
        let e1 = chain.seal(
            EventKind::ToolDecision,
            ts,
            body(json!({"callId": "c1", "seq": 99})),
        );
        assert_eq!(e0.seq(), 0);
        assert_eq!(e0.prev_hash(), None);
        assert_eq!(e1.seq(), 1);
        assert_eq!(e1.prev_hash(), Some(e0.hash()));
        assert!(!e1.body().contains_key("seq"));
        assert_eq!(e0.id().get_version_num(), 7);
        assert!(e0.hash_is_valid() && e1.hash_is_valid());
        let v = e1.to_json();
        assert_eq!(v["ts"], "2026-01-05T09:00:00.123Z");
        assert_eq!(expected_hash(&v).as_deref(), Some(e1.hash()));
        let text = e1.to_canonical_json();
        assert_eq!(text, canonical_json(&e1.to_json()));
        let back: AuditEvent = serde_json::from_str(&text).unwrap();
        assert_eq!(back, e1);
        assert_eq!(back.to_canonical_json(), text);
        let mut edited = v.clone();
        edited["callId"] = json!("c2");
        let parsed = AuditEvent::from_value(edited).unwrap();
        assert!(!parsed.hash_is_valid());
    }

    #[test]
    fn rejects_bad_envelopes() {
        for bad in [
            json!(1),
            json!({"schema": "x"}),
            json!({"schema": SCHEMA, "id": "nope"}),
        ] {
            assert!(AuditEvent::from_value(bad).is_err());
        }
    }
}
