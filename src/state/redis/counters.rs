//! Counters, metric windows, run history and flags: the reservation a decision makes and the
//! commit of its outcome, one script call each.

use super::store::RedisStateStore;
use super::{Commit, RedisPermit, RedisStateError, Reservation, ReserveRequest, RunFlag};
use super::{keys, scripts};

impl RedisStateStore {
    /// Reads the run's history and flags, every window, and every counter's count, and — only
    /// if every counter with `reserve` has room — takes a slot in each: one round trip, atomic.
    pub async fn reserve(
        &self,
        req: &ReserveRequest,
        now_ms: i64,
    ) -> Result<Reservation, RedisStateError> {
        let script = &self.inner.scripts.reserve;
        let mut inv = script.prepare_invoke();
        let (hist, flags) = match &req.run {
            Some(r) => (r.history.as_str(), r.flags.as_str()),
            None => ("", ""),
        };
        inv.key(flags).key(hist);
        inv.arg(now_ms)
            .arg(self.ttl_ms())
            .arg(req.counters.len())
            .arg(req.windows.len())
            .arg(u8::from(req.run.is_some()))
            .arg(u8::from(req.resume));
        let mut members = Vec::with_capacity(req.counters.len());
        for c in &req.counters {
            inv.key(&c.key);
            let member = c.window_ms.map(|_| self.next_member(now_ms));
            inv.arg(c.max)
                .arg(c.window_ms.unwrap_or(-1))
                .arg(u8::from(c.reserve))
                .arg(u8::from(c.expires))
                .arg(member.as_deref().unwrap_or(""));
            members.push(member);
        }
        for w in &req.windows {
            inv.key(&w.key);
            inv.arg(w.window_ms);
        }
        let (epoch, fresh) = self.epoch_args();
        let empty = keys::RunKeys {
            history: String::new(),
            flags: String::new(),
            chain: String::new(),
            lease: String::new(),
        };
        let run = req.run.as_ref().unwrap_or(&empty);
        let lease = req.lease.as_ref().filter(|_| req.run.is_some());
        inv.key(self.epoch_key())
            .key(self.keys().lost())
            .key(&run.lease)
            .key(&run.chain);
        let (hseq, hhash) = match lease.and_then(|l| l.head.as_ref()) {
            Some((s, h)) => (s.to_string(), h.as_str()),
            None => (String::new(), ""),
        };
        inv.arg(&*epoch)
            .arg(fresh)
            .arg(lease.map_or("", |l| l.owner.as_str()))
            .arg(self.lease_ms())
            .arg(hseq)
            .arg(hhash);
        let raw: redis::Value = match self.run("reserve", inv).await {
            Err(RedisStateError::Command { message, .. }) => {
                return Err(self.classify(message));
            }
            r => r?,
        };
        scripts::parse_reserve(raw, req, members).map_err(|m| self.reply_err("reserve", m))
    }

    /// Gives back slots taken by [`reserve`](Self::reserve) (the call did not proceed).
    pub async fn release(&self, permits: &[RedisPermit]) -> Result<(), RedisStateError> {
        if permits.is_empty() {
            return Ok(());
        }
        let mut inv = self.inner.scripts.release.prepare_invoke();
        for p in permits {
            inv.key(&p.key);
            inv.arg(p.member.as_deref().unwrap_or(""));
        }
        let _: i64 = self.run("release", inv).await?;
        Ok(())
    }

    /// Writes a call's outcome (history, flag, metric events, unconditional counts, slots
    /// given back) in one round trip.
    pub async fn commit(&self, c: &Commit, now_ms: i64) -> Result<(), RedisStateError> {
        let mut inv = self.inner.scripts.commit.prepare_invoke();
        let (hist, flags) = match &c.run {
            Some(r) => (r.history.as_str(), r.flags.as_str()),
            None => ("", ""),
        };
        inv.key(hist).key(flags);
        let flag = match (c.aborted, c.run.is_some()) {
            (Some(true), true) => "1",
            (Some(false), true) => "0",
            _ => "",
        };
        inv.arg(now_ms)
            .arg(self.ttl_ms())
            .arg(c.tool.as_deref().unwrap_or(""))
            .arg(u8::from(c.tool.is_some() && c.run.is_some()))
            .arg(c.metrics.len() + c.metrics_at.len())
            .arg(c.adds.len())
            .arg(flag);
        let timed = c.metrics.iter().map(|(k, w, v)| (k, w, v, &now_ms));
        for (key, window_ms, value, at) in
            timed.chain(c.metrics_at.iter().map(|(k, w, v, t)| (k, w, v, t)))
        {
            inv.key(key);
            let member = format!("{}:{}", self.next_member(*at), value);
            inv.arg(*window_ms).arg(*at).arg(member);
        }
        for (key, window_ms, expires) in &c.adds {
            inv.key(key);
            inv.arg(window_ms.unwrap_or(-1))
                .arg(u8::from(*expires))
                .arg(self.next_member(now_ms));
        }
        for p in &c.releases {
            inv.key(&p.key);
            inv.arg(p.member.as_deref().unwrap_or(""));
        }
        let _: i64 = self.run("commit", inv).await?;
        Ok(())
    }

    /// Sets or clears a run's pause or abort flag (refreshes the flags' TTL).
    pub async fn set_flag(
        &self,
        run: &keys::RunKeys,
        flag: RunFlag,
        on: bool,
    ) -> Result<(), RedisStateError> {
        let mut inv = self.inner.scripts.flag.prepare_invoke();
        inv.key(&run.flags)
            .arg(flag.field())
            .arg(u8::from(on))
            .arg(self.ttl_ms());
        let _: i64 = self.run("set_flag", inv).await?;
        Ok(())
    }

    /// Forgets a run's history, flags and the given run-scoped counters and windows.
    pub async fn end_run(
        &self,
        run: &keys::RunKeys,
        scoped: &[String],
    ) -> Result<(), RedisStateError> {
        let mut inv = self.inner.scripts.forget.prepare_invoke();
        inv.key(&run.history).key(&run.flags);
        for k in scoped {
            inv.key(k);
        }
        let _: i64 = self.run("end_run", inv).await?;
        Ok(())
    }
}
