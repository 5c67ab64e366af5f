//! Where the limiter reads `now`: the system clock, or a [`ManualClock`] in tests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of the current time, as a [`Duration`] since the UNIX epoch.
///
/// The limiter works in whole microseconds; finer parts are dropped.
pub trait Clock: Send + Sync + 'static {
    /// The current time since the UNIX epoch.
    fn now(&self) -> Duration;
}

/// The system's wall clock (the default).
///
/// Wall time, not a monotonic clock, because the Redis store shares timestamps between
/// processes; a clock stepped backwards only makes the limiter stricter for a while (entries are
/// never recorded earlier than the newest one already in a log).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
    }
}

/// A clock that moves only when told to, for tests without sleeps.
///
/// Clones share one time. It starts at zero (the epoch) unless made with [`ManualClock::at`].
///
/// ```
/// use std::time::Duration;
/// use tiered_ratelimit::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let shared = clock.clone();
/// clock.advance(Duration::from_secs(5));
/// assert_eq!(shared.now(), Duration::from_secs(5));
/// shared.set(Duration::from_millis(1500));
/// assert_eq!(clock.now(), Duration::from_millis(1500));
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    micros: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at the epoch (time zero).
    pub fn new() -> Self {
        Self::default()
    }

    /// A clock at `now` since the epoch.
    pub fn at(now: Duration) -> Self {
        let clock = Self::new();
        clock.set(now);
        clock
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.micros
            .fetch_add(saturating_micros(by), Ordering::SeqCst);
    }

    /// Sets the clock to `now` since the epoch (backwards too).
    pub fn set(&self, now: Duration) {
        self.micros.store(saturating_micros(now), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_micros(self.micros.load(Ordering::SeqCst))
    }
}

pub(crate) fn saturating_micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
