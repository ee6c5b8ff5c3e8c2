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
//! The engine's code lives in four rooms, plus [`GovernanceEngine`] here and its builder
//! (`builder.rs`):
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
mod builder;
mod clock;
mod decide;
mod hitl;
mod llm;
mod run;

// A path kept from the flat layout: `crate::engine::conditions` is used by `policy::compile`.
pub(crate) use decide::conditions;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

pub use builder::EngineBuilder;
pub use clock::{Clock, ManualClock, SystemClock};
pub use decide::call::{Enduser, RunContext, SubjectRef, ToolCall, ToolOutcome};
pub use decide::decision::{
    Decision, DecisionCode, Evaluated, EvaluatedRule, HitlInfo, ReviewStatus, SignalRecord,
};
pub use hitl::notify::{
    DELIVERY_HEADER, MAX_IN_FLIGHT as NOTIFY_MAX_IN_FLIGHT, Notifier, NotifyConfig, NotifyFormat,
    NotifyKind, QUEUE as NOTIFY_QUEUE, SIGNATURE_HEADER, TIMESTAMP_HEADER,
    delivery_signature as notify_delivery_signature, sign as notify_signature, slack_escape,
};
#[cfg(feature = "redis")]
pub(crate) use hitl::reviews::redis as redis_reviews;
pub use hitl::reviews::{
    EXPIRY_REVIEWER, FileReviewStore, MAX_REDACTED, MemoryReviewStore, Redacted, Review,
    ReviewError, ReviewHead, ReviewStore, ReviewVerdict, decided_event_body, expiry_verdict,
    fingerprint, status_word,
};
pub use llm::{LlmCall, LlmUsage, MAX_PRICES, ModelPrice, Prices, STATUS_BUDGET_EXCEEDED};
pub use run::guard::{Guarded, Refusal};
pub use run::handle::{PendingDecision, Run};
pub(crate) use run::inner::EngineInner;
pub use run::inner::FailureMode;
pub use run::observe::DecisionObserver;
pub use run::refused::RunClosed;

pub use decide::custom::{CustomCondition, CustomContext};
pub use decide::signals::SignalProvider;
pub use decide::subjects::{SubjectExtractor, SubjectInput};

use crate::audit::{AuditBus, AuditError, BusConfig, Redactor, RunSigner};
use crate::eval::EvalError;
use crate::policy::{CompiledPolicies, Policy, PolicyErrors, load_policies};
use audit::evaluations::{EngineEvals, EvalSet};
use audit::state::AuditState;
use decide::signals::SignalRegistry;
use decide::subjects::RegisteredExtractor;

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

impl GovernanceEngine {
    /// Starts configuring an engine.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }
}

impl EngineBuilder {
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
            Some(Arc::new(AuditState::new(
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
                self.clock.clone(),
                self.shared.clone(),
            )))
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
        if let Some(a) = &audit {
            a.redactor.set_detectors(compiled.redacting.clone());
        }
        Ok(GovernanceEngine {
            inner: Arc::new(EngineInner {
                policies: decide::current::CurrentPolicies::new(decide::profile::PolicySet::new(
                    Arc::new(compiled),
                )),
                clock: self.clock,
                decide: decide::env::DecideEnv {
                    org_timezone: self.org_timezone,
                    signal_timeout: self.signal_timeout,
                    state: self.state,
                    tz_names: decide::tz::TzNames::default(),
                    signals: ArcSwap::from_pointee(SignalRegistry::new()),
                    customs: ArcSwap::from_pointee(self.customs),
                    extractors: ArcSwap::from_pointee(Vec::new()),
                    scan_mode: decide::conditions::ScanMode {
                        limit: self.scan_limit,
                        stand_ins: self.stand_ins,
                    },
                },
                failure_mode: self.failure_mode,
                review_ttl: self.review_ttl,
                shared: self.shared,
                reviews: self.reviews,
                fingerprints: hitl::fp_cache::FingerprintCache::default(),
                fingerprint_key: self
                    .fingerprint_key
                    .unwrap_or_else(|| rand::random::<[u8; 32]>().to_vec())
                    .into(),
                register_lock: parking_lot::Mutex::new(()),
                audit,
                evals,
                observers: self.observers.into(),
                notifier: self
                    .notify
                    .filter(|c| !c.urls.is_empty())
                    .map(|c| Arc::new(Notifier::start(c))),
                shut_down: std::sync::atomic::AtomicBool::new(false),
                llm: llm::LlmOptions {
                    prices: self.prices,
                    record_messages: self.record_messages,
                },
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
    /// Starts a run. Emits `run.started`.
    pub fn start_run(&self, context: RunContext) -> Run {
        Run::new(self.inner.clone(), context)
    }

    /// The state store shared by processes, when one is configured.
    #[cfg(all(feature = "mcp", feature = "http"))]
    pub(crate) fn shared_store(&self) -> Option<Arc<dyn crate::state::SharedStateStore>> {
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
        let mut map = (**self.inner.decide.signals.load()).clone();
        map.insert(key.into(), Arc::new(provider));
        self.inner.decide.signals.store(Arc::new(map));
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
            .decide
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
        self.inner.decide.extractors.store(Arc::new(list));
        Ok(())
    }

    /// Replaces the policies atomically. Decisions in flight finish on the old policies; on
    /// error the old policies stay in place.
    pub fn reload(&self, policies: Vec<Policy>) -> Result<(), EngineError> {
        let compiled = CompiledPolicies::compile(policies, &[])?;
        self.inner.set_redacting(&compiled);
        self.inner
            .policies
            .store(decide::profile::PolicySet::new(Arc::new(compiled)));
        Ok(())
    }

    /// Reloads from policy files or folders.
    pub fn reload_paths(&self, paths: &[PathBuf]) -> Result<(), EngineError> {
        let compiled = load_policies(paths)?;
        self.inner.set_redacting(&compiled);
        self.inner
            .policies
            .store(decide::profile::PolicySet::new(Arc::new(compiled)));
        Ok(())
    }

    /// The review store, to list, approve, deny or expire reviews.
    pub fn reviews(&self) -> Reviews<'_> {
        Reviews { engine: self }
    }

    /// Flushes the audit sinks and shuts them down, bounded by the flush timeout; then waits
    /// (at most [`NOTIFY_DRAIN`]) for review notifications still on their way. From now on
    /// every run of the engine refuses decisions (see [`Run::closed`]) and writes nothing.
    pub async fn shutdown(&self) -> Result<(), AuditError> {
        self.inner
            .shut_down
            .store(true, std::sync::atomic::Ordering::Release);
        if let Some(a) = &self.inner.audit {
            a.shut_down
                .store(true, std::sync::atomic::Ordering::Release);
        }
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

    /// Whether [`shutdown`](Self::shutdown) was called: every run then refuses decisions
    /// (see [`Run::closed`]) and a run started now writes nothing.
    pub fn is_shut_down(&self) -> bool {
        self.inner
            .shut_down
            .load(std::sync::atomic::Ordering::Acquire)
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
        Arc::clone(&self.inner.policies.load().compiled)
    }
}

impl GovernanceEngine {
    /// Registers (or replaces) the custom condition `name` on a running engine. Safe while runs
    /// are live: decisions that start afterwards use it.
    pub fn register_condition(&self, name: impl Into<String>, f: impl CustomCondition) {
        let _g = self.inner.register_lock.lock();
        let mut map = (**self.inner.decide.customs.load()).clone();
        map.insert(name.into(), Arc::new(f));
        self.inner.decide.customs.store(Arc::new(map));
    }
}

/// How long [`GovernanceEngine::shutdown`] waits for review notifications still on their way.
pub const NOTIFY_DRAIN: Duration = Duration::from_millis(500);

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
        match self.engine.inner.reviews.decide_with(id, verdict) {
            Ok(r) => {
                self.engine.inner.notify_decided(&r);
                Ok(r)
            }
            Err(e) => {
                // The verdict lost to the expiry it recorded: the expiry is told once, here.
                if let ReviewError::AlreadyDecided {
                    expired_now: Some(r),
                    ..
                } = &e
                {
                    self.engine.inner.notify_decided(r);
                }
                Err(e)
            }
        }
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
