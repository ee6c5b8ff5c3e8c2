//! The native addon of the `toolgate` npm package (napi-rs 3).
//!
//! This crate only translates: every decision, rule, review and audit event is the Rust
//! crate's. The package's JavaScript layer (`index.js`) adds the conveniences (`guard`, the
//! error classes, the adapters) on top of the classes here, and hands values across as JSON
//! text (`JSON.stringify` in JavaScript, `serde_json` here): one string per value instead of
//! one Node-API call per property.
//!
//! Decisions never block Node's event loop longer than the decision itself: a decision is
//! first polled once on the calling (JavaScript) thread; when nothing has to be awaited (no
//! signal, subject extractor or custom condition in play, the common case) it is returned
//! there and then; otherwise the rest of it runs on the tokio runtime and the caller gets a
//! promise (see [`now_or_later`]).

// No `unsafe` of its own: napi-derive's generated glue is the only unsafe code here.

/// The addon's allocator (see Cargo.toml): Rust allocations only, never handed to Node.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod callbacks;
mod engine;
mod fast;
mod run;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use napi::bindgen_prelude::*;
use napi_derive::napi;

/// Runs `f` inside the tokio runtime's context (the audit trail's workers and the engine's
/// timers are spawned on it).
pub(crate) fn in_runtime<T>(f: impl FnOnce() -> T) -> T {
    napi::bindgen_prelude::within_runtime_if_available(f)
}

/// A JavaScript error the package's `index.js` turns into a `ToolgateError` subclass: the
/// message is a marker and a JSON object `{kind, message, path?, file?}`.
pub(crate) fn toolgate_error(
    kind: &str,
    message: String,
    path: Option<String>,
    file: Option<String>,
) -> Error {
    let body = serde_json::json!({"kind": kind, "message": message, "path": path, "file": file});
    Error::new(Status::GenericFailure, format!("\u{1}toolgate:{body}"))
}

/// A `TypeError`-like argument error (shown to the caller as it is).
pub(crate) fn invalid(message: impl Into<String>) -> Error {
    Error::new(Status::InvalidArg, message.into())
}

/// A future polled once on the calling thread: its value if it finished, else the future.
pub(crate) enum NowOrLater<T> {
    /// Finished on the first poll.
    Now(T),
    /// Still running: to be awaited on the runtime.
    Later(Pin<Box<dyn Future<Output = T> + Send>>),
}

/// Polls `fut` once, inside the runtime's context, on this thread. A decision with nothing
/// to await finishes here (no thread hop, no promise to settle); one that waits for a
/// callback, a timer or Redis comes back as `Later`, to be moved onto the runtime, where it
/// is polled again with a real waker (futures re-register their waker on every poll).
pub(crate) fn now_or_later<T>(fut: impl Future<Output = T> + Send + 'static) -> NowOrLater<T> {
    let mut fut: Pin<Box<dyn Future<Output = T> + Send>> = Box::pin(fut);
    let mut cx = Context::from_waker(Waker::noop());
    match in_runtime(|| fut.as_mut().poll(&mut cx)) {
        Poll::Ready(v) => NowOrLater::Now(v),
        Poll::Pending => NowOrLater::Later(fut),
    }
}

/// One decision of the engine, as `index.js` receives it: as JSON text (`to_json_text`), one
/// string for Node-API to create instead of an object of 14 properties.
pub struct NativeDecision {
    /// The id of the call decided.
    pub call_id: String,
    /// `"tool.before"` or `"tool.after"`.
    pub phase: String,
    /// `"allow"`, `"block"` or `"hitl"`.
    pub effect: String,
    /// The decision code, e.g. `"BLOCKED_RULE"`.
    pub code: String,
    /// The deciding rule's reason.
    pub reason: Option<String>,
    /// The deciding rule's id.
    pub rule_id: Option<String>,
    /// Whether the call may proceed.
    pub allowed: bool,
    /// The review's id when the effect is hitl (or a review decided this call).
    pub review_id: Option<String>,
    /// Whether the agent must stop the run.
    pub abort_run: bool,
    /// The effect a shadow-mode rule would have had.
    pub shadow_effect: Option<String>,
    /// The internal error behind a failure-mode decision, if any.
    pub error: Option<String>,
    /// How long the engine took, in nanoseconds.
    pub latency_ns: f64,
    /// Its number in the run: `NativeRun.decisionJson(seq)` gives the whole decision while the
    /// run keeps it (0 when `full` is set).
    pub seq: f64,
    /// The whole decision as JSON text, for a decision that had to be awaited (its callbacks'
    /// errors are what one reads it for; next to a thread hop its serialisation costs nothing).
    pub full: Option<String>,
}

fn push_json_str(out: &mut Vec<u8>, s: &str) {
    // Writing JSON into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

fn push_opt(out: &mut Vec<u8>, key: &str, v: &Option<String>) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\":");
    match v {
        Some(s) => push_json_str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

impl NativeDecision {
    /// `{callId, phase, effect, code, reason, ruleId, allowed, reviewId, abortRun, shadowEffect,
    /// error, latencyNs, seq, full?}` as JSON text (`full`: the whole decision, an object).
    pub(crate) fn to_json_text(&self) -> String {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(b"{\"callId\":");
        push_json_str(&mut out, &self.call_id);
        for (k, v) in [
            ("phase", &self.phase),
            ("effect", &self.effect),
            ("code", &self.code),
        ] {
            out.extend_from_slice(b",\"");
            out.extend_from_slice(k.as_bytes());
            out.extend_from_slice(b"\":");
            push_json_str(&mut out, v);
        }
        push_opt(&mut out, "reason", &self.reason);
        push_opt(&mut out, "ruleId", &self.rule_id);
        push_opt(&mut out, "reviewId", &self.review_id);
        push_opt(&mut out, "shadowEffect", &self.shadow_effect);
        push_opt(&mut out, "error", &self.error);
        let tail = format!(
            ",\"allowed\":{},\"abortRun\":{},\"latencyNs\":{},\"seq\":{}",
            self.allowed, self.abort_run, self.latency_ns, self.seq
        );
        out.extend_from_slice(tail.as_bytes());
        if let Some(full) = &self.full {
            out.extend_from_slice(b",\"full\":");
            out.extend_from_slice(full.as_bytes());
        }
        out.push(b'}');
        // Built from `&str`s and ASCII: valid UTF-8.
        String::from_utf8(out).unwrap_or_default()
    }
}

/// The last decisions of a run, whole, for `Decision.toJSON()`. Kept here rather than handed
/// to JavaScript as an external: a Node-API external carries a finalizer (a weak handle V8 has
/// to track and collect), which cost more than the rest of the decision's crossing.
#[derive(Default)]
pub(crate) struct Recent {
    seq: std::sync::atomic::AtomicU64,
    kept: std::sync::Mutex<std::collections::VecDeque<(u64, toolgate::engine::Decision)>>,
}

/// How many decisions of a run `toJSON()` can read back.
pub(crate) const KEEP: usize = 256;

impl Recent {
    pub(crate) fn keep(&self, d: toolgate::engine::Decision) -> u64 {
        let n = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() == KEEP {
            kept.pop_front();
        }
        kept.push_back((n, d));
        n
    }

    /// Decision `seq` as JSON text, if still kept.
    pub(crate) fn json(&self, seq: u64) -> Result<Option<String>> {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        match kept.iter().rev().find(|(n, _)| *n == seq) {
            Some((_, d)) => serde_json::to_string(d)
                .map(Some)
                .map_err(|e| invalid(format!("decision: {e}"))),
            None => Ok(None),
        }
    }
}

impl NativeDecision {
    pub(crate) fn new(call_id: String, d: toolgate::engine::Decision, recent: &Recent) -> Self {
        let mut out = NativeDecision {
            call_id,
            phase: d.phase.as_str().to_string(),
            effect: d.effect.as_str().to_string(),
            code: d.code.as_str().to_string(),
            reason: d.reason.as_deref().map(str::to_string),
            rule_id: d.rule_id.as_deref().map(str::to_string),
            allowed: d.is_allowed(),
            review_id: d.hitl.as_ref().map(|h| h.review_id.clone()),
            abort_run: d.abort_run,
            shadow_effect: d.shadow_effect.map(|e| e.as_str().to_string()),
            error: d.error.clone(),
            latency_ns: d.latency_ns as f64,
            seq: 0.0,
            full: None,
        };
        out.seq = recent.keep(d) as f64;
        out
    }

    /// A decision that was awaited: its whole JSON goes with it.
    pub(crate) fn awaited(call_id: String, d: toolgate::engine::Decision) -> Result<Self> {
        let full = serde_json::to_string(&d).map_err(|e| invalid(format!("decision: {e}")))?;
        let mut out = NativeDecision::new(call_id, d, &Recent::default());
        out.seq = 0.0;
        out.full = Some(full);
        Ok(out)
    }
}

/// A clock that moves only when told to (tests, replays). Times are milliseconds since the
/// Unix epoch (what `Date.getTime()` gives).
#[napi]
pub struct NativeManualClock {
    pub(crate) clock: toolgate::engine::ManualClock,
}

fn utc(epoch_ms: f64) -> Result<chrono::DateTime<chrono::Utc>> {
    if !epoch_ms.is_finite() {
        return Err(invalid("clock: expected a valid date"));
    }
    chrono::DateTime::from_timestamp_micros((epoch_ms * 1000.0).round() as i64)
        .ok_or_else(|| invalid(format!("clock: {epoch_ms} ms is out of range")))
}

#[napi]
impl NativeManualClock {
    /// A clock showing `epoch_ms`.
    #[napi(constructor)]
    pub fn new(epoch_ms: f64) -> Result<Self> {
        Ok(NativeManualClock {
            clock: toolgate::engine::ManualClock::new(utc(epoch_ms)?),
        })
    }

    /// Sets the time.
    #[napi]
    pub fn set(&self, epoch_ms: f64) -> Result<()> {
        self.clock.set(utc(epoch_ms)?);
        Ok(())
    }

    /// Moves the time by `ms` (negative: back).
    #[napi]
    pub fn advance(&self, ms: f64) -> Result<()> {
        if !ms.is_finite() {
            return Err(invalid("advance: ms must be a finite number"));
        }
        self.clock
            .advance(chrono::Duration::microseconds((ms * 1000.0).round() as i64));
        Ok(())
    }

    /// The clock's time, in milliseconds since the epoch.
    #[napi]
    pub fn now(&self) -> f64 {
        use toolgate::engine::Clock;
        self.clock.now().timestamp_micros() as f64 / 1000.0
    }
}

/// The crate's version.
#[napi]
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
