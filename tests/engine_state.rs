//! The engine's stateful semantics — maxCalls, metricWindow, sequence, hitl pause/resume — as
//! ONE suite that runs against both state stores: every `store_test!` runs once on the memory
//! store and once on Redis (`TOOLGATE_TEST_REDIS_URL`; the Redis half is skipped with a printed
//! reason when unset and fails when set and unreachable). Each Redis engine gets its own key
//! prefix, so tests (and other processes on the same server) never share state.

mod common;

use std::sync::Arc;

use toolgate::engine::{EngineBuilder, GovernanceEngine, ManualClock};

/// The state store a test runs on.
#[derive(Debug, Clone)]
pub enum Store {
    /// The embedded default.
    Memory,
    /// Redis at this URL.
    Redis(String),
}

impl Store {
    /// Redis from `TOOLGATE_TEST_REDIS_URL`, `None` (with a printed reason) when unset.
    pub fn redis() -> Option<Store> {
        if !cfg!(feature = "redis") {
            eprintln!("skipped (Redis half): built without the `redis` feature");
            return None;
        }
        match std::env::var("TOOLGATE_TEST_REDIS_URL") {
            Ok(u) if !u.is_empty() => Some(Store::Redis(u)),
            _ => {
                eprintln!("skipped (Redis half): TOOLGATE_TEST_REDIS_URL is not set");
                None
            }
        }
    }

    /// `builder` on this store (a fresh key prefix on Redis).
    pub fn on(&self, builder: EngineBuilder) -> EngineBuilder {
        match self {
            Store::Memory => builder,
            #[cfg(not(feature = "redis"))]
            Store::Redis(_) => unreachable!("no Redis store without the `redis` feature"),
            #[cfg(feature = "redis")]
            Store::Redis(url) => {
                let mut cfg = toolgate::state::redis::RedisConfig::new(url.clone());
                cfg.prefix = format!("tgtest:engine:{}", uuid::Uuid::now_v7().simple());
                cfg.ttl = std::time::Duration::from_secs(600);
                // a busy shared test machine: the fault test checks the 50 ms default
                cfg.timeout = std::time::Duration::from_secs(2);
                builder.redis_state(cfg)
            }
        }
    }

    /// An engine with `policy` and `clock` on this store.
    pub fn engine(&self, json: &str, clock: &ManualClock) -> GovernanceEngine {
        self.on(common::builder(json, clock))
            .build()
            .expect("engine builds")
    }

    /// A plain builder (no policy) on this store with `clock`.
    pub fn builder(&self, clock: &ManualClock) -> EngineBuilder {
        self.on(GovernanceEngine::builder().clock(Arc::new(clock.clone())))
    }
}

/// Defines a test that runs on both stores: `store_test! { async fn name(store) { … } }`
/// becomes `name::memory` and `name::redis`.
macro_rules! store_test {
    (async fn $name:ident($store:ident) $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn body($store: $crate::Store) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn memory() {
                body($crate::Store::Memory).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn redis() {
                if let Some(s) = $crate::Store::redis() {
                    // Every decision of the test goes through Redis: a failure of the store
                    // would show as BLOCKED_FAILURE decisions (fail-closed default).
                    body(s).await
                }
            }
        }
    };
}

#[path = "engine_state/counting.rs"]
mod counting;
#[path = "engine_state/hitl.rs"]
mod hitl;
#[path = "engine_state/spec.rs"]
mod spec;
#[path = "engine_state/windows.rs"]
mod windows;
