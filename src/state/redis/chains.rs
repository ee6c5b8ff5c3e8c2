//! A run's audit chain and lease (claimed, left, renewed on a timer), and re-arming the prefix
//! after Redis lost toolgate's state.

use super::store::RedisStateStore;
use super::{RedisStateError, keys};

impl RedisStateStore {
    /// Claims a run's audit chain and lease for `owner` (one round trip); see
    /// [`SharedStateStore::claim_chain`](crate::state::SharedStateStore::claim_chain).
    pub async fn claim_chain(
        &self,
        run: &keys::RunKeys,
        owner: &str,
    ) -> Result<crate::state::ChainClaim, RedisStateError> {
        let (epoch, fresh) = self.epoch_args();
        let mut inv = self.inner.scripts.claim_chain.prepare_invoke();
        inv.key(&run.chain)
            .key(&run.lease)
            .key(self.epoch_key())
            .key(self.keys().lost());
        inv.arg(owner)
            .arg(self.ttl_ms())
            .arg(self.lease_ms())
            .arg(&*epoch)
            .arg(fresh);
        type Raw = (String, String, String, String, String, String);
        let (state, seq, hash, prev, ep, lost): Raw = self.run("claim_chain", inv).await?;
        self.adopt_epoch(&ep);
        let mut claim = crate::state::ChainClaim::default();
        match state.as_str() {
            "ended" => claim.ended = true,
            "held" => {
                claim.held_elsewhere = true;
                claim.holder = Some(prev);
            }
            _ => {
                claim.leased = true;
                if !seq.is_empty() && !hash.is_empty() {
                    claim.head = Some(crate::state::ChainHead {
                        next_seq: seq
                            .parse()
                            .map_err(|_| self.reply_err("claim_chain", format!("seq {seq:?}")))?,
                        last_hash: hash,
                    });
                }
                if !prev.is_empty() && prev != owner {
                    claim.replaced = Some(prev);
                }
                claim.head_lost = claim.head.is_none() && !lost.is_empty();
            }
        }
        Ok(claim)
    }

    /// Leaves a run's audit chain at `head` and gives its lease up, or (`ended`) leaves the
    /// run's tombstone; `false` when `owner` no longer holds it.
    pub async fn leave_chain(
        &self,
        run: &keys::RunKeys,
        owner: &str,
        head: Option<&crate::state::ChainHead>,
        ended: bool,
    ) -> Result<bool, RedisStateError> {
        let mut inv = self.inner.scripts.leave_chain.prepare_invoke();
        inv.key(&run.chain)
            .key(&run.lease)
            .arg(owner)
            .arg(self.ttl_ms())
            .arg(head.map_or(0, |h| h.next_seq))
            .arg(head.map_or("", |h| h.last_hash.as_str()))
            .arg(u8::from(ended));
        let ok: i64 = self.run("leave_chain", inv).await?;
        Ok(ok == 1)
    }

    /// Renews the leases of the runs this process holds and writes their chain heads, in one
    /// round trip (the lease timer). Answers, per run, whether it is still held; a loss of
    /// state found meanwhile is adopted (and marked, as a reservation would).
    pub async fn renew_leases(
        &self,
        runs: &[(keys::RunKeys, String, Option<crate::state::ChainHead>)],
    ) -> Result<Vec<bool>, RedisStateError> {
        let (epoch, fresh) = self.epoch_args();
        let mut inv = self.inner.scripts.renew.prepare_invoke();
        inv.key(self.epoch_key()).key(self.keys().lost());
        inv.arg(&*epoch)
            .arg(fresh)
            .arg(self.lease_ms())
            .arg(self.ttl_ms());
        for (keys, owner, head) in runs {
            inv.key(&keys.lease).key(&keys.chain);
            match head {
                Some(h) => inv.arg(owner).arg(h.next_seq).arg(&h.last_hash),
                None => inv.arg(owner).arg("").arg(""),
            };
        }
        let raw: Vec<redis::Value> = self.run("renew_leases", inv).await?;
        let mut it = raw.into_iter();
        let ep: String = it
            .next()
            .map(|v| redis::FromRedisValue::from_redis_value(&v))
            .transpose()
            .map_err(|e| self.reply_err("renew_leases", e.to_string()))?
            .unwrap_or_default();
        self.adopt_epoch(&ep);
        let _lost_now = it.next();
        Ok(it.map(|v| matches!(v, redis::Value::Int(1))).collect())
    }

    /// Re-arms the prefix after a loss of state (`toolgate state rearm`): removes the loss
    /// marker, so counts are trusted again from what Redis holds now, and logs `entry` (a JSON
    /// object) in the prefix's re-arm log. Answers when the loss was found (server ms), if one was.
    pub async fn rearm(&self, entry: &serde_json::Value) -> Result<Option<i64>, RedisStateError> {
        let mut inv = self.inner.scripts.rearm.prepare_invoke();
        inv.key(self.keys().lost())
            .key(self.keys().rearms())
            .arg(entry.to_string());
        let lost: String = self.run("rearm", inv).await?;
        Ok(lost.parse().ok())
    }

    /// When Redis lost toolgate's state, if the prefix is not re-armed since (server ms).
    pub async fn lost_at(&self) -> Result<Option<i64>, RedisStateError> {
        let got: Option<String> = self
            .command("lost_at", redis::cmd("GET").arg(self.keys().lost()))
            .await?;
        Ok(got.and_then(|s| s.parse().ok()))
    }

    /// The prefix's re-arm log, newest first (JSON objects as written by `state rearm`).
    pub async fn rearm_log(&self) -> Result<Vec<String>, RedisStateError> {
        self.command(
            "rearm_log",
            redis::cmd("LRANGE")
                .arg(self.keys().rearms())
                .arg(0)
                .arg(99),
        )
        .await
    }
}
