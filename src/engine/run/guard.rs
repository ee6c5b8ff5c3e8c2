//! The guard: wraps tool dispatch in one call — decide, run the tool only if allowed, record
//! the outcome and its duration, and hand back either the output or a refusal that tells the
//! agent what to do.

use std::future::Future;
use std::time::Instant;

use serde::Serialize;
use serde_json::{Value, json};

use super::handle::{Run, ToolCall, ToolOutcome};
use crate::engine::decide::decision::{Decision, DecisionCode};
use crate::policy::EffectType;

/// Why a guarded call did not give the agent an output.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    /// The decision that refused the call.
    pub decision: Decision,
    /// A message for the agent.
    pub message: String,
    /// `true`: stop the run (hitl pending or run aborted); `false`: go on without this tool.
    pub stop_run: bool,
}

impl Refusal {
    /// The refusal as a JSON value to hand the model in place of the tool's output.
    pub fn to_tool_result(&self) -> Value {
        json!({
            "error": "tool call refused by policy",
            "code": self.decision.code,
            "reason": self.decision.reason,
            "instruction": self.message,
        })
    }
}

/// The result of a guarded call.
#[derive(Debug, Clone, PartialEq)]
pub enum Guarded {
    /// The tool ran; its output (or its error) and the after-phase decision, if any.
    Ran {
        /// What the tool returned.
        outcome: ToolOutcome,
        /// The before-phase decision.
        decision: Decision,
    },
    /// The call was refused before or after it ran.
    Refused(Refusal),
}

fn refusal(decision: Decision) -> Refusal {
    let stop_run = decision.abort_run || decision.code == DecisionCode::BlockedRunAborted;
    let why = decision
        .reason
        .as_deref()
        .map(|r| r.trim_end_matches('.'))
        .unwrap_or("a policy rule");
    let message = if stop_run {
        format!(
            "This call needs human review ({why}). Stop the run now and tell the user it is waiting for approval."
        )
    } else {
        format!("This call was blocked ({why}). Continue without it.")
    };
    Refusal {
        decision,
        message,
        stop_run,
    }
}

impl Run {
    /// Decides the call, runs `tool` only if allowed, records its outcome and duration, and
    /// applies after-phase rules.
    ///
    /// ```
    /// # use toolgate::engine::*;
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let engine = GovernanceEngine::builder().build().unwrap();
    /// let run = engine.start_run(RunContext::new("r1", "agent"));
    /// let g = run
    ///     .guard(ToolCall::new("c1", "echo", serde_json::json!({"text": "hi"})), |args| async move {
    ///         Ok(args["text"].clone())
    ///     })
    ///     .await;
    /// assert!(matches!(g, Guarded::Ran { .. }));
    /// # });
    /// ```
    pub async fn guard<F, Fut>(&self, call: ToolCall, tool: F) -> Guarded
    where
        F: FnOnce(Value) -> Fut,
        Fut: Future<Output = Result<Value, String>>,
    {
        let id = call.id.clone();
        let args = call.args.clone();
        let decision = self.before_tool(call).await;
        if decision.effect != EffectType::Allow {
            return Guarded::Refused(refusal(decision));
        }
        let started = Instant::now();
        let result = tool(args).await;
        let duration = started.elapsed();
        let outcome = match result {
            Ok(v) => ToolOutcome::ok(v, duration),
            Err(e) => ToolOutcome::err(e, duration),
        };
        if let Some(after) = self.after_tool(&id, outcome.clone()).await
            && after.effect != EffectType::Allow
        {
            return Guarded::Refused(refusal(after));
        }
        Guarded::Ran { outcome, decision }
    }
}
