//! Operators' blocks in memory: when each blocked key's block ends, beside the logs.
//!
//! A check with no block anywhere pays one atomic load; with blocks, one map lookup per tier.
//! An ended block is removed by the first check or sweep that meets it, so it takes no room
//! after.

use std::sync::atomic::{AtomicUsize, Ordering};

use dashmap::DashMap;

use super::super::TierCheck;
use crate::tier::Tier;

/// Blocked keys of the user and endpoint tiers, each with the time its block ends (µs).
#[derive(Debug, Default)]
pub(super) struct Blocks {
    users: DashMap<Box<str>, u64, ahash::RandomState>,
    endpoints: DashMap<Box<str>, u64, ahash::RandomState>,
    /// Entries in both maps: zero on the hot path means no lookup at all.
    count: AtomicUsize,
}

impl Blocks {
    fn map(&self, tier: Tier) -> Option<&DashMap<Box<str>, u64, ahash::RandomState>> {
        match tier {
            Tier::User => Some(&self.users),
            Tier::Endpoint => Some(&self.endpoints),
            Tier::Global => None,
        }
    }

    /// Blocks `tier`'s key `id` until `until` (µs), replacing an earlier end.
    pub(super) fn block(&self, tier: Tier, id: &str, until: u64) {
        let Some(map) = self.map(tier) else { return };
        if map.insert(Box::from(id), until).is_none() {
            self.count.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Ends the block of `tier`'s key `id`, and of its per-route buckets (`id@<route>`: an
    /// encoded part holds `@` only first, in an address, so the prefix names only them).
    pub(super) fn unblock(&self, tier: Tier, id: &str) {
        let Some(map) = self.map(tier) else { return };
        if map.remove(id).is_some() {
            self.count.fetch_sub(1, Ordering::AcqRel);
        }
        let bucket = format!("{id}@");
        map.retain(|key, _| {
            let keep = !key.starts_with(&bucket);
            if !keep {
                self.count.fetch_sub(1, Ordering::AcqRel);
            }
            keep
        });
    }

    /// The first of `tiers` blocked at `now` (µs), and when the last of their blocks ends (µs
    /// from `now`).
    #[inline]
    pub(super) fn find(&self, tiers: &[TierCheck<'_>], now: u64) -> Option<(Tier, u64)> {
        if !self.any() {
            return None;
        }
        self.find_slow(tiers, now)
    }

    /// Whether any key is blocked (or a block that ended is not purged yet).
    #[inline]
    pub(super) fn any(&self) -> bool {
        self.count.load(Ordering::Acquire) != 0
    }

    #[cold]
    fn find_slow(&self, tiers: &[TierCheck<'_>], now: u64) -> Option<(Tier, u64)> {
        let mut found: Option<(Tier, u64)> = None;
        for t in tiers {
            let Some(map) = self.map(t.tier) else {
                continue;
            };
            let Some(until) = map.get(t.id).map(|u| *u) else {
                continue;
            };
            if until <= now {
                // Ended: gone for good (unless blocked again meanwhile).
                if map.remove_if(t.id, |_, u| *u <= now).is_some() {
                    self.count.fetch_sub(1, Ordering::AcqRel);
                }
                continue;
            }
            let left = until - now;
            found = Some(match found {
                Some((tier, longest)) => (tier, longest.max(left)),
                None => (t.tier, left),
            });
        }
        found
    }

    /// Removes every block ended by `now` (µs).
    pub(super) fn purge(&self, now: u64) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        for map in [&self.users, &self.endpoints] {
            map.retain(|_, until| {
                let keep = *until > now;
                if !keep {
                    self.count.fetch_sub(1, Ordering::AcqRel);
                }
                keep
            });
        }
    }

    /// How many blocks are kept (ended ones included until met or swept).
    pub(super) fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }
}
