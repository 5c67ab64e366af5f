//! The in-process store: one sliding log per key in a [`DashMap`], decided under the logs' locks.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use parking_lot::{Mutex, MutexGuard};

use super::{Backend, Store, StoreError, StoreOutcome, StoreRequest, TierCheck};
use crate::clock::saturating_micros;
use crate::config::DEFAULT_MAX_TRACKED_KEYS;
use crate::decision::Tier;

type SharedLog = Arc<Mutex<Log>>;
type LogMap = DashMap<Box<str>, SharedLog, ahash::RandomState>;

/// One key's sliding log: the admitted requests' timestamps (µs since the epoch), oldest first.
#[derive(Debug, Default)]
struct Log {
    entries: VecDeque<u64>,
    /// Set, under the lock, by whoever removes the log from its map; a check that finds it set
    /// looks the key up again, so nothing is ever recorded in a log that is no longer in the map.
    dead: bool,
}

impl Log {
    /// Drops entries older than `cutoff` (an entry at exactly `cutoff` still counts).
    fn trim(&mut self, cutoff: u64) {
        while self.entries.front().is_some_and(|&t| t < cutoff) {
            self.entries.pop_front();
        }
    }

    /// Whether every entry is older than `cutoff`, so that forgetting the log changes nothing.
    fn idle(&self, cutoff: u64) -> bool {
        self.entries.back().is_none_or(|&t| t < cutoff)
    }
}

/// The in-memory store: sliding logs in a [`DashMap`], exact under any number of threads.
///
/// # Exactness
/// A check takes the logs of all its tiers (user, endpoint, global), locks them in one global
/// order (so two checks can never deadlock), trims them, and only if every tier has room records
/// the request in all of them. So no tier admits more than its limit in any window, and a denied
/// request leaves no trace, however many threads check at once.
///
/// # Cost
/// A check of a key already tracked allocates nothing: the key is looked up by `&str`, and the
/// log's deque only grows when its window holds more than ever before. Trimming pops expired
/// entries from the front, so a check is amortized O(1) whatever the number of live entries.
/// Each recorded request costs 8 bytes (16 at most while the deque's capacity is doubling).
///
/// # Bounded memory
/// - **Idle keys** (every entry older than the window) are evicted without anything to run:
///   once per `window` (at least every second, at most every minute) the first check past that
///   time sweeps both maps. A key idle for a whole window is gone by the next sweep.
/// - **The key cap** ([`max_tracked_keys`](crate::RateLimitConfig::max_tracked_keys), default
///   1,000,000 user and endpoint keys together) holds under a flood of distinct ids. At the cap,
///   a check that needs a *new* key first sweeps idle keys; if none can go, the request is
///   **denied** by that key's tier, with `Retry-After` set to when the first tracked key falls
///   idle. Keys already tracked are served as usual. The store never forgets a key that still
///   holds live entries, so the cap can never make a tier admit more than its limit: it fails
///   closed, for new ids only, until room frees up.
#[derive(Clone, Debug)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    users: LogMap,
    endpoints: LogMap,
    global: SharedLog,
    /// Keys in `users` and `endpoints`, counted as slots are reserved.
    tracked: AtomicUsize,
    max_keys: usize,
    /// When the next periodic sweep is due (µs).
    next_sweep: AtomicU64,
    /// Before this time (µs) a new key at the cap is denied without another sweep.
    cap_retry_at: AtomicU64,
    sweeping: Mutex<()>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A store with the default cap of 1,000,000 tracked keys.
    pub fn new() -> Self {
        Self::with_max_keys(DEFAULT_MAX_TRACKED_KEYS)
    }

    /// A store that tracks at most `max_keys` user and endpoint keys at once (at least 1).
    pub fn with_max_keys(max_keys: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                users: LogMap::default(),
                endpoints: LogMap::default(),
                global: SharedLog::default(),
                tracked: AtomicUsize::new(0),
                max_keys: max_keys.max(1),
                next_sweep: AtomicU64::new(0),
                cap_retry_at: AtomicU64::new(0),
                sweeping: Mutex::new(()),
            }),
        }
    }

    /// How many user and endpoint keys are tracked now.
    pub fn tracked_keys(&self) -> usize {
        self.inner.tracked.load(Ordering::Acquire)
    }

    /// How many entries one key's log holds now (expired ones included until the next check of
    /// that key trims them). The global tier's id is ignored.
    pub fn entries(&self, tier: Tier, id: &str) -> usize {
        self.log(tier, id).map_or(0, |log| log.lock().entries.len())
    }

    /// The oldest entry of one key's log, as a time since the epoch.
    pub fn oldest(&self, tier: Tier, id: &str) -> Option<Duration> {
        let log = self.log(tier, id)?;
        let oldest = log.lock().entries.front().copied();
        oldest.map(Duration::from_micros)
    }

    /// Forgets every key.
    pub fn clear(&self) {
        for map in [&self.inner.users, &self.inner.endpoints] {
            map.retain(|_, log| {
                log.lock().dead = true;
                self.inner.tracked.fetch_sub(1, Ordering::AcqRel);
                false
            });
        }
        self.inner.global.lock().entries.clear();
    }

    fn log(&self, tier: Tier, id: &str) -> Option<SharedLog> {
        match tier {
            Tier::Global => Some(self.inner.global.clone()),
            Tier::User => self.inner.users.get(id).map(|r| r.value().clone()),
            Tier::Endpoint => self.inner.endpoints.get(id).map(|r| r.value().clone()),
        }
    }

    /// Decides one request synchronously (the limiter calls this directly, with no future).
    pub(crate) fn check_sync(&self, req: &StoreRequest<'_>) -> Result<StoreOutcome, StoreError> {
        let tiers = req.tiers;
        if tiers.len() > 3 || has_duplicate_tier(tiers) {
            return Err(StoreError::new(
                "a request names each of the three tiers at most once",
            ));
        }
        let now = saturating_micros(req.now);
        let window = saturating_micros(req.window);
        let inner = &*self.inner;
        if now >= inner.next_sweep.load(Ordering::Relaxed) {
            inner.sweep(now, window);
        }
        let cutoff = now.saturating_sub(window);
        let cost = req.cost;
        let n = tiers.len();
        loop {
            let mut logs: [Option<SharedLog>; 3] = [None, None, None];
            for (slot, t) in logs.iter_mut().zip(tiers) {
                match inner.log_for(t, now, window) {
                    Ok(log) => *slot = Some(log),
                    Err(retry_after) => {
                        return Ok(StoreOutcome::Denied {
                            tier: t.tier,
                            retry_after: Duration::from_micros(retry_after.max(1)),
                        })
                    }
                }
            }
            // Lock in address order: every check agrees on it, so none can deadlock.
            let mut order = [0usize, 1, 2];
            order[..n].sort_unstable_by_key(|&i| logs[i].as_ref().map(Arc::as_ptr));
            let mut guards: [Option<MutexGuard<'_, Log>>; 3] = [None, None, None];
            for &i in &order[..n] {
                guards[i] = logs[i].as_ref().map(|l| l.lock());
            }
            let guards = &mut guards[..n];
            if guards.iter().flatten().any(|g| g.dead) {
                continue; // swept away between lookup and lock: look it up again
            }
            let mut remaining = u64::MAX;
            for (guard, t) in guards.iter_mut().zip(tiers) {
                let log = guard.as_mut().expect("locked above");
                log.trim(cutoff);
                let count = log.entries.len() as u64;
                if count.saturating_add(cost) > t.limit {
                    let retry_after = if cost > t.limit {
                        window // can never fit: a full window is the honest floor
                    } else {
                        // The entry whose expiry makes room for `cost` more.
                        let idx = usize::try_from(count + cost - t.limit - 1).unwrap_or(0);
                        let ts = log.entries.get(idx).copied().unwrap_or(now);
                        ts.saturating_add(window)
                            .saturating_add(1)
                            .saturating_sub(now)
                    };
                    return Ok(StoreOutcome::Denied {
                        tier: t.tier,
                        retry_after: Duration::from_micros(retry_after.max(1)),
                    });
                }
                remaining = remaining.min(t.limit - count - cost);
            }
            for guard in guards.iter_mut() {
                let log = guard.as_mut().expect("locked above");
                // Never record before the newest entry: the log stays sorted even when threads
                // read the clock in one order and lock in another.
                let at = log.entries.back().map_or(now, |&b| b.max(now));
                for _ in 0..cost {
                    log.entries.push_back(at);
                }
            }
            return Ok(StoreOutcome::Admitted { remaining });
        }
    }

    fn reset_sync(&self, tier: Tier, id: &str) {
        let map = match tier {
            Tier::Global => {
                self.inner.global.lock().entries.clear();
                return;
            }
            Tier::User => &self.inner.users,
            Tier::Endpoint => &self.inner.endpoints,
        };
        if let Some((_, log)) = map.remove(id) {
            log.lock().dead = true;
            self.inner.tracked.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

fn has_duplicate_tier(tiers: &[TierCheck<'_>]) -> bool {
    tiers
        .iter()
        .enumerate()
        .any(|(i, a)| tiers[..i].iter().any(|b| b.tier == a.tier))
}

impl Inner {
    /// The log of one tier's key, created if new. `Err(µs)`: the key is new, the store is at its
    /// cap, and room is expected in that many microseconds.
    fn log_for(&self, t: &TierCheck<'_>, now: u64, window: u64) -> Result<SharedLog, u64> {
        let map = match t.tier {
            Tier::Global => return Ok(self.global.clone()),
            Tier::User => &self.users,
            Tier::Endpoint => &self.endpoints,
        };
        if let Some(found) = map.get(t.id) {
            return Ok(found.value().clone());
        }
        self.reserve_slot(now, window)?;
        let log = match map.entry(Box::from(t.id)) {
            Entry::Occupied(o) => {
                self.tracked.fetch_sub(1, Ordering::AcqRel); // another check made it first
                o.get().clone()
            }
            Entry::Vacant(v) => v.insert(SharedLog::default()).value().clone(),
        };
        Ok(log)
    }

    fn reserve_slot(&self, now: u64, window: u64) -> Result<(), u64> {
        if self.try_reserve() {
            return Ok(());
        }
        let retry_at = self.cap_retry_at.load(Ordering::Acquire);
        if now >= retry_at {
            self.sweep(now, window);
            if self.try_reserve() {
                return Ok(());
            }
        }
        let retry_at = self.cap_retry_at.load(Ordering::Acquire);
        Err(retry_at.saturating_sub(now))
    }

    fn try_reserve(&self) -> bool {
        if self.tracked.fetch_add(1, Ordering::AcqRel) < self.max_keys {
            true
        } else {
            self.tracked.fetch_sub(1, Ordering::AcqRel);
            false
        }
    }

    /// Evicts idle keys from both maps. Only one thread sweeps at a time; the others go on.
    fn sweep(&self, now: u64, window: u64) {
        let Some(_sweeping) = self.sweeping.try_lock() else {
            return;
        };
        let cutoff = now.saturating_sub(window);
        // The first time a kept key may fall idle; logs in use now fall idle a window from now.
        let mut earliest_idle = now.saturating_add(window).saturating_add(1);
        let mut removed = 0usize;
        for map in [&self.users, &self.endpoints] {
            map.retain(|_, log| {
                // try_lock: a log locked by a check is in use, and a check never holds a map
                // guard while it waits for a log, so this cannot deadlock.
                let Some(mut log) = log.try_lock() else {
                    return true;
                };
                if log.idle(cutoff) {
                    log.dead = true;
                    removed += 1;
                    return false;
                }
                log.trim(cutoff);
                if log.entries.capacity() > 64 && log.entries.capacity() > 4 * log.entries.len() {
                    log.entries.shrink_to_fit();
                }
                if let Some(&newest) = log.entries.back() {
                    earliest_idle =
                        earliest_idle.min(newest.saturating_add(window).saturating_add(1));
                }
                true
            });
        }
        self.tracked.fetch_sub(removed, Ordering::AcqRel);
        for map in [&self.users, &self.endpoints] {
            if map.capacity() > 1024 && map.capacity() > 4 * map.len() {
                map.shrink_to_fit();
            }
        }
        // Sweep once a window, but at least every second and at most every minute.
        let interval = window.clamp(1_000_000, 60_000_000);
        self.next_sweep
            .store(now.saturating_add(interval), Ordering::Relaxed);
        // At the cap, sweep again no sooner than a key can fall idle, nor more than ~8 times a
        // window: a flood of new ids then costs a comparison, not a sweep, per request.
        let gap = (window / 8).clamp(1_000, 1_000_000);
        self.cap_retry_at.store(
            earliest_idle.max(now.saturating_add(gap)),
            Ordering::Release,
        );
    }
}

impl Store for MemoryStore {
    fn check(
        &self,
        request: &StoreRequest<'_>,
    ) -> impl Future<Output = Result<StoreOutcome, StoreError>> + Send {
        std::future::ready(self.check_sync(request))
    }

    fn reset(&self, tier: Tier, id: &str) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.reset_sync(tier, id);
        std::future::ready(Ok(()))
    }

    fn backend(&self) -> Backend {
        Backend::Memory
    }
}
