//! The engine's [`SharedStateStore`] seam on Redis: a request becomes one `reserve` script
//! call, a settlement one `commit` script call.

use async_trait::async_trait;
use tokio::sync::OnceCell;

use super::{
    Commit, CounterSpec, RedisConfig, RedisPermit, RedisStateError, RedisStateStore,
    ReserveRequest, WindowSpec,
};
use crate::state::shared::LeaseRenewal;
use crate::state::shared::{
    Settlement, SharedPermit, SharedStateError, SharedStateStore, StateRequest, StateSnapshot,
};
use crate::state::{ChainClaim, ChainHead, CurrentRun, StateKey};

fn secs_ms(s: u64) -> i64 {
    i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX)
}

fn err(e: RedisStateError) -> SharedStateError {
    SharedStateError(e.to_string())
}

impl RedisStateStore {
    fn counter_key(&self, agent: &str, key: &StateKey) -> String {
        self.keys().counter(agent, key.slot, &key.scope)
    }

    fn window_key(&self, agent: &str, key: &StateKey) -> String {
        self.keys().window(agent, key.slot, &key.scope)
    }
}

#[async_trait]
impl SharedStateStore for RedisStateStore {
    async fn reserve(&self, req: StateRequest<'_>) -> Result<StateSnapshot, SharedStateError> {
        let r = ReserveRequest {
            run: Some(self.keys().run(req.agent, req.run_id)),
            counters: req
                .counters
                .iter()
                .map(|c| CounterSpec {
                    key: self.counter_key(req.agent, &c.key),
                    max: c.max,
                    window_ms: c.window_secs.map(secs_ms),
                    reserve: c.reserve,
                    expires: c.run_scoped,
                })
                .collect(),
            windows: req
                .windows
                .iter()
                .map(|w| WindowSpec {
                    key: self.window_key(req.agent, &w.key),
                    window_ms: secs_ms(w.window_secs),
                })
                .collect(),
            resume: req.resume,
            lease: req.lease.map(|l| super::LeaseSpec {
                owner: l.owner.clone(),
                head: l.head.as_ref().map(|h| (h.next_seq, h.last_hash.clone())),
            }),
        };
        let got = RedisStateStore::reserve(self, &r, req.now_ms)
            .await
            .map_err(err)?;
        Ok(StateSnapshot {
            granted: got.granted,
            counts: got.counts,
            permits: got
                .permits
                .into_iter()
                .map(|p| SharedPermit {
                    key: p.key,
                    member: p.member,
                })
                .collect(),
            windows: got.windows,
            history: got.history,
            aborted: got.aborted,
            lease_lost: got.lease_lost,
        })
    }

    async fn settle(
        &self,
        agent: &str,
        run_id: &str,
        s: &Settlement,
        now_ms: i64,
    ) -> Result<(), SharedStateError> {
        let c = Commit {
            run: Some(self.keys().run(agent, run_id)),
            tool: s.history.clone(),
            metrics: Vec::new(),
            metrics_at: s
                .metrics
                .iter()
                .filter(|m| m.value.is_finite())
                .map(|m| {
                    (
                        self.window_key(agent, &m.key),
                        secs_ms(m.window_secs),
                        m.value,
                        m.at_ms,
                    )
                })
                .collect(),
            adds: s
                .adds
                .iter()
                .map(|a| {
                    (
                        self.counter_key(agent, &a.key),
                        a.window_secs.map(secs_ms),
                        a.run_scoped,
                    )
                })
                .collect(),
            releases: s
                .release
                .iter()
                .map(|p| RedisPermit {
                    key: p.key.clone(),
                    member: p.member.clone(),
                })
                .collect(),
            aborted: s.aborted,
        };
        self.commit(&c, now_ms).await.map_err(err)
    }

    async fn end_run(
        &self,
        agent: &str,
        run_id: &str,
        scoped: &[StateKey],
    ) -> Result<(), SharedStateError> {
        let run = self.keys().run(agent, run_id);
        let keys: Vec<String> = scoped
            .iter()
            .flat_map(|k| [self.counter_key(agent, k), self.window_key(agent, k)])
            .collect();
        RedisStateStore::end_run(self, &run, &keys)
            .await
            .map_err(err)
    }

    async fn claim_chain(
        &self,
        agent: &str,
        run_id: &str,
        owner: &str,
    ) -> Result<ChainClaim, SharedStateError> {
        let run = self.keys().run(agent, run_id);
        RedisStateStore::claim_chain(self, &run, owner)
            .await
            .map_err(err)
    }

    async fn leave_chain(
        &self,
        agent: &str,
        run_id: &str,
        owner: &str,
        head: Option<&ChainHead>,
        ended: bool,
    ) -> Result<bool, SharedStateError> {
        let run = self.keys().run(agent, run_id);
        RedisStateStore::leave_chain(self, &run, owner, head, ended)
            .await
            .map_err(err)
    }

    async fn renew_leases(&self, runs: &[LeaseRenewal]) -> Result<Vec<bool>, SharedStateError> {
        let runs: Vec<_> = runs
            .iter()
            .map(|r| {
                (
                    self.keys().run(&r.agent, &r.run_id),
                    r.hold.owner.clone(),
                    r.hold.head.clone(),
                )
            })
            .collect();
        RedisStateStore::renew_leases(self, &runs)
            .await
            .map_err(err)
    }

    fn lease_duration(&self) -> Option<std::time::Duration> {
        Some(self.config().lease)
    }

    async fn acquire_current_run(
        &self,
        agent: &str,
        key: &str,
        fresh: &str,
        now_ms: i64,
        idle_ms: i64,
    ) -> Result<CurrentRun, SharedStateError> {
        RedisStateStore::acquire_current_run(self, agent, key, fresh, now_ms, idle_ms)
            .await
            .map_err(err)
    }

    async fn touch_current_run(
        &self,
        agent: &str,
        key: &str,
        run_id: &str,
        now_ms: i64,
    ) -> Result<(), SharedStateError> {
        RedisStateStore::touch_current_run(self, agent, key, run_id, now_ms)
            .await
            .map_err(err)
    }

    async fn end_idle_current_run(
        &self,
        agent: &str,
        key: &str,
        run_id: &str,
        now_ms: i64,
        idle_ms: i64,
    ) -> Result<bool, SharedStateError> {
        RedisStateStore::end_idle_current_run(self, agent, key, run_id, now_ms, idle_ms)
            .await
            .map_err(err)
    }

    fn round_trips(&self) -> u64 {
        RedisStateStore::round_trips(self)
    }
}

/// A Redis store that connects at its first use (so an engine can be built without awaiting),
/// bounded by the configured timeout; a failed connection is tried again at the next call.
#[derive(Debug)]
pub struct LazyRedisStore {
    config: RedisConfig,
    store: OnceCell<RedisStateStore>,
    /// Whether a first connection was tried (it may take up to 1 s; later tries, the timeout).
    tried: std::sync::atomic::AtomicBool,
}

impl LazyRedisStore {
    /// A store for `config`; nothing is connected yet.
    pub fn new(config: RedisConfig) -> Self {
        LazyRedisStore {
            config,
            store: OnceCell::new(),
            tried: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The connected store, connecting first if needed: the first time within one connect
    /// (the timeout, at least 1 s), later within the configured timeout, so a server that is
    /// down or accepts and never answers costs a decision no more than the timeout.
    pub async fn get(&self) -> Result<&RedisStateStore, SharedStateError> {
        let first = !self.tried.swap(true, std::sync::atomic::Ordering::Relaxed);
        let timeout = if first {
            self.config.timeout.max(std::time::Duration::from_secs(1))
        } else {
            self.config.timeout
        };
        self.store
            .get_or_try_init(|| async {
                match tokio::time::timeout(timeout, RedisStateStore::connect(self.config.clone()))
                    .await
                {
                    Ok(r) => r.map_err(err),
                    Err(_) => Err(SharedStateError(format!(
                        "redis state store {}: no connection within {} ms",
                        super::redact_url(&self.config.url),
                        timeout.as_millis()
                    ))),
                }
            })
            .await
    }
}

#[async_trait]
impl SharedStateStore for LazyRedisStore {
    async fn reserve(&self, req: StateRequest<'_>) -> Result<StateSnapshot, SharedStateError> {
        SharedStateStore::reserve(self.get().await?, req).await
    }

    async fn settle(
        &self,
        agent: &str,
        run_id: &str,
        s: &Settlement,
        now_ms: i64,
    ) -> Result<(), SharedStateError> {
        self.get().await?.settle(agent, run_id, s, now_ms).await
    }

    async fn end_run(
        &self,
        agent: &str,
        run_id: &str,
        scoped: &[StateKey],
    ) -> Result<(), SharedStateError> {
        SharedStateStore::end_run(self.get().await?, agent, run_id, scoped).await
    }

    async fn claim_chain(
        &self,
        agent: &str,
        run_id: &str,
        owner: &str,
    ) -> Result<ChainClaim, SharedStateError> {
        SharedStateStore::claim_chain(self.get().await?, agent, run_id, owner).await
    }

    async fn leave_chain(
        &self,
        agent: &str,
        run_id: &str,
        owner: &str,
        head: Option<&ChainHead>,
        ended: bool,
    ) -> Result<bool, SharedStateError> {
        SharedStateStore::leave_chain(self.get().await?, agent, run_id, owner, head, ended).await
    }

    async fn renew_leases(&self, runs: &[LeaseRenewal]) -> Result<Vec<bool>, SharedStateError> {
        SharedStateStore::renew_leases(self.get().await?, runs).await
    }

    fn lease_duration(&self) -> Option<std::time::Duration> {
        Some(self.config.lease)
    }

    async fn acquire_current_run(
        &self,
        agent: &str,
        key: &str,
        fresh: &str,
        now_ms: i64,
        idle_ms: i64,
    ) -> Result<CurrentRun, SharedStateError> {
        SharedStateStore::acquire_current_run(self.get().await?, agent, key, fresh, now_ms, idle_ms)
            .await
    }

    async fn touch_current_run(
        &self,
        agent: &str,
        key: &str,
        run_id: &str,
        now_ms: i64,
    ) -> Result<(), SharedStateError> {
        SharedStateStore::touch_current_run(self.get().await?, agent, key, run_id, now_ms).await
    }

    async fn end_idle_current_run(
        &self,
        agent: &str,
        key: &str,
        run_id: &str,
        now_ms: i64,
        idle_ms: i64,
    ) -> Result<bool, SharedStateError> {
        SharedStateStore::end_idle_current_run(
            self.get().await?,
            agent,
            key,
            run_id,
            now_ms,
            idle_ms,
        )
        .await
    }

    fn round_trips(&self) -> u64 {
        self.store.get().map_or(0, RedisStateStore::round_trips)
    }
}
