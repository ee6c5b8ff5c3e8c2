//! The engine's shared state behind every [`GovernanceEngine`](crate::engine::GovernanceEngine)
//! handle and its runs: the compiled policies, the rooms' engine-wide parts (what decisions
//! read, the audit side, reviews and notifications, evaluations, observers) and the failure mode.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::audit::evaluations::EngineEvals;
use crate::engine::audit::state::AuditState;
use crate::engine::clock::Clock;
use crate::engine::decide;
use crate::engine::hitl;
use crate::engine::hitl::notify::{Notifier, NotifyKind};
use crate::engine::hitl::reviews::{Review, ReviewStore};
use crate::engine::llm;
use crate::engine::run;
use crate::policy::CompiledPolicies;
use crate::state::SharedStateStore;

/// What the engine decides when it fails internally.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailureMode {
    /// Allow the call.
    Open,
    /// Block the call (the default).
    #[default]
    Closed,
}

pub(crate) struct EngineInner {
    pub(crate) policies: crate::engine::decide::current::CurrentPolicies,
    pub(crate) clock: Arc<dyn Clock>,
    /// What decisions read of the engine: registries, the state store, time zones, timeouts.
    pub(crate) decide: decide::env::DecideEnv,
    pub(crate) failure_mode: FailureMode,
    pub(crate) review_ttl: Option<Duration>,
    /// A store shared by processes: when set, decisions read and write state there instead.
    pub(crate) shared: Option<Arc<dyn SharedStateStore>>,
    pub(crate) reviews: Arc<dyn ReviewStore>,
    /// Hitl fingerprints of the calls seen (see `hitl/fp_cache.rs`).
    pub(crate) fingerprints: hitl::fp_cache::FingerprintCache,
    /// The key of the hitl fingerprint's keyed part (see `hitl::reviews::keyed_fingerprint`).
    pub(crate) fingerprint_key: Box<[u8]>,
    pub(crate) register_lock: parking_lot::Mutex<()>,
    /// The engine's side of the audit trail (see `audit/`), when one is configured.
    pub(crate) audit: Option<Arc<AuditState>>,
    pub(crate) evals: EngineEvals,
    pub(crate) observers: run::observe::Observers,
    /// Webhooks told of reviews raised and decided (see `hitl/notify.rs`).
    pub(crate) notifier: Option<Arc<Notifier>>,
    /// [`GovernanceEngine::shutdown`] was called: runs decide nothing more.
    pub(crate) shut_down: std::sync::atomic::AtomicBool,
    /// The model's side: prices, whether messages are recorded.
    pub(crate) llm: llm::LlmOptions,
}

impl EngineInner {
    /// Tells the audit trail which detectors' findings to redact from every event: those of
    /// `compiled`'s redacting `sensitiveData` conditions.
    pub(crate) fn set_redacting(&self, compiled: &CompiledPolicies) {
        if let Some(a) = &self.audit {
            a.redactor.set_detectors(compiled.redacting.clone());
        }
    }
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
