//! `NativeRun`: one agent run; its before/after decisions (returned at once when nothing is
//! awaited, else as a promise settled from the runtime) and its end.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use serde_json::Value;
use toolgate::engine::{Enduser, Run, ToolCall, ToolOutcome};

use crate::fast::{self, Filled, Strings, slot};
use crate::{NativeDecision, NowOrLater, Recent, invalid, now_or_later};

/// A run of an agent.
#[napi]
pub struct NativeRun {
    run: Arc<Run>,
    calls: AtomicU64,
    recent: Arc<Recent>,
    strings: Arc<Strings>,
}

impl NativeRun {
    pub(crate) fn new(run: Run, strings: Arc<Strings>) -> Self {
        NativeRun {
            run: Arc::new(run),
            calls: AtomicU64::new(0),
            recent: Arc::default(),
            strings,
        }
    }
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

fn json_arg(what: &str, text: Option<String>) -> Result<Value> {
    match text {
        None => Ok(Value::Object(Default::default())),
        Some(t) => serde_json::from_str(&t).map_err(|e| invalid(format!("{what}: not JSON: {e}"))),
    }
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
    /// The run's id.
    #[napi(getter)]
    pub fn run_id(&self) -> String {
        self.run.context().run_id.clone()
    }

    /// The agent's id.
    #[napi(getter)]
    pub fn agent_id(&self) -> String {
        self.run.context().agent_id.clone()
    }

    /// Whether a hitl decision (or a failure) stopped the run.
    #[napi(getter)]
    pub fn aborted(&self) -> bool {
        self.run.is_aborted()
    }

    /// Decides a tool call (phase `tool.before`). A decision made at once is written to `out`
    /// (a `Float64Array`, see `fast::slot`) when it fits there, the return value then being
    /// the strings new to JavaScript (a JSON array) or `null`; otherwise it is the decision as
    /// JSON text (`out[0]` is 0), or a promise of that when something had to be awaited.
    #[napi]
    pub fn before_tool<'env>(
        &self,
        env: &'env Env,
        name: String,
        args_json: Option<String>,
        tags: Option<Vec<String>>,
        call_id: Option<String>,
        out: OutBuffer<'_>,
    ) -> Result<Decided<'env>> {
        let out = fast::buffer(out)?;
        let args = json_arg("args", args_json)?;
        let (id, call_no) = match call_id {
            Some(id) => (id, 0),
            None => {
                let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
                (format!("call-{n}"), n)
            }
        };
        let call = ToolCall::new(id.clone(), name, args).with_tags(tags.unwrap_or_default());
        let run = self.run.clone();
        match now_or_later(async move { run.before_tool(call).await }) {
            NowOrLater::Now(d) => match self.strings.fill(&d, call_no, out) {
                Filled::Buffer(new) => {
                    out[slot::SEQ] = self.recent.keep(d) as f64;
                    Ok(Either::A(new))
                }
                Filled::Text => Ok(Either::A(Some(
                    NativeDecision::new(id, d, &self.recent).to_json_text(),
                ))),
            },
            NowOrLater::Later(fut) => env
                .spawn_future(async move {
                    NativeDecision::awaited(id, fut.await).map(|d| d.to_json_text())
                })
                .map(Either::B),
        }
    }

    /// Records the outcome of an allowed call and decides the after-phase rules: the
    /// after-phase decision, or `null` when none is in play (or `callId` was not allowed in
    /// this run); a promise of it when something had to be awaited.
    #[napi]
    pub fn after_tool<'env>(
        &self,
        env: &'env Env,
        call_id: String,
        output_json: Option<String>,
        duration_ms: Option<f64>,
        error: Option<String>,
    ) -> Result<AfterDecided<'env>> {
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
            Some(t) => {
                serde_json::from_str(&t).map_err(|e| invalid(format!("output: not JSON: {e}")))?
            }
        };
        let outcome = match error {
            Some(e) => ToolOutcome::err(e, duration),
            None => ToolOutcome::ok(output, duration),
        };
        let run = self.run.clone();
        let id = call_id.clone();
        match now_or_later(async move { run.after_tool(&id, outcome).await }) {
            NowOrLater::Now(d) => {
                Ok(Either::A(d.map(|d| {
                    NativeDecision::new(call_id, d, &self.recent).to_json_text()
                })))
            }
            NowOrLater::Later(fut) => env
                .spawn_future(async move {
                    fut.await
                        .map(|d| NativeDecision::awaited(call_id, d).map(|d| d.to_json_text()))
                        .transpose()
                })
                .map(Either::B),
        }
    }

    /// Ends the run (`run.ended`) and flushes its audit events (bounded).
    #[napi]
    pub fn end<'env>(
        &self,
        env: &'env Env,
        status: String,
        output: Option<String>,
    ) -> Result<PromiseRaw<'env, ()>> {
        let run = self.run.clone();
        env.spawn_future(async move {
            run.end(&status, output.as_deref()).await;
            Ok(())
        })
    }

    /// Records LLM usage (for `metricWindow` rules on llm_tokens_* / llm_cost_usd).
    #[napi]
    pub fn record_llm(&self, tokens_in: f64, tokens_out: f64, cost_usd: f64) -> Result<()> {
        let count = |what: &str, n: f64| -> Result<u64> {
            if n.is_finite() && n >= 0.0 {
                Ok(n as u64)
            } else {
                Err(invalid(format!("{what}: expected a non-negative number")))
            }
        };
        self.run.record_llm(
            count("tokensIn", tokens_in)?,
            count("tokensOut", tokens_out)?,
            cost_usd,
        );
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
        self.recent.json(seq as u64)
    }

    /// Lifts the pause a hitl decision put on the run (once its review is resolved): later
    /// calls are decided by the rules again.
    #[napi]
    pub fn resume(&self) {
        self.run.resume();
    }

    /// Records a custom metric.
    #[napi]
    pub fn record_metric(&self, key: String, value: f64) {
        self.run.record_metric(&key, value);
    }
}
