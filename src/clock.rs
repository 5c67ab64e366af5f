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
///
/// Reading the system clock costs a `clock_gettime` call (~20 ns), as much as the rest of an
/// in-memory check. So each thread anchors the system time to the CPU's time-stamp counter
/// (through `quanta`, which falls back to the OS clock where the counter is unreliable) and
/// reads the counter, re-anchoring every 50 ms: the time returned never strays from the system
/// clock by more than the counter's drift over 50 ms (microseconds at most).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

/// Re-anchor the counter to the system clock this often (ns).
const ANCHOR_EVERY_NS: u64 = 50_000_000;

thread_local! {
    /// (counter reading, system time in µs) at this thread's last anchoring.
    static ANCHOR: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

fn counter() -> &'static quanta::Clock {
    static COUNTER: std::sync::OnceLock<quanta::Clock> = std::sync::OnceLock::new();
    COUNTER.get_or_init(quanta::Clock::new)
}

fn system_micros() -> u64 {
    saturating_micros(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO),
    )
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Duration {
        let counter = counter();
        let raw = counter.raw();
        let micros = ANCHOR.with(|anchor| {
            let (raw0, micros0) = anchor.get();
            if raw0 != 0 && raw >= raw0 {
                let elapsed = counter.delta_as_nanos(raw0, raw);
                if elapsed < ANCHOR_EVERY_NS {
                    return micros0 + elapsed / 1_000;
                }
            }
            let micros = system_micros();
            anchor.set((raw, micros));
            micros
        });
        Duration::from_micros(micros)
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
        let by = saturating_micros(by);
        let _ = self
            .micros
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(by))
            });
    }

    /// Sets the clock to `now` since the epoch (backwards too).
    pub fn set(&self, now: Duration) {
        self.micros.store(saturating_micros(now), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> Duration {
        Duration::from_micros(self.micros.load(Ordering::SeqCst))
    }
}

pub(crate) fn saturating_micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_follows_the_system_time() {
        for _ in 0..1_000 {
            let before = system_micros();
            let now = saturating_micros(SystemClock.now());
            let after = system_micros();
            // Within the anchoring period's drift (generously: 5 ms).
            assert!(
                now + 5_000 >= before && now <= after + 5_000,
                "{before} {now} {after}"
            );
        }
    }
}
