//! The in-process store: one sliding log per key in sharded hash tables, decided under the
//! logs' locks.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::{Answer, Backend, Store, StoreError, StoreOutcome, StoreRequest};
use crate::clock::saturating_micros;
use crate::config::DEFAULT_MAX_TRACKED_KEYS;
use crate::tier::Tier;

mod blocks;
mod decide;
mod direct;
mod inspect;
mod log;
mod map;
mod padded;
mod ring;
mod sweep;
mod usage;

use self::blocks::Blocks;
use self::decide::Shape;
pub(crate) use self::direct::Direct;
use self::log::Log;
use self::map::LogMap;
use self::padded::Padded;

/// Shards per map: enough that checks of different keys rarely meet on one shard lock.
const SHARDS: usize = 64;

/// The in-memory store: sliding logs in sharded hash tables, exact under any number of threads.
///
/// # Exactness
/// A check holds the locks of all its tiers at once — the user key's shard of the users map,
/// the endpoint key's shard of the endpoints map, the global log's mutex, always taken in that
/// order, so two checks can never deadlock — trims the logs, and only if every tier has room
/// records the request in all of them. So no tier admits more than its limit in any window,
/// and a denied request leaves no trace, however many threads check at once.
///
/// # Cost
/// A check of a key already tracked allocates nothing: keys are looked up by `&str`, and a
/// log's ring only grows when its window holds more than ever before. Trimming pops expired
/// entries from the front, so a check is amortized O(1) whatever the number of live entries.
/// Each recorded request costs 8 bytes (16 at most while the ring's capacity is doubling),
/// and unit requests recorded in the same microsecond share one entry (a key checked
/// millions of times a second keeps an entry per microsecond); a key that has seen a request
/// costing more than one unit keeps a running total beside each entry (16 bytes an entry,
/// one entry per request), so that a request of any cost is still one entry.
///
/// # Bounded memory
/// - **Idle keys** (every entry older than the window) are evicted without anything to run:
///   once per `window` (at least every second, at most every minute) the first check past that
///   time sweeps both maps. A key idle for a whole window is gone by the next sweep.
/// - **A denied request leaves no key**: a key is inserted only when a request is admitted
///   and recorded in it, so a flood of requests that some tier denies (however many distinct
///   ids it carries) tracks nothing new.
/// - **The key cap** ([`max_tracked_keys`](crate::RateLimitConfig::max_tracked_keys), default
///   1,000,000 user and endpoint keys together) holds under a flood of distinct ids. Every
///   tracked key held a live entry when it was last swept or inserted. At the cap, an admitted
///   request that needs a *new* key first sweeps: every key without a live entry goes. If room
///   is still short, the request is **denied** by that key's tier, with `Retry-After` set to
///   when the first tracked key falls idle. Keys already tracked are served as usual. A flood
///   of new ids at the cap costs a comparison, not a sweep, per request: after a sweep the
///   next one waits until a key can have fallen idle, and at least 1/8 of a window (1 ms to
///   1 s), so a key idle for less than that may be reclaimed that much later. The store never
///   forgets a key that still holds live entries, so the cap can never make a tier admit more
///   than its limit: it fails closed, for new ids only, until room frees up. A tier in shadow
///   mode never denies: after the same sweep, if room is still short, its new key is not made,
///   and the request goes through, not counted in that tier, reported as the denial enforcing
///   the tier would have given.
#[derive(Clone, Debug)]
pub struct MemoryStore {
    inner: Arc<TierLogs>,
}

/// What every clone of a [`MemoryStore`] shares: the tiers' logs (user and endpoint maps, the
/// global log) and the bookkeeping of the key cap and the sweep.
#[derive(Debug)]
struct TierLogs {
    users: LogMap,
    endpoints: LogMap,
    /// Alone on its cache lines: every check writes its lock and fields, and reads the
    /// fields around it.
    global: Padded<Mutex<Log>>,
    /// Keys in `users` and `endpoints`, counted as slots are reserved.
    tracked: AtomicUsize,
    max_keys: usize,
    /// When the next periodic sweep is due (µs).
    next_sweep: AtomicU64,
    /// Before this time (µs) a new key at the cap is denied without another sweep.
    cap_retry_at: AtomicU64,
    /// The window (µs) of the last sweep, which `cap_retry_at` was worked out under.
    swept_window: AtomicU64,
    /// When the next warning that the key cap denies new keys may be logged (µs).
    next_cap_warning: AtomicU64,
    sweeping: Mutex<()>,
    /// Operators' blocks (see [`Store::block`]).
    blocks: Blocks,
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

    /// A store that tracks at most `max_keys` user and endpoint keys at once (at least
    /// [`MIN_TRACKED_KEYS`](crate::config::MIN_TRACKED_KEYS), 2: one request may need a key of each).
    pub fn with_max_keys(max_keys: usize) -> Self {
        let map = || LogMap::new(SHARDS);
        Self {
            inner: Arc::new(TierLogs {
                users: map(),
                endpoints: map(),
                global: Padded(Mutex::new(Log::default())),
                tracked: AtomicUsize::new(0),
                max_keys: max_keys.max(crate::config::MIN_TRACKED_KEYS),
                next_sweep: AtomicU64::new(0),
                cap_retry_at: AtomicU64::new(0),
                swept_window: AtomicU64::new(u64::MAX),
                next_cap_warning: AtomicU64::new(0),
                sweeping: Mutex::new(()),
                blocks: Blocks::default(),
            }),
        }
    }

    /// Decides one request synchronously: the limiter calls this directly, with no future and
    /// no conversion of its answer (see [`Answer`]).
    #[inline]
    pub(crate) fn answer(&self, req: &StoreRequest<'_>) -> Result<Answer, StoreError> {
        let tiers = req.tiers;
        if tiers.is_empty() {
            return Ok(Answer::of_outcome(StoreOutcome::nothing_to_count()));
        }
        let Some(shape) = Shape::of(req) else {
            return Err(super::misordered());
        };
        let now = saturating_micros(req.now);
        let window = saturating_micros(req.window);
        let inner = &*self.inner;
        if now >= inner.next_sweep.load(Ordering::Relaxed) {
            inner.sweep(now, window);
        }
        if let Some((tier, retry_after_us)) = inner.blocks.find(tiers, now) {
            return Ok(Answer::Blocked {
                tier,
                retry_after_us,
            });
        }
        let mut may_sweep = true;
        loop {
            match inner.decide(req, shape, now, window, may_sweep) {
                Ok(outcome) => return Ok(outcome),
                // An admitted request needs a new key at the cap, with a sweep due: sweep with
                // no lock held (keys without a live entry go), then decide once more.
                Err(CapReached { sweep: true, .. }) => {
                    inner.sweep(now, window);
                    may_sweep = false;
                }
                Err(CapReached { tier, .. }) => {
                    inner.warn_cap_reached(now, tier);
                    let retry_at = inner.cap_retry_at.load(Ordering::Acquire);
                    return Ok(Answer::Denied {
                        tier,
                        retry_after_us: retry_at.saturating_sub(now).max(1),
                    });
                }
            }
        }
    }
    fn reset_sync(&self, tier: Tier, id: &str) {
        let map = match tier {
            Tier::Global => {
                self.inner.global.lock().clear();
                return;
            }
            Tier::User => &self.inner.users,
            Tier::Endpoint => &self.inner.endpoints,
        };
        if map.remove(id) {
            self.inner.tracked.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl TierLogs {
    /// Logs, at most once every [`CAP_WARNING_INTERVAL_US`], that the key cap denied a new key
    /// of `tier`, or left it untracked for a tier in shadow mode (reported as `tier`'s denials
    /// or shadow denials, which the decision alone cannot tell from a full tier).
    fn warn_cap_reached(&self, now: u64, tier: Tier) {
        let due = self.next_cap_warning.load(Ordering::Relaxed);
        if now < due
            || self
                .next_cap_warning
                .compare_exchange(
                    due,
                    now.saturating_add(CAP_WARNING_INTERVAL_US),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return;
        }
        tracing::warn!(
            max_tracked_keys = self.max_keys,
            tracked = self.tracked.load(Ordering::Relaxed),
            tier = tier.as_str(),
            "the in-memory store's key cap is reached: requests that need a new key (new user \
             ids, or a route not used within the window) are denied (a tier in shadow mode \
             lets them through, not counted) until keys fall idle; raise max_tracked_keys if \
             this is not a flood"
        );
    }
}

/// A request the memory store would admit needs a new key of `tier` while the key cap is
/// reached; nothing was recorded. `sweep`: a sweep is due and allowed, and may make room (then
/// the request is decided once more).
#[derive(Clone, Copy, Debug)]
struct CapReached {
    tier: Tier,
    sweep: bool,
}

/// At most one key-cap warning in this many microseconds (10 s).
const CAP_WARNING_INTERVAL_US: u64 = 10_000_000;

impl Store for MemoryStore {
    fn check(
        &self,
        request: &StoreRequest<'_>,
    ) -> impl Future<Output = Result<StoreOutcome, StoreError>> + Send {
        std::future::ready(self.answer(request).map(Answer::outcome))
    }

    #[inline]
    fn check_now(&self, request: &StoreRequest<'_>) -> Option<Result<StoreOutcome, StoreError>> {
        Some(self.answer(request).map(Answer::outcome))
    }

    fn reset(&self, tier: Tier, id: &str) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.reset_sync(tier, id);
        std::future::ready(Ok(()))
    }

    fn usage(
        &self,
        request: &StoreRequest<'_>,
    ) -> impl Future<Output = Result<Vec<super::TierUsage>, StoreError>> + Send {
        std::future::ready(Ok(self.usage_sync(request)))
    }

    fn block(
        &self,
        tier: Tier,
        id: &str,
        now: Duration,
        duration: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let until = saturating_micros(now).saturating_add(saturating_micros(duration));
        self.inner.blocks.block(tier, id, until);
        std::future::ready(Ok(()))
    }

    fn unblock(&self, tier: Tier, id: &str) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.inner.blocks.unblock(tier, id);
        std::future::ready(Ok(()))
    }

    fn backend(&self) -> Backend {
        Backend::Memory
    }
}
