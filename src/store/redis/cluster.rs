//! Redis Cluster: the script once per tier, with reserve-and-rollback.
//!
//! The tiers' keys live in different slots (and usually on different nodes), so one script
//! cannot see them all. The script runs per tier, in tier order, on the node owning that key;
//! when a later tier denies, the entries this request recorded in the earlier tiers are removed
//! again (see `rollback`), so a denied request spends no quota. Never over-admits; a
//! concurrent request may be denied by a reservation that is then rolled back.

use std::time::Duration;

use super::super::{StoreError, StoreOutcome, StoreRequest, TierCheck};
use super::blocks;
use super::reply::{conclude, Found, Reply};
use super::rollback::Reservation;
use super::script;
use super::sharded::Walk;
use super::RedisStore;
use crate::clock::saturating_micros;
use crate::tier::Tier;

impl RedisStore {
    /// Decides `req` tier by tier, every request on a cluster (a sharded global tier: see
    /// `sharded`); `now` is the script's `ARGV[1]`. The facts of every tier go through the one
    /// algorithm, as on a single node; a sharded global tier's facts are its shard's, with the
    /// shard's cap as its limit.
    pub(super) async fn check_per_tier(
        &self,
        req: &StoreRequest<'_>,
        now: &str,
    ) -> Result<(StoreOutcome, Duration), StoreError> {
        let shards = self.inner.global.as_ref();
        let global = req.tiers.iter().position(|t| t.tier == Tier::Global);
        if let (Some(shards), Some(g)) = (shards, global) {
            // Every shard known full: denied before any tier is reserved.
            let now_us = self.cache_now(req);
            if let Some(wait) = self.all_shards_full(
                shards,
                &req.tiers[g],
                (saturating_micros(req.window), req.cost),
                now_us,
            ) {
                // As everywhere, a block of an earlier tier answers before a full tier.
                if let Some((tier, ms)) = self.blocks_of(&req.tiers[..g]).await {
                    let blocked = StoreOutcome::blocked(tier, Duration::from_millis(ms));
                    return Ok((blocked, Duration::ZERO));
                }
                return Ok((StoreOutcome::denied(Tier::Global, wait), Duration::ZERO));
            }
        }
        let mut checks = req.tiers.to_vec();
        // What this request reserved in the tiers so far.
        let mut recorded: Vec<Reservation> = Vec::with_capacity(req.tiers.len());
        let mut found: Vec<Found> = Vec::with_capacity(req.tiers.len());
        // Each node may read its own clock (Redis TIME): every tier's times are moved onto
        // the first tier's `now`, so the facts speak of one moment.
        let mut first_now = None;
        for (i, tier) in req.tiers.iter().enumerate() {
            if let (Some(shards), Some(_)) = (shards, global.filter(|&g| g == i)) {
                match self
                    .walk_global(shards, req, now, tier, &mut first_now)
                    .await?
                {
                    Walk::Denied(wait) => {
                        self.roll_back(&recorded).await?;
                        let denied = StoreOutcome::denied(Tier::Global, wait);
                        return Ok((denied, Duration::ZERO));
                    }
                    Walk::Facts {
                        cap,
                        found: f,
                        members,
                    } => {
                        checks[i].limit = cap;
                        found.push(f);
                        recorded.extend(members);
                        continue;
                    }
                }
            }
            let key = self.key(tier.tier, tier.id);
            let (reply, f) = self.one_tier(&key, req, now, tier, &mut first_now).await?;
            let later = &req.tiers[i + 1..];
            if let Some((_, ms)) = reply.blocked {
                self.roll_back(&recorded).await?;
                let longest = self.blocks_of(later).await.map_or(ms, |(_, l)| l.max(ms));
                let blocked = StoreOutcome::blocked(tier.tier, Duration::from_millis(longest));
                return Ok((blocked, Duration::ZERO));
            }
            found.push(f);
            let base = first_now.unwrap_or(reply.now);
            if !reply.admitted {
                self.roll_back(&recorded).await?;
                // As on one node, a block of a later tier answers before a full tier.
                if let Some((blocked, ms)) = self.blocks_of(later).await {
                    let blocked = StoreOutcome::blocked(blocked, Duration::from_millis(ms));
                    return Ok((blocked, Duration::ZERO));
                }
                return conclude(&checks, &found, false, base, req);
            }
            // A full shadow tier records nothing: there is no member to roll back.
            recorded.extend(Reservation::of(&key, reply.member, req.cost, reply.now));
        }
        let now = first_now.unwrap_or_default();
        conclude(&checks, &found, true, now, req)
    }

    /// Runs the script for one tier (`check`) on `key` (with the key's block key, in its slot);
    /// its reply, and its facts moved onto the first tier's `now` (`base`, set here if this is
    /// the first tier). A reply that met a block has no facts: `Found` is then empty.
    pub(super) async fn one_tier(
        &self,
        key: &str,
        req: &StoreRequest<'_>,
        now: &str,
        check: &TierCheck<'_>,
        base: &mut Option<u64>,
    ) -> Result<(Reply, Found), StoreError> {
        let args = script::args(req, now, std::slice::from_ref(check), 0);
        let block = blocks::block_key_of(check.tier, key);
        let reply = Reply::parse(&self.inner.eval_one(key, block, &args).await?)?;
        let at = *base.get_or_insert(reply.now);
        if reply.blocked.is_some() {
            let none = Found {
                count: 0,
                oldest: None,
                expiry: None,
            };
            return Ok((reply, none));
        }
        let shift = |t: Option<u64>| t.map(|t| (t + at).saturating_sub(reply.now));
        let [f] = reply.found[..] else {
            return Err(StoreError::new("one tier's script answered for several"));
        };
        let found = Found {
            oldest: shift(f.oldest),
            expiry: shift(f.expiry),
            ..f
        };
        Ok((reply, found))
    }

    /// The first of `tiers` blocked, and the longest time left (ms) of their blocks: one PTTL
    /// per tier with a block key, on its node, all sent at once. Only asked when a tier has
    /// already refused the request (so it refines the answer, never changes admit to deny): a
    /// failed PTTL counts as no block.
    async fn blocks_of(&self, tiers: &[TierCheck<'_>]) -> Option<(Tier, u64)> {
        let keys: Vec<(Tier, String)> = tiers
            .iter()
            .filter_map(|t| Some((t.tier, self.block_key(t.tier, t.id)?)))
            .collect();
        let inner = &*self.inner;
        let ttls = keys
            .iter()
            .map(|(_, key)| inner.on_key::<i64>("PTTL", key, &[]));
        let ttls = futures_util::future::join_all(ttls).await;
        let mut found: Option<(Tier, u64)> = None;
        for ((tier, _), ttl) in keys.iter().zip(ttls) {
            let Some(ms) = ttl
                .ok()
                .and_then(|ms| u64::try_from(ms).ok())
                .filter(|&ms| ms > 0)
            else {
                continue;
            };
            found = Some(found.map_or((*tier, ms), |(first, l)| (first, l.max(ms))));
        }
        found
    }
}
