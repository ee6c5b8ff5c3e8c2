//! The Lua scripts (loaded once per server: EVALSHA, and EVAL on NOSCRIPT) and their replies.

use redis::Script;

use super::{RedisPermit, Reservation, ReserveRequest};
use crate::state::WindowStats;

/// KEYS: flags, history, counters…, windows…
/// ARGV: now, ttl, #counters, #windows, has_run, then per counter (max, window_ms or -1,
/// reserve, expires, member), then per window (window_ms).
/// Windows drop entries with `t ≤ now − w` first, so what is left is `(now − w, now]`.
const RESERVE: &str = r#"
local now = tonumber(ARGV[1]); local ttl = tonumber(ARGV[2])
local n = tonumber(ARGV[3]); local m = tonumber(ARGV[4])
local paused, aborted, hist = 0, 0, {}
if ARGV[5] == '1' then
  local f = redis.call('HMGET', KEYS[1], 'paused', 'aborted')
  if f[1] == '1' then paused = 1 end
  if f[2] == '1' then aborted = 1 end
  hist = redis.call('LRANGE', KEYS[2], 0, -1)
end
local counts, ok = {}, 1
for i = 1, n do
  local k = KEYS[2 + i]; local b = 5 + (i - 1) * 5
  local max = tonumber(ARGV[b + 1]); local w = tonumber(ARGV[b + 2])
  local c
  if w >= 0 then
    redis.call('ZREMRANGEBYSCORE', k, '-inf', string.format('%d', now - w))
    c = redis.call('ZCARD', k)
  else
    c = tonumber(redis.call('GET', k) or '0')
  end
  counts[i] = c
  if ARGV[b + 3] == '1' and c >= max then ok = 0 end
end
if ok == 1 then
  for i = 1, n do
    local k = KEYS[2 + i]; local b = 5 + (i - 1) * 5
    local w = tonumber(ARGV[b + 2])
    if ARGV[b + 3] == '1' then
      if w >= 0 then
        redis.call('ZADD', k, string.format('%d', now), ARGV[b + 5])
        redis.call('PEXPIRE', k, math.max(ttl, w))
      else
        redis.call('INCR', k)
        if ARGV[b + 4] == '1' then redis.call('PEXPIRE', k, ttl) end
      end
    end
  end
end
local wins = {}
for j = 1, m do
  local k = KEYS[2 + n + j]; local w = tonumber(ARGV[5 + 5 * n + j])
  redis.call('ZREMRANGEBYSCORE', k, '-inf', string.format('%d', now - w))
  local items = redis.call('ZRANGE', k, 0, -1)
  local cnt, sum, mn, mx, mns, mxs = 0, 0, nil, nil, '', ''
  for _, it in ipairs(items) do
    local s = string.match(it, '^[^:]*:[^:]*:(.*)$')
    local v = tonumber(s)
    if v then
      cnt = cnt + 1; sum = sum + v
      if mn == nil or v < mn then mn = v; mns = s end
      if mx == nil or v > mx then mx = v; mxs = s end
    end
  end
  wins[j] = {cnt, string.format('%.17g', sum), mns, mxs}
end
return {ok, counts, wins, hist, paused, aborted}
"#;

/// KEYS: history, metric windows…, counters…
/// ARGV: now, ttl, tool, push, #metrics, per metric (window_ms, member), per counter
/// (window_ms or -1, expires, member).
const COMMIT: &str = r#"
local now = tonumber(ARGV[1]); local ttl = tonumber(ARGV[2]); local k = tonumber(ARGV[5])
if ARGV[4] == '1' then
  redis.call('RPUSH', KEYS[1], ARGV[3]); redis.call('PEXPIRE', KEYS[1], ttl)
end
for j = 1, k do
  local key = KEYS[1 + j]; local w = tonumber(ARGV[5 + 2 * j - 1])
  redis.call('ZADD', key, string.format('%d', now), ARGV[5 + 2 * j])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - w))
  redis.call('PEXPIRE', key, math.max(ttl, w))
end
for i = 1, #KEYS - 1 - k do
  local key = KEYS[1 + k + i]; local b = 5 + 2 * k + 3 * (i - 1)
  local w = tonumber(ARGV[b + 1])
  if w >= 0 then
    redis.call('ZADD', key, string.format('%d', now), ARGV[b + 3])
    redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - w))
    redis.call('PEXPIRE', key, math.max(ttl, w))
  else
    redis.call('INCR', key)
    if ARGV[b + 2] == '1' then redis.call('PEXPIRE', key, ttl) end
  end
end
return 1
"#;

/// KEYS: counters; ARGV: the window member per counter, or '' for a plain counter.
const RELEASE: &str = r#"
for i = 1, #KEYS do
  if ARGV[i] ~= '' then
    redis.call('ZREM', KEYS[i], ARGV[i])
  elseif tonumber(redis.call('GET', KEYS[i]) or '0') > 0 then
    redis.call('DECR', KEYS[i])
  end
end
return 1
"#;

const FLAG: &str = r#"
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]); redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"#;

const FORGET: &str = r#"
for i = 1, #KEYS do redis.call('DEL', KEYS[i]) end
return 1
"#;

pub(super) struct Scripts {
    pub reserve: Script,
    pub commit: Script,
    pub release: Script,
    pub flag: Script,
    pub forget: Script,
}

impl Scripts {
    pub fn new() -> Self {
        Scripts {
            reserve: Script::new(RESERVE),
            commit: Script::new(COMMIT),
            release: Script::new(RELEASE),
            flag: Script::new(FLAG),
            forget: Script::new(FORGET),
        }
    }
}

type RawWindow = (u64, String, String, String);
type RawReserve = (i64, Vec<u64>, Vec<RawWindow>, Vec<String>, i64, i64);

fn number(s: &str) -> Result<Option<f64>, String> {
    if s.is_empty() {
        return Ok(None);
    }
    s.parse::<f64>()
        .map(Some)
        .map_err(|e| format!("window value {s:?}: {e}"))
}

pub(super) fn parse_reserve(
    raw: redis::Value,
    req: &ReserveRequest,
    members: Vec<Option<String>>,
) -> Result<Reservation, String> {
    let (ok, counts, wins, history, paused, aborted): RawReserve =
        redis::FromRedisValue::from_redis_value(&raw).map_err(|e| e.to_string())?;
    if counts.len() != req.counters.len() || wins.len() != req.windows.len() {
        return Err(format!(
            "{} counts and {} windows for {} counters and {} windows",
            counts.len(),
            wins.len(),
            req.counters.len(),
            req.windows.len()
        ));
    }
    let granted = ok == 1;
    let permits = if granted {
        req.counters
            .iter()
            .zip(members)
            .filter(|(c, _)| c.reserve)
            .map(|(c, member)| RedisPermit {
                key: c.key.clone(),
                member,
            })
            .collect()
    } else {
        Vec::new()
    };
    let windows = wins
        .into_iter()
        .map(|(count, sum, min, max)| {
            Ok(WindowStats {
                count,
                sum: number(&sum)?.unwrap_or(0.0),
                min: number(&min)?,
                max: number(&max)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Reservation {
        granted,
        counts,
        permits,
        windows,
        history,
        paused: paused == 1,
        aborted: aborted == 1,
    })
}
