//! JavaScript functions as the engine's signal providers, subject extractors and `custom`
//! conditions.
//!
//! `index.js` hands over every callback wrapped as `async (argsJson) => resultJson`: the
//! wrapper calls the user's function (plain or async) with the parsed arguments, awaits what
//! it returns, and answers `{"ok": value}` or `{"error": "TypeError: …"}` — it never throws
//! and its promise never rejects, so nothing here can become an unhandled rejection.
//!
//! A JavaScript function can only run on the JavaScript thread: the engine calls it through a
//! weak thread-safe function (queued onto Node's event loop; weak: a registered callback does
//! not keep the process alive) and awaits its promise on the tokio runtime. While the callback
//! runs, the event loop is free; the engine's signal timeout bounds the wait, and a late answer
//! is dropped. Whatever the callback does — throw, reject, time out, answer something that is
//! not JSON — the engine sees an `Err`: missing data, with the error in the decision.
//!
//! Bounded (issue 33): an engine's callback calls in flight share one pool of
//! [`POOL_SLOTS`] slots; a call holds its slot only while the engine waits for it, so a
//! callback past its timeout (the engine stops waiting and drops the call) gives its slot
//! back at once, and a hung callback never starves the healthy ones. A call that finds the
//! pool full, or the queue to the JavaScript thread full ([`QUEUE_SLOTS`], e.g. while the
//! event loop is blocked), is missing data at once. A callback that keeps hanging is not
//! called without end: `index.js` stops calling it while `LATE_CAP` (256) of its calls are
//! unanswered past the timeout.

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi::threadsafe_function::ThreadsafeFunction;
use serde_json::{Map, Value, json};
use tokio::sync::Semaphore;
use toolgate::engine::{CustomContext, SubjectInput, SubjectRef};

/// Callback calls an engine waits for at once (all its callbacks together).
pub const POOL_SLOTS: usize = 4096;
/// Calls queued to the JavaScript thread per callback, not yet started.
pub const QUEUE_SLOTS: usize = 4096;

/// The pool of an engine's callback calls in flight (see the module's docs).
pub fn pool() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(POOL_SLOTS))
}

type Tsfn = ThreadsafeFunction<String, Promise<String>, String, Status, false, true, QUEUE_SLOTS>;

/// A JavaScript callback callable from any thread.
pub struct Callback {
    tsfn: Tsfn,
    pool: Arc<Semaphore>,
}

impl Callback {
    /// Wraps the (already `index.js`-wrapped) function `func`; its calls take a slot of `pool`.
    pub fn new(
        func: Function<'_, String, Promise<String>>,
        pool: Arc<Semaphore>,
    ) -> Result<Arc<Self>> {
        let tsfn = func
            .build_threadsafe_function::<String>()
            .callee_handled::<false>()
            .weak::<true>()
            .max_queue_size::<QUEUE_SLOTS>()
            .build()?;
        Ok(Arc::new(Callback { tsfn, pool }))
    }

    /// Calls it with `args` (a JSON array of the arguments) and returns what it answered.
    /// The call's slot is held until it answers or the engine stops waiting (drops it).
    pub async fn call(self: Arc<Self>, args: Value) -> std::result::Result<Value, String> {
        let _slot = self.pool.clone().try_acquire_owned().map_err(|_| {
            format!("the callback was not called: {POOL_SLOTS} callback calls are in flight")
        })?;
        let answer = self
            .tsfn
            .call_async(args.to_string())
            .await
            .map_err(|e| format!("the callback could not be called: {}", e.reason))?
            .await
            .map_err(|e| format!("the callback failed: {}", e.reason))?;
        let mut v: Value = serde_json::from_str(&answer)
            .map_err(|e| format!("the callback's answer is not JSON: {e}"))?;
        if let Some(e) = v.get("error").and_then(Value::as_str) {
            return Err(e.to_string());
        }
        match v.get_mut("ok") {
            Some(ok) => Ok(ok.take()),
            None => Err("the callback returned undefined (not a JSON value)".into()),
        }
    }
}

/// The future a provider or extractor returns.
type BoxFut<T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = std::result::Result<T, String>> + Send>>;

/// A signal provider calling `fn(args)`.
pub fn signal_provider(
    cb: Arc<Callback>,
) -> impl Fn(Map<String, Value>) -> BoxFut<Value> + Send + Sync + 'static {
    move |args: Map<String, Value>| {
        let cb = cb.clone();
        Box::pin(async move { cb.call(json!([args])).await })
    }
}

/// A subject extractor calling `fn(toolName, args)`, which returns a list of
/// `{subjectType, id, idSystem?, role?}`.
pub fn subject_extractor(
    cb: Arc<Callback>,
) -> impl Fn(SubjectInput) -> BoxFut<Vec<SubjectRef>> + Send + Sync + 'static {
    move |input: SubjectInput| {
        let cb = cb.clone();
        Box::pin(async move {
            SubjectRef::list_from_json(&cb.call(json!([input.tool_name, input.args])).await?)
        })
    }
}

/// A `custom` condition calling `fn(args, call)`, which returns a boolean. `args` is the
/// condition's `args` (`null` when absent); `call` is `{toolName, toolTags, args, runId,
/// agentId, agentTags, sessionId, enduser}` (`enduser`: `{id, tags}` or `null`).
pub fn custom_condition(
    cb: Arc<Callback>,
) -> impl Fn(Value, CustomContext) -> BoxFut<bool> + Send + Sync + 'static {
    move |args: Value, ctx: CustomContext| {
        let cb = cb.clone();
        Box::pin(async move {
            let call = ctx.into_json();
            match cb.call(json!([args, call])).await? {
                Value::Bool(b) => Ok(b),
                other => Err(format!(
                    "a custom condition returns a boolean, not {}",
                    kind(&other)
                )),
            }
        })
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
