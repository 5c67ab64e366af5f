//! Redis Cluster: the script once per tier, with reserve-and-rollback.
//!
//! The tiers' keys live in different slots (and usually on different nodes), so one script
//! cannot see them all. The script runs per tier, in tier order, on the node owning that key;
//! when a later tier denies, the entries this request recorded in the earlier tiers are removed
//! again (by their unique member), so a denied request spends no quota. Never over-admits; a
//! concurrent request may be denied by a reservation that is then rolled back.

use std::time::Duration;

use super::super::{StoreError, StoreOutcome, StoreRequest};
use super::script::{self, Found, Reply};
use super::RedisStore;

impl RedisStore {
    /// Decides `req` (more than one tier) tier by tier; `now` is the script's `ARGV[1]`. The
    /// facts of every tier go through the one algorithm, as on a single node.
    pub(super) async fn check_per_tier(
        &self,
        req: &StoreRequest<'_>,
        now: &str,
    ) -> Result<(StoreOutcome, Duration), StoreError> {
        // (key, member) of every tier this request was recorded in so far.
        let mut recorded: Vec<(String, String)> = Vec::with_capacity(req.tiers.len());
        let mut found: Vec<Found> = Vec::with_capacity(req.tiers.len());
        // Each node may read its own clock (Redis TIME): every tier's times are moved onto
        // the first tier's `now`, so the facts speak of one moment.
        let mut first_now = None;
        for (i, tier) in req.tiers.iter().enumerate() {
            let key = self.key(tier.tier, tier.id);
            let tiers = &req.tiers[i..=i];
            let reply = self
                .inner
                .eval_one(&key, script::args(req, now, tiers))
                .await?;
            let reply = Reply::parse(&reply)?;
            let base = *first_now.get_or_insert(reply.now);
            let shift = |t: Option<u64>| t.map(|t| (t + base).saturating_sub(reply.now));
            let [f] = reply.found[..] else {
                return Err(StoreError::new("one tier's script answered for several"));
            };
            found.push(Found {
                oldest: shift(f.oldest),
                expiry: shift(f.expiry),
                ..f
            });
            if !reply.admitted {
                self.roll_back(&recorded).await?;
                return script::conclude(req.tiers, &found, false, base, req);
            }
            // A full shadow tier records nothing: there is no member to roll back.
            if let Some(member) = reply.member {
                recorded.push((key, member));
            }
        }
        let now = first_now.unwrap_or_default();
        script::conclude(req.tiers, &found, true, now, req)
    }

    /// Removes this request's entries (one member per key) again, all at once.
    ///
    /// A member removed from the middle of a key's log (a later request was recorded after
    /// it) leaves its cost in the running totals of the later members, so the key counts that
    /// cost until they expire: stricter for a while, never looser.
    async fn roll_back(&self, recorded: &[(String, String)]) -> Result<(), StoreError> {
        for (key, _) in recorded {
            self.inner.denials.forget(key); // a unit may be free again
        }
        // Sent together: fred pipelines them, one round trip per node.
        let removals = recorded
            .iter()
            .map(|(key, member)| self.inner.zrem_one(key, member));
        futures_util::future::join_all(removals)
            .await
            .into_iter()
            .collect()
    }
}
