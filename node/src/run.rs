//! `NativeRun`: one agent run; its before/after decisions (returned at once when nothing is
//! awaited, else as a promise settled from the runtime) and its end.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use serde_json::Value;
use toolgate::engine::{
    Decision, DecisionCode, Enduser, LlmCall, LlmUsage, Run, ToolCall, ToolOutcome,
};
use toolgate::policy::{EffectType, Phase};

use crate::fast::{self, Strings};
use crate::{
    NativeDecision, NowOrLater, Recent, in_runtime, invalid, now_or_later, toolgate_error,
};

/// A run of an agent.
#[napi]
pub struct NativeRun {
    state: Arc<RunState>,
    /// Its slot in this thread's [`RUNS`].
    slot: u32,
    /// Its number (`runBeforeTool`'s first argument): the slot and the slot's generation.
    no: f64,
}

/// What a run's calls share: one allocation (next to the core's own), as a run that is
/// never ended stays allocated until Node runs its finalizer, which a loop that never yields
/// to the event loop postpones for every run it starts.
struct RunState {
    run: Run,
    calls: AtomicU64,
    /// Model calls numbered so far (`llm-<n>` ids of calls given without one).
    llm_calls: AtomicU64,
    recent: Recent,
    strings: Arc<Strings>,
    /// The decision `beforeToolFunction`'s function left for `runPending` (taken at once).
    pending: std::sync::Mutex<Option<LaterText>>,
}

/// The live runs of this thread (the JavaScript thread of one Node environment), by number:
/// [`run_before_tool`] finds its run here instead of unwrapping a class instance, which with
/// napi-rs 3 costs a global lock and two hash-map updates per call (its borrow tracking: the
/// larger part of an empty method call's 0.4–0.5 µs on the development VM).
///
/// A run's number is its slot and the slot's generation (`generation << SLOT_BITS | slot`,
/// below 2^53: exact as a JavaScript number): a slot is reused once its run is finalized, and
/// the old number then names no run, instead of the slot's next one (possibly another
/// engine's).
#[derive(Default)]
struct Runs {
    slots: Vec<Option<(u32, Arc<RunState>)>>,
    free: Vec<u32>,
    /// The generation the next run gets (1, 2, …; wraps below 2^28).
    generation: u32,
}

/// Bits of a run number that are its slot (16 M live runs a thread).
const SLOT_BITS: u32 = 24;
/// Generations wrap below this (a number stays below 2^52).
const GENERATIONS: u32 = 1 << 28;

thread_local! {
    static RUNS: RefCell<Runs> = RefCell::default();
}

/// A run number as JavaScript holds it.
fn run_number(generation: u32, slot: u32) -> f64 {
    ((u64::from(generation) << SLOT_BITS) | u64::from(slot)) as f64
}

impl NativeRun {
    pub(crate) fn new(run: Run, strings: Arc<Strings>) -> Result<Self> {
        let state = Arc::new(RunState {
            run,
            calls: AtomicU64::new(0),
            llm_calls: AtomicU64::new(0),
            recent: Recent::default(),
            strings,
            pending: std::sync::Mutex::new(None),
        });
        let (slot, generation) = RUNS.with_borrow_mut(|runs| {
            runs.generation = runs.generation % (GENERATIONS - 1) + 1;
            let generation = runs.generation;
            let slot = match runs.free.pop() {
                Some(slot) => slot,
                None => {
                    if runs.slots.len() >= 1 << SLOT_BITS {
                        return Err(invalid("too many live runs on this thread (16,777,216)"));
                    }
                    runs.slots.push(None);
                    (runs.slots.len() - 1) as u32
                }
            };
            runs.slots[slot as usize] = Some((generation, state.clone()));
            Ok((slot, generation))
        })?;
        Ok(NativeRun {
            state,
            slot,
            no: run_number(generation, slot),
        })
    }
}

impl Drop for NativeRun {
    fn drop(&mut self) {
        // Finalized on the thread that created it; during a thread's exit its table may be
        // gone already (then there is nothing left to free).
        let _ = RUNS.try_with(|runs| {
            let mut runs = runs.borrow_mut();
            if let Some(slot) = runs.slots.get_mut(self.slot as usize) {
                *slot = None;
                runs.free.push(self.slot);
            }
        });
    }
}

impl RunState {
    /// A `ToolgateError` when the run decides nothing more (ended, or its engine shut down).
    fn open(&self) -> Result<()> {
        match self.run.closed() {
            Some(why) => Err(toolgate_error("ToolgateError", why.to_string(), None, None)),
            None => Ok(()),
        }
    }

    /// Decides a tool call (phase `tool.before`): a decision made at once in the fast form
    /// (a string of 16-bit units, see `fast::unit`) when it fits there, else as JSON text; the
    /// rest of the decision, when something had to be awaited.
    fn before_tool(
        &self,
        name: String,
        args_json: Option<&str>,
        tags: Vec<String>,
        call_id: Option<String>,
    ) -> Result<Crossed> {
        self.open()?;
        let args = json_arg("args", args_json)?;
        let (id, call_no) = match call_id {
            Some(id) => (id, 0),
            None => {
                let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
                (numbered("call-", n), n)
            }
        };
        // A numbered call's id is made again on the rare paths that need it.
        let given = (call_no == 0).then(|| id.clone());
        let id_of = move || given.unwrap_or_else(|| numbered("call-", call_no));
        let call = ToolCall::new(id, name, args).with_tags(tags);
        // Decided here when nothing has to be awaited (no future to allocate or poll), inside
        // the runtime's context (as before: whatever the engine spawns finds it); the rest
        // runs on the runtime.
        Ok(match in_runtime(|| self.run.before_tool_now(call)) {
            Ok(d) => match self.strings.number(&d) {
                Some(numbered) => {
                    let (flags, latency) = (fast::flags(&d), d.latency_ns);
                    let seq = self.recent.keep(d);
                    Crossed::Fast(numbered.encode(flags, seq, latency, call_no))
                }
                None => Crossed::Text(NativeDecision::new(id_of(), d, &self.recent).to_json_text()),
            },
            Err(pending) => Crossed::Later(Box::pin(async move {
                NativeDecision::awaited(id_of(), pending.await).map(|d| d.to_json_text())
            })),
        })
    }

    /// Records the outcome of an allowed call and decides the after-phase rules: the
    /// after-phase decision (ALLOWED when none is in play, or when `callId` was not allowed in
    /// this run: its result is not recorded); a promise of it when something had to be
    /// awaited.
    fn after_tool<'env>(
        &self,
        env: &'env Env,
        call_id: String,
        output_json: Option<String>,
        duration_ms: Option<f64>,
        error: Option<String>,
    ) -> Result<AfterDecided<'env>> {
        self.open()?;
        let duration = match duration_ms {
            None => Duration::ZERO,
            Some(ms) if ms.is_finite() && ms >= 0.0 => Duration::from_secs_f64(ms / 1000.0),
            Some(ms) => {
                return Err(invalid(format!(
                    "durationMs {ms}: expected a non-negative number"
                )));
            }
        };
        let output = match output_json {
            None => Value::Null,
            Some(t) => json_value("output", &t)?,
        };
        let outcome = match error {
            Some(e) => ToolOutcome::err(e, duration),
            None => ToolOutcome::ok(output, duration),
        };
        let run = self.run.clone();
        let id = call_id.clone();
        let decided = async move {
            run.after_tool(&id, outcome)
                .await
                .unwrap_or_else(no_after_rule)
        };
        match now_or_later(decided) {
            NowOrLater::Now(d) => Ok(Either::A(Some(
                NativeDecision::new(call_id, d, &self.recent).to_json_text(),
            ))),
            NowOrLater::Later(fut) => env
                .spawn_future(async move {
                    NativeDecision::awaited(call_id, fut.await).map(|d| Some(d.to_json_text()))
                })
                .map(Either::B),
        }
    }
}

/// The JSON text of a decision still to be made.
type LaterText = Pin<Box<dyn Future<Output = Result<String>> + Send>>;

/// The function [`before_tool_function`] makes: `(no, packed, callId?)` to the fast form or
/// JSON text.
type PackedFunction<'env> =
    Function<'env, FnArgs<(f64, Utf16String, Option<String>)>, Either<Utf16String, String>>;

/// How a before decision crosses: in the fast form, as JSON text, or later (a promise).
enum Crossed {
    /// A decision made at once, in the fast form (`fast::unit`).
    Fast(Vec<u16>),
    /// A decision made at once, as JSON text.
    Text(String),
    /// The rest of a decision that has something to await: its JSON text.
    Later(LaterText),
}

impl Crossed {
    /// The value a `#[napi]` function returns: a promise for a decision not made yet.
    fn into_js<'env>(self, env: &'env Env) -> Result<Decided<'env>> {
        match self {
            Crossed::Fast(units) => Ok(Either3::A(Utf16String::from(units))),
            Crossed::Text(text) => Ok(Either3::B(text)),
            Crossed::Later(fut) => env.spawn_future(fut).map(Either3::C),
        }
    }
}

/// Decides a tool call of run `no` (`NativeRun.no`; phase `tool.before`; a function, not a
/// method, for the reason [`RUNS`] gives). A decision made at once is returned in the fast
/// form (a string of 16-bit units, see `fast::unit`) when it fits there, else as JSON text;
/// a promise of its JSON text when something had to be awaited.
#[napi]
pub fn run_before_tool<'env>(
    env: &'env Env,
    no: f64,
    name: String,
    args_json: Option<String>,
    tags: Option<Vec<String>>,
    call_id: Option<String>,
) -> Result<Decided<'env>> {
    state_of(no)?
        .before_tool(
            name,
            args_json.as_deref(),
            tags.unwrap_or_default(),
            call_id,
        )?
        .into_js(env)
}

/// The function `lib/run.js` decides packed calls with: `(no, packed, callId?)`, as
/// [`run_before_tool`] with the args, the name and the tags in one string (see [`unpack`];
/// JSON text never holds a NUL, and `lib/run.js` packs only a name and tags without one). It
/// returns the decision in the fast form or as JSON text; for one that has to await
/// something, the empty string: then `runPending(no)` gives its promise.
///
/// Made from a closure, not a `#[napi]` function: napi-rs wraps those in a borrow-tracking
/// scope (a thread-local stack, a mutex and allocations per call: ~800 instructions, a third
/// of the crossing's own cost), which a closure's trampoline does not; and the string comes
/// as UTF-16 (its length is known without a scan, its copy is a widening `memcpy`), converted
/// here with an ASCII fast path, instead of V8's UTF-8 writer, which measured and wrote it
/// character by character.
#[napi]
pub fn before_tool_function(env: &Env) -> Result<PackedFunction<'_>> {
    env.create_function_from_closure("runBeforeToolPacked", |ctx| {
        let no: f64 = ctx.get(0)?;
        let packed: Utf16String = ctx.get(1)?;
        // Most calls are numbered by the addon: `lib/run.js` then passes two arguments.
        let call_id: Option<String> = if ctx.length() > 2 { ctx.get(2)? } else { None };
        let state = state_of(no)?;
        if state
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
        {
            // `lib/run.js` takes a pending decision at once; a second call before that would
            // leave the first one's decision (and its audit event) to be dropped.
            return Err(invalid(format!(
                "run {no}: a decision is pending; call runPending first"
            )));
        }
        let packed = utf8_of(&packed);
        let (args, name, tags) = unpack(&packed)?;
        Ok(match state.before_tool(name, args, tags, call_id)? {
            Crossed::Fast(units) => Either::A(Utf16String::from(units)),
            Crossed::Text(text) => Either::B(text),
            Crossed::Later(fut) => {
                *state.pending.lock().unwrap_or_else(|e| e.into_inner()) = Some(fut);
                Either::B(String::new())
            }
        })
    })
}

/// The promise of run `no`'s decision that `beforeToolFunction`'s function left pending.
#[napi]
pub fn run_pending(env: &Env, no: f64) -> Result<PromiseRaw<'_, String>> {
    let state = state_of(no)?;
    let fut = state
        .pending
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let fut = fut.ok_or_else(|| invalid(format!("run {no}: no decision pending")))?;
    env.spawn_future(fut)
}

/// UTF-16 text as UTF-8: ASCII byte for byte (the common case: loops the compiler
/// vectorises); otherwise decoded, a lone surrogate as U+FFFD (as Node-API's UTF-8 does).
fn utf8_of(units: &[u16]) -> String {
    if units.iter().fold(0, |any, &u| any | u) < 0x80 {
        let bytes: Vec<u8> = units.iter().map(|&u| u as u8).collect();
        // All ASCII: valid UTF-8.
        String::from_utf8(bytes).unwrap_or_default()
    } else {
        String::from_utf16_lossy(units)
    }
}

/// A packed call, as UTF-8 (`utf8_of`): `count name (NUL tag){count} NUL args`, `count` the
/// number of tags as one character, `args` JSON text (empty: none). The name and the tags
/// come first, so only they are scanned for their ends; the args are the rest.
fn unpack(packed: &str) -> Result<(Option<&str>, String, Vec<String>)> {
    let bad = || invalid("packed call: expected `count name (NUL tag){count} NUL args`");
    let mut chars = packed.chars();
    let count = chars.next().ok_or_else(bad)? as usize;
    let mut rest = chars.as_str();
    let name = next_part(&mut rest);
    let mut tags = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        rest = rest.strip_prefix('\0').ok_or_else(bad)?;
        tags.push(next_part(&mut rest));
    }
    let args = rest.strip_prefix('\0').ok_or_else(bad)?;
    Ok(((!args.is_empty()).then_some(args), name, tags))
}

/// The text of `rest` up to its first NUL (or its end), `rest` moved to that NUL.
fn next_part(rest: &mut &str) -> String {
    let n = rest.bytes().position(|b| b == 0).unwrap_or(rest.len());
    let part = rest[..n].to_string();
    *rest = &rest[n..];
    part
}

/// `prefix` and `n` in decimal (`call-7`): what `format!` gives, without its machinery.
fn numbered(prefix: &str, n: u64) -> String {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(n);
    let mut s = String::with_capacity(prefix.len() + digits.len());
    s.push_str(prefix);
    s.push_str(digits);
    s
}

/// Records the outcome of an allowed call of run `no` (`NativeRun.no`) and decides the
/// after-phase rules: the after-phase decision as JSON text (ALLOWED when none is in play, or
/// when `callId` was not allowed in this run); a promise of it when something had to be
/// awaited. (A function, not a method, for the reason [`RUNS`] gives.)
#[napi]
pub fn run_after_tool<'env>(
    env: &'env Env,
    no: f64,
    call_id: String,
    output_json: Option<String>,
    duration_ms: Option<f64>,
    error: Option<String>,
) -> Result<AfterDecided<'env>> {
    state_of(no)?.after_tool(env, call_id, output_json, duration_ms, error)
}

/// The after-phase decision when no after-phase rule decided the call (design §12/§13: an
/// after decision is always a `Decision`): allowed, nothing evaluated.
fn no_after_rule() -> Decision {
    Decision::simple(Phase::After, EffectType::Allow, DecisionCode::Allowed, None)
}

/// Run `no` of this thread.
fn state_of(no: f64) -> Result<Arc<RunState>> {
    let missing = || invalid(format!("run {no}: no such run on this thread"));
    // Only the exact number a live run was given: no truncation, no wrapping.
    if !(no.is_finite() && no >= 0.0 && no.fract() == 0.0 && no < (1u64 << 52) as f64) {
        return Err(missing());
    }
    let n = no as u64;
    let (slot, generation) = (n & ((1 << SLOT_BITS) - 1), n >> SLOT_BITS);
    RUNS.with_borrow(|runs| match runs.slots.get(slot as usize) {
        Some(Some((g, state))) if u64::from(*g) == generation => Some(state.clone()),
        _ => None,
    })
    .ok_or_else(missing)
}

/// `{id, tags?}` (JSON text) as the run's end user; tag values that are not strings are kept
/// as their JSON text.
pub(crate) fn enduser(text: &str) -> Result<Enduser> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| invalid(format!("enduser: not JSON: {e}")))?;
    let Some(o) = v.as_object() else {
        return Err(invalid("enduser: expected {id: string, tags?: {...}}"));
    };
    let id = match o.get("id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return Err(invalid("enduser: \"id\" (a string) is required")),
    };
    let mut tags = BTreeMap::new();
    match o.get("tags") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (k, v) in map {
                let text = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                tags.insert(k.clone(), text);
            }
        }
        Some(_) => return Err(invalid("enduser.tags: expected an object")),
    }
    Ok(Enduser { id, tags })
}

fn json_arg(what: &str, text: Option<&str>) -> Result<Value> {
    match text {
        None => Ok(Value::Object(Default::default())),
        Some(t) => json_value(what, t),
    }
}

/// A JSON text as a value the engine takes: refused (with the limit named) when it nests
/// deeper than toolgate's one limit for values.
fn json_value(what: &str, text: &str) -> Result<Value> {
    use toolgate::json::{MAX_VALUE_DEPTH, deeper_than};
    let too_deep = || {
        invalid(format!(
            "{what}: nested deeper than {MAX_VALUE_DEPTH} levels"
        ))
    };
    let v: Value = serde_json::from_str(text).map_err(|e| {
        if e.to_string().contains("recursion limit") {
            too_deep()
        } else {
            invalid(format!("{what}: not JSON: {e}"))
        }
    })?;
    if deeper_than(&v, MAX_VALUE_DEPTH) {
        return Err(too_deep());
    }
    Ok(v)
}

/// A decision now (in the fast form, `fast::unit`; or as JSON text), or a promise of it (JSON
/// text).
type Decided<'env> = Either3<Utf16String, String, PromiseRaw<'env, String>>;
/// A decision now as JSON text, or a promise of it.
type TextDecided<'env> = Either<String, PromiseRaw<'env, String>>;
/// An after-phase decision (or `null`) now, or a promise of it.
type AfterDecided<'env> = Either<Option<String>, PromiseRaw<'env, Option<String>>>;

#[napi]
impl NativeRun {
    /// Its number for `runBeforeTool`.
    #[napi(getter)]
    pub fn no(&self) -> f64 {
        self.no
    }

    /// The run's id.
    #[napi(getter)]
    pub fn run_id(&self) -> String {
        self.state.run.context().run_id.clone()
    }

    /// The agent's id.
    #[napi(getter)]
    pub fn agent_id(&self) -> String {
        self.state.run.context().agent_id.clone()
    }

    /// Whether a hitl decision (or a failure) stopped the run.
    #[napi(getter)]
    pub fn aborted(&self) -> bool {
        self.state.run.is_aborted()
    }

    /// Ends the run (`run.ended`) and flushes its audit events (bounded).
    #[napi]
    pub fn end<'env>(
        &self,
        env: &'env Env,
        status: String,
        output: Option<String>,
    ) -> Result<PromiseRaw<'env, ()>> {
        let run = self.state.run.clone();
        env.spawn_future(async move {
            run.end(&status, output.as_deref()).await;
            Ok(())
        })
    }

    /// Decides a model call (phase `llm.before`): the decision as JSON text at once, or a
    /// promise of it when a signal, a custom condition or the shared store had to be awaited.
    /// `messagesJson`: the messages as JSON text (absent: none); `callId` defaults to `llm-1`,
    /// `llm-2`, … in the run.
    #[napi]
    pub fn before_llm<'env>(
        &self,
        env: &'env Env,
        model: String,
        messages_json: Option<String>,
        call_id: Option<String>,
    ) -> Result<TextDecided<'env>> {
        let state = &self.state;
        state.open()?;
        // Without llm.before rules (nor recorded messages) the messages are not parsed.
        let messages = match messages_json.filter(|_| state.run.gates_llm()) {
            None => Value::Array(Vec::new()),
            Some(t) => json_value("messages", &t)?,
        };
        let id = call_id.unwrap_or_else(|| {
            numbered("llm-", state.llm_calls.fetch_add(1, Ordering::Relaxed) + 1)
        });
        let call = LlmCall::new(model)
            .with_messages(messages)
            .with_id(id.clone());
        let run = state.run.clone();
        match now_or_later(async move { run.before_llm(&call).await }) {
            NowOrLater::Now(d) => Ok(Either::A(
                NativeDecision::new(id, d, &state.recent).to_json_text(),
            )),
            NowOrLater::Later(fut) => env
                .spawn_future(async move {
                    NativeDecision::awaited(id, fut.await).map(|d| d.to_json_text())
                })
                .map(Either::B),
        }
    }

    /// Whether `beforeLlm` reads a call's messages now (some `llm.before` rule is loaded, or
    /// messages are recorded): when not, `index.js` does not serialise them.
    #[napi(getter)]
    pub fn gates_llm(&self) -> bool {
        self.state.run.gates_llm()
    }

    /// Records a model call's usage (the `llm_tokens_in`, `llm_tokens_out` and
    /// `llm_cost_usd` metrics, and an `llm.result` event). Without `costUsd` the cost comes
    /// from the engine's `prices` for `model` (none when the model has no price).
    #[napi]
    pub fn record_llm(
        &self,
        tokens_in: f64,
        tokens_out: f64,
        cost_usd: Option<f64>,
        model: Option<String>,
        duration_ms: Option<f64>,
        call_id: Option<String>,
    ) -> Result<()> {
        let count = |what: &str, n: f64| -> Result<u64> {
            if n.is_finite() && n >= 0.0 {
                // Past 2**64 - 1 it counts as 2**64 - 1 (a budget is never under-counted).
                Ok(n as u64)
            } else {
                Err(invalid(format!(
                    "{what} {n}: expected a non-negative number of tokens"
                )))
            }
        };
        let mut usage = LlmUsage::new(
            count("tokensIn", tokens_in)?,
            count("tokensOut", tokens_out)?,
        );
        usage.cost_usd = cost_usd;
        usage.model = model;
        usage.duration_ms = duration_ms;
        usage.call_id = call_id;
        self.state.run.record_llm_usage(usage);
        Ok(())
    }

    /// Decision `seq` of this run (`NativeDecision.seq`) as the Rust `Decision` serialises it
    /// (camelCase keys), as JSON text; `null` once the run no longer keeps it (it keeps its
    /// last 256).
    #[napi]
    pub fn decision_json(&self, seq: f64) -> Result<Option<String>> {
        if !(seq.is_finite() && seq >= 1.0) {
            return Err(invalid("seq: expected a decision's number"));
        }
        self.state.recent.json(seq as u64)
    }

    /// Lifts the pause a hitl decision put on the run (once its review is resolved): later
    /// calls are decided by the rules again.
    #[napi]
    pub fn resume(&self) {
        self.state.run.resume();
    }

    /// Records a custom metric.
    #[napi]
    pub fn record_metric(&self, key: String, value: f64) {
        self.state.run.record_metric(&key, value);
    }
}
