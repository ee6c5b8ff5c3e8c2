//! The runs of 2026-07-28 clients kept in *current-run records* (see
//! [`crate::state::current_run`]): a client that names no run (`_meta["dev.toolgate/runId"]`
//! absent) gets one run per token — in this process without a shared store, else on it (Redis,
//! `--state redis://…`: every replica shares the record, the first to see the token creates the
//! run, the others continue it, design §14); a run the client names gets a record too on a
//! shared store, so that every replica serving it continues it and its idle end is decided
//! once. A run idle for `--run-idle-secs` ends once, in the one replica the store tells (the
//! reaper here, or the call that found it idle); a token's next call gets a new run.
//!
//! On a shared store a replica holds such a run only while it has calls of it in flight, and
//! hands it over (chain head written, no `run.ended`, no flush of the trail) before the last
//! answer goes out, so the next call — on whichever replica — continues the same audit chain
//! (design §8).

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
    /// The run id, in the engine and the trail, of the run a client of `token` names `run`: the
    /// name within the token's identity (`<run>@<16 hex digits of the token's run key>`), so
    /// that another token naming the same run gets another run (its own counters, pause and
    /// audit chain), and every session of one token naming it gets the same one.
    pub(super) fn scoped_run(&self, token: usize, run: &str) -> String {
        let key = self.listen.tokens.run_key(token).unwrap_or_default();
        format!("{run}@{}", key.get(..16).unwrap_or(&key))
    }

    /// The session of `token`'s current run (`named` `None`), or of the run the client named
    /// (on a shared store): continued when the store has one used within the idle time, else a
    /// new one (ending the idle one it replaced, when the store says this replica is the one
    /// to). A named run found idle and not ended yet is continued: it is the run the client
    /// asks for, and it ends when it is idle again.
    pub(super) async fn recorded_run(
        &self,
        token: usize,
        who: &Identity,
        named: Option<String>,
    ) -> Result<Arc<Session>, String> {
        let mut key = self.listen.tokens.run_key(token).unwrap_or_default();
        if let Some(run) = &named {
            // The token's key is 64 hex digits: `key:run` names one (token, run) pair.
            key = format!("{key}:{run}");
        }
        let fresh = match &named {
            Some(run) => self.scoped_run(token, run),
            None => uuid::Uuid::now_v7().to_string(),
        };
        let k = (token, named.clone().unwrap_or_default());
        let now = self.base.engine.now_ms();
        let idle = millis(self.listen.run_idle);
        let mut got = match self
            .book
            .acquire(&who.agent_id, &key, &fresh, now, idle)
            .await
        {
            Ok(g) => g,
            Err(e) => {
                // The store failed: this replica's own session of the run (decisions follow
                // the failure mode anyway; an `error` event is written by them).
                tracing::warn!("state store: the client's current run: {e}");
                if let Some(s) = self.runs.lock().get(&k)
                    && !s.is_closed()
                {
                    s.touch();
                    return Ok(s.clone());
                }
                CurrentRun {
                    run_id: fresh,
                    created: true,
                    stale: None,
                }
            }
        };
        if named.is_some() {
            got.stale = None;
        }
        let current = Current {
            agent: who.agent_id.clone(),
            key,
            run: got.run_id.clone(),
        };
        let hub = self.ups.for_session(token, &got.run_id).await?;
        let (session, replaced) = {
            let mut runs = self.runs.lock();
            if let Some(s) = runs.get(&k)
                && !s.is_closed()
                && s.current.as_ref().is_some_and(|c| c.run == got.run_id)
            {
                s.touch();
                return Ok(s.clone());
            }
            let s = Session::open(
                self.config(who, Some(got.run_id.clone())),
                &hub,
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
                // Taking the run up may wait on the store: not on a runtime worker.
                if let Ok(run) = tokio::task::spawn_blocking(move || engine.start_run(ctx)).await {
                    run.end("idle", None).await;
                }
            }
        });
        Ok(session)
    }

    /// One reaper round over the sessions of recorded runs: a session with calls in flight
    /// keeps its record fresh; one idle here for the idle time asks the store whether the run is idle
    /// everywhere — the one replica told so ends it, the others let their session go.
    pub(super) async fn reap_recorded_runs(&self) {
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
                    tracing::warn!("state store: keeping the client's run alive: {e}");
                }
                continue;
            }
            if s.idle_for().is_none_or(|d| d < idle) {
                continue;
            }
            let end = match self.book.end_idle(&c, now, millis(idle)).await {
                Ok(end) => end,
                Err(e) => {
                    tracing::warn!("state store: ending the client's idle run: {e}");
                    continue;
                }
            };
            {
                let mut runs = self.runs.lock();
                // A call took the session while the store was asked (it touched it under this
                // lock): unless the store ended the run, the session stays for that call.
                if !end && s.idle_for().is_none_or(|d| d < idle) {
                    continue;
                }
                if runs.get(&k).is_some_and(|x| Arc::ptr_eq(x, &s)) {
                    runs.remove(&k);
                }
            }
            s.close_as(end.then_some("idle")).await;
        }
    }
}
