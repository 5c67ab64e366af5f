//! Redis Cluster: the script once per tier, with reserve-and-rollback.
//!
//! The tiers' keys live in different slots (and usually on different nodes), so one script
//! cannot see them all. The script runs per tier, in tier order, on the node owning that key;
//! when a later tier denies, the entries this request recorded in the earlier tiers are removed
//! again (by their unique member), so a denied request spends no quota. Never over-admits; a
//! concurrent request may be denied by a reservation that is then rolled back.

use std::time::Duration;

use super::super::{StoreError, StoreRequest};
use super::script::{self, Admitted, Reply};
use super::RedisStore;

impl RedisStore {
    /// Decides `req` (more than one tier) tier by tier; `now` is the script's `ARGV[1]`.
    pub(super) async fn check_per_tier(
        &self,
        req: &StoreRequest<'_>,
        now: &str,
    ) -> Result<Reply, StoreError> {
        // (key, member) of every tier this request was recorded in so far.
        let mut recorded: Vec<(String, String)> = Vec::with_capacity(req.tiers.len());
        let mut remaining = u64::MAX;
        let (mut binding, mut reset) = (req.tiers[0].tier, Duration::ZERO);
        let mut shadow_denied = None;
        for (i, tier) in req.tiers.iter().enumerate() {
            let key = self.key(tier.tier, tier.id);
            let tiers = &req.tiers[i..=i];
            let reply = self
                .inner
                .eval_one(&key, script::args(req, now, tiers))
                .await?;
            let admitted = match Reply::parse(&reply, tiers)? {
                Reply::Admitted(admitted) => admitted,
                denied @ Reply::Denied(_) => {
                    self.roll_back(&recorded).await?;
                    return Ok(denied);
                }
            };
            if admitted.remaining < remaining {
                (remaining, binding, reset) = (admitted.remaining, tier.tier, admitted.reset);
            }
            match admitted {
                // A full shadow tier: nothing recorded there.
                Admitted {
                    shadow_denied: Some(s),
                    ..
                } => shadow_denied = shadow_denied.or(Some(s)),
                Admitted {
                    member: Some(member),
                    ..
                } => recorded.push((key, member)),
                Admitted { member: None, .. } => {
                    return Err(StoreError::new("the script recorded no member"));
                }
            }
        }
        Ok(Reply::Admitted(Admitted {
            remaining,
            binding,
            reset,
            shadow_denied,
            member: None,
        }))
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
