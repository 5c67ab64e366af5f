//! The Redis store's local memory of denials: repeats of a denied request answered with no round
//! trip, never with a `Retry-After` shorter than Redis would give while every instance runs the
//! same limits, and forgotten on every instance when any instance resets the key. (An instance
//! on a higher limit, in a rolling change of limits, can admit into a key this one remembers
//! full; the wait remembered is then short, and the retry is refused again: docs/OPERATIONS.md.)
//!
//! A denial is remembered only when Redis said the tier has **no room at all**: then nothing
//! but its oldest entry leaving the window (or a reset) can change the key, since a denied
//! request records nothing and no request of any cost can be admitted. Until that moment (the
//! `still` of the script's reply) the wait Redis gave for the request's cost is exact, so a
//! repeat of the same cost is answered from here with the same absolute wait. A tier with some
//! room left (less than the request's cost) is never cached: a cheaper request may be admitted
//! at any moment, and move the real wait later.
//!
//! A denial is remembered with the request's other tiers' keys (their fingerprint): the same
//! user on another route asks Redis, so a block of that route is never hidden by the user's
//! full window.
//!
//! Resets go through Redis pub/sub: the resetting instance publishes the key on
//! `<prefix>:invalidate` after deleting it, and every instance subscribed drops it. A block
//! publishes `*`, and every instance drops every key: a block of a route refuses requests whose
//! first tier is a user, so no remembered denial can be trusted to name the block. The cache is
//! only used while the subscription is up: if subscribing fails at the start, the cache stays
//! off; if the subscription's connection is lost later, the cache is cleared and switched off
//! until it is subscribed again (see `invalidation`); a lag (messages lost) clears it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use dashmap::DashMap;

use crate::shards::KnownFull;
use crate::store::TierCheck;

/// At most this many keys are remembered.
const MAX_KEYS: usize = 65_536;

/// A purge of a full cache waits until at least this share (1/n) of its entries can go, so
/// that a full cache costs O(n) per purge and O(1) per denial between them.
const PURGE_SHARE: usize = 8;

#[derive(Clone, Copy, Debug)]
struct Cached {
    /// Until when (µs, the cache's clock: the store's `cache_now`) the key cannot change.
    still_until: u64,
    /// When (µs) a request under `terms` fits, as Redis said.
    fits_at: u64,
    terms: Terms,
}

/// What a remembered denial holds for: a request of `cost` against a first tier of `limit`
/// (in shadow mode or not) over `window` (µs), whose other tiers' keys are `others` (see
/// [`DenialCache::others`]). A request under other terms — another cost, limits changed by a
/// live reconfiguration, another route — asks Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Terms {
    pub(crate) cost: u64,
    pub(crate) limit: u64,
    pub(crate) shadow: bool,
    pub(crate) window: u64,
    pub(crate) others: u64,
}

/// Denials remembered per Redis key (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct DenialCache {
    entries: DashMap<String, Cached, ahash::RandomState>,
    /// The invalidation subscription is up: the cache may answer.
    live: AtomicBool,
    /// The store is closed: the cache never answers again, whatever its listener does.
    closed: AtomicBool,
    /// Seeds the fingerprints of [`others`](Self::others) (random per process).
    hasher: ahash::RandomState,
    /// Counts the invalidations (resets, blocks) heard: a denial Redis gave before one of them
    /// arrived may already be out of date, and is not remembered (see [`epoch`](Self::epoch)).
    epoch: AtomicU64,
    /// While the cache is full, no purge before this time (µs): the last purge kept entries
    /// of which fewer than 1/[`PURGE_SHARE`] can have ended earlier.
    purge_at: AtomicU64,
}

impl DenialCache {
    /// A fingerprint of the keys of a request's tiers after its first. A denial is remembered
    /// for the first tier's key *with* the other keys it was given with: a request that adds a
    /// blocked key (the same user on a blocked route) must ask Redis, which answers the block
    /// before any count. (Blocks set later empty the whole cache.)
    pub(crate) fn others(&self, tiers: &[TierCheck<'_>]) -> u64 {
        let mut fingerprint = 0u64;
        for t in tiers {
            fingerprint = self.hasher.hash_one((fingerprint, t.tier as u8, t.id));
        }
        fingerprint
    }

    /// The wait for a request under `terms` on `key` at `now` (µs), if a denial is remembered.
    pub(crate) fn get(&self, key: &str, terms: Terms, now: u64) -> Option<Duration> {
        if !self.live.load(Ordering::Acquire) {
            return None;
        }
        let cached = *self.entries.get(key)?;
        if now < cached.still_until && terms == cached.terms {
            return Some(Duration::from_micros(
                cached.fits_at.saturating_sub(now).max(1),
            ));
        }
        if now >= cached.still_until {
            self.entries.remove_if(key, |_, c| c.still_until <= now);
        }
        None
    }

    /// What is remembered of `key` (a global shard) if it has no room at all at `now` (µs):
    /// until when it stays so (it is skipped until then), and by when a request of `cost`
    /// fits there at the latest (a wait that is never shorter than the truth: what Redis said
    /// for a cost at least as large, else a window and 1 µs from now, when every entry of now
    /// has left). Only under the global `limit` and `window` it was remembered under: a live
    /// reconfiguration changes the shards' caps.
    pub(crate) fn full_until(
        &self,
        key: &str,
        (limit, window): (u64, u64),
        now: u64,
        cost: u64,
    ) -> Option<KnownFull> {
        if !self.live.load(Ordering::Acquire) {
            return None;
        }
        let cached = *self.entries.get(key)?;
        let same = cached.terms.limit == limit && cached.terms.window == window;
        if !same || now >= cached.still_until {
            return None;
        }
        let fits_by = if cost <= cached.terms.cost {
            cached.fits_at
        } else {
            now.saturating_add(window).saturating_add(1)
        };
        Some(KnownFull {
            until: cached.still_until,
            fits_by: fits_by.max(cached.still_until),
        })
    }

    /// Remembers that `key` has no room, unchanged for `still`, and that a request under
    /// `terms` fits after `retry_after`, both counted by Redis from a moment within `span`
    /// (µs: when the request was sent, when Redis's answer came); unless an invalidation
    /// arrived since `epoch` (read before the request was sent): Redis's answer may then
    /// predate a reset or a block.
    ///
    /// `still` is counted from the span's start and `retry_after` from its end, so that
    /// neither is ever later (the cache answers while the key may have changed) or earlier
    /// (a wait shorter than the truth) than Redis's; on the app's clock both ends are the
    /// request's `now`, Redis's own.
    pub(crate) fn remember_since(
        &self,
        epoch: u64,
        key: String,
        terms: Terms,
        span: (u64, u64),
        retry_after: Duration,
        still: Duration,
    ) {
        self.remember_if(key, terms, span, retry_after, still, || {
            self.epoch() == epoch
        });
    }

    /// Remembers that `key` has no room, unchanged for `still` from `now` (µs), and that a
    /// request under `terms` fits after `retry_after` (the checks use
    /// [`remember_since`](Self::remember_since)).
    #[cfg(test)]
    pub(crate) fn remember(
        &self,
        key: String,
        terms: Terms,
        now: u64,
        retry_after: Duration,
        still: Duration,
    ) {
        self.remember_if(key, terms, (now, now), retry_after, still, || true);
    }

    /// Remembers `key`'s denial if `current` holds, asked with the key's shard locked:
    /// `forget`, `forget_all` and `disable` count an invalidation before they remove (which
    /// waits for that lock), so one that counts after the question removes this entry, and one
    /// that counted before it is seen by it. No stale entry is ever left, or read.
    fn remember_if(
        &self,
        key: String,
        terms: Terms,
        (sent, answered): (u64, u64),
        retry_after: Duration,
        still: Duration,
        current: impl FnOnce() -> bool,
    ) {
        if !self.live.load(Ordering::SeqCst) || still.is_zero() {
            return;
        }
        let after =
            |from: u64, d: Duration| from.saturating_add(crate::clock::saturating_micros(d));
        let still_until = after(sent, still);
        if still_until <= answered {
            return; // the key may already have changed
        }
        if self.entries.len() >= MAX_KEYS && !self.purge(answered) {
            return; // full of live denials: this one goes to Redis each time
        }
        let entry = self.entries.entry(key);
        if current() {
            entry.insert(Cached {
                still_until,
                fits_at: after(answered, retry_after),
                terms,
            });
        }
    }

    /// Makes room in a full cache: drops the denials ended by `now` (µs), unless too few can
    /// have ended since the last purge. Whether there is room now.
    ///
    /// A purge scans every entry. Scanning on every denial of a full cache would make each cost
    /// O(n) (a flood of distinct denied ids then costs the instance far more than the round
    /// trip the cache saves), so a purge also works out when the next one can free at least
    /// 1/[`PURGE_SHARE`] of the entries it kept, and none runs before then.
    #[cold]
    fn purge(&self, now: u64) -> bool {
        // One purge at a time: the first to claim it scans (`u64::MAX` until it is done); the
        // others keep their denial out, as before a purge is due.
        let due = self.purge_at.load(Ordering::Acquire);
        let claimed = now >= due
            && (self.purge_at)
                .compare_exchange(due, u64::MAX, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
        if !claimed {
            return false;
        }
        let mut kept = Vec::with_capacity(MAX_KEYS);
        self.entries.retain(|_, c| {
            let keep = c.still_until > now;
            if keep {
                kept.push(c.still_until);
            }
            keep
        });
        let next = if kept.is_empty() {
            0
        } else {
            let share = (kept.len() / PURGE_SHARE).min(kept.len() - 1);
            *kept.select_nth_unstable(share).1
        };
        self.purge_at.store(next, Ordering::Release);
        self.entries.len() < MAX_KEYS
    }

    /// The invalidations heard so far: read it before asking Redis, and pass it to
    /// [`remember_since`](Self::remember_since), which drops the denial if an invalidation
    /// arrived while the request was in flight (the reset or block may have come after Redis
    /// answered).
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Drops what is remembered of `key` after Redis admitted a request to it: that request
    /// was checked under other terms (a live reconfiguration's window, limit or cost), and a
    /// check under a shorter window trims entries for good, so the key may have room long
    /// before the remembered wait ends. (Not an invalidation: the epoch stays.)
    #[inline]
    pub(crate) fn forget_admitted(&self, key: &str) {
        if self.entries.contains_key(key) {
            self.entries.remove(key);
        }
    }

    /// Forgets one key (it was reset here or on another instance).
    pub(crate) fn forget(&self, key: &str) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.entries.remove(key);
    }

    /// Forgets every key (a block was set: it may refuse any key, first tier or not).
    pub(crate) fn forget_all(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.entries.clear();
        // What the last purge kept is gone: the cache may fill with denials that end sooner.
        self.purge_at.store(0, Ordering::Release);
    }

    /// The invalidation subscription is up: answer from the cache from now on (unless the
    /// store is closed).
    pub(crate) fn enable(&self) {
        // Sequentially consistent with `close`, which stores `closed` and then `live = false`:
        // if this load misses `closed`, that store of `false` comes after this store of
        // `true`; if it sees it, this takes its own back. Either way a closed cache ends off.
        self.live.store(true, Ordering::SeqCst);
        if self.closed.load(Ordering::SeqCst) {
            self.live.store(false, Ordering::SeqCst);
        }
    }

    /// The store is closed: off for good, whatever a listener still running does.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.live.store(false, Ordering::SeqCst);
        self.disable();
    }

    /// The subscription is gone: forget everything and answer nothing from here again. Counted
    /// as an invalidation (before the entries go), so that a denial asked before it is never
    /// kept after it.
    pub(crate) fn disable(&self) {
        self.live.store(false, Ordering::Release);
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.entries.clear();
        self.purge_at.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests;
