//! [`EngineBuilder`]: configures a [`GovernanceEngine`](crate::engine::GovernanceEngine)
//! (policies, clock, state, reviews, audit, evaluations, signals, subjects, custom conditions,
//! notifications). [`EngineBuilder::build`] (beside the engine, in `mod.rs`) builds it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono_tz::Tz;

use super::clock::{Clock, SystemClock};
use super::decide;
use super::decide::custom::CustomCondition;
use super::hitl::notify::NotifyConfig;
use super::hitl::reviews::{MemoryReviewStore, ReviewStore};
use super::llm::Prices;
use super::run::inner::FailureMode;
use super::run::observe::DecisionObserver;
use crate::audit::{AuditConfig, AuditSink, BusConfig, RedactionConfig, RunSigner};
use crate::eval::EvaluationRunConfig;
use crate::policy::Policy;
use crate::state::{MemoryStateStore, SharedStateStore, StateStore};

/// Configures a [`GovernanceEngine`](crate::engine::GovernanceEngine).
pub struct EngineBuilder {
    pub(super) policies: Vec<Policy>,
    pub(super) files: Vec<PathBuf>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) org_timezone: Option<Tz>,
    pub(super) failure_mode: FailureMode,
    pub(super) signal_timeout: Duration,
    pub(super) review_ttl: Option<Duration>,
    pub(super) state: Arc<dyn StateStore>,
    pub(super) shared: Option<Arc<dyn SharedStateStore>>,
    pub(super) reviews: Arc<dyn ReviewStore>,
    pub(super) audit: Option<AuditConfig>,
    pub(super) extra_sinks: Vec<Arc<dyn AuditSink>>,
    pub(super) signer: Option<Arc<RunSigner>>,
    pub(super) flush_timeout: Duration,
    pub(super) audit_queue: usize,
    pub(super) audit_sealers: Option<usize>,
    pub(super) audit_caller_batch: Option<usize>,
    pub(super) tool_evals: Vec<(String, EvaluationRunConfig)>,
    pub(super) run_eval: Option<EvaluationRunConfig>,
    pub(super) observers: Vec<Arc<dyn DecisionObserver>>,
    pub(super) customs: decide::custom::CustomRegistry,
    pub(super) notify: Option<NotifyConfig>,
    pub(super) scan_limit: usize,
    pub(super) stand_ins: bool,
    pub(super) fingerprint_key: Option<Vec<u8>>,
    pub(super) prices: Prices,
    pub(super) record_messages: bool,
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
            scan_limit: decide::conditions::DEFAULT_SCAN_LIMIT,
            stand_ins: false,
            fingerprint_key: None,
            prices: Prices::new(),
            record_messages: false,
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

    /// The price table for model calls (see [`Prices`]): a usage recorded without a cost
    /// ([`LlmUsage::cost_usd`](crate::engine::LlmUsage::cost_usd) `None`) is priced from it, so `llm_cost_usd` budgets work
    /// without the app computing costs. A model without a price records no cost.
    pub fn prices(mut self, prices: Prices) -> Self {
        self.prices = prices;
        self
    }

    /// Writes the messages of each model call decided by [`Run::before_llm`](crate::engine::Run::before_llm) as an
    /// `llm.messages` audit event (default off): role, kind and content of each message, a
    /// content past 16 KiB truncated, redacted like arguments.
    pub fn record_messages(mut self, on: bool) -> Self {
        self.record_messages = on;
        self
    }

    /// Sets the review store (default: in memory).
    pub fn review_store(mut self, store: Arc<dyn ReviewStore>) -> Self {
        self.reviews = store;
        self
    }

    /// `sensitiveData` scans at most `bytes` of each string (default 1 MiB). Past it, a
    /// detector's answer on the rest is missing data: the condition resolves it by its own or
    /// its rule's `onMissing`, else to block (never silently allowed), and the decision's
    /// `missing` records the cut.
    pub fn sensitive_scan_limit(mut self, bytes: usize) -> Self {
        self.scan_limit = bytes.max(1);
        self
    }

    /// The key of the hitl fingerprint's keyed part (HMAC-SHA256; default: 32 random bytes per
    /// engine, held in memory only). When a redacting `sensitiveData` condition changed a
    /// call's arguments for the trail, its fingerprint also covers the real arguments through
    /// this key, so an approval never covers a call that differs inside a redacted span.
    /// Engines that share a review store (replicas) must share the key for such calls to find
    /// each other's reviews; with different keys each asks for its own review (never a wrong
    /// approval). Keep it secret: with it, a guess of a redacted value can be checked against
    /// the fingerprint in the trail.
    pub fn hitl_fingerprint_key(mut self, key: &[u8]) -> Self {
        self.fingerprint_key = Some(key.to_vec());
        self
    }

    /// A what-if replay of a recorded trail: `sensitiveData` honours the trail's stand-ins
    /// (`[redacted:<detector>]`), and reports what they hide from it as undecidable.
    pub(crate) fn replaying_trail(mut self) -> Self {
        self.stand_ins = true;
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
}

impl EngineBuilder {
    /// Registers (or replaces) the custom condition `name` (policies name it in
    /// `{"kind": "custom", "name": ..}`).
    pub fn custom_condition(mut self, name: impl Into<String>, f: impl CustomCondition) -> Self {
        self.customs.insert(name.into(), Arc::new(f));
        self
    }
}

impl EngineBuilder {
    /// Registers an observer of decisions, results and run ends. Observers are called in
    /// registration order.
    pub fn observer(mut self, observer: Arc<dyn DecisionObserver>) -> Self {
        self.observers.push(observer);
        self
    }
}
