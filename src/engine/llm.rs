//! The model's side of a run: a model call about to be made ([`LlmCall`], decided by
//! [`Run::before_llm`](crate::engine::Run::before_llm) against the `llm.before` rules), the
//! usage of one that was made ([`LlmUsage`], recorded by
//! [`Run::record_llm_usage`](crate::engine::Run::record_llm_usage)), and the price table that
//! turns tokens into dollars when the caller gives no cost ([`Prices`]).
//!
//! ```
//! use toolgate::engine::{GovernanceEngine, LlmCall, LlmUsage, Prices, RunContext};
//! use toolgate::policy::parse_policy;
//! let policy = parse_policy(r#"[{"id": "budget", "name": "Token budget", "priority": 1,
//!   "selector": {"phase": "llm.before"},
//!   "condition": {"kind": "metricWindow", "scope": "run", "metric": {"kind": "inbuilt",
//!     "key": "llm_tokens_in"}, "aggregate": "sum", "op": "gte", "value": 1000},
//!   "effect": {"type": "block", "reason": "token budget spent"}}]"#, None).unwrap();
//! let prices = Prices::from_json(&serde_json::json!({"gpt-4o": {"in": 2.5, "out": 10}})).unwrap();
//! let engine = GovernanceEngine::builder().policy(policy).prices(prices).build().unwrap();
//! let run = engine.start_run(RunContext::new("run-1", "support-bot"));
//! let call = LlmCall::new("gpt-4o").with_messages(serde_json::json!([
//!     {"role": "user", "content": "hello"}]));
//! assert!(run.before_llm_blocking(&call).is_allowed());
//! run.record_llm_usage(LlmUsage::new(1200, 30).with_model("gpt-4o").with_duration_ms(850.0));
//! let d = run.before_llm_blocking(&call);
//! assert!(!d.is_allowed());
//! assert_eq!(d.reason.as_deref(), Some("token budget spent"));
//! ```

use std::collections::HashMap;

use globset::GlobMatcher;
use serde_json::Value;

/// The engine's options for model calls.
#[derive(Debug, Default)]
pub(crate) struct LlmOptions {
    pub(crate) prices: Prices,
    pub(crate) record_messages: bool,
}

/// The run status an adapter ends a run with when an `llm.before` rule blocked the next model
/// call (the agent cannot go on without its model).
pub const STATUS_BUDGET_EXCEEDED: &str = "budget_exceeded";

/// A model call about to be made: the model's name and the messages it will be sent.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmCall {
    /// The call's id in the audit trail (`callId`); the run numbers calls `llm-1`, `llm-2`, …
    /// when `None`.
    pub id: Option<String>,
    /// The model's name, as the rules' selectors (`"tool": {"name": "gpt-*"}`) and `maxCalls`
    /// patterns match it (case-insensitive).
    pub model: String,
    /// The messages, as JSON: usually an array of `{"role", "content"}` objects (`content` a
    /// string or any JSON); `sensitiveData` with `target: "llmInput"` scans every string in it.
    pub messages: Value,
}

impl LlmCall {
    /// A call of `model` with no messages (`[]`).
    pub fn new(model: impl Into<String>) -> Self {
        LlmCall {
            id: None,
            model: model.into(),
            messages: Value::Array(Vec::new()),
        }
    }

    /// Sets the messages the model will be sent.
    pub fn with_messages(mut self, messages: Value) -> Self {
        self.messages = messages;
        self
    }

    /// Sets the call's id (`callId` in the trail; also what a trace's `llm` line names).
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }
}

/// The usage of one model call, recorded by
/// [`Run::record_llm_usage`](crate::engine::Run::record_llm_usage): its tokens become the
/// inbuilt metrics `llm_tokens_in` / `llm_tokens_out`, its cost `llm_cost_usd`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LlmUsage {
    /// Input (prompt) tokens.
    pub tokens_in: u64,
    /// Output (completion) tokens.
    pub tokens_out: u64,
    /// The cost in USD as the caller knows it. `None`: computed from the engine's
    /// [`Prices`] for the model, or none recorded when the model has no price. A cost that
    /// is negative or not finite is refused (an `error` event says so) and treated as `None`.
    pub cost_usd: Option<f64>,
    /// The model's name.
    pub model: Option<String>,
    /// How long the call took, in ms (negative or not finite: not recorded).
    pub duration_ms: Option<f64>,
    /// The id of the [`LlmCall`] this usage belongs to (`callId` in the trail), if known.
    pub call_id: Option<String>,
}

impl LlmUsage {
    /// Usage of `tokens_in` input and `tokens_out` output tokens.
    pub fn new(tokens_in: u64, tokens_out: u64) -> Self {
        LlmUsage {
            tokens_in,
            tokens_out,
            ..LlmUsage::default()
        }
    }

    /// Sets the cost in USD (else computed from the price table, if the model has a price).
    pub fn with_cost_usd(mut self, cost_usd: f64) -> Self {
        self.cost_usd = Some(cost_usd);
        self
    }

    /// Sets the model's name.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Sets the call's duration in ms.
    pub fn with_duration_ms(mut self, ms: f64) -> Self {
        self.duration_ms = Some(ms);
        self
    }

    /// Names the [`LlmCall`] this usage belongs to.
    pub fn with_call_id(mut self, id: impl Into<String>) -> Self {
        self.call_id = Some(id.into());
        self
    }
}

/// The price of one model, in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelPrice {
    /// USD per million input tokens (`in`).
    pub input: f64,
    /// USD per million output tokens (`out`).
    pub output: f64,
}

impl ModelPrice {
    /// The cost of a call with these tokens.
    pub fn cost(&self, tokens_in: u64, tokens_out: u64) -> f64 {
        (tokens_in as f64 * self.input + tokens_out as f64 * self.output) / 1e6
    }
}

/// A price table: `{"<model>": {"in": usd_per_million, "out": usd_per_million}}`. A model's
/// price is the entry named exactly like it (case-insensitive), else the longest entry whose
/// name is a glob (`"gpt-4o*"`) matching it; a model without a price records no cost.
#[derive(Debug, Clone, Default)]
pub struct Prices {
    exact: HashMap<String, ModelPrice>,
    globs: Vec<(usize, GlobMatcher, ModelPrice)>,
}

/// At most this many models in a price table.
pub const MAX_PRICES: usize = 4096;

impl Prices {
    /// An empty table.
    pub fn new() -> Self {
        Prices::default()
    }

    /// Reads `{"<model>": {"in": n, "out": n}}` (both numbers, finite and ≥ 0; no other keys).
    /// The error names the model and what is wrong.
    pub fn from_json(v: &Value) -> Result<Prices, String> {
        let Value::Object(map) = v else {
            return Err(
                "prices: expected an object {\"<model>\": {\"in\": usd_per_million, \"out\": \
                 usd_per_million}}"
                    .into(),
            );
        };
        if map.len() > MAX_PRICES {
            return Err(format!("prices: at most {MAX_PRICES} models"));
        }
        let mut out = Prices::new();
        for (model, p) in map {
            let Value::Object(p) = p else {
                return Err(format!(
                    "prices.{model}: expected {{\"in\": usd_per_million, \"out\": usd_per_million}}"
                ));
            };
            if let Some(k) = p.keys().find(|k| *k != "in" && *k != "out") {
                return Err(format!(
                    "prices.{model}: unknown key \"{k}\" (expected \"in\" and \"out\")"
                ));
            }
            let num = |k: &str| -> Result<f64, String> {
                match p.get(k).and_then(Value::as_f64) {
                    Some(n) if n.is_finite() && n >= 0.0 => Ok(n),
                    _ => Err(format!(
                        "prices.{model}.{k}: expected a non-negative number (USD per million tokens)"
                    )),
                }
            };
            let price = ModelPrice {
                input: num("in")?,
                output: num("out")?,
            };
            out.insert(model, price)
                .map_err(|e| format!("prices.{model}: {e}"))?;
        }
        Ok(out)
    }

    /// Adds (or replaces) a model's price; a name with `*`, `?` or `[` is a glob.
    pub fn insert(&mut self, model: &str, price: ModelPrice) -> Result<(), String> {
        if model.contains(['*', '?', '[']) {
            let g = crate::policy::glob_matcher(model).map_err(|e| e.kind().to_string())?;
            self.globs
                .retain(|(_, m, _)| m.glob().glob() != g.glob().glob());
            self.globs.push((model.len(), g, price));
            self.globs
                .sort_by_key(|(len, _, _)| std::cmp::Reverse(*len));
        } else {
            self.exact.insert(model.to_lowercase(), price);
        }
        Ok(())
    }

    /// The price of `model`, if it has one.
    pub fn get(&self, model: &str) -> Option<ModelPrice> {
        let lc = model.to_lowercase();
        if let Some(p) = self.exact.get(&lc) {
            return Some(*p);
        }
        self.globs
            .iter()
            .find(|(_, g, _)| g.is_match(&lc))
            .map(|(_, _, p)| *p)
    }

    /// Whether the table has no price.
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.globs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_price_is_found_exactly_then_by_the_longest_glob() {
        let p = Prices::from_json(&json!({
            "gpt-4o": {"in": 2.5, "out": 10},
            "gpt-4o*": {"in": 1, "out": 1},
            "gpt-*": {"in": 9, "out": 9},
        }))
        .expect("prices");
        assert_eq!(p.get("GPT-4o").map(|p| p.input), Some(2.5));
        assert_eq!(p.get("gpt-4o-2024-08-06").map(|p| p.input), Some(1.0));
        assert_eq!(p.get("gpt-3.5").map(|p| p.input), Some(9.0));
        assert_eq!(p.get("claude"), None);
        let cost = p.get("gpt-4o").map(|p| p.cost(1_000_000, 500_000));
        assert_eq!(cost, Some(7.5));
    }

    #[test]
    fn bad_price_tables_are_refused_with_the_model_named() {
        for (v, want) in [
            (json!([]), "expected an object"),
            (json!({"m": 1}), "prices.m: expected"),
            (json!({"m": {"in": -1, "out": 1}}), "prices.m.in"),
            (json!({"m": {"in": 1}}), "prices.m.out"),
            (
                json!({"m": {"in": 1, "out": 1, "cached": 1}}),
                "unknown key \"cached\"",
            ),
            (json!({"m": {"in": "1", "out": 1}}), "prices.m.in"),
        ] {
            let e = Prices::from_json(&v).expect_err("refused");
            assert!(e.contains(want), "{e}");
        }
    }
}
