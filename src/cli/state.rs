//! `--state`, `--state-prefix`, `--state-timeout-ms` and `--failure-mode`: shared engine state
//! on Redis, for `replay`, `review` and `mcp-proxy`.

use crate::engine::{EngineBuilder, FailureMode};

/// Failure modes on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailureArg {
    /// Allow the call when the engine fails (the state store is down, a signal fails...).
    Open,
    /// Block the call when the engine fails (`BLOCKED_FAILURE`).
    Closed,
}

impl From<FailureArg> for FailureMode {
    fn from(f: FailureArg) -> Self {
        match f {
            FailureArg::Open => FailureMode::Open,
            FailureArg::Closed => FailureMode::Closed,
        }
    }
}

/// Where counters, windows, run history, run flags and reviews live.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct StateArgs {
    /// Share state (counters, windows, run history and flags, reviews) with every process using
    /// the same Redis: `redis://[[USER]:PASSWORD@]HOST:PORT/DB` (the password is never printed).
    #[arg(long, value_name = "URL", global = true)]
    pub state: Option<String>,
    /// Key prefix in Redis [default: toolgate].
    #[arg(long, value_name = "PREFIX", global = true)]
    pub state_prefix: Option<String>,
    /// Limit on every Redis call, in milliseconds [default: 50]; past it a decision follows
    /// --failure-mode.
    #[arg(long, value_name = "MS", global = true)]
    pub state_timeout_ms: Option<u64>,
    /// How long a run's lease lasts without renewal, in milliseconds [default: 10000]: a
    /// process holding a run renews it with every decision and on a timer; when it dies,
    /// another process takes the run over this long after its last renewal.
    #[arg(long, value_name = "MS", global = true)]
    pub state_lease_ms: Option<u64>,
}

impl StateArgs {
    /// The Redis configuration, or `None` without `--state`; an error names the bad option.
    #[cfg(feature = "redis")]
    pub fn redis(&self) -> Result<Option<crate::state::redis::RedisConfig>, String> {
        let Some(url) = &self.state else {
            if self.state_prefix.is_some()
                || self.state_timeout_ms.is_some()
                || self.state_lease_ms.is_some()
            {
                return Err(
                    "--state-prefix, --state-timeout-ms and --state-lease-ms need --state URL"
                        .into(),
                );
            }
            return Ok(None);
        };
        if !url.starts_with("redis://") && !url.starts_with("rediss://") {
            return Err(format!(
                "--state {}: expected redis://HOST:PORT/DB",
                crate::state::redis::redact_url(url)
            ));
        }
        let mut config = crate::state::redis::RedisConfig::new(url.clone());
        if let Some(p) = &self.state_prefix {
            if p.is_empty() {
                return Err("--state-prefix: must not be empty".into());
            }
            config.prefix = p.clone();
        }
        if let Some(ms) = self.state_timeout_ms {
            if ms == 0 || ms > 60_000 {
                return Err(format!("--state-timeout-ms {ms}: expected 1..=60000"));
            }
            config.timeout = std::time::Duration::from_millis(ms);
        }
        if let Some(ms) = self.state_lease_ms {
            if !(100..=600_000).contains(&ms) {
                return Err(format!("--state-lease-ms {ms}: expected 100..=600000"));
            }
            config.lease = std::time::Duration::from_millis(ms);
        }
        Ok(Some(config))
    }

    /// The review store on Redis, checked to answer now (a clear error at start rather than
    /// reviews silently not shared).
    #[cfg(feature = "redis")]
    pub fn review_store(
        config: &crate::state::redis::RedisConfig,
    ) -> Result<crate::state::redis::RedisReviewStore, String> {
        let store =
            crate::state::redis::RedisReviewStore::new(config).map_err(|e| e.to_string())?;
        // The first connection may need longer than a per-call limit of a few ms: one connect
        // (at most 1 s, as the engine's first connection), then the PING within that limit.
        // A server that accepts and never answers is no different from one that refuses.
        let mut probe = config.clone();
        probe.timeout = probe.timeout.max(std::time::Duration::from_secs(1));
        crate::state::redis::RedisReviewStore::new(&probe)
            .and_then(|p| p.ping())
            .map_err(|e| format!("--state: cannot reach Redis: {e}"))?;
        Ok(store)
    }

    /// Puts the engine's state and reviews on Redis when `--state` is given; otherwise leaves
    /// the builder as it is. Reaching the server is bounded (one connect and the store
    /// timeout); when it does not answer, `closed` refuses to start (the error names the
    /// server without its password), `open` starts anyway with a warning: decisions are then
    /// allowed with an `error` event each until the server answers (design §8).
    pub fn apply(&self, builder: EngineBuilder, mode: FailureArg) -> Result<EngineBuilder, String> {
        #[cfg(feature = "redis")]
        {
            let Some(config) = self.redis()? else {
                return Ok(builder);
            };
            let reviews = match (Self::review_store(&config), mode) {
                (Ok(r), _) => r,
                (Err(e), FailureArg::Closed) => {
                    return Err(format!(
                        "{e} (with --failure-mode open the process would start and allow calls)"
                    ));
                }
                (Err(e), FailureArg::Open) => {
                    eprintln!(
                        "warning: {e}; starting anyway (--failure-mode open): calls are allowed \
                         and each writes an error event until Redis answers"
                    );
                    crate::state::redis::RedisReviewStore::new(&config)
                        .map_err(|e| e.to_string())?
                }
            };
            Ok(builder
                .redis_state(config)
                .review_store(std::sync::Arc::new(reviews)))
        }
        #[cfg(not(feature = "redis"))]
        {
            let _ = mode;
            if self.state.is_some() {
                return Err("--state needs toolgate built with the `redis` feature".into());
            }
            Ok(builder)
        }
    }

    /// The `--state URL` with its password redacted, for messages.
    pub fn shown(&self) -> Option<String> {
        #[cfg(feature = "redis")]
        {
            self.state.as_deref().map(crate::state::redis::redact_url)
        }
        #[cfg(not(feature = "redis"))]
        {
            self.state.clone()
        }
    }
}
