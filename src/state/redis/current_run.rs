//! Current-run records on Redis (see [`crate::state::current_run`]): a hash `run`, `last`
//! (ms) per (agent, key) at `<prefix>:{<agentId>}:t:<key>`, read and written by one Lua
//! script per call, so two processes seeing a new key at once agree on one run, and an idle
//! run is reported to exactly one of them.

use std::sync::LazyLock;

use redis::Script;

use super::{RedisStateError, RedisStateStore};
use crate::state::CurrentRun;

/// KEYS: the record; ARGV: fresh run id, now, idle, ttl. Answers {run, created, stale}.
const ACQUIRE: &str = r#"
local h = redis.call('HMGET', KEYS[1], 'run', 'last')
local now = tonumber(ARGV[2])
local last = tonumber(h[2])
if h[1] and last and now - last < tonumber(ARGV[3]) then
  if now > last then redis.call('HSET', KEYS[1], 'last', ARGV[2]) end
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return {h[1], 0, ''}
end
redis.call('HSET', KEYS[1], 'run', ARGV[1], 'last', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {ARGV[1], 1, h[1] or ''}
"#;

/// KEYS: the record; ARGV: run id, now, ttl.
const TOUCH: &str = r#"
local h = redis.call('HMGET', KEYS[1], 'run', 'last')
if h[1] ~= ARGV[1] then return 0 end
if tonumber(ARGV[2]) > (tonumber(h[2]) or 0) then redis.call('HSET', KEYS[1], 'last', ARGV[2]) end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"#;

/// KEYS: the record; ARGV: run id, now, idle. 1: forgotten (the caller ends the run).
const END_IDLE: &str = r#"
local h = redis.call('HMGET', KEYS[1], 'run', 'last')
if h[1] ~= ARGV[1] then return 0 end
if tonumber(ARGV[2]) - (tonumber(h[2]) or 0) < tonumber(ARGV[3]) then return 0 end
redis.call('DEL', KEYS[1])
return 1
"#;

struct Scripts {
    acquire: Script,
    touch: Script,
    end_idle: Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: Script::new(ACQUIRE),
    touch: Script::new(TOUCH),
    end_idle: Script::new(END_IDLE),
});

impl RedisStateStore {
    /// A record lives at least the store's TTL, and never less than twice the idle time.
    fn record_ttl(&self, idle_ms: i64) -> u64 {
        let idle = u64::try_from(idle_ms.max(0)).unwrap_or(0);
        self.ttl_ms().max(idle.saturating_mul(2)).max(1)
    }

    /// See [`SharedStateStore::acquire_current_run`](crate::state::SharedStateStore::acquire_current_run).
    pub async fn acquire_current_run(
        &self,
        agent: &str,
        key: &str,
        fresh: &str,
        now_ms: i64,
        idle_ms: i64,
    ) -> Result<CurrentRun, RedisStateError> {
        let mut inv = SCRIPTS.acquire.prepare_invoke();
        inv.key(self.keys().current_run(agent, key))
            .arg(fresh)
            .arg(now_ms)
            .arg(idle_ms)
            .arg(self.record_ttl(idle_ms));
        let (run_id, created, stale): (String, i64, String) =
            self.run("acquire_current_run", inv).await?;
        Ok(CurrentRun {
            run_id,
            created: created == 1,
            stale: (!stale.is_empty()).then_some(stale),
        })
    }

    /// See [`SharedStateStore::touch_current_run`](crate::state::SharedStateStore::touch_current_run).
    pub async fn touch_current_run(
        &self,
        agent: &str,
        key: &str,
        run_id: &str,
        now_ms: i64,
    ) -> Result<(), RedisStateError> {
        let mut inv = SCRIPTS.touch.prepare_invoke();
        inv.key(self.keys().current_run(agent, key))
            .arg(run_id)
            .arg(now_ms)
            .arg(self.ttl_ms().max(1));
        let _: i64 = self.run("touch_current_run", inv).await?;
        Ok(())
    }

    /// See [`SharedStateStore::end_idle_current_run`](crate::state::SharedStateStore::end_idle_current_run).
    pub async fn end_idle_current_run(
        &self,
        agent: &str,
        key: &str,
        run_id: &str,
        now_ms: i64,
        idle_ms: i64,
    ) -> Result<bool, RedisStateError> {
        let mut inv = SCRIPTS.end_idle.prepare_invoke();
        inv.key(self.keys().current_run(agent, key))
            .arg(run_id)
            .arg(now_ms)
            .arg(idle_ms);
        let ended: i64 = self.run("end_idle_current_run", inv).await?;
        Ok(ended == 1)
    }
}
