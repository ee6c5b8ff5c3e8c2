//! The Lua scripts (loaded once per server: EVALSHA, and EVAL on NOSCRIPT) and their replies.
//!
//! A metric window `K` is three keys in the same hash slot: `K` (a sorted set of entries
//! `time:nonce:value` scored by time), `K|v` (the same entries scored by value, for min and max)
//! and `K|a` (a hash with the running sum). Entries leaving the window are removed from all
//! three once, so reading and writing a window is O(log n) amortized, never a rescan.

use redis::Script;

use super::{RedisPermit, Reservation, ReserveRequest};
use crate::state::WindowStats;

/// Shared Lua helpers: `evict` drops the entries with `t ≤ now − w` of window `k`, keeping the
/// value set and the running sum in step; `stats` reads count, sum, min and max.
const WINDOW_LUA: &str = r#"
local function value_of(it) return tonumber(string.match(it, '^[^:]*:[^:]*:(.*)$')) end
local function evict(k, now, w)
  local cut = string.format('%d', now - w)
  local old = redis.call('ZRANGEBYSCORE', k, '-inf', cut)
  if #old == 0 then return end
  local s = 0
  for i = 1, #old, 500 do
    local chunk = {}
    for j = i, math.min(i + 499, #old) do
      chunk[#chunk + 1] = old[j]
      local v = value_of(old[j]); if v then s = s + v end
    end
    redis.call('ZREM', k .. '|v', unpack(chunk))
  end
  redis.call('ZREMRANGEBYSCORE', k, '-inf', cut)
  if redis.call('ZCARD', k) == 0 then
    redis.call('DEL', k .. '|a')
  else
    local sum = tonumber(redis.call('HGET', k .. '|a', 's') or '0') - s
    redis.call('HSET', k .. '|a', 's', string.format('%.17g', sum))
  end
end
local function stats(k)
  local n = redis.call('ZCARD', k)
  if n == 0 then return {0, '0', '', ''} end
  local sum = redis.call('HGET', k .. '|a', 's') or '0'
  local lo = redis.call('ZRANGE', k .. '|v', 0, 0)[1]
  local hi = redis.call('ZRANGE', k .. '|v', -1, -1)[1]
  local mn, mx = '', ''
  if lo then mn = string.match(lo, '^[^:]*:[^:]*:(.*)$') or '' end
  if hi then mx = string.match(hi, '^[^:]*:[^:]*:(.*)$') or '' end
  return {n, sum, mn, mx}
end
local function record(k, now, w, member, ttl)
  local v = value_of(member)
  redis.call('ZADD', k, string.format('%d', now), member)
  if v then
    redis.call('ZADD', k .. '|v', string.format('%.17g', v), member)
    local sum = tonumber(redis.call('HGET', k .. '|a', 's') or '0') + v
    redis.call('HSET', k .. '|a', 's', string.format('%.17g', sum))
  end
  evict(k, now, w)
  local life = math.max(ttl, w)
  redis.call('PEXPIRE', k, life); redis.call('PEXPIRE', k .. '|v', life)
  redis.call('PEXPIRE', k .. '|a', life)
end
"#;

/// Shared Lua helpers for lost state and leases: `server_ms` is the server's clock (leases and
/// the age of a loss are measured on it, so processes whose clocks disagree agree on them);
/// `check_epoch` compares the caller's epoch with the prefix's: when it is gone (FLUSHALL, a
/// restart without persistence, eviction) a new one is written, and when it is gone or changed
/// the loss marker is set (kept if already there). It answers the epoch now in force and
/// whether the caller has just found a loss. `hold` renews `owner`'s lease on a run and writes
/// its chain head (never backwards), or answers the holder that replaced it.
const GUARD_LUA: &str = r#"
local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function check_epoch(ek, lk, mine, fresh, now)
  local cur = redis.call('GET', ek)
  if cur and cur == mine then return cur, false end
  if not cur then redis.call('SET', ek, fresh); cur = fresh end
  redis.call('SET', lk, tostring(now), 'NX')
  return cur, true
end
local function hold(lease, chain, owner, lease_ms, ttl, hseq, hhash)
  local holder = redis.call('GET', lease)
  if holder ~= owner then
    local co = redis.call('HGET', chain, 'owner')
    if holder or (co and co ~= owner) then return holder or co or '' end
  end
  redis.call('SET', lease, owner, 'PX', lease_ms)
  local cs = tonumber(redis.call('HGET', chain, 'seq') or '-1')
  if hseq ~= '' and tonumber(hseq) > cs then
    redis.call('HSET', chain, 'seq', hseq, 'hash', hhash, 'owner', owner)
  else
    redis.call('HSET', chain, 'owner', owner)
  end
  redis.call('PEXPIRE', chain, ttl)
  return nil
end
"#;

/// KEYS: flags, history, counters…, windows…, then the prefix's epoch key, its loss marker,
/// the run's lease and its chain head.
/// ARGV: now, ttl, #counters, #windows, has_run, resume, then per counter (max, window_ms or
/// -1, reserve, expires, member), then per window (window_ms), then the epoch this process
/// knows, a fresh epoch (written if the prefix has none), the lease owner ('' none), the lease
/// in ms, and the holder's chain head (seq and hash, '' none).
/// An epoch that is gone or changed means Redis lost toolgate's state: the loss marker is set
/// and the reply is an error `TOOLGATE_STATE_LOST <epoch now>`. With an owner, the run's lease
/// is renewed and its head written (piggy-backed: no round trip of its own), or, when another
/// holder took the run over, the reply is `{-1, holder}` and nothing is read. While the loss
/// marker is set (until `toolgate state rearm`), a request reading a counter without window,
/// or a counter or metric window whose window has not passed since the loss, is refused with
/// `TOOLGATE_STATE_LOST_UNARMED <loss time>`: a lost count never re-opens a cap.
/// Windows drop entries with `t ≤ now − w` first, so what is left is `(now − w, now]`. An
/// aborted run takes no slot.
const RESERVE: &str = r#"
local nk, na = #KEYS, #ARGV
local snow = server_ms()
local ep, lost_now = check_epoch(KEYS[nk - 3], KEYS[nk - 2], ARGV[na - 5], ARGV[na - 4], snow)
if lost_now then return redis.error_reply('TOOLGATE_STATE_LOST ' .. ep) end
if ARGV[na - 3] ~= '' then
  local other = hold(KEYS[nk - 1], KEYS[nk], ARGV[na - 3], ARGV[na - 2], ARGV[2], ARGV[na - 1], ARGV[na])
  if other then return {-1, other} end
end
local now = tonumber(ARGV[1]); local ttl = tonumber(ARGV[2])
local n = tonumber(ARGV[3]); local m = tonumber(ARGV[4])
local lost_at = tonumber(redis.call('GET', KEYS[nk - 2]) or '')
if lost_at then
  local age, needs = snow - lost_at, false
  for i = 1, n do
    local w = tonumber(ARGV[6 + (i - 1) * 5 + 2])
    if w < 0 or age < w then needs = true end
  end
  for j = 1, m do
    if age < tonumber(ARGV[6 + 5 * n + j]) then needs = true end
  end
  if needs then return redis.error_reply('TOOLGATE_STATE_LOST_UNARMED ' .. lost_at) end
end
local paused, aborted, hist = 0, 0, {}
if ARGV[5] == '1' then
  if ARGV[6] == '1' then
    redis.call('HSET', KEYS[1], 'aborted', '0', 'paused', '0'); redis.call('PEXPIRE', KEYS[1], ttl)
  end
  local f = redis.call('HMGET', KEYS[1], 'paused', 'aborted')
  if f[1] == '1' then paused = 1 end
  if f[2] == '1' then aborted = 1 end
  hist = redis.call('SMEMBERS', KEYS[2])
end
local counts, ok = {}, 1
if aborted == 1 then ok = 0 end
for i = 1, n do
  local k = KEYS[2 + i]; local b = 6 + (i - 1) * 5
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
    local k = KEYS[2 + i]; local b = 6 + (i - 1) * 5
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
  local k = KEYS[2 + n + j]; local w = tonumber(ARGV[6 + 5 * n + j])
  evict(k, now, w)
  wins[j] = stats(k)
end
return {ok, counts, wins, hist, paused, aborted}
"#;

/// KEYS: history, flags, metric windows…, added counters…, released counters…
/// ARGV: now, ttl, tool, push, #metrics, #adds, flag ('' none, '0' clear, '1' set), per metric
/// (window_ms, at, member), per added counter (window_ms or -1, expires, member), per released
/// counter (member or '').
const COMMIT: &str = r#"
local now = tonumber(ARGV[1]); local ttl = tonumber(ARGV[2])
local k = tonumber(ARGV[5]); local a = tonumber(ARGV[6])
if ARGV[4] == '1' then
  redis.call('SADD', KEYS[1], ARGV[3]); redis.call('PEXPIRE', KEYS[1], ttl)
end
if ARGV[7] ~= '' then
  redis.call('HSET', KEYS[2], 'aborted', ARGV[7]); redis.call('PEXPIRE', KEYS[2], ttl)
end
for j = 1, k do
  local b = 7 + 3 * (j - 1)
  record(KEYS[2 + j], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 1]), ARGV[b + 3], ttl)
end
for i = 1, a do
  local key = KEYS[2 + k + i]; local b = 7 + 3 * k + 3 * (i - 1)
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
local r0 = 7 + 3 * k + 3 * a
for i = 1, #KEYS - 2 - k - a do
  local key = KEYS[2 + k + a + i]; local member = ARGV[r0 + i]
  if member ~= '' then
    redis.call('ZREM', key, member)
  elseif tonumber(redis.call('GET', key) or '0') > 0 then
    redis.call('DECR', key)
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

/// KEYS: history, flags, then counters and windows (a window's value set and sum go too).
const FORGET: &str = r#"
for i = 1, #KEYS do redis.call('DEL', KEYS[i], KEYS[i] .. '|v', KEYS[i] .. '|a') end
return 1
"#;

/// KEYS: the run's chain head, its lease, the prefix's epoch key and loss marker; ARGV: owner,
/// ttl, lease ms, the caller's epoch, a fresh epoch. Answers `{state, seq, hash, previous
/// owner, epoch now, loss time}`: state `ended` (the run ended: a tombstone), `held` (another
/// live holder has the lease; previous owner = that holder; nothing changed), or `ok` (the
/// lease and the chain are now the caller's; previous owner '' when the last holder left the
/// run, else the holder whose lease lapsed).
const CLAIM_CHAIN: &str = r#"
local snow = server_ms()
local ep = check_epoch(KEYS[3], KEYS[4], ARGV[4], ARGV[5], snow)
local h = redis.call('HMGET', KEYS[1], 'seq', 'hash', 'owner', 'ended')
if h[4] == '1' then return {'ended', '', '', '', ep, ''} end
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[1] then return {'held', '', '', holder, ep, ''} end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
redis.call('HSET', KEYS[1], 'owner', ARGV[1]); redis.call('PEXPIRE', KEYS[1], ARGV[2])
local lost = redis.call('GET', KEYS[4]) or ''
return {'ok', h[1] or '', h[2] or '', h[3] or '', ep, lost}
"#;

/// KEYS: the run's chain head and lease; ARGV: owner, ttl, seq, hash, ended. Only the holder
/// leaves a chain (0: another process took it over meanwhile); it writes the head and gives
/// the lease up, or (the run ended) leaves a tombstone `ended` for the TTL, so the run's id
/// is never started as a second chain.
const LEAVE_CHAIN: &str = r#"
local cur = redis.call('HGET', KEYS[1], 'owner')
local holder = redis.call('GET', KEYS[2])
if (cur and cur ~= '' and cur ~= ARGV[1]) or (holder and holder ~= ARGV[1]) then return 0 end
redis.call('DEL', KEYS[2])
if ARGV[5] == '1' then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'ended', '1', 'seq', ARGV[3], 'hash', ARGV[4], 'owner', '')
else
  redis.call('HSET', KEYS[1], 'seq', ARGV[3], 'hash', ARGV[4], 'owner', '')
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"#;

/// KEYS: the prefix's epoch key and loss marker, then per run its lease and chain head;
/// ARGV: the caller's epoch, a fresh epoch, lease ms, ttl, then per run (owner, seq, hash).
/// Renews every lease still the caller's and writes its head (the timer of held runs: one
/// round trip for all of them). Answers `{epoch now, lost found (0/1), per run 1 held / 0 lost}`.
const RENEW: &str = r#"
local snow = server_ms()
local ep, lost_now = check_epoch(KEYS[1], KEYS[2], ARGV[1], ARGV[2], snow)
local out = {ep, lost_now and 1 or 0}
for i = 1, (#KEYS - 2) / 2 do
  local b = 4 + (i - 1) * 3
  local other = hold(KEYS[1 + 2 * i], KEYS[2 + 2 * i], ARGV[b + 1], ARGV[3], ARGV[4], ARGV[b + 2], ARGV[b + 3])
  out[#out + 1] = other and 0 or 1
end
return out
"#;

/// KEYS: the loss marker and the re-arm log; ARGV: the log entry (JSON without the loss time),
/// which gets `"lostAt":<ms or null>` appended. Removes the marker; answers its value or ''.
const REARM: &str = r#"
local l = redis.call('GET', KEYS[1])
redis.call('DEL', KEYS[1])
local entry = string.sub(ARGV[1], 1, -2) .. ',"lostAt":' .. (l or 'null') .. '}'
redis.call('LPUSH', KEYS[2], entry)
redis.call('LTRIM', KEYS[2], 0, 99)
return l or ''
"#;

/// KEYS: the prefix's epoch key; ARGV: a new epoch. Writes it unless one is there; answers
/// the one that is.
const EPOCH: &str = r#"
local e = redis.call('GET', KEYS[1])
if e then return e end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
"#;

pub(super) struct Scripts {
    pub reserve: Script,
    pub commit: Script,
    pub release: Script,
    pub flag: Script,
    pub forget: Script,
    pub claim_chain: Script,
    pub epoch: Script,
    pub leave_chain: Script,
    pub renew: Script,
    pub rearm: Script,
}

impl Scripts {
    pub fn new() -> Self {
        Scripts {
            reserve: Script::new(&format!("{WINDOW_LUA}{GUARD_LUA}{RESERVE}")),
            commit: Script::new(&format!("{WINDOW_LUA}{COMMIT}")),
            release: Script::new(RELEASE),
            flag: Script::new(FLAG),
            forget: Script::new(FORGET),
            claim_chain: Script::new(&format!("{GUARD_LUA}{CLAIM_CHAIN}")),
            epoch: Script::new(EPOCH),
            leave_chain: Script::new(LEAVE_CHAIN),
            renew: Script::new(&format!("{GUARD_LUA}{RENEW}")),
            rearm: Script::new(REARM),
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
    if let redis::Value::Array(items) = &raw
        && items.len() == 2
        && matches!(items.first(), Some(redis::Value::Int(-1)))
    {
        let holder: String =
            redis::FromRedisValue::from_redis_value(&items[1]).map_err(|e| e.to_string())?;
        return Ok(Reservation {
            lease_lost: Some(holder),
            ..Reservation::default()
        });
    }
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
        lease_lost: None,
    })
}
