//! Keeping the memory bounded: idle keys swept inline, and when the next sweep may run.

use std::sync::atomic::Ordering;

use super::TierLogs;

impl TierLogs {
    /// Evicts idle keys from both maps. Only one thread sweeps at a time; the others go on.
    pub(super) fn sweep(&self, now: u64, window: u64) {
        let Some(_sweeping) = self.sweeping.try_lock() else {
            return;
        };
        let cutoff = now.saturating_sub(window);
        // The first time a kept key may fall idle (a window from now at the latest).
        let mut earliest_idle = now.saturating_add(window).saturating_add(1);
        let mut removed = 0usize;
        for map in [&self.users, &self.endpoints] {
            removed += map.retain(|log| {
                if log.idle(cutoff) {
                    return false;
                }
                log.trim(cutoff);
                log.shrink();
                if let Some(newest) = log.newest() {
                    earliest_idle =
                        earliest_idle.min(newest.saturating_add(window).saturating_add(1));
                }
                true
            });
        }
        self.tracked.fetch_sub(removed, Ordering::AcqRel);
        self.blocks.purge(now);
        for map in [&self.users, &self.endpoints] {
            map.shrink();
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
        self.swept_window.store(window, Ordering::Release);
    }

    /// Whether a sweep at `now` under `window` may free room at the key cap: the time a kept
    /// key may first fall idle has come, or the window is shorter than the one that time was
    /// worked out under (a `reconfigure`: keys fall idle sooner than it says).
    #[inline]
    pub(super) fn cap_sweep_due(&self, now: u64, window: u64) -> bool {
        now >= self.cap_retry_at.load(Ordering::Acquire)
            || window < self.swept_window.load(Ordering::Acquire)
    }
}
