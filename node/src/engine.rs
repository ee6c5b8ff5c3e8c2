//! `NativeEngine`: builds a `GovernanceEngine` from the options `index.js` passes; signals,
//! subjects, custom conditions, reviews, reload and shutdown.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use toolgate::engine::{
    EngineBuilder, EngineError, FailureMode, FileReviewStore, GovernanceEngine, RunContext,
};
use toolgate::policy::{Policy, PolicyErrors, parse_policy};

use crate::callbacks::{Callback, custom_condition, signal_provider, subject_extractor};
use crate::run::{NativeRun, enduser};
use crate::{NativeManualClock, in_runtime, invalid, toolgate_error};

/// One policy source: a file or folder (`path`) or a policy document as JSON text (`json`).
#[napi(object)]
pub struct PolicyInput {
    /// A policy file or a folder of them.
    pub path: Option<String>,
    /// A policy document (or a bare array of rules), as JSON text.
    pub json: Option<String>,
}

/// Where the audit trail goes.
#[napi(object)]
pub struct AuditInput {
    /// A folder for the JSONL trail.
    pub dir: Option<String>,
    /// The URL of a collector (`toolgate collect`).
    pub collector: Option<String>,
    /// The collector's bearer token.
    pub token: Option<String>,
    /// An Ed25519 PKCS#8 PEM file that signs runs.
    pub signing_key: Option<String>,
}

/// The engine's options (see `index.d.ts`).
#[napi(object)]
pub struct EngineInput {
    /// The policies.
    pub policies: Vec<PolicyInput>,
    /// The audit trail, if any.
    pub audit: Option<AuditInput>,
    /// `redis://…` for shared state, else in process.
    pub state: Option<String>,
    /// A review file shared with `toolgate review --store`.
    pub reviews: Option<String>,
    /// `"closed"` (default) or `"open"`.
    pub failure_mode: Option<String>,
    /// An IANA timezone; absent: the policies' own `timezone`.
    pub org_timezone: Option<String>,
    /// Past it a callback is missing data (default 100).
    pub signal_timeout_ms: Option<u32>,
    /// The price table `{"<model>": {"in": usd_per_million, "out": …}}`, as JSON text.
    pub prices: Option<String>,
    /// Write each model call's messages as `llm.messages` events (default false).
    pub record_messages: Option<bool>,
}

/// The engine.
#[napi]
pub struct NativeEngine {
    engine: GovernanceEngine,
    /// The strings its decisions have handed JavaScript by number (see `fast`).
    strings: std::sync::Arc<crate::fast::Strings>,
    /// The slots of its callback calls in flight (see `callbacks`).
    pool: std::sync::Arc<tokio::sync::Semaphore>,
}

/// `PolicyError` for these errors: the message lists them all; `path` is the JSON path of the
/// first, `file` its file.
fn policy_error(e: PolicyErrors) -> Error {
    let first = e.errors().first();
    let path = first.map(|f| f.path.clone());
    let file = first.and_then(|f| f.file.as_ref().map(|p| p.display().to_string()));
    toolgate_error("PolicyError", e.to_string(), path, file)
}

fn engine_error(e: EngineError) -> Error {
    match e {
        EngineError::Policy(p) => policy_error(p),
        other => toolgate_error("ToolgateError", other.to_string(), None, None),
    }
}

fn parse_doc(text: &str) -> Result<Policy> {
    parse_policy(text, None).map_err(policy_error)
}

fn audit_config(a: AuditInput) -> Result<toolgate::audit::AuditConfig> {
    use toolgate::audit::{AuditConfig, FileSinkConfig, HttpSinkConfig, SinkConfig};
    let mut config = AuditConfig::default();
    if let Some(dir) = a.dir {
        config
            .sinks
            .push(SinkConfig::File(FileSinkConfig::in_dir(PathBuf::from(dir))));
    }
    if let Some(url) = a.collector {
        let mut c = HttpSinkConfig::new(url);
        c.token = a.token;
        config.sinks.push(SinkConfig::Http(c));
    }
    if let Some(key) = a.signing_key {
        config.signing_key = Some(PathBuf::from(key));
    }
    if config.sinks.is_empty() {
        return Err(invalid(
            "audit: give dir or collector (where the trail goes)",
        ));
    }
    Ok(config)
}

fn builder(policies: Vec<PolicyInput>) -> Result<EngineBuilder> {
    if policies.is_empty() {
        return Err(invalid("policies: give at least one policy"));
    }
    let mut b = GovernanceEngine::builder();
    for (i, p) in policies.into_iter().enumerate() {
        b = match (p.path, p.json) {
            (Some(path), None) => b.policy_path(path),
            (None, Some(text)) => b.policy(parse_doc(&text)?),
            _ => {
                return Err(invalid(format!(
                    "policies[{i}]: expected a path or a policy document"
                )));
            }
        };
    }
    Ok(b)
}

#[napi]
impl NativeEngine {
    /// Builds the engine (loads and compiles the policies, opens the audit trail).
    #[napi(constructor)]
    pub fn new(options: EngineInput, clock: Option<&NativeManualClock>) -> Result<Self> {
        let mut b = builder(options.policies)?;
        b = b.failure_mode(match options.failure_mode.as_deref() {
            None | Some("closed") => FailureMode::Closed,
            Some("open") => FailureMode::Open,
            Some(other) => {
                return Err(invalid(format!(
                    "failureMode {other:?}: expected \"closed\" or \"open\""
                )));
            }
        });
        if let Some(tz) = options.org_timezone {
            let parsed = tz.parse::<chrono_tz::Tz>().map_err(|_| {
                invalid(format!(
                    "orgTimezone {tz:?}: not a known IANA timezone (e.g. Europe/London)"
                ))
            })?;
            b = b.org_timezone(parsed);
        }
        let timeout = options.signal_timeout_ms.unwrap_or(100);
        if timeout == 0 {
            return Err(invalid("signalTimeoutMs must be at least 1"));
        }
        b = b.signal_timeout(Duration::from_millis(u64::from(timeout)));
        if let Some(c) = clock {
            b = b.clock(Arc::new(c.clock.clone()));
        }
        if let Some(a) = options.audit {
            b = b.audit(audit_config(a)?);
        }
        if let Some(text) = options.prices {
            let v: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| invalid(format!("prices: not JSON: {e}")))?;
            b = b.prices(toolgate::engine::Prices::from_json(&v).map_err(invalid)?);
        }
        b = b.record_messages(options.record_messages.unwrap_or(false));
        if let Some(url) = &options.state {
            if !url.starts_with("redis://") && !url.starts_with("rediss://") {
                return Err(invalid(format!(
                    "state {}: expected redis://HOST:PORT/DB",
                    toolgate::state::redis::redact_url(url)
                )));
            }
            let config = toolgate::state::redis::RedisConfig::new(url.clone());
            if options.reviews.is_none() {
                let store =
                    toolgate::state::redis::RedisReviewStore::new(&config).map_err(|e| {
                        toolgate_error("ToolgateError", format!("state: {e}"), None, None)
                    })?;
                b = b.review_store(Arc::new(store));
            }
            b = b.redis_state(config);
        }
        if let Some(path) = options.reviews {
            b = b.review_store(Arc::new(FileReviewStore::new(path)));
        }
        let engine = in_runtime(|| b.build()).map_err(engine_error)?;
        Ok(NativeEngine {
            engine,
            strings: Default::default(),
            pool: crate::callbacks::pool(),
        })
    }

    /// Starts a run (emits `run.started`).
    #[napi]
    pub fn start_run(
        &self,
        agent_id: String,
        run_id: String,
        enduser_json: Option<String>,
        agent_tags: Option<Vec<String>>,
    ) -> Result<NativeRun> {
        if self.engine.is_shut_down() {
            let why = toolgate::engine::RunClosed::EngineShutDown;
            return Err(toolgate_error("ToolgateError", why.to_string(), None, None));
        }
        let mut ctx = RunContext::new(run_id, agent_id);
        if let Some(tags) = agent_tags {
            ctx = ctx.with_agent_tags(tags);
        }
        if let Some(e) = enduser_json {
            ctx.enduser = Some(enduser(&e)?);
        }
        let run = in_runtime(|| self.engine.start_run(ctx));
        NativeRun::new(run, self.strings.clone())
    }

    /// Registers (or replaces) the provider of signal `key` (a wrapped callback).
    #[napi]
    pub fn register_signal(
        &self,
        key: String,
        func: Function<'_, String, Promise<String>>,
    ) -> Result<()> {
        let cb = Callback::new(func, self.pool.clone())?;
        self.engine.register_signal(key, signal_provider(cb));
        Ok(())
    }

    /// Registers (or replaces) the `custom` condition `name` (a wrapped callback).
    #[napi]
    pub fn register_condition(
        &self,
        name: String,
        func: Function<'_, String, Promise<String>>,
    ) -> Result<()> {
        let cb = Callback::new(func, self.pool.clone())?;
        self.engine.register_condition(name, custom_condition(cb));
        Ok(())
    }

    /// Registers a subject extractor for tools matching `glob` (a wrapped callback).
    #[napi]
    pub fn register_subjects(
        &self,
        glob: String,
        func: Function<'_, String, Promise<String>>,
    ) -> Result<()> {
        let cb = Callback::new(func, self.pool.clone())?;
        self.engine
            .register_subject_extractor(&glob, subject_extractor(cb))
            .map_err(engine_error)
    }

    /// Replaces the policies atomically; on error the old ones stay in place.
    #[napi]
    pub fn reload(&self, policies: Vec<PolicyInput>) -> Result<()> {
        if policies
            .iter()
            .all(|p| p.path.is_some() && p.json.is_none())
        {
            let paths: Vec<PathBuf> = policies
                .into_iter()
                .filter_map(|p| p.path.map(PathBuf::from))
                .collect();
            return self.engine.reload_paths(&paths).map_err(engine_error);
        }
        let mut docs = Vec::with_capacity(policies.len());
        for (i, p) in policies.into_iter().enumerate() {
            docs.push(match (p.path, p.json) {
                (None, Some(text)) => parse_doc(&text)?,
                (Some(path), None) => read_file(Path::new(&path))?,
                _ => {
                    return Err(invalid(format!(
                        "policies[{i}]: expected a path or a policy document"
                    )));
                }
            });
        }
        self.engine.reload(docs).map_err(engine_error)
    }

    /// Every review, as JSON text (camelCase keys, as `toolgate review` shows them). The
    /// store is read on a blocking thread (a review file, or Redis), never on the event loop.
    #[napi]
    pub async fn reviews_list(&self) -> Result<String> {
        let engine = self.engine.clone();
        let all = tokio::task::spawn_blocking(move || engine.reviews().list())
            .await
            .map_err(|e| toolgate_error("ToolgateError", format!("reviews: {e}"), None, None))?;
        serde_json::to_string(&all).map_err(|e| invalid(e.to_string()))
    }

    /// Decides review `id`: `action` is approve, deny or expire. The review as JSON text.
    #[napi]
    pub async fn reviews_decide(&self, action: String, id: String) -> Result<String> {
        let engine = self.engine.clone();
        let review = tokio::task::spawn_blocking(move || {
            let reviews = engine.reviews();
            match action.as_str() {
                "approve" => Ok(reviews.approve(&id)),
                "deny" => Ok(reviews.deny(&id)),
                "expire" => Ok(reviews.expire(&id)),
                _ => Err(invalid(format!("unknown review action {action:?}"))),
            }
        })
        .await
        .map_err(|e| toolgate_error("ToolgateError", format!("reviews: {e}"), None, None))??
        .map_err(|e| toolgate_error("ToolgateError", e.to_string(), None, None))?;
        serde_json::to_string(&review).map_err(|e| invalid(e.to_string()))
    }

    /// Flushes the audit trail and shuts its sinks down (bounded by the flush timeout).
    #[napi]
    pub async fn shutdown(&self) -> Result<()> {
        let engine = self.engine.clone();
        engine
            .shutdown()
            .await
            .map_err(|e| toolgate_error("ToolgateError", format!("audit trail: {e}"), None, None))
    }

    /// Flushes the audit trail (bounded by the flush timeout).
    #[napi]
    pub async fn flush(&self) -> Result<()> {
        let engine = self.engine.clone();
        engine
            .flush()
            .await
            .map_err(|e| toolgate_error("ToolgateError", format!("audit trail: {e}"), None, None))
    }

    /// Number of active rules.
    #[napi(getter)]
    pub fn active_rules(&self) -> u32 {
        u32::try_from(self.engine.policies().active_rules()).unwrap_or(u32::MAX)
    }
}

fn read_file(p: &Path) -> Result<Policy> {
    if p.is_dir() {
        return Err(invalid(format!(
            "{}: a folder cannot be mixed with policy documents in reload(); give its files",
            p.display()
        )));
    }
    let text = std::fs::read_to_string(p).map_err(|e| {
        toolgate_error(
            "PolicyError",
            format!("{}: {e}", p.display()),
            Some(String::new()),
            Some(p.display().to_string()),
        )
    })?;
    parse_policy(&text, Some(p)).map_err(policy_error)
}
