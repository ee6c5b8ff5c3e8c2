//! The customer-support workload of `benches/data/support-workload.json` (a copy of the shared
//! benchmark workload): 10 rules (sequence, maxCalls, timeGate, enduserTag, toolArg), optionally
//! padded with fillers that never select a called tool (to 1,000 or 100,000 rules), 4 end
//! users and one 20-call run, at a fixed time.
//!
//! A run: the next end user (cycling through the 4), then for each call `before_tool`, and
//! `after_tool` for the allowed ones.

#![allow(dead_code)]

pub mod cedar;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use toolgate::engine::{Clock, Decision, GovernanceEngine, Run, RunContext, ToolCall, ToolOutcome};
use toolgate::policy::{Policy, parse_policy_value};

/// A clock that always reads the same time, without a lock (the workload's `clock`).
#[derive(Debug, Clone, Copy)]
pub struct FixedClock(pub DateTime<Utc>);

impl Clock for FixedClock {
    fn now(&self) -> DateTime<Utc> {
        self.0
    }
}

/// The parsed workload.
pub struct Workload {
    /// The rules, as JSON (without Handlebar's `policyId`).
    pub rules10: Vec<Value>,
    /// 990 filler rules.
    pub filler: Vec<Value>,
    /// End users: id and tags.
    pub endusers: Vec<(String, Vec<(String, String)>)>,
    /// The run's calls, ready to clone (tags from the tool list).
    pub calls: Vec<ToolCall>,
    /// The fixed time of every decision.
    pub clock: DateTime<Utc>,
}

fn strip_policy_id(mut rule: Value) -> Value {
    if let Value::Object(m) = &mut rule {
        m.remove("policyId");
    }
    rule
}

impl Workload {
    /// Reads `benches/data/support-workload.json`.
    pub fn load() -> Workload {
        Workload::load_from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/benches/data/support-workload.json"
        ))
    }

    /// Reads a workload file.
    pub fn load_from(path: &str) -> Workload {
        let text = std::fs::read_to_string(path).expect("the support workload is readable");
        let w: Value = serde_json::from_str(&text).expect("the support workload is JSON");
        let rules = |k: &str| -> Vec<Value> {
            w[k].as_array()
                .expect("a rule list")
                .iter()
                .cloned()
                .map(strip_policy_id)
                .collect()
        };
        let tools: Vec<(String, Vec<String>)> = w["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| {
                let tags = t["categories"]
                    .as_array()
                    .expect("categories")
                    .iter()
                    .map(|c| c.as_str().expect("a tag").to_string())
                    .collect();
                (t["name"].as_str().expect("a name").to_string(), tags)
            })
            .collect();
        let calls = w["calls"]
            .as_array()
            .expect("calls")
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let name = c[0].as_str().expect("a tool name");
                let tags = tools
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, t)| t.clone())
                    .unwrap_or_default();
                ToolCall::new(format!("c{i}"), name, c[1].clone()).with_tags(tags)
            })
            .collect();
        let endusers = w["endusers"]
            .as_array()
            .expect("endusers")
            .iter()
            .map(|u| {
                let tags = u["metadata"]
                    .as_object()
                    .expect("metadata")
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().expect("a tag value").to_string()))
                    .collect();
                (u["externalId"].as_str().expect("an id").to_string(), tags)
            })
            .collect();
        Workload {
            rules10: rules("rules10"),
            filler: rules("filler990"),
            endusers,
            calls,
            clock: w["clock"]
                .as_str()
                .expect("clock")
                .parse()
                .expect("an RFC 3339 time"),
        }
    }

    /// The policy with `n` rules: the 10, then fillers (the 990 of the workload, then
    /// generated ones of the same shapes with distinct names).
    pub fn policy(&self, n: usize) -> Policy {
        let mut rules = self.rules10.clone();
        let mut i = 0usize;
        while rules.len() < n {
            let j = i % self.filler.len();
            if i < self.filler.len() {
                rules.push(self.filler[j].clone());
            } else {
                let text = serde_json::to_string(&self.filler[j]).expect("JSON");
                let text = text.replace(&format!("{j:04}"), &format!("g{i:06}"));
                rules.push(serde_json::from_str(&text).expect("JSON"));
            }
            i += 1;
        }
        let doc = json!({"policy": {"name": format!("support-{n}")}, "rules": rules});
        parse_policy_value(&doc, None).expect("the support policy parses")
    }

    /// An engine on the `n`-rule policy at the workload's fixed time.
    pub fn engine(&self, n: usize) -> GovernanceEngine {
        GovernanceEngine::builder()
            .policy(self.policy(n))
            .clock(Arc::new(FixedClock(self.clock)))
            .build()
            .expect("the support policy compiles")
    }

    /// [`engine`](Self::engine) with the audit trail on: the file sink in `dir`, fsync off
    /// (call it inside a tokio runtime: the sink's task runs there).
    pub fn audited_engine(&self, n: usize, dir: &std::path::Path) -> GovernanceEngine {
        GovernanceEngine::builder()
            .policy(self.policy(n))
            .clock(Arc::new(FixedClock(self.clock)))
            .audit(toolgate::audit::AuditConfig {
                sinks: vec![toolgate::audit::SinkConfig::File(
                    toolgate::audit::FileSinkConfig {
                        fsync: false,
                        ..toolgate::audit::FileSinkConfig::in_dir(dir)
                    },
                )],
                ..Default::default()
            })
            .build()
            .expect("the support policy compiles")
    }

    /// The context of run number `k` (end users cycle).
    pub fn context(&self, k: usize) -> RunContext {
        let (id, tags) = &self.endusers[k % self.endusers.len()];
        RunContext::new(format!("run-{k}"), "support-bot").with_enduser(id.clone(), tags.clone())
    }
}

/// Plays one run's 20 calls: `before_tool`, then `after_tool` for the allowed ones.
/// `each` sees every before decision.
pub fn play(w: &Workload, run: &Run, mut each: impl FnMut(&ToolCall, &Decision)) {
    for call in &w.calls {
        let d = run.before_tool_blocking(call.clone());
        each(call, &d);
        if d.is_allowed() {
            let outcome = ToolOutcome::ok(json!({"ok": true}), Duration::from_millis(3));
            run.after_tool_blocking(&call.id, outcome);
        }
    }
}
