//! `NativeRun`: one agent run; its before/after decisions (returned at once when nothing is
//! awaited, else as a promise settled from the runtime) and its end.

use std::cell::RefCell;
use std::collections::BTreeMap;
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

use crate::fast::{self, Filled, Strings, slot};
use crate::{NativeDecision, NowOrLater, Recent, invalid, now_or_later, toolgate_error};

/// A run of an agent.
#[napi]
pub struct NativeRun {
    state: Arc<RunState>,
    /// Its number in this thread's [`RUNS`] (`runBeforeTool`'s first argument).
    no: u32,
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
}

/// The live runs of this thread (the JavaScript thread of one Node environment), by number:
/// [`run_before_tool`] finds its run here instead of unwrapping a class instance, which with
/// napi-rs 3 costs a global lock and two hash-map updates per call (its borrow tracking: the
/// larger part of an empty method call's 0.4–0.5 µs on the development VM).
#[derive(Default)]
struct Runs {
    slots: Vec<Option<Arc<RunState>>>,
    free: Vec<u32>,
}

thread_local! {
    static RUNS: RefCell<Runs> = RefCell::default();
}

impl NativeRun {
    pub(crate) fn new(run: Run, strings: Arc<Strings>) -> Self {
        let state = Arc::new(RunState {
            run,
            calls: AtomicU64::new(0),
            llm_calls: AtomicU64::new(0),
            recent: Recent::default(),
            strings,
        });
        let no = RUNS.with_borrow_mut(|runs| match runs.free.pop() {
            Some(no) => {
                runs.slots[no as usize] = Some(state.clone());
                no
            }
            None => {
                runs.slots.push(Some(state.clone()));
                (runs.slots.len() - 1) as u32
            }
        });
        NativeRun { state, no }
    }
}

impl Drop for NativeRun {
    fn drop(&mut self) {
        // Finalized on the thread that created it; during a thread's exit its table may be
        // gone already (then there is nothing left to free).
        let _ = RUNS.try_with(|runs| {
            let mut runs = runs.borrow_mut();
            if let Some(slot) = runs.slots.get_mut(self.no as usize) {
                *slot = None;
                runs.free.push(self.no);
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

    /// Decides a tool call (phase `tool.before`). A decision made at once is written to `out`
    /// (a `Float64Array`, see `fast::slot`) when it fits there, the return value then being
    /// the strings new to JavaScript (a JSON array) or `null`; otherwise it is the decision as
    /// JSON text (`out[0]` is 0), or a promise of that when something had to be awaited.
    fn before_tool<'env>(
        &self,
        env: &'env Env,
        name: String,
        args_json: Option<&str>,
        tags: Vec<String>,
        call_id: Option<String>,
        out: OutBuffer<'_>,
    ) -> Result<Decided<'env>> {
        self.open()?;
        let out = fast::buffer(out)?;
        let args = json_arg("args", args_json)?;
        let (id, call_no) = match call_id {
            Some(id) => (id, 0),
            None => {
                let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
                (format!("call-{n}"), n)
            }
        };
        // A numbered call's id is made again on the rare paths that need it.
        let given = (call_no == 0).then(|| id.clone());
        let id_of = move || given.unwrap_or_else(|| format!("call-{call_no}"));
        let call = ToolCall::new(id, name, args).with_tags(tags);
        let run = self.run.clone();
        match now_or_later(async move { run.before_tool(call).await }) {
            NowOrLater::Now(d) => match self.strings.fill(&d, call_no, out) {
                Filled::Buffer(new) => {
                    out[slot::SEQ] = self.recent.keep(d) as f64;
                    Ok(Either::A(new))
                }
                Filled::Text => Ok(Either::A(Some(
                    NativeDecision::new(id_of(), d, &self.recent).to_json_text(),
                ))),
            },
            NowOrLater::Later(fut) => env
                .spawn_future(async move {
                    NativeDecision::awaited(id_of(), fut.await).map(|d| d.to_json_text())
                })
                .map(Either::B),
        }
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

/// Decides a tool call of run `no` (`NativeRun.no`; phase `tool.before`; a function, not a
/// method, for the reason [`RUNS`] gives). A decision made at once is written to `out` (a
/// `Float64Array`, see `fast::slot`) when it fits there, the return value then being the
/// strings new to JavaScript (a JSON array) or `null`; otherwise it is the decision as JSON
/// text (`out[0]` is 0), or a promise of that when something had to be awaited.
#[napi]
pub fn run_before_tool<'env>(
    env: &'env Env,
    no: u32,
    name: String,
    args_json: Option<String>,
    tags: Option<Vec<String>>,
    call_id: Option<String>,
    out: OutBuffer<'_>,
) -> Result<Decided<'env>> {
    state_of(no)?.before_tool(
        env,
        name,
        args_json.as_deref(),
        tags.unwrap_or_default(),
        call_id,
        out,
    )
}

/// [`run_before_tool`] with the args, the name and the tags in one string, `args NUL name
/// (NUL tag)*` (`args` empty: none; JSON text never holds a NUL, and `index.js` packs only a
/// name and tags without one): one string for Node-API to convert instead of two strings and
/// an array of strings, which was the larger part of the crossing (docs/performance.md).
#[napi]
pub fn run_before_tool_packed<'env>(
    env: &'env Env,
    no: u32,
    packed: String,
    call_id: Option<String>,
    out: OutBuffer<'_>,
) -> Result<Decided<'env>> {
    let state = state_of(no)?;
    let Some((args, rest)) = packed.split_once('\0') else {
        return Err(invalid("packed call: expected `args NUL name (NUL tag)*`"));
    };
    let mut parts = rest.split('\0');
    let name = parts.next().unwrap_or_default().to_string();
    let tags = parts.map(str::to_string).collect();
    let args = (!args.is_empty()).then_some(args);
    state.before_tool(env, name, args, tags, call_id, out)
}

/// Records the outcome of an allowed call of run `no` (`NativeRun.no`) and decides the
/// after-phase rules: the after-phase decision as JSON text (ALLOWED when none is in play, or
/// when `callId` was not allowed in this run); a promise of it when something had to be
/// awaited. (A function, not a method, for the reason [`RUNS`] gives.)
#[napi]
pub fn run_after_tool<'env>(
    env: &'env Env,
    no: u32,
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
fn state_of(no: u32) -> Result<Arc<RunState>> {
    RUNS.with_borrow(|runs| runs.slots.get(no as usize).cloned().flatten())
        .ok_or_else(|| invalid(format!("run {no}: no such run on this thread")))
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

/// The `Float64Array` a decision made at once is written to (a type alias: napi-derive reads
/// a `&mut` argument as a class instance).
type OutBuffer<'a> = &'a mut [f64];

/// A decision now (in the buffer, with the strings new to JavaScript if any; or as JSON
/// text), or a promise of it (JSON text).
type Decided<'env> = Either<Option<String>, PromiseRaw<'env, String>>;
/// An after-phase decision (or `null`) now, or a promise of it.
type AfterDecided<'env> = Either<Option<String>, PromiseRaw<'env, Option<String>>>;

#[napi]
impl NativeRun {
    /// Its number for `runBeforeTool`.
    #[napi(getter)]
    pub fn no(&self) -> u32 {
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
    ) -> Result<Decided<'env>> {
        let state = &self.state;
        state.open()?;
        // Without llm.before rules (nor recorded messages) the messages are not parsed.
        let messages = match messages_json.filter(|_| state.run.gates_llm()) {
            None => Value::Array(Vec::new()),
            Some(t) => json_value("messages", &t)?,
        };
        let id = call_id.unwrap_or_else(|| {
            format!(
                "llm-{}",
                state.llm_calls.fetch_add(1, Ordering::Relaxed) + 1
            )
        });
        let call = LlmCall::new(model)
            .with_messages(messages)
            .with_id(id.clone());
        let run = state.run.clone();
        match now_or_later(async move { run.before_llm(&call).await }) {
            NowOrLater::Now(d) => Ok(Either::A(Some(
                NativeDecision::new(id, d, &state.recent).to_json_text(),
            ))),
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
