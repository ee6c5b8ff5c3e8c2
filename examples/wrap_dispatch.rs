//! A scripted coding agent whose tool dispatch goes through [`Run::guard`].
//!
//! There is no LLM here: the "agent" is a fixed list of the tool calls it intends to make. Every
//! call goes through `run.guard(call, tool)`, which asks the policy first and runs the (toy,
//! in-memory) tool only when the call is allowed. On a refusal the agent does what the refusal
//! says: a `block` means "continue without this tool", a `hitl` means "stop the run now; a
//! human has to approve the call first".
//!
//! Policies: `policies/coding-agent.json` (loaded with `policy_path`) plus a small inline
//! release-gate policy whose production deploys need human approval.
//!
//! ```sh
//! cargo run --example wrap_dispatch
//! ```
//!
//! The output is deterministic: the engine runs on a `ManualClock`, and nothing time- or
//! id-dependent (latencies, review ids) is printed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use toolgate::engine::{
    Decision, GovernanceEngine, Guarded, ManualClock, Run, RunContext, ToolCall,
};
use toolgate::policy::parse_policy;

/// The second policy: production deploys are held for a human.
const RELEASE_GATE: &str = r#"{
  "policy": { "name": "release-gate", "combine": "most_severe_wins" },
  "rules": [
    {
      "id": "prod-deploy-needs-approval",
      "name": "Production deploys need a human",
      "priority": 100,
      "enabled": true,
      "selector": { "phase": "tool.before", "tool": { "name": "deploy" } },
      "condition": { "kind": "toolArg", "type": "string", "op": "eq", "path": "environment", "value": "production" },
      "effect": { "type": "hitl", "reason": "Production deploys need a release manager's approval." }
    }
  ]
}"#;

/// The sandbox the toy tools work on: an in-memory checkout of `/workspace`.
#[derive(Default)]
struct Sandbox {
    files: Mutex<BTreeMap<String, String>>,
}

impl Sandbox {
    fn new() -> Self {
        let sb = Sandbox::default();
        {
            let mut files = sb.files.lock().unwrap();
            files.insert(
                "/workspace/src/lib.rs".into(),
                "// TODO: handle empty input\npub fn parse() {}\n".into(),
            );
            files.insert(
                "/workspace/.env".into(),
                "DEPLOY_TOKEN=not-a-real-token\n".into(),
            );
        }
        sb
    }
}

/// The toy tools. Nothing here touches the real machine: the shell only pretends.
async fn run_tool(sandbox: Arc<Sandbox>, tool: String, args: Value) -> Result<Value, String> {
    let arg = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_string);
    match tool.as_str() {
        "read_file" => {
            let path = arg("path").ok_or("read_file needs a path")?;
            let files = sandbox.files.lock().unwrap();
            let text = files
                .get(&path)
                .ok_or_else(|| format!("no such file: {path}"))?;
            Ok(json!({ "path": path, "bytes": text.len() }))
        }
        "write_file" => {
            let path = arg("path").ok_or("write_file needs a path")?;
            let content = arg("content").unwrap_or_default();
            let bytes = content.len();
            sandbox.files.lock().unwrap().insert(path.clone(), content);
            Ok(json!({ "path": path, "written": bytes }))
        }
        "shell" => {
            let command = arg("command").ok_or("shell needs a command")?;
            let matches = if command.starts_with("grep") {
                let files = sandbox.files.lock().unwrap();
                files.values().filter(|t| t.contains("TODO")).count()
            } else {
                0
            };
            Ok(json!({ "exitCode": 0, "simulated": command, "matches": matches }))
        }
        "run_tests" => Ok(json!({ "passed": 42, "failed": 0 })),
        "git_push" => Ok(json!({ "pushed": arg("branch").unwrap_or_else(|| "main".into()) })),
        "http_get" => Ok(json!({ "status": 200 })),
        "deploy" => Ok(json!({ "deployed": arg("environment") })),
        other => Err(format!("unknown tool {other}")),
    }
}

/// One intended step of the script.
fn step(name: &str, tags: &[&str], args: Value) -> (String, Vec<String>, Value) {
    (
        name.to_string(),
        tags.iter().map(|t| t.to_string()).collect(),
        args,
    )
}

fn script() -> Vec<(String, Vec<String>, Value)> {
    vec![
        step(
            "read_file",
            &["fs"],
            json!({"path": "/workspace/src/lib.rs"}),
        ),
        step("shell", &["exec"], json!({"command": "grep -rn TODO src/"})),
        step(
            "write_file",
            &["fs"],
            json!({"path": "/workspace/src/lib.rs", "content": "pub fn parse() -> Option<()> { None }\n"}),
        ),
        step(
            "write_file",
            &["fs"],
            json!({"path": "/workspace/../etc/cron.d/cleanup", "content": "* * * * * true\n"}),
        ),
        step(
            "shell",
            &["exec"],
            json!({"command": "cd /workspace && rm -rf target"}),
        ),
        step(
            "http_get",
            &["network"],
            json!({"url": "https://example.com/crate-docs"}),
        ),
        step(
            "git_push",
            &["git", "network"],
            json!({"remote": "origin", "branch": "fix/empty-input"}),
        ),
        step("run_tests", &["exec"], json!({})),
        step(
            "git_push",
            &["git", "network"],
            json!({"remote": "origin", "branch": "fix/empty-input", "force": true}),
        ),
        step(
            "git_push",
            &["git", "network"],
            json!({"remote": "origin", "branch": "fix/empty-input"}),
        ),
        step(
            "read_file",
            &["fs", "secrets"],
            json!({"path": "/workspace/.env"}),
        ),
        step(
            "git_push",
            &["git", "network"],
            json!({"remote": "origin", "branch": "fix/empty-input"}),
        ),
        step(
            "deploy",
            &["release"],
            json!({"environment": "production", "version": "1.4.2"}),
        ),
        step("shell", &["exec"], json!({"command": "echo done"})),
    ]
}

fn describe(d: &Decision) -> String {
    format!(
        "effect={} code={} rule={} reason={}",
        d.effect.as_str(),
        d.code,
        d.rule_id.as_deref().unwrap_or("-"),
        d.reason
            .as_deref()
            .map_or("-".to_string(), |r| format!("\"{r}\"")),
    )
}

/// Runs the script in `run`; returns how the run ended.
async fn agent_loop(
    run: &Run,
    sandbox: &Arc<Sandbox>,
    steps: Vec<(String, Vec<String>, Value)>,
) -> &'static str {
    let total = steps.len();
    for (i, (name, tags, args)) in steps.into_iter().enumerate() {
        let n = i + 1;
        println!("[{n:>2}] {name} {args}");
        let call = ToolCall::new(format!("call-{n}"), name.clone(), args).with_tags(tags);
        let sb = sandbox.clone();
        let tool = name.clone();
        match run.guard(call, move |args| run_tool(sb, tool, args)).await {
            Guarded::Ran { outcome, decision } => {
                println!("     tool={name} {}", describe(&decision));
                match (&outcome.output, &outcome.error) {
                    (Some(out), _) => println!("     ran: {out}"),
                    (_, Some(e)) => println!("     ran, failed: {e}"),
                    _ => {}
                }
            }
            Guarded::Refused(refusal) => {
                println!("     tool={name} {}", describe(&refusal.decision));
                if refusal.stop_run {
                    println!(
                        "     agent: stops the run ({} of {total} steps not attempted)",
                        total - n
                    );
                    println!(
                        "     tool result for the model: {}",
                        refusal.to_tool_result()
                    );
                    return "stopped: waiting for human review";
                }
                println!("     agent: continues without {name}");
            }
        }
    }
    "completed"
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let clock = ManualClock::new("2026-01-05T09:00:00Z".parse().expect("valid time"));
    let engine = GovernanceEngine::builder()
        .policy_path(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/policies/coding-agent.json"
        ))
        .policy(parse_policy(RELEASE_GATE, None).expect("the release-gate policy parses"))
        .clock(Arc::new(clock.clone()))
        .build()
        .expect("the policies load");
    println!(
        "== run-1: {} active rules",
        engine.policies().active_rules()
    );

    let sandbox = Arc::new(Sandbox::new());
    let run = engine.start_run(RunContext::new("run-1", "coding-agent"));
    let outcome = agent_loop(&run, &sandbox, script()).await;
    run.end(
        if outcome == "completed" {
            "success"
        } else {
            "aborted"
        },
        None,
    )
    .await;
    println!("run-1 {outcome} (aborted: {})", run.is_aborted());

    // A human looks at the pending review and approves it.
    let pending = engine.reviews().pending();
    for r in &pending {
        println!(
            "review pending: rule={} tool={} args={} reason=\"{}\"",
            r.rule_id,
            r.tool_name,
            r.args,
            r.reason.as_deref().unwrap_or("")
        );
        engine
            .reviews()
            .approve(&r.id)
            .expect("the review is pending");
        println!("review approved by the release manager");
    }

    // The agent retries the identical call in a new run: the approval lets it through.
    clock.advance(chrono::Duration::minutes(20));
    println!("== run-2: retry after approval");
    let run = engine.start_run(RunContext::new("run-2", "coding-agent"));
    let retry = vec![step(
        "deploy",
        &["release"],
        json!({"environment": "production", "version": "1.4.2"}),
    )];
    let outcome = agent_loop(&run, &sandbox, retry).await;
    run.end("success", None).await;
    println!("run-2 {outcome}");
}
