//! The governance engine: decisions about tool calls, from compiled policies.
//!
//! ```
//! use toolgate::engine::{GovernanceEngine, RunContext, ToolCall};
//! use toolgate::policy::parse_policy;
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let policy = parse_policy(r#"[{"id": "no-delete", "name": "No deletes", "priority": 1,
//!   "enabled": true, "selector": {"phase": "tool.before", "tool": {"name": "delete*"}},
//!   "condition": {"kind": "toolName", "op": "glob", "value": "*"},
//!   "effect": {"type": "block", "reason": "deleting is not allowed"}}]"#, None).unwrap();
//! let engine = GovernanceEngine::builder().policy(policy).build().unwrap();
//! let run = engine.start_run(RunContext::new("run-1", "support-bot"));
//! let d = run.before_tool(ToolCall::new("c1", "deleteUser", serde_json::json!({"id": 7}))).await;
//! assert!(!d.is_allowed());
//! assert_eq!(d.reason.as_deref(), Some("deleting is not allowed"));
//! # });
//! ```
//!
//! # Layout
//!
//! The engine's code lives in four rooms, plus the builder and [`GovernanceEngine`] here:
//!
//! - `decide/`: deciding one call — rule evaluation, one file per condition kind
//!   (`decide/conditions/`), tool profiles, signals, subjects, `custom` conditions, the
//!   [`Decision`].
//! - `run/`: a [`Run`] and the life of its calls — before and after phases, pending calls,
//!   shared state, the guard, observers.
//! - `hitl/`: human reviews — review stores, fingerprints.
//! - `audit/`: the engine's side of the audit trail — the per-run hash chain, chain heads,
//!   event bodies, the sealer, evaluations.
//!
//! `clock.rs` (the injected time) and `blocking.rs` (awaiting for a caller that is not async)
//! depend on nothing else in the engine.

mod audit;
mod blocking;
mod clock;
mod decide;
mod hitl;
mod run;

// Paths kept from the flat layout: `crate::engine::conditions` is used by `policy::compile`,
// and the `sensitive_data` condition files name `crate::engine::{decision, evaluate}`.
pub(crate) use decide::conditions;
use decide::{decision, evaluate};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use chrono_tz::Tz;

pub use clock::{Clock, ManualClock, SystemClock};
pub use decide::call::{Enduser, RunContext, ToolCall, ToolOutcome};
pub use decide::decision::{
    Decision, DecisionCode, EvaluatedRule, HitlInfo, ReviewStatus, SignalRecord,
};
pub use hitl::notify::{
    Notifier, NotifyConfig, NotifyFormat, NotifyKind, QUEUE as NOTIFY_QUEUE, SIGNATURE_HEADER,
    sign as notify_signature,
};
#[cfg(feature = "redis")]
pub(crate) use hitl::reviews::resolve as resolve_review;
pub use hitl::reviews::{
    EXPIRY_REVIEWER, FileReviewStore, MemoryReviewStore, Review, ReviewError, ReviewHead,
    ReviewStore, ReviewVerdict, decided_event_body, expiry_verdict, fingerprint, status_word,
};
pub use run::guard::{Guarded, Refusal};
pub use run::handle::Run;
pub use run::observe::DecisionObserver;

pub use decide::custom::{CustomCondition, CustomContext};
pub(crate) use decide::profile::ToolCache;
pub use decide::signals::SignalProvider;
pub use decide::subjects::{SubjectExtractor, SubjectInput, SubjectRef};

use crate::audit::{
    AuditBus, AuditConfig, AuditError, AuditSink, BusConfig, RedactionConfig, Redactor, RunSigner,
};
use crate::eval::{EvalError, EvaluationRunConfig};
use crate::policy::{CompiledPolicies, Policy, PolicyErrors, load_policies};
use crate::state::{MemoryStateStore, SharedStateStore, StateStore};
use audit::audit_hook::AuditState;
use audit::evaluations::{EngineEvals, EvalSet};
use decide::signals::SignalRegistry;
use decide::subjects::RegisteredExtractor;

/// What the engine decides when it fails internally.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailureMode {
    /// Allow the call.
    Open,
    /// Block the call (the default).
    #[default]
    Closed,
}

/// Errors of building or reloading an engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A policy did not load.
    #[error("{0}")]
    Policy(#[from] PolicyErrors),
    /// The audit configuration is invalid or a sink could not start.
    #[error("audit: {0}")]
    Audit(#[from] AuditError),
    /// An evaluation configuration is invalid.
    #[error("evaluation config for {target}: {source}")]
    Eval {
        /// `run` or the tool glob.
        target: String,
        /// Why.
        source: EvalError,
    },
    /// A subject extractor's tool glob is invalid.
    #[error("invalid tool glob \"{glob}\": {message}")]
    Glob {
        /// The glob.
        glob: String,
        /// Why.
        message: String,
    },
}

pub(crate) struct EngineInner {
    pub(crate) policies: ArcSwap<CompiledPolicies>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) org_timezone: Option<Tz>,
    pub(crate) failure_mode: FailureMode,
    pub(crate) signal_timeout: Duration,
    pub(crate) review_ttl: Option<Duration>,
    pub(crate) state: Arc<dyn StateStore>,
    /// A store shared by processes: when set, decisions read and write state there instead.
    pub(crate) shared: Option<Arc<dyn SharedStateStore>>,
    pub(crate) reviews: Arc<dyn ReviewStore>,
    /// Hitl fingerprints of the calls seen (see `hitl/fp_cache.rs`).
    pub(crate) fingerprints: hitl::fp_cache::FingerprintCache,
    /// End-user time zone names parsed (see `decide/tz.rs`).
    pub(crate) tz_names: decide::tz::TzNames,
    pub(crate) signals: ArcSwap<SignalRegistry>,
    pub(crate) customs: ArcSwap<decide::custom::CustomRegistry>,
    pub(crate) extractors: ArcSwap<Vec<RegisteredExtractor>>,
    pub(crate) register_lock: parking_lot::Mutex<()>,
    pub(crate) audit: Option<AuditState>,
    pub(crate) evals: EngineEvals,
    pub(crate) observers: run::observe::Observers,
    /// Webhooks told of reviews raised and decided (see `hitl/notify.rs`).
    pub(crate) notifier: Option<Arc<Notifier>>,
}

impl EngineInner {
    /// Tells the webhooks a review was raised (never waits).
    pub(crate) fn notify_created(&self, review: &Review) {
        if let Some(n) = &self.notifier {
            n.send(NotifyKind::Created, review);
        }
    }

    /// Tells the webhooks a review was decided (never waits).
    pub(crate) fn notify_decided(&self, review: &Review) {
        if let Some(n) = &self.notifier {
            n.send(NotifyKind::Decided, review);
        }
    }
}

/// The engine. Cheap to clone (an `Arc`); share it between tasks.
#[derive(Clone)]
pub struct GovernanceEngine {
    inner: Arc<EngineInner>,
}

impl std::fmt::Debug for GovernanceEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GovernanceEngine")
            .field("rules", &self.inner.policies.load().active_rules())
            .finish()
    }
}

/// Configures a [`GovernanceEngine`].
pub struct EngineBuilder {
    policies: Vec<Policy>,
    files: Vec<PathBuf>,
    clock: Arc<dyn Clock>,
    org_timezone: Option<Tz>,
    failure_mode: FailureMode,
    signal_timeout: Duration,
    review_ttl: Option<Duration>,
    state: Arc<dyn StateStore>,
    shared: Option<Arc<dyn SharedStateStore>>,
    reviews: Arc<dyn ReviewStore>,
    audit: Option<AuditConfig>,
    extra_sinks: Vec<Arc<dyn AuditSink>>,
    signer: Option<Arc<RunSigner>>,
    flush_timeout: Duration,
    audit_queue: usize,
    audit_sealers: Option<usize>,
    audit_caller_batch: Option<usize>,
    tool_evals: Vec<(String, EvaluationRunConfig)>,
    run_eval: Option<EvaluationRunConfig>,
    observers: Vec<Arc<dyn DecisionObserver>>,
    customs: decide::custom::CustomRegistry,
    notify: Option<NotifyConfig>,
}

impl Default for EngineBuilder {
    fn default() -> Self {
        EngineBuilder {
            policies: Vec::new(),
            files: Vec::new(),
            clock: Arc::new(SystemClock),
            org_timezone: None,
            failure_mode: FailureMode::Closed,
            signal_timeout: Duration::from_millis(100),
            review_ttl: None,
            state: Arc::new(MemoryStateStore::new()),
            shared: None,
            reviews: Arc::new(MemoryReviewStore::new()),
            audit: None,
            extra_sinks: Vec::new(),
            signer: None,
            flush_timeout: Duration::from_secs(5),
            audit_queue: BusConfig::default().queue_capacity,
            audit_sealers: None,
            audit_caller_batch: None,
            tool_evals: Vec::new(),
            run_eval: None,
            observers: Vec::new(),
            customs: decide::custom::CustomRegistry::new(),
            notify: None,
        }
    }
}

impl EngineBuilder {
    /// Adds a parsed policy.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policies.push(policy);
        self
    }

    /// Adds policy files or folders (loaded by [`build`](Self::build)).
    pub fn policy_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.files.push(path.into());
        self
    }

    /// Sets the clock (default: the system clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sets the org timezone, overriding the policies' `timezone`.
    pub fn org_timezone(mut self, tz: Tz) -> Self {
        self.org_timezone = Some(tz);
        self
    }

    /// What to decide on an internal failure (default closed: block).
    pub fn failure_mode(mut self, mode: FailureMode) -> Self {
        self.failure_mode = mode;
        self
    }

    /// How long a signal provider or subject extractor may take (default 100 ms).
    pub fn signal_timeout(mut self, timeout: Duration) -> Self {
        self.signal_timeout = timeout;
        self
    }

    /// Pending reviews expire after this long (default: never).
    pub fn review_ttl(mut self, ttl: Duration) -> Self {
        self.review_ttl = Some(ttl);
        self
    }

    /// Sets the state store (default: in memory). Replaces a shared store set before.
    pub fn state_store(mut self, store: Arc<dyn StateStore>) -> Self {
        self.state = store;
        self.shared = None;
        self
    }

    /// Keeps counters, metric windows, run history and run flags in a store shared by
    /// processes: each decision reads them in one round trip (see
    /// [`SharedStateStore`]). A failing store makes decisions follow the
    /// [`failure_mode`](Self::failure_mode), with an `error` audit event.
    pub fn shared_state_store(mut self, store: Arc<dyn SharedStateStore>) -> Self {
        self.shared = Some(store);
        self
    }

    /// Keeps the engine's state on Redis (see `docs/operations-redis.md`): connects at the
    /// first decision, each call bounded by `config.timeout`.
    #[cfg(feature = "redis")]
    pub fn redis_state(self, config: crate::state::redis::RedisConfig) -> Self {
        self.shared_state_store(Arc::new(crate::state::redis::LazyRedisStore::new(config)))
    }

    /// Posts each review raised and decided by this engine to webhooks (signed JSON or Slack
    /// messages, see [`NotifyConfig`]), from a worker thread: retried with backoff, never on
    /// the decision path.
    pub fn notify(mut self, config: NotifyConfig) -> Self {
        self.notify = Some(config);
        self
    }

    /// Sets the review store (default: in memory).
    pub fn review_store(mut self, store: Arc<dyn ReviewStore>) -> Self {
        self.reviews = store;
        self
    }

    /// Turns on the audit trail with this configuration: its sinks (the JSONL file sink in
    /// `./toolgate-audit/` when none is listed) and its redaction rules. Without `audit` or
    /// [`audit_sink`](Self::audit_sink), the engine writes no audit trail.
    pub fn audit(mut self, config: AuditConfig) -> Self {
        self.audit = Some(config);
        self
    }

    /// Events queued for one audit sink (default 65,536) past which the audit worker waits
    /// for the sink to take some (at most the flush timeout per batch) instead of queueing
    /// more: a sink slower than the decisions slows the audit worker, then the callers
    /// (past 32,768 events waiting in a sealer thread's queue they seal, and wait, themselves), so memory
    /// stays bounded and no event is dropped unless a sink stays stuck past the timeout.
    pub fn audit_queue_capacity(mut self, events: usize) -> Self {
        self.audit_queue = events.max(1);
        self
    }

    /// How many threads seal audit events (write them to canonical JSON, hash and chain them);
    /// default: one per core, up to 4. Each run's events are all sealed by one thread, in
    /// order; different runs are spread over the threads. At least 1.
    pub fn audit_sealer_threads(mut self, threads: usize) -> Self {
        self.audit_sealers = Some(threads.max(1));
        self
    }

    /// How many audit events may wait in a sealer thread's queue before the caller that adds
    /// the next one seals the queue itself, in one batch, on its own thread (at least 1).
    ///
    /// Default: 512 when the process can run on one core only (by its CPU affinity or quota):
    /// there a sealer thread could only run *instead of* the caller, and small batches sealed by
    /// the caller stay in the CPU's cache (into a null sink, 250,000 → 380,000 audited
    /// decisions/s on one core; docs/performance.md). Otherwise 32,768: the sealer threads do the work
    /// beside the callers, and callers seal only when they outrun them (backpressure).
    /// A lower value moves sealing onto the deciding threads: one decision in a few hundred
    /// then carries the cost of sealing the batch.
    pub fn audit_caller_batch(mut self, events: usize) -> Self {
        self.audit_caller_batch = Some(events.max(1));
        self
    }

    /// Adds an audit sink (turning the audit trail on), e.g. a `MemorySink` in tests or your own.
    pub fn audit_sink(mut self, sink: Arc<dyn AuditSink>) -> Self {
        self.extra_sinks.push(sink);
        self
    }

    /// Redacts tool args and outputs before events are hashed.
    pub fn redaction(mut self, redaction: RedactionConfig) -> Self {
        self.audit.get_or_insert_with(AuditConfig::default);
        if let Some(a) = self.audit.as_mut() {
            a.redaction = redaction;
        }
        self
    }

    /// Signs every run's audit chain with `signer` (turning the audit trail on): `run.ended`
    /// and periodic `checkpoint` events carry `signature` and `keyId` (see
    /// [`crate::audit::sign`]). Overrides [`AuditConfig::signing_key`].
    pub fn signing_key(mut self, signer: RunSigner) -> Self {
        self.audit.get_or_insert_with(AuditConfig::default);
        self.signer = Some(Arc::new(signer));
        self
    }

    /// Bounds flushing the audit trail on `Run::end` and shutdown (default 5 s).
    pub fn audit_flush_timeout(mut self, timeout: Duration) -> Self {
        self.flush_timeout = timeout;
        self
    }

    /// Evaluates the output of tools matching `tool_glob` after each call; the result rides on
    /// the `tool.result` audit event. The first matching glob wins.
    pub fn evaluate_tool(
        mut self,
        tool_glob: impl Into<String>,
        config: EvaluationRunConfig,
    ) -> Self {
        self.tool_evals.push((tool_glob.into(), config));
        self
    }

    /// Evaluates each run's final response (given to `Run::end`); the result rides on the
    /// `run.ended` audit event.
    pub fn evaluate_run(mut self, config: EvaluationRunConfig) -> Self {
        self.run_eval = Some(config);
        self
    }

    /// Loads and compiles the policies and builds the engine. With an audit trail configured,
    /// call it inside a tokio runtime (the sinks' workers run on it).
    pub fn build(self) -> Result<GovernanceEngine, EngineError> {
        let compiled = compile_all(self.policies, &self.files)?;
        let audit = if self.audit.is_some() || !self.extra_sinks.is_empty() {
            let config = self.audit.unwrap_or_default();
            let redactor = Redactor::new(&config.redaction)?;
            let mut sinks = if config.sinks.is_empty() && !self.extra_sinks.is_empty() {
                Vec::new()
            } else {
                config.build_sinks()?
            };
            sinks.extend(self.extra_sinks);
            let signer = match (self.signer, &config.signing_key) {
                (Some(s), _) => Some(s),
                (None, Some(path)) => Some(Arc::new(RunSigner::from_file(path)?)),
                (None, None) => None,
            };
            Some(AuditState::new(
                // The sinks' tasks run on the bus's own thread: the sealer (and a caller
                // sealing past the queue's limit) can wait for room without stalling them.
                AuditBus::new(
                    sinks,
                    BusConfig {
                        own_thread: true,
                        queue_capacity: self.audit_queue,
                        // Large hand-offs to the sinks: the file sink syncs once per batch
                        // that ends a run.
                        max_batch: 8_192,
                    },
                ),
                redactor,
                self.flush_timeout,
                audit::sealer::SealerConfig {
                    threads: self.audit_sealers,
                    caller_batch: self.audit_caller_batch,
                },
                signer,
            ))
        } else {
            None
        };
        let mut evals = EngineEvals::default();
        for (glob, config) in &self.tool_evals {
            let matcher = crate::policy::glob_matcher(glob).map_err(|e| EngineError::Glob {
                glob: glob.clone(),
                message: e.kind().to_string(),
            })?;
            let set = EvalSet::build(config).map_err(|source| EngineError::Eval {
                target: format!("tool \"{glob}\""),
                source,
            })?;
            evals.per_tool.push((matcher, set));
        }
        if let Some(config) = &self.run_eval {
            evals.per_run = Some(EvalSet::build(config).map_err(|source| EngineError::Eval {
                target: "run".into(),
                source,
            })?);
        }
        Ok(GovernanceEngine {
            inner: Arc::new(EngineInner {
                policies: ArcSwap::from_pointee(compiled),
                clock: self.clock,
                org_timezone: self.org_timezone,
                failure_mode: self.failure_mode,
                signal_timeout: self.signal_timeout,
                review_ttl: self.review_ttl,
                state: self.state,
                shared: self.shared,
                reviews: self.reviews,
                fingerprints: hitl::fp_cache::FingerprintCache::default(),
                tz_names: decide::tz::TzNames::default(),
                signals: ArcSwap::from_pointee(SignalRegistry::new()),
                customs: ArcSwap::from_pointee(self.customs),
                extractors: ArcSwap::from_pointee(Vec::new()),
                register_lock: parking_lot::Mutex::new(()),
                audit,
                evals,
                observers: self.observers.into(),
                notifier: self
                    .notify
                    .filter(|c| !c.urls.is_empty())
                    .map(|c| Arc::new(Notifier::start(c))),
            }),
        })
    }
}

fn compile_all(
    mut policies: Vec<Policy>,
    files: &[PathBuf],
) -> Result<CompiledPolicies, PolicyErrors> {
    if !files.is_empty() {
        let loaded = load_policies(files)?;
        let mut all = loaded.policies().to_vec();
        all.append(&mut policies);
        policies = all;
    }
    CompiledPolicies::compile(policies, &[])
}

impl GovernanceEngine {
    /// Starts configuring an engine.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// Starts a run. Emits `run.started`.
    pub fn start_run(&self, context: RunContext) -> Run {
        Run::new(self.inner.clone(), context)
    }

    /// The state store shared by processes, when one is configured.
    #[cfg(all(feature = "mcp", feature = "http"))]
    pub(crate) fn shared_store(&self) -> Option<Arc<dyn SharedStateStore>> {
        self.inner.shared.clone()
    }

    /// The engine's time, ms since the Unix epoch.
    #[cfg(all(feature = "mcp", feature = "http"))]
    pub(crate) fn now_ms(&self) -> i64 {
        self.inner.clock.now().timestamp_millis()
    }

    /// Registers (or replaces) the signal provider for `key`. Safe while runs are live.
    pub fn register_signal(&self, key: impl Into<String>, provider: impl SignalProvider) {
        let _g = self.inner.register_lock.lock();
        let mut map = (**self.inner.signals.load()).clone();
        map.insert(key.into(), Arc::new(provider));
        self.inner.signals.store(Arc::new(map));
    }

    /// Registers a subject extractor for tools matching `tool_glob` (case-insensitive).
    pub fn register_subject_extractor(
        &self,
        tool_glob: &str,
        extractor: impl SubjectExtractor,
    ) -> Result<(), EngineError> {
        let glob = crate::policy::glob_matcher(tool_glob).map_err(|e| EngineError::Glob {
            glob: tool_glob.to_string(),
            message: e.kind().to_string(),
        })?;
        let _g = self.inner.register_lock.lock();
        let mut list: Vec<RegisteredExtractor> = self
            .inner
            .extractors
            .load()
            .iter()
            .map(|e| RegisteredExtractor {
                glob: e.glob.clone(),
                extractor: e.extractor.clone(),
            })
            .collect();
        list.push(RegisteredExtractor {
            glob,
            extractor: Arc::new(extractor),
        });
        self.inner.extractors.store(Arc::new(list));
        Ok(())
    }

    /// Replaces the policies atomically. Decisions in flight finish on the old policies; on
    /// error the old policies stay in place.
    pub fn reload(&self, policies: Vec<Policy>) -> Result<(), EngineError> {
        let compiled = CompiledPolicies::compile(policies, &[])?;
        self.inner.policies.store(Arc::new(compiled));
        Ok(())
    }

    /// Reloads from policy files or folders.
    pub fn reload_paths(&self, paths: &[PathBuf]) -> Result<(), EngineError> {
        let compiled = load_policies(paths)?;
        self.inner.policies.store(Arc::new(compiled));
        Ok(())
    }

    /// The review store, to list, approve, deny or expire reviews.
    pub fn reviews(&self) -> Reviews<'_> {
        Reviews { engine: self }
    }

    /// Flushes the audit sinks and shuts them down, bounded by the flush timeout; then waits
    /// (at most [`NOTIFY_DRAIN`]) for review notifications still on their way.
    pub async fn shutdown(&self) -> Result<(), AuditError> {
        let audit = match &self.inner.audit {
            Some(a) => a.drained_bus().shutdown(a.flush_timeout).await,
            None => Ok(()),
        };
        // Review notifications still on their way get a bounded moment to leave.
        if let Some(n) = &self.inner.notifier {
            let left = n.drain(NOTIFY_DRAIN).await;
            if left > 0 {
                tracing::warn!("{left} review notification(s) not delivered at shutdown");
            }
        }
        audit
    }

    /// Flushes the audit sinks, bounded by the flush timeout.
    pub async fn flush(&self) -> Result<(), AuditError> {
        match &self.inner.audit {
            Some(a) => a.drained_bus().flush(a.flush_timeout).await,
            None => Ok(()),
        }
    }

    /// Audit events captured and not yet sealed (0 without an audit trail): how far the
    /// audit worker is behind the decisions. It grows while a sink is slower than the
    /// decisions (see [`EngineBuilder::audit_queue_capacity`]).
    pub fn audit_backlog(&self) -> usize {
        self.inner.audit.as_ref().map_or(0, |a| a.sealer.backlog())
    }

    /// The current compiled policies.
    pub fn policies(&self) -> Arc<CompiledPolicies> {
        self.inner.policies.load_full()
    }
}

/// How long [`GovernanceEngine::shutdown`] waits for review notifications still on their way.
pub const NOTIFY_DRAIN: Duration = Duration::from_secs(5);

/// Access to the engine's human reviews.
#[derive(Debug)]
pub struct Reviews<'a> {
    engine: &'a GovernanceEngine,
}

impl Reviews<'_> {
    /// Every review.
    pub fn list(&self) -> Vec<Review> {
        self.engine.inner.reviews.list()
    }

    /// Pending reviews.
    pub fn pending(&self) -> Vec<Review> {
        self.list()
            .into_iter()
            .filter(|r| r.status == ReviewStatus::Pending)
            .collect()
    }

    /// Records a verdict (with reviewer and comment) on a pending review. Of two verdicts on
    /// one review, one wins and the other gets [`ReviewError::AlreadyDecided`].
    pub fn decide(&self, id: &str, verdict: &ReviewVerdict) -> Result<Review, ReviewError> {
        let r = self.engine.inner.reviews.decide_with(id, verdict)?;
        self.engine.inner.notify_decided(&r);
        Ok(r)
    }

    /// Approves a pending review: identical calls (same fingerprint) are allowed from now on.
    pub fn approve(&self, id: &str) -> Result<Review, ReviewError> {
        let now = self.engine.inner.clock.now();
        self.decide(id, &ReviewVerdict::new(ReviewStatus::Approved, now))
    }

    /// Denies a pending review: identical calls are blocked from now on.
    pub fn deny(&self, id: &str) -> Result<Review, ReviewError> {
        let now = self.engine.inner.clock.now();
        self.decide(id, &ReviewVerdict::new(ReviewStatus::Denied, now))
    }

    /// Expires a review: the next identical call asks for review again.
    pub fn expire(&self, id: &str) -> Result<Review, ReviewError> {
        let now = self.engine.inner.clock.now();
        self.engine
            .inner
            .reviews
            .decide(id, ReviewStatus::Expired, now)
    }
}
