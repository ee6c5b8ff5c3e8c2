//! toolgate and Cedar side by side on the support workload (`benches/data/support-workload.json`
//! of the main crate): the same runs, the same requests, decisions checked equal, one table.
//!
//! Cedar is stateless and has no globs over sets, time zones or "human review", so the harness
//! does for Cedar what toolgate does itself, inside the timed section, as an application
//! would: per call it builds the request context from the run's state
//! (the set of tools called so far, one count per distinct maxCalls selector, the end user's local
//! day and minute, the call's args). Rules translate one to one into `forbid` policies with an
//! `@effect` annotation (`block` or `hitl`), plus one `permit` for everything; a denied request's
//! effect is `block` if any determining policy says so, else `hitl`. An `allow` rule only
//! confirms the default and has no Cedar counterpart. Sequence globs are expanded against the
//! workload's tool names.
//!
//! ```sh
//! cd bench/compare && cargo run --release
//! ```

#[path = "../../../benches/support/mod.rs"]
mod support;

use std::collections::{BTreeSet, HashMap};
use std::str::FromStr;
use std::time::Instant;

use cedar_policy::{
    Authorizer, Context, Decision as CedarDecision, Entities, EntityUid, PolicyId, PolicySet,
    Request,
};
use chrono::{Datelike, Timelike};
use serde_json::{Value, json};
use support::Workload;
use toolgate::policy::EffectType;

/// A Cedar rendering of the workload's rules.
struct CedarPolicies {
    set: PolicySet,
    effects: HashMap<PolicyId, EffectType>,
    /// Distinct maxCalls selectors (JSON), each a context attribute `c<i>`.
    counters: Vec<Value>,
}

struct Translator<'a> {
    tools: &'a [(String, Vec<String>)],
    counters: Vec<Value>,
}

fn glob_match(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((pre, post)) => {
            name.len() >= pre.len() + post.len() && name.starts_with(pre) && name.ends_with(post)
        }
    }
}

fn q(s: &str) -> String {
    serde_json::to_string(s).expect("a string")
}

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

fn set(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| q(s)).collect();
    format!("[{}]", quoted.join(", "))
}

impl Translator<'_> {
    /// The tool names a sequence glob can match (literal names as they are).
    fn expand(&self, pattern: &str) -> Vec<String> {
        if !pattern.contains('*') {
            return vec![pattern.to_string()];
        }
        let hits: Vec<String> = self
            .tools
            .iter()
            .filter(|(n, _)| glob_match(pattern, n))
            .map(|(n, _)| n.clone())
            .collect();
        if hits.is_empty() {
            vec![pattern.to_string()]
        } else {
            hits
        }
    }

    fn selector(&self, tool: &Value) -> String {
        let mut parts = Vec::new();
        if let Some(n) = tool.get("name") {
            let alts: Vec<String> = strings(n)
                .iter()
                .map(|p| format!("resource.name like {}", q(p)))
                .collect();
            parts.push(format!("({})", alts.join(" || ")));
        }
        if let Some(t) = tool.get("tagsAll") {
            parts.push(format!("resource.tags.containsAll({})", set(&strings(t))));
        }
        if let Some(t) = tool.get("tagsAny") {
            parts.push(format!("resource.tags.containsAny({})", set(&strings(t))));
        }
        if parts.is_empty() {
            "true".into()
        } else {
            parts.join(" && ")
        }
    }

    fn cond(&mut self, c: &Value) -> String {
        match c["kind"].as_str().unwrap_or("") {
            "and" => {
                let parts: Vec<String> = c["all"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|x| self.cond(x))
                    .collect();
                format!("({})", parts.join(" && "))
            }
            "or" => {
                let parts: Vec<String> = c["any"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|x| self.cond(x))
                    .collect();
                format!("({})", parts.join(" || "))
            }
            "not" => format!("!({})", self.cond(&c["not"])),
            "toolName" => format!(
                "resource.name like {}",
                q(c["value"].as_str().unwrap_or(""))
            ),
            "enduserTag" => {
                let tag = c["tag"].as_str().unwrap_or("");
                match c["op"].as_str() {
                    Some("hasValue") => format!(
                        "(principal has {tag} && principal.{tag} == {})",
                        q(c["value"].as_str().unwrap_or(""))
                    ),
                    _ => format!("principal has {tag}"),
                }
            }
            "toolArg" => {
                let path = c["path"].as_str().unwrap_or("");
                let op = match c["op"].as_str() {
                    Some("gte") => ">=",
                    Some("gt") => ">",
                    Some("lte") => "<=",
                    Some("lt") => "<",
                    _ => "==",
                };
                format!(
                    "(context.args has {path} && context.args.{path} {op} {})",
                    c["value"]
                )
            }
            "sequence" => {
                let mut parts = Vec::new();
                for p in strings(&c["mustHaveCalled"]) {
                    parts.push(format!(
                        "!context.history.containsAny({})",
                        set(&self.expand(&p))
                    ));
                }
                for p in strings(&c["mustNotHaveCalled"]) {
                    parts.push(format!(
                        "context.history.containsAny({})",
                        set(&self.expand(&p))
                    ));
                }
                format!("({})", parts.join(" || "))
            }
            "maxCalls" => {
                let sel = c["selector"].clone();
                let i = match self.counters.iter().position(|s| *s == sel) {
                    Some(i) => i,
                    None => {
                        self.counters.push(sel);
                        self.counters.len() - 1
                    }
                };
                format!("context.c{i} >= {}", c["max"])
            }
            "timeGate" => {
                let mut alts = Vec::new();
                for w in c["windows"].as_array().into_iter().flatten() {
                    let minutes = |k: &str| {
                        let s = w[k].as_str().unwrap_or("00:00");
                        let (h, m) = s.split_once(':').unwrap_or(("0", "0"));
                        h.parse::<u32>().unwrap_or(0) * 60 + m.parse::<u32>().unwrap_or(0)
                    };
                    alts.push(format!(
                        "({}.contains(context.day) && context.minute >= {} && context.minute < {})",
                        set(&strings(&w["days"])),
                        minutes("start"),
                        minutes("end")
                    ));
                }
                format!("({})", alts.join(" || "))
            }
            other => panic!("no Cedar translation for condition kind {other}"),
        }
    }
}

fn cedar_policies(rules: &[Value], tools: &[(String, Vec<String>)]) -> CedarPolicies {
    let mut t = Translator {
        tools,
        counters: Vec::new(),
    };
    let mut text = String::from("permit(principal, action, resource);\n");
    for r in rules {
        let effect = r["effect"]["type"].as_str().unwrap_or("block");
        if effect == "allow" {
            continue;
        }
        let sel = t.selector(&r["selector"]["tool"]);
        let cond = t.cond(&r["condition"]);
        text.push_str(&format!(
            "@effect({}) @id({}) forbid(principal, action, resource) when {{ {sel} && {cond} }};\n",
            q(effect),
            q(r["id"].as_str().unwrap_or(""))
        ));
    }
    let set = PolicySet::from_str(&text).unwrap_or_else(|e| panic!("Cedar policies: {e:?}"));
    let mut effects = HashMap::new();
    for p in set.policies() {
        let e = match p.annotation("effect") {
            Some("hitl") => EffectType::Hitl,
            Some("block") => EffectType::Block,
            _ => EffectType::Allow,
        };
        effects.insert(p.id().clone(), e);
    }
    CedarPolicies {
        set,
        effects,
        counters: t.counters,
    }
}

fn counter_selects(sel: &Value, name: &str, tags: &[String]) -> bool {
    match sel["by"].as_str() {
        Some("toolTag") => strings(&sel["tags"]).iter().any(|t| tags.contains(t)),
        _ => strings(&sel["patterns"])
            .iter()
            .any(|p| glob_match(p, name)),
    }
}

/// Plays `runs` runs through Cedar; returns each decision's effect and per-decision times
/// (request built from the run's state + `is_authorized`; and `is_authorized` alone).
fn cedar_runs(
    w: &Workload,
    tools: &[(String, Vec<String>)],
    p: &CedarPolicies,
    runs: usize,
) -> (Vec<EffectType>, Vec<u64>, Vec<u64>) {
    let authorizer = Authorizer::new();
    let action = EntityUid::from_str(r#"Action::"call""#).expect("an action");
    let mut effects = Vec::new();
    let mut times = Vec::new();
    let mut auth_times = Vec::new();
    for k in 0..runs {
        let ctx = w.context(k);
        let user = ctx.enduser.as_ref().expect("an end user");
        let mut entities = vec![json!({
            "uid": {"type": "User", "id": user.id},
            "attrs": user.tags,
            "parents": []
        })];
        for (name, tags) in tools {
            entities.push(json!({
                "uid": {"type": "Tool", "id": name},
                "attrs": {"name": name, "tags": tags},
                "parents": []
            }));
        }
        let entities = Entities::from_json_value(Value::Array(entities), None).expect("entities");
        let principal = EntityUid::from_type_name_and_id(
            "User".parse().expect("a type"),
            user.id.parse().expect("an id"),
        );
        let tz: chrono_tz::Tz = user.tags["tz"].parse().expect("a time zone");
        let local = w.clock.with_timezone(&tz);
        let day = local.weekday().to_string().to_lowercase();
        let minute = local.hour() * 60 + local.minute();
        let mut history: BTreeSet<String> = BTreeSet::new();
        let mut counts = vec![0u64; p.counters.len()];
        let mut aborted = false;
        for call in &w.calls {
            let started = Instant::now();
            let effect = if aborted {
                EffectType::Block
            } else {
                let mut c =
                    json!({"history": history, "args": call.args, "day": day, "minute": minute});
                for (i, n) in counts.iter().enumerate() {
                    c[format!("c{i}")] = json!(n);
                }
                let context = Context::from_json_value(c, None).expect("a context");
                let resource = EntityUid::from_type_name_and_id(
                    "Tool".parse().expect("a type"),
                    call.name.parse().expect("an id"),
                );
                let request =
                    Request::new(principal.clone(), action.clone(), resource, context, None)
                        .expect("a request");
                let auth_started = Instant::now();
                let response = authorizer.is_authorized(&request, &p.set, &entities);
                auth_times.push(auth_started.elapsed().as_nanos() as u64);
                match response.decision() {
                    CedarDecision::Allow => EffectType::Allow,
                    CedarDecision::Deny => response
                        .diagnostics()
                        .reason()
                        .filter_map(|id| p.effects.get(id))
                        .copied()
                        .max()
                        .unwrap_or(EffectType::Block),
                }
            };
            times.push(started.elapsed().as_nanos() as u64);
            match effect {
                EffectType::Hitl => aborted = true,
                EffectType::Allow => {
                    for (i, sel) in p.counters.iter().enumerate() {
                        if counter_selects(sel, &call.name, &call.tags) {
                            counts[i] += 1;
                        }
                    }
                    history.insert(call.name.clone());
                }
                EffectType::Block => {}
            }
            effects.push(effect);
        }
    }
    times.sort_unstable();
    auth_times.sort_unstable();
    (effects, times, auth_times)
}

/// Plays `runs` runs through toolgate; returns each decision's effect and per-decision times.
fn toolgate_runs(w: &Workload, n: usize, runs: usize) -> (Vec<EffectType>, Vec<u64>) {
    let engine = w.engine(n);
    let mut effects = Vec::new();
    let mut times = Vec::new();
    for k in 0..runs {
        let run = engine.start_run(w.context(k));
        for call in &w.calls {
            let c = call.clone();
            let started = Instant::now();
            let d = run.before_tool_blocking(c);
            times.push(started.elapsed().as_nanos() as u64);
            if d.is_allowed() {
                let o = toolgate::engine::ToolOutcome::ok(
                    json!({"ok": true}),
                    std::time::Duration::from_millis(3),
                );
                run.after_tool_blocking(&call.id, o);
            }
            effects.push(d.effect);
        }
    }
    times.sort_unstable();
    (effects, times)
}

fn pct(v: &[u64], p: f64) -> f64 {
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v.get(i).copied().unwrap_or(0) as f64 / 1000.0
}

fn main() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../benches/data/support-workload.json"
    );
    let w = Workload::load_from(path);
    let text = std::fs::read_to_string(path).expect("the workload");
    let raw: Value = serde_json::from_str(&text).expect("JSON");
    let tools: Vec<(String, Vec<String>)> = raw["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap_or("").to_string(),
                strings(&t["categories"]),
            )
        })
        .collect();
    println!(
        "| rules | toolgate median | toolgate p99 | Cedar median | Cedar p99 | Cedar `is_authorized` alone, median | decisions equal |"
    );
    println!("|---:|---:|---:|---:|---:|---:|:---|");
    for (n, runs, cedar_runs_n) in [(10usize, 2000usize, 2000usize), (1_000, 2000, 40)] {
        let mut rules = w.rules10.clone();
        rules.extend(w.filler.iter().take(n - 10).cloned());
        let cedar = cedar_policies(&rules, &tools);
        let (te, tt) = toolgate_runs(&w, n, runs);
        let (ce, ct, ca) = cedar_runs(&w, &tools, &cedar, cedar_runs_n);
        let equal = te[..ce.len()] == ce[..];
        assert!(
            equal,
            "toolgate and Cedar disagree at {n} rules:\n{te:?}\n{ce:?}"
        );
        println!(
            "| {n} | {:.2} µs | {:.2} µs | {:.2} µs | {:.2} µs | {:.2} µs | yes ({} decisions) |",
            pct(&tt, 0.5),
            pct(&tt, 0.99),
            pct(&ct, 0.5),
            pct(&ct, 0.99),
            pct(&ca, 0.5),
            ce.len()
        );
    }
}
