//! Where the limiter reads `now`: the system clock, or a [`ManualClock`] in tests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
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
/// in-memory check. So the process reads the CPU's time-stamp counter instead (through
/// `quanta`, which falls back to the OS's monotonic clock where the counter is unreliable),
/// anchored to the system time: one anchor for the whole process, re-taken by whichever thread
/// first finds it 50 ms old. Every thread adds the counter's elapsed time to the same anchor, so
/// threads never disagree about the time beyond the instant a re-anchoring is published; the
/// time returned never strays from the system clock by more than the counter's drift over
/// 50 ms (microseconds at most), and between re-anchorings it is monotonic.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

/// Re-anchor the counter to the system clock this often (µs of the counter).
const ANCHOR_EVERY_US: u64 = 50_000;

/// A reading of the system clock bracketed by counter reads this close (µs) is taken at once.
const MAX_BRACKET_US: u64 = 5;

/// The one anchor of the process.
struct Anchor {
    counter: quanta::Clock,
    /// The counter's raw reading at first use: counter time is measured from here.
    start: u64,
    /// System time (µs since the epoch) minus counter time (µs since `start`), as of the last
    /// anchoring.
    offset: AtomicU64,
    /// Counter time (µs since `start`) at which the anchor is next re-taken.
    next: AtomicU64,
}

impl Anchor {
    fn get() -> &'static Anchor {
        static ANCHOR: OnceLock<Anchor> = OnceLock::new();
        ANCHOR.get_or_init(|| {
            let counter = quanta::Clock::new();
            let start = counter.raw();
            let anchor = Anchor {
                counter,
                start,
                offset: AtomicU64::new(0),
                next: AtomicU64::new(ANCHOR_EVERY_US),
            };
            anchor.offset.store(anchor.offset_now(), Ordering::Relaxed);
            anchor
        })
    }

    /// Counter time: µs since `start`, the same on every thread.
    #[inline]
    fn elapsed_us(&self) -> u64 {
        self.counter.delta_as_nanos(self.start, self.counter.raw()) / 1_000
    }

    /// System time minus counter time, read now.
    ///
    /// The counter is read on both sides of the system clock, and the reading with the
    /// narrowest bracket of a few tries is kept: a thread preempted between the two reads would
    /// otherwise anchor every thread's time back by as long as it was descheduled.
    fn offset_now(&self) -> u64 {
        bracketed_offset(|| {
            let before = self.elapsed_us();
            let system = system_micros();
            (before, system, self.elapsed_us())
        })
    }

    /// Re-takes the anchor, unless another thread has already claimed this turn.
    #[cold]
    fn reanchor(&self, due: u64, elapsed: u64) {
        let next = elapsed.saturating_add(ANCHOR_EVERY_US);
        if self
            .next
            .compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.offset.store(self.offset_now(), Ordering::Relaxed);
        }
    }
}

/// System time minus counter time from `read`'s (counter before, system time, counter after)
/// readings: the one of at most four with the narrowest bracket, taken at its middle.
fn bracketed_offset(mut read: impl FnMut() -> (u64, u64, u64)) -> u64 {
    let mut best: Option<(u64, u64)> = None; // (bracket width, offset)
    for _ in 0..4 {
        let (before, system, after) = read();
        let width = after.saturating_sub(before);
        let offset = system.saturating_sub(before + width / 2);
        if best.is_none_or(|(w, _)| width < w) {
            best = Some((width, offset));
        }
        if width <= MAX_BRACKET_US {
            break;
        }
    }
    best.map_or(0, |(_, offset)| offset)
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
        let anchor = Anchor::get();
        let elapsed = anchor.elapsed_us();
        let due = anchor.next.load(Ordering::Relaxed);
        if elapsed >= due {
            anchor.reanchor(due, elapsed);
        }
        let offset = anchor.offset.load(Ordering::Relaxed);
        Duration::from_micros(offset.saturating_add(elapsed))
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

/// Whole microseconds in `d`, `u64::MAX` past it (in 64-bit arithmetic: every check converts
/// its time and window).
#[inline]
pub(crate) fn saturating_micros(d: Duration) -> u64 {
    d.as_secs()
        .checked_mul(1_000_000)
        .and_then(|us| us.checked_add(u64::from(d.subsec_micros())))
        .unwrap_or(u64::MAX)
}

/// `d` in whole µs, rounded up (so that no wait is ever told shorter than it is), saturating.
#[inline]
pub(crate) fn micros_up(d: Duration) -> u64 {
    let nanos = d.subsec_nanos();
    d.as_secs()
        .checked_mul(1_000_000)
        .and_then(|us| us.checked_add(u64::from(nanos.div_ceil(1_000))))
        .unwrap_or(u64::MAX)
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

    #[test]
    fn an_anchor_read_across_a_preemption_is_not_kept() {
        // System time 1,000,000 µs at counter 100: offset 999,900. The first try is preempted
        // for 40 ms between the system read and the second counter read.
        let mut reads = vec![(100, 1_000_000, 40_100), (40_200, 1_040_100, 40_202)].into_iter();
        assert_eq!(
            bracketed_offset(|| reads.next().unwrap()),
            1_040_100 - 40_201
        );
        // A narrow first reading is taken at once, at the middle of its bracket.
        let mut calls = 0;
        let offset = bracketed_offset(|| {
            calls += 1;
            (100, 1_000_002, 104)
        });
        assert_eq!((offset, calls), (999_900, 1));
        // Always preempted: the narrowest of the four tries.
        let mut reads = [
            (0, 10_000, 9_000),
            (0, 10_000, 300),
            (0, 10_000, 7_000),
            (0, 10_000, 800),
        ]
        .into_iter();
        assert_eq!(bracketed_offset(|| reads.next().unwrap()), 10_000 - 150);
    }

    #[test]
    fn saturating_micros_is_the_whole_microseconds_or_the_maximum() {
        let reference = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let max_secs = u64::MAX / 1_000_000;
        for d in [
            Duration::ZERO,
            Duration::from_nanos(999),
            Duration::from_nanos(1_000),
            Duration::new(1, 999_999_999),
            Duration::new(max_secs, 551_615_000),
            Duration::new(max_secs, 551_616_000),
            Duration::new(max_secs, 999_999_999),
            Duration::new(max_secs + 1, 0),
            Duration::MAX,
        ] {
            assert_eq!(saturating_micros(d), reference(d), "{d:?}");
        }
        let mut next = crate::test_rng::seeded(7);
        for _ in 0..10_000 {
            let d = Duration::new(next() % (max_secs + 2), (next() % 1_000_000_000) as u32);
            assert_eq!(saturating_micros(d), reference(d), "{d:?}");
        }
    }

    /// One time for all threads: a time read on one thread and handed to another is never
    /// ahead of what the other reads next (beyond a re-anchoring's few µs).
    #[test]
    fn threads_agree_about_the_time() {
        let (to_b, from_a) = std::sync::mpsc::channel::<u64>();
        let (to_a, from_b) = std::sync::mpsc::channel::<u64>();
        let a = std::thread::spawn(move || {
            let mut worst = 0u64;
            for _ in 0..2_000 {
                to_b.send(saturating_micros(SystemClock.now())).unwrap();
                let theirs = from_b.recv().unwrap();
                let mine = saturating_micros(SystemClock.now());
                worst = worst.max(theirs.saturating_sub(mine));
            }
            worst
        });
        let b = std::thread::spawn(move || {
            let mut worst = 0u64;
            while let Ok(theirs) = from_a.recv() {
                let mine = saturating_micros(SystemClock.now());
                worst = worst.max(theirs.saturating_sub(mine));
                if to_a.send(saturating_micros(SystemClock.now())).is_err() {
                    break;
                }
            }
            worst
        });
        let worst = a.join().unwrap().max(b.join().unwrap());
        assert!(worst <= 100, "one thread saw {worst} µs ahead of the other");
    }
}
