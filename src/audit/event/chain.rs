//! [`RunChain`]: the chain state of one run, which seals its events.

use std::cell::RefCell;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use uuid::Uuid;

use super::canonical::{self, Keys, Member, sha256_hex_into};
use super::{
    AuditEvent, ENVELOPE_KEYS, Envelope, EnvelopeRef, EventKind, HashText, Members, RunIds,
    envelope_members, rfc3339,
};
use crate::audit::sign::{KEY_ID_FIELD, RunSigner, SIGNATURE_FIELD};

/// The chain state of one run: hands out `seq` numbers and links each event to the previous
/// one's hash. One `RunChain` per run; sealing takes `&mut self`, so a run's events are sealed one
/// at a time.
#[derive(Debug, Clone)]
pub struct RunChain {
    ids: Arc<RunIds>,
    next_seq: u64,
    last_hash: Option<HashText>,
    /// Whether `last_hash` is known to need no escape (a hash this process computed).
    last_hash_plain: bool,
    signing: Option<Signing>,
    /// A `run.ended` was sealed: only what may follow it is sealed now (see
    /// [`RunChain::accepts`]).
    ended: bool,
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
            ids: RunIds::new(run_id.into(), agent_id.into(), enduser_id),
            next_seq: 0,
            last_hash: None,
            last_hash_plain: false,
            signing: None,
            ended: false,
        }
    }

    /// Signs this chain's `run.ended` and `checkpoint` events with `signer` (see
    /// [`crate::audit::sign`]); `None` leaves it unsigned.
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
            ids: last.ids.clone(),
            next_seq: last.seq.saturating_add(1),
            last_hash: Some(last.hash.clone()),
            // Read from elsewhere: plain only if it has the form of a hash.
            last_hash_plain: last.hash().bytes().all(|b| b.is_ascii_hexdigit()),
            signing: None,
            ended: false,
        }
    }

    /// Continues this (new) chain where another holder left the run: the next sealed event
    /// gets `next_seq` and `prevHash` `last_hash` (design §8, a run continued in another
    /// process).
    pub fn continue_at(mut self, next_seq: u64, last_hash: &str) -> RunChain {
        self.next_seq = next_seq;
        self.last_hash = Some(HashText::new(last_hash));
        self.last_hash_plain =
            !last_hash.is_empty() && last_hash.bytes().all(|b| b.is_ascii_hexdigit());
        self
    }

    /// The run id.
    pub fn run_id(&self) -> &str {
        self.ids.run_id()
    }
    /// The agent id.
    pub fn agent_id(&self) -> &str {
        self.ids.agent_id()
    }
    /// The end-user id, if any.
    pub fn enduser_id(&self) -> Option<&str> {
        self.ids.enduser_id()
    }
    /// Whether an event of `kind` may be sealed now: anything before the run's `run.ended`;
    /// after it only what belongs to the end (`evaluation.result` of slow evaluators, the
    /// closing `checkpoint`, an `error` found while letting go of the chain). `toolgate
    /// verify` reports anything else after `run.ended` as a break.
    pub fn accepts(&self, kind: EventKind) -> bool {
        !self.ended || may_follow_end(kind)
    }

    /// Whether the chain's `run.ended` has been sealed.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// The `seq` the next sealed event gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }
    /// The hash of the last sealed event, `None` before the first.
    pub fn last_hash(&self) -> Option<&str> {
        self.last_hash.as_ref().map(HashText::as_str)
    }

    /// Seals an event: assigns its id (UUID v7 from `ts`), `seq`, `prevHash` and `hash`.
    ///
    /// Redaction (see [`crate::audit::Redactor`]) must be applied to `body` before sealing. Body keys
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
                    run_id = %self.ids.run_id(),
                    kind = %kind,
                    "audit event body key {key:?} collides with an envelope field; dropped"
                );
            }
        }
        // Only the chain writes `signature` and `keyId`.
        body.remove(SIGNATURE_FIELD);
        body.remove(KEY_ID_FIELD);
        let members: Members<'_> = body
            .iter()
            .map(|(k, v)| (k.as_str(), Member::Json(v)))
            .collect();
        let sealed = self.seal_members(kind, ts, id, &members, Keys::Escape);
        drop(members);
        if let Some((signature, key_id)) = sealed.signature {
            body.insert(SIGNATURE_FIELD.into(), Value::String(signature));
            body.insert(KEY_ID_FIELD.into(), Value::String(key_id));
        }
        AuditEvent::sealed(sealed.envelope, sealed.hash, sealed.line, Some(body))
    }

    /// Seals an event whose body is given as members (keys distinct, none an envelope key,
    /// `signature` or `keyId`; values written in canonical form): the typed bodies of the
    /// engine, written straight to canonical text. The event's body is parsed from its line
    /// only if someone asks for it.
    pub(crate) fn seal_typed(
        &mut self,
        kind: EventKind,
        ts: DateTime<Utc>,
        id: Uuid,
        body: &[(&str, Member<'_>)],
    ) -> AuditEvent {
        debug_assert!(body.iter().all(|(k, _)| !ENVELOPE_KEYS.contains(k)
            && *k != SIGNATURE_FIELD
            && *k != KEY_ID_FIELD));
        let sealed = self.seal_members(kind, ts, id, body, Keys::Plain);
        AuditEvent::sealed(sealed.envelope, sealed.hash, sealed.line, None)
    }

    /// Seals an event whose whole canonical text (envelope included, without `hash`) `write`
    /// produces, returning where `hash` goes (see [`canonical::write_members`]): for the
    /// engine's frequent kinds, whose members come in a fixed key order, so that the text
    /// between their values is written in constant pieces instead of merged member by
    /// member. Not for `run.ended` or `checkpoint` (a signed chain signs those, adding
    /// members `write` does not know).
    pub(crate) fn seal_whole(
        &mut self,
        kind: EventKind,
        ts: DateTime<Utc>,
        id: Uuid,
        write: &dyn Fn(&EnvelopeRef<'_>, &mut String) -> Option<usize>,
    ) -> AuditEvent {
        debug_assert!(!matches!(kind, EventKind::RunEnded | EventKind::Checkpoint));
        let whole =
            |env: &EnvelopeRef<'_>, _: &[(&str, Member<'_>)], out: &mut String| write(env, out);
        let sealed = self.seal_written(kind, ts, id, &whole);
        AuditEvent::sealed(sealed.envelope, sealed.hash, sealed.line, None)
    }

    /// Writes the event's canonical text, hashes it (signs it, for a signed chain's
    /// `run.ended` and `checkpoint`), and advances the chain. `keys` says whether the body's
    /// keys need escaping.
    fn seal_members(
        &mut self,
        kind: EventKind,
        ts: DateTime<Utc>,
        id: Uuid,
        body: &[(&str, Member<'_>)],
        keys: Keys,
    ) -> Sealed {
        let write = |env: &EnvelopeRef<'_>, extra: &[(&str, Member<'_>)], out: &mut String| {
            write_event(env, body, extra, keys, out)
        };
        self.seal_written(kind, ts, id, &write)
    }

    /// [`RunChain::seal_members`] with the text written by `write` (given the envelope and
    /// the members a signature adds, if any; it returns where `hash` goes).
    fn seal_written(
        &mut self,
        kind: EventKind,
        ts: DateTime<Utc>,
        id: Uuid,
        write: &TextWriter<'_>,
    ) -> Sealed {
        let ts_text = rfc3339(ts);
        let (agent_q, run_q, enduser_q) = self.ids.quoted();
        let signer = match &self.signing {
            Some(s) if matches!(kind, EventKind::RunEnded | EventKind::Checkpoint) => {
                Some(s.signer.clone())
            }
            _ => None,
        };
        let mut id_buf = Uuid::encode_buffer();
        let id_text: &str = id.hyphenated().encode_lower(&mut id_buf);
        let env = EnvelopeRef {
            id: id_text,
            kind,
            ts_text: ts_text.as_str(),
            run_id: Member::Raw(run_q),
            seq: self.next_seq,
            agent_id: Member::Raw(agent_q),
            enduser_id: enduser_q.map(Member::Raw),
            prev_hash: match &self.last_hash {
                None => Member::Null,
                Some(h) if self.last_hash_plain => Member::Plain(h.as_str()),
                Some(h) => Member::Str(h.as_str()),
            },
        };
        // The text is written into a buffer this thread keeps (no allocation per event); the
        // line is copied out once, into its `Arc`.
        let (line, hash, signature) = with_scratch(|text, line| {
            text.clear();
            let mut at = write(&env, &[], text);
            let mut hex = [0u8; 64];
            let mut hash: &str = sha256_hex_into(text.as_bytes(), &mut hex);
            let mut signature = None;
            let mut hex2 = [0u8; 64];
            if let Some(signer) = &signer {
                // The hash computed so far, without the two fields, is the signing hash.
                let sig = signer.sign_hash(hash);
                let key_id = signer.key_id().to_string();
                text.clear();
                at = write(
                    &env,
                    &[
                        (SIGNATURE_FIELD, Member::Str(&sig)),
                        (KEY_ID_FIELD, Member::Str(&key_id)),
                    ],
                    text,
                );
                hash = sha256_hex_into(text.as_bytes(), &mut hex2);
                signature = Some((sig, key_id));
            }
            line.clear();
            with_hash_member(text, at, hash, line);
            (
                Arc::<str>::from(line.as_str()),
                HashText::new(hash),
                signature,
            )
        });
        let envelope = Envelope {
            id,
            kind,
            ts,
            ts_text,
            ids: self.ids.clone(),
            seq: self.next_seq,
            prev_hash: self.last_hash.take(),
        };
        if let Some(signing) = &mut self.signing {
            if signing.last_signed_at.is_none() {
                signing.last_signed_at = Some(ts);
            }
            if signature.is_some() {
                signing.since_signed = 0;
                signing.last_signed_at = Some(ts);
            } else {
                signing.since_signed += 1;
            }
        }
        self.next_seq += 1;
        self.ended |= kind == EventKind::RunEnded;
        self.last_hash = Some(hash.clone());
        self.last_hash_plain = true;
        Sealed {
            envelope,
            hash,
            line,
            signature,
        }
    }
}

/// Writes an event's canonical text without `hash`, given its envelope and the members a
/// signature adds (empty unless signed); returns where `hash` goes.
type TextWriter<'b> =
    dyn Fn(&EnvelopeRef<'_>, &[(&str, Member<'_>)], &mut String) -> Option<usize> + 'b;

/// What [`RunChain::seal_members`] produced.
struct Sealed {
    envelope: Envelope,
    hash: HashText,
    line: Arc<str>,
    /// The signature and key id, for a signed event.
    signature: Option<(String, String)>,
}

/// Writes the canonical text of an event without `hash` (envelope, body, extra members);
/// returns where the `hash` member goes (see [`canonical::write_members`]). `keys` says how
/// the body's keys are written (the envelope's and `extra`'s need no escape either way).
fn write_event(
    env: &EnvelopeRef<'_>,
    body: &[(&str, Member<'_>)],
    extra: &[(&str, Member<'_>)],
    keys: Keys,
    out: &mut String,
) -> Option<usize> {
    let mut envelope: Members<'_> = Members::new();
    envelope_members(env, &mut envelope);
    let in_order = |m: &[(&str, Member<'_>)]| m.is_sorted_by(|a, b| canonical::key_le(a.0, b.0));
    if extra.is_empty() && in_order(body) {
        // Both lists are in key order (a JSON map's keys are, and so are the engine's typed
        // bodies): merged as they are written instead of sorted.
        canonical::write_sorted_members(canonical::merged(&envelope, body), "hash", keys, out)
    } else {
        envelope.extend_from_slice(body);
        envelope.extend_from_slice(extra);
        canonical::write_members(&mut envelope, "hash", out)
    }
}

/// The canonical text `text` (an object without `hash`) with the `hash` member put in its
/// place, written into `line`: at `at`, before the first member that sorts after it (or last
/// when none does).
fn with_hash_member(text: &str, at: Option<usize>, hash: &str, line: &mut String) {
    line.reserve(text.len() + hash.len() + 10);
    match at {
        Some(at) => {
            line.push_str(&text[..at]);
            line.push_str("\"hash\":\"");
            line.push_str(hash);
            line.push_str("\",");
            line.push_str(&text[at..]);
        }
        None => {
            let open = text.strip_suffix('}').unwrap_or(text);
            line.push_str(open);
            if open.len() > 1 {
                line.push(',');
            }
            line.push_str("\"hash\":\"");
            line.push_str(hash);
            line.push_str("\"}");
        }
    }
}

thread_local! {
    /// Per thread: the text of the event being sealed and its line with `hash`.
    static SCRATCH: RefCell<(String, String)> = const { RefCell::new((String::new(), String::new())) };
}

/// Runs `f` with this thread's two scratch buffers (fresh ones if they are in use).
fn with_scratch<R>(f: impl FnOnce(&mut String, &mut String) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut bufs) => {
            let (text, line) = &mut *bufs;
            let r = f(text, line);
            if text.capacity() > 1 << 20 {
                // A huge event: do not keep its buffers.
                *text = String::new();
                *line = String::new();
            }
            r
        }
        Err(_) => f(
            &mut String::with_capacity(1024),
            &mut String::with_capacity(1024),
        ),
    })
}

/// The kinds of event that may follow a run's `run.ended` in its chain: the slow run
/// evaluators' `evaluation.result`, the `checkpoint` that signs them and an `error` found while
/// the chain was let go (a fork). Anything else after `run.ended` is a break for `verify`.
pub fn may_follow_end(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::EvaluationResult | EventKind::Checkpoint | EventKind::Error
    )
}
