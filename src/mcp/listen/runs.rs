//! The run of a 2026-07-28 client that names none (`_meta["dev.toolgate/runId"]` absent): one
//! run per token, a *current-run record* in the state store (see
//! [`crate::state::current_run`]) — on Redis when `--state redis://…` (every replica shares
//! it: the first to see the token creates the run, the others continue it, design §14), in
//! this process otherwise. A run idle for `--run-idle-secs` ends once, in the one replica the
//! store tells (the reaper here, or the call that found it idle), and the next call gets a new
//! one.
//!
//! On a shared store a replica holds the run only while it has calls of it in flight, and
//! leaves it (chain head written, no `run.ended`) before the last answer goes out, so the next
//! call — on whichever replica — continues the same audit chain (design §8).

use std::sync::Arc;
use std::time::Duration;

use crate::engine::RunContext;
use crate::state::{CurrentRun, MemoryCurrentRuns, SharedStateStore};

use super::super::tokens::Identity;
use super::Server;
use super::session::{Current, Session};

/// Where the current-run records live.
pub(super) enum RunBook {
    /// This process only (no shared state store).
    Memory(MemoryCurrentRuns),
    /// The state store shared with the other replicas.
    Shared(Arc<dyn SharedStateStore>),
}

impl RunBook {
    async fn acquire(
        &self,
        agent: &str,
        key: &str,
        fresh: &str,
        now_ms: i64,
        idle_ms: i64,
    ) -> Result<CurrentRun, String> {
        match self {
            RunBook::Memory(m) => Ok(m.acquire(agent, key, fresh, now_ms, idle_ms)),
            RunBook::Shared(s) => s
                .acquire_current_run(agent, key, fresh, now_ms, idle_ms)
                .await
                .map_err(|e| e.to_string()),
        }
    }

    async fn touch(&self, c: &Current, now_ms: i64) -> Result<(), String> {
        match self {
            RunBook::Memory(m) => {
                m.touch(&c.agent, &c.key, &c.run, now_ms);
                Ok(())
            }
            RunBook::Shared(s) => s
                .touch_current_run(&c.agent, &c.key, &c.run, now_ms)
                .await
                .map_err(|e| e.to_string()),
        }
    }

    async fn end_idle(&self, c: &Current, now_ms: i64, idle_ms: i64) -> Result<bool, String> {
        match self {
            RunBook::Memory(m) => Ok(m.end_idle(&c.agent, &c.key, &c.run, now_ms, idle_ms)),
            RunBook::Shared(s) => s
                .end_idle_current_run(&c.agent, &c.key, &c.run, now_ms, idle_ms)
                .await
                .map_err(|e| e.to_string()),
        }
    }

    /// Whether runs are shared with other replicas (held only while calls are in flight).
    pub(super) fn shared(&self) -> bool {
        matches!(self, RunBook::Shared(_))
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Server {
    /// The session of `token`'s current run: continued when the store has one used within the
    /// idle time, else a new one (ending the idle one it replaced, when the store says this
    /// replica is the one to).
    pub(super) async fn token_run(&self, token: usize, who: &Identity) -> Arc<Session> {
        let key = self.listen.tokens.run_key(token).unwrap_or_default();
        let fresh = uuid::Uuid::now_v7().to_string();
        let now = self.base.engine.now_ms();
        let idle = millis(self.listen.run_idle);
        let got = match self
            .book
            .acquire(&who.agent_id, &key, &fresh, now, idle)
            .await
        {
            Ok(g) => g,
            Err(e) => {
                // The store failed: this replica's own run of the token (decisions follow the
                // failure mode anyway; an `error` event is written by them).
                tracing::warn!("state store: the token's current run: {e}");
                if let Some(s) = self.runs.lock().get(&(token, String::new()))
                    && !s.is_closed()
                {
                    return s.clone();
                }
                CurrentRun {
                    run_id: fresh,
                    created: true,
                    stale: None,
                }
            }
        };
        let current = Current {
            agent: who.agent_id.clone(),
            key,
            run: got.run_id.clone(),
        };
        let (session, replaced) = {
            let mut runs = self.runs.lock();
            let k = (token, String::new());
            if let Some(s) = runs.get(&k)
                && !s.is_closed()
                && s.current.as_ref().is_some_and(|c| c.run == got.run_id)
            {
                return s.clone();
            }
            let s = Session::open(
                self.config(who, Some(got.run_id.clone())),
                &self.hub,
                token,
                Some(current),
                self.book.shared(),
            );
            (s.clone(), runs.insert(k, s))
        };
        let stale = got.stale;
        let engine = self.base.engine.clone();
        let who = who.clone();
        tokio::spawn(async move {
            let mut stale = stale;
            if let Some(old) = replaced {
                // This replica's session of an earlier run: it ends it when the store named it
                // idle to this call, else leaves it (another replica ended or replaced it).
                let ends = old
                    .current
                    .as_ref()
                    .is_some_and(|c| stale.as_deref() == Some(c.run.as_str()));
                if ends {
                    stale = None;
                }
                old.close_as(ends.then_some("idle")).await;
            }
            if let Some(run) = stale {
                // Ended here, for every replica: taken up (its chain continued) and ended.
                let mut ctx = RunContext::new(run, who.agent_id.clone());
                ctx.enduser = who.enduser.clone();
                ctx.agent_tags = who.agent_tags.clone();
                engine.start_run(ctx).end("idle", None).await;
            }
        });
        session
    }

    /// One reaper round over the per-token sessions: a session with calls in flight keeps its
    /// record fresh; one idle here for the idle time asks the store whether the run is idle
    /// everywhere — the one replica told so ends it, the others let their session go.
    pub(super) async fn reap_token_runs(&self) {
        let idle = self.listen.run_idle;
        let sessions: Vec<((usize, String), Arc<Session>)> = self
            .runs
            .lock()
            .iter()
            .filter(|(_, s)| s.current.is_some())
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        let now = self.base.engine.now_ms();
        for (k, s) in sessions {
            let Some(c) = s.current.clone() else { continue };
            if s.busy() {
                if let Err(e) = self.book.touch(&c, now).await {
                    tracing::warn!("state store: keeping the token's run alive: {e}");
                }
                continue;
            }
            if s.idle_for().is_none_or(|d| d < idle) {
                continue;
            }
            let end = match self.book.end_idle(&c, now, millis(idle)).await {
                Ok(end) => end,
                Err(e) => {
                    tracing::warn!("state store: ending the token's idle run: {e}");
                    continue;
                }
            };
            {
                let mut runs = self.runs.lock();
                if runs.get(&k).is_some_and(|x| Arc::ptr_eq(x, &s)) {
                    runs.remove(&k);
                }
            }
            s.close_as(end.then_some("idle")).await;
        }
    }
}
