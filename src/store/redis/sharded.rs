//! Redis Cluster with `global_shards > 1`: the global tier's budget split over keys that the
//! cluster spreads over its masters (the layout and the walk are [`crate::shards`]'s).
//!
//! Each shard key holds a fixed cap (the caps sum to the global limit) and its script enforces
//! it exactly, so no window ever holds more than the limit. A request walks the shards from a
//! rotating start, skipping those this instance knows are full (the denial cache: a shard that
//! held its whole cap stays full until its oldest entry leaves, and a reset of the global tier
//! forgets every shard on every instance), moving on when one denies, until one admits or all
//! denied. When every shard is known full the request is denied with no round trip. A cost
//! that no shard fits whole, but the rooms the walk saw do together, is recorded in parts, one
//! per shard (all removed again if one part is denied).

use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use super::super::{StoreError, StoreRequest, TierCheck};
use super::denial_cache::Terms;
use super::reply::Found;
use super::rollback::Reservation;
use super::RedisStore;
use crate::algorithm::until_gone;
use crate::clock::saturating_micros;
use crate::shards::{full_until, Attempt, Rotation, ShardLayout};
use crate::tier::Tier;

/// The global tier's shard keys, and where this instance's requests start.
pub(super) struct GlobalShards {
    layout: ShardLayout,
    keys: Vec<String>,
    rotation: Rotation,
}

impl GlobalShards {
    /// `shards` keys under `prefix` (`<prefix>:global:{<tag>}`); `None` for a single key.
    pub(super) fn new(prefix: &str, shards: u32) -> Option<Self> {
        if shards <= 1 {
            return None;
        }
        let layout = ShardLayout::new(shards as usize);
        let keys = (0..layout.len())
            .map(|i| format!("{prefix}:global:{{{}}}", layout.tag(i)))
            .collect();
        // A random start per instance, so that instances do not walk in step.
        let seed = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
        Some(Self {
            layout,
            keys,
            rotation: Rotation::new(seed),
        })
    }

    /// Every shard key (a reset deletes them all).
    pub(super) fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The keys a global tier of `limit` uses (the first `ShardLayout::used` of them).
    pub(super) fn used_keys(&self, limit: u64) -> &[String] {
        &self.keys[..self.layout.used(limit).min(self.keys.len())]
    }
}

/// How the walk over the global shards ended.
pub(super) enum Walk {
    /// A shard recorded the request (or several shards a part of it each), or (shadow) every
    /// shard was full: the facts to conclude on, with the cap of the shards used as the
    /// tier's limit, and the members to remove on a rollback.
    Facts {
        cap: u64,
        found: Found,
        members: Vec<Reservation>,
    },
    /// Every shard denied (or was known full): the wait until the first frees.
    Denied(Duration),
}

impl RedisStore {
    /// The wait, if every shard of `tier` (the request's global tier, enforced) is known full
    /// at `now` (µs, the denial cache's clock) under this `window` (µs), for a request of
    /// `cost`: the request is denied with no round trip.
    pub(super) fn all_shards_full(
        &self,
        shards: &GlobalShards,
        tier: &TierCheck<'_>,
        (window, cost): (u64, u64),
        now: u64,
    ) -> Option<Duration> {
        if tier.shadow {
            return None;
        }
        let n = shards.layout.used(tier.limit);
        let known = |i: usize| {
            let terms = (tier.limit, window);
            (self.inner.denials).full_until(&shards.keys[i], terms, now, cost)
        };
        let until = Attempt::new(n, 0, n, now, known).err()?;
        Some(wait(until, now))
    }

    /// Walks the global shards for `tier` (the request's global tier); `base` is the first
    /// tier's `now`, onto which the facts are moved (set here if this is the first tier).
    pub(super) async fn walk_global(
        &self,
        shards: &GlobalShards,
        req: &StoreRequest<'_>,
        now: &str,
        tier: &TierCheck<'_>,
        base: &mut Option<u64>,
    ) -> Result<Walk, StoreError> {
        let denials = &self.inner.denials;
        // Read before any shard is asked: a shard's "full" is remembered only if no reset or
        // block was heard since.
        let epoch = denials.epoch();
        // On the denial cache's clock: what is known of the shards is remembered on it.
        let started = (Instant::now(), self.cache_now(req));
        let local_now = || started.1 + saturating_micros(started.0.elapsed());
        let n = shards.layout.used(tier.limit);
        // A shadow tier never denies: no shard is skipped, every one is tried if need be.
        let known = |i: usize| {
            let key = &shards.keys[i];
            let window = saturating_micros(req.window);
            let terms = (tier.limit, window);
            (!tier.shadow).then(|| denials.full_until(key, terms, started.1, req.cost))?
        };
        let start = shards.rotation.start(n);
        let mut attempt = match Attempt::new(n, start, n, started.1, known) {
            Ok(attempt) => attempt,
            Err(until) => return Ok(Walk::Denied(wait(until, started.1))),
        };
        let mut fullest: Option<(u64, u64, Found)> = None; // (fits at, cap, facts): shadow
        while let Some(i) = attempt.next_shard(local_now()) {
            let (key, cap) = (&shards.keys[i], shards.layout.cap(tier.limit, i));
            let check = TierCheck {
                limit: cap,
                ..*tier
            };
            let (reply, found) = self.one_tier(key, req, now, &check, base).await?;
            let f = reply.found[0]; // the facts in the shard's own clock
            if f.count.saturating_add(req.cost) <= cap {
                // Room, maybe under another window than a remembered denial of it.
                denials.forget_admitted(key);
                let members = Reservation::of(key, reply.member, req.cost, reply.now)
                    .into_iter()
                    .collect();
                return Ok(Walk::Facts {
                    cap,
                    found,
                    members,
                });
            }
            let span = (started.1, self.cache_now(req));
            let fits_at = self.shard_full(key, &f, cap, req, (reply.now, span), epoch);
            attempt.denied(fits_at, cap.saturating_sub(f.count));
            if fullest.is_none_or(|(t, ..)| fits_at < t) {
                fullest = Some((fits_at, cap, found));
            }
        }
        // No shard had room for the whole cost, but together they may: a part in each.
        if let Some(parts) = attempt.split(req.cost).filter(|_| !tier.shadow) {
            if let Some(walk) = self
                .reserve_parts(shards, req, now, tier, &parts, base)
                .await?
            {
                return Ok(walk);
            }
        }
        match fullest {
            Some((_, cap, found)) if tier.shadow => Ok(Walk::Facts {
                cap,
                found,
                members: Vec::new(),
            }),
            _ => Ok(Walk::Denied(wait(
                attempt.earliest().unwrap_or(started.1),
                started.1,
            ))),
        }
    }
}

impl RedisStore {
    /// Records `req` in parts, `(shard, units)` each, every part by its shard's script against
    /// its cap; if one part is denied, the parts recorded are removed again (`None`).
    async fn reserve_parts(
        &self,
        shards: &GlobalShards,
        req: &StoreRequest<'_>,
        now: &str,
        tier: &TierCheck<'_>,
        parts: &[(usize, u64)],
        base: &mut Option<u64>,
    ) -> Result<Option<Walk>, StoreError> {
        let mut members = Vec::with_capacity(parts.len());
        let (mut cap, mut count, mut oldest) = (0, 0, None::<u64>);
        for &(i, units) in parts {
            let key = &shards.keys[i];
            let part = StoreRequest {
                cost: units,
                ..*req
            };
            let check = TierCheck {
                limit: shards.layout.cap(tier.limit, i),
                ..*tier
            };
            let (reply, found) = self.one_tier(key, &part, now, &check, base).await?;
            if !reply.admitted {
                self.roll_back(&members).await?;
                return Ok(None);
            }
            self.inner.denials.forget_admitted(key);
            members.extend(Reservation::of(key, reply.member, units, reply.now));
            cap += check.limit;
            count += found.count;
            oldest = match (oldest, found.oldest) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        let found = Found {
            count,
            oldest,
            expiry: None,
        };
        Ok(Some(Walk::Facts {
            cap,
            found,
            members,
        }))
    }

    /// Shard `key` (cap `cap`) could not take `req`; `f` are its facts at `script_now` (its
    /// script's clock), which lies within `span` (the walk's start and the shard's answer, on
    /// the denial cache's clock: see `RedisStore::cache_now`). Remembers it as full if it held
    /// its whole cap (and no invalidation was heard since `epoch`), and returns when the
    /// request fits there (µs, on that clock, never earlier than Redis's answer says).
    fn shard_full(
        &self,
        key: &str,
        f: &Found,
        cap: u64,
        req: &StoreRequest<'_>,
        (script_now, span): (u64, (u64, u64)),
        epoch: u64,
    ) -> u64 {
        let window = saturating_micros(req.window);
        let fits = match f.expiry {
            Some(expiry) if req.cost <= cap => until_gone(expiry, window, script_now),
            _ => window,
        };
        if let Some(until) = full_until(f.count, cap, f.oldest, window) {
            let still = Duration::from_micros(until.saturating_sub(script_now));
            let retry = Duration::from_micros(fits);
            let denials = &self.inner.denials;
            // Remembered under the global limit (the caps follow from it) and the window.
            let terms = Terms {
                cost: req.cost,
                limit: req
                    .tiers
                    .iter()
                    .find(|t| t.tier == Tier::Global)
                    .map_or(cap, |t| t.limit),
                shadow: false,
                window,
                others: 0,
            };
            denials.remember_since(epoch, key.to_owned(), terms, span, retry, still);
        }
        span.1.saturating_add(fits)
    }
}

/// The wait from `now` until `until` (µs), at least 1 µs.
fn wait(until: u64, now: u64) -> Duration {
    Duration::from_micros(until.saturating_sub(now).max(1))
}
