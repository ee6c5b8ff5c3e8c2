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

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi::threadsafe_function::ThreadsafeFunction;
use serde_json::{Map, Value, json};
use toolgate::engine::{CustomContext, SubjectInput, SubjectRef};

/// A JavaScript callback callable from any thread.
pub struct Callback {
    tsfn: ThreadsafeFunction<String, Promise<String>, String, Status, false, true>,
}

impl Callback {
    /// Wraps the (already `index.js`-wrapped) function `func`.
    pub fn new(func: Function<'_, String, Promise<String>>) -> Result<Arc<Self>> {
        let tsfn = func
            .build_threadsafe_function::<String>()
            .callee_handled::<false>()
            .weak::<true>()
            .build()?;
        Ok(Arc::new(Callback { tsfn }))
    }

    /// Calls it with `args` (a JSON array of the arguments) and returns what it answered.
    pub async fn call(self: Arc<Self>, args: Value) -> std::result::Result<Value, String> {
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
