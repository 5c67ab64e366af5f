//! One key's sliding log: the admitted requests' times, oldest first, and (once a request
//! cost more than one unit) running totals of their costs, so that a request of any cost is
//! one entry and a count is O(1).
//!
//! In a log of unit requests only, the requests recorded in one microsecond share an entry:
//! the entry's high bits count the requests beyond the first ([`MORE_BITS`]). A key checked
//! millions of times a second (the global tier of a busy process) then keeps an entry per
//! microsecond, not per request: less memory, and less of it to walk through per check. The
//! decision is the same either way: the requests of one microsecond leave the window together.

use std::collections::VecDeque;

use super::ring::Ring;
use crate::algorithm::TierFacts;
use crate::store::TierCheck;

/// An entry's low bits: its time, µs since the epoch. The memory store counts time up to
/// 2^52 µs (the year 2112); a clock past that stops there for it.
const TIME_BITS: u32 = 52;
const TIME: u64 = (1 << TIME_BITS) - 1;
/// An entry's high bits: how many more requests than one it stands for.
const MORE_BITS: u32 = 64 - TIME_BITS;
const ONE_MORE: u64 = 1 << TIME_BITS;
const MAX_MORE: u64 = (1 << MORE_BITS) - 1;

/// An expiry that would walk more entries than this (a denial asking many units of a log whose
/// entries stand for several requests) first gives the log running totals, searched in O(log n).
const MAX_WALK: usize = 64;

#[inline(always)]
fn time(entry: u64) -> u64 {
    entry & TIME
}

#[inline(always)]
fn requests(entry: u64) -> u64 {
    1 + (entry >> TIME_BITS)
}

/// One key's sliding log: the admitted requests' timestamps (µs since the epoch), oldest first.
#[derive(Debug, Default)]
pub(super) struct Log {
    entries: Ring,
    /// The requests kept beyond one per entry (entries that stand for several).
    more: u64,
    /// Only once a request costing more than 1 was recorded here: running totals, so that a
    /// request of any cost is one entry and the count stays O(1). Such a log keeps one entry
    /// per request.
    costs: Option<Box<Costs>>,
}

/// The running total of costs up to and including each entry (parallel to `Log::entries`),
/// and the total of the entries already dropped.
#[derive(Debug, Default)]
struct Costs {
    cumulative: VecDeque<u64>,
    dropped: u64,
}

impl Costs {
    /// The units of the entries kept. Totals wrap around u64 over a key's lifetime; a
    /// difference of two of them is exact as long as the units live in the window fit in a
    /// u64 (they are at most a limit).
    #[inline]
    fn units(&self) -> u64 {
        self.cumulative
            .back()
            .map_or(0, |&last| last.wrapping_sub(self.dropped))
    }

    /// Drops the totals of the `n` oldest entries, keeping the last one dropped.
    #[cold]
    fn drop_front(&mut self, n: usize) {
        for _ in 0..n {
            self.dropped = self.cumulative.pop_front().unwrap_or(self.dropped);
        }
    }
}

impl Log {
    /// Drops entries older than `cutoff` (an entry at exactly `cutoff` still counts).
    #[inline]
    pub(super) fn trim(&mut self, cutoff: u64) {
        self.trim_counting(cutoff);
    }

    /// [`trim`](Self::trim), then how many entries went, how many are left and the oldest
    /// left's time.
    #[inline(always)]
    fn trim_counting(&mut self, cutoff: u64) -> (usize, usize, Option<u64>) {
        let cutoff = cutoff.min(TIME);
        let (gone, left, oldest) = if self.more == 0 {
            // No entry stands for more than one request: their high bits are all clear.
            self.entries.trim(|entry| entry < cutoff)
        } else {
            let mut more_gone = 0;
            let trimmed = self.entries.trim(|entry| {
                let old = time(entry) < cutoff;
                if old {
                    more_gone += entry >> TIME_BITS;
                }
                old
            });
            self.more -= more_gone;
            trimmed
        };
        if gone > 0 {
            if let Some(costs) = &mut self.costs {
                costs.drop_front(gone);
            }
        }
        (gone, left, oldest.map(time))
    }

    /// How many requests the log holds (expired ones included until trimmed).
    pub(super) fn requests(&self) -> usize {
        self.entries.len() + self.more as usize
    }

    /// The oldest entry's time.
    pub(super) fn oldest(&self) -> Option<u64> {
        self.entries.front().map(time)
    }

    /// Forgets every entry.
    pub(super) fn clear(&mut self) {
        self.entries.clear();
        self.more = 0;
        self.costs = None;
    }

    /// The units live at `cutoff` (entries at or after it) and the oldest of those entries,
    /// read without trimming anything.
    pub(super) fn live(&self, cutoff: u64) -> (u64, Option<u64>) {
        let cutoff = cutoff.min(TIME);
        let len = self.entries.len();
        let gone = self.entries.partition_point(|entry| time(entry) < cutoff);
        let oldest = self.entries.get(gone).map(time);
        let units = match &self.costs {
            None if self.more == 0 => (len - gone) as u64,
            None => {
                // The requests of the entries on the shorter side of `gone`, added up.
                let sum = |range: std::ops::Range<usize>| -> u64 {
                    range
                        .filter_map(|i| self.entries.get(i))
                        .map(requests)
                        .sum()
                };
                if gone <= len - gone {
                    (len as u64 + self.more) - sum(0..gone)
                } else {
                    sum(gone..len)
                }
            }
            Some(c) => {
                let before = gone.checked_sub(1).map_or(c.dropped, |i| c.cumulative[i]);
                c.cumulative
                    .back()
                    .map_or(0, |&last| last.wrapping_sub(before))
            }
        };
        (units, oldest)
    }

    /// The time of the entry whose expiry brings the count down by `units` (≥ 1).
    #[inline]
    pub(super) fn expiry_of(&mut self, units: u64) -> Option<u64> {
        if self.costs.is_none() && self.more > 0 {
            match self.walk_to(units) {
                Ok(entry) => return entry.map(time),
                Err(()) => self.give_costs(),
            }
        }
        let index = match &self.costs {
            None => usize::try_from(units - 1).ok()?,
            Some(c) => c
                .cumulative
                .partition_point(|&total| total.wrapping_sub(c.dropped) < units),
        };
        self.entries.get(index).map(time)
    }

    /// The entry, from the oldest, by which `units` requests have been counted; `Err` past
    /// [`MAX_WALK`] entries.
    #[cold]
    fn walk_to(&self, units: u64) -> Result<Option<u64>, ()> {
        let mut counted = 0;
        for i in 0..self.entries.len().min(MAX_WALK) {
            let entry = self.entries.get(i);
            counted += entry.map_or(0, requests);
            if counted >= units {
                return Ok(entry);
            }
        }
        if self.entries.len() <= MAX_WALK {
            Ok(None)
        } else {
            Err(())
        }
    }

    /// Trims the log at `cutoff` and tells what it holds for the algorithm, as `tier`.
    #[inline(always)]
    pub(super) fn facts(&mut self, tier: &TierCheck<'_>, cutoff: u64) -> TierFacts {
        let (count, oldest) = self.live_after_trim(cutoff);
        TierFacts {
            limit: tier.limit,
            shadow: tier.shadow,
            count,
            oldest,
        }
    }

    /// [`facts`](Self::facts) under a tier of `limit` not in shadow mode (the `direct`
    /// path's): a log that keeps costs is read apart, out of the way of the usual log of unit
    /// requests.
    #[inline(always)]
    pub(super) fn facts_enforced(&mut self, limit: u64, cutoff: u64) -> TierFacts {
        let (count, oldest) = if self.costs.is_some() {
            self.live_after_trim_with_costs(cutoff)
        } else {
            let (_, left, oldest) = self.trim_counting(cutoff);
            (left as u64 + self.more, oldest)
        };
        TierFacts {
            limit,
            shadow: false,
            count,
            oldest,
        }
    }

    /// Trims the log at `cutoff`: the units still live, and the oldest entry's time.
    #[inline(always)]
    fn live_after_trim(&mut self, cutoff: u64) -> (u64, Option<u64>) {
        let (_, left, oldest) = self.trim_counting(cutoff);
        let count = match &self.costs {
            None => left as u64 + self.more,
            Some(costs) => costs.units(),
        };
        (count, oldest)
    }

    /// [`live_after_trim`](Self::live_after_trim) for a log that keeps costs.
    #[cold]
    #[inline(never)]
    fn live_after_trim_with_costs(&mut self, cutoff: u64) -> (u64, Option<u64>) {
        self.live_after_trim(cutoff)
    }

    /// Records one request of `cost` units at `now`, or at the newest entry's time if that is
    /// later: the log stays sorted even when threads read the clock in one order and lock in
    /// another. A unit request at the newest entry's time joins that entry.
    #[inline(always)]
    pub(super) fn record_at_least(&mut self, now: u64, cost: u64) {
        let now = now.min(TIME);
        if cost == 1 && self.costs.is_none() {
            match self.entries.back() {
                Some(newest) if time(newest) >= now => {
                    if newest >> TIME_BITS < MAX_MORE {
                        self.entries.set_back(newest + ONE_MORE);
                        self.more += 1;
                    } else {
                        self.entries.push(time(newest));
                    }
                }
                _ => self.entries.push(now),
            }
            return;
        }
        self.record_cost(now, cost);
    }

    /// Records a request of `cost` units in a log with costs (giving the log its running totals
    /// first if it had none).
    #[cold]
    #[inline(never)]
    fn record_cost(&mut self, now: u64, cost: u64) {
        self.give_costs();
        let newest = self.entries.back().map_or(0, time);
        self.entries.push(now.max(newest));
        if let Some(costs) = &mut self.costs {
            let last = costs.cumulative.back().copied().unwrap_or(costs.dropped);
            costs.cumulative.push_back(last.wrapping_add(cost));
        }
    }

    /// Gives the log running totals, if it has none: an entry per request (the requests an
    /// entry stood for each get one), each a unit.
    fn give_costs(&mut self) {
        if self.costs.is_some() {
            return;
        }
        if self.more > 0 {
            let mut entries = Ring::default();
            for i in 0..self.entries.len() {
                if let Some(entry) = self.entries.get(i) {
                    for _ in 0..requests(entry) {
                        entries.push(time(entry));
                    }
                }
            }
            self.entries = entries;
            self.more = 0;
        }
        let len = self.entries.len() as u64;
        // Until now every entry cost 1.
        self.costs = Some(Box::new(Costs {
            cumulative: (1..=len).collect(),
            dropped: 0,
        }));
    }

    /// Whether every entry is older than `cutoff`, so that forgetting the log changes nothing.
    pub(super) fn idle(&self, cutoff: u64) -> bool {
        self.entries
            .back()
            .is_none_or(|entry| time(entry) < cutoff.min(TIME))
    }

    /// The newest entry's time.
    pub(super) fn newest(&self) -> Option<u64> {
        self.entries.back().map(time)
    }

    /// Gives back the memory the log does not need (after its window emptied much of it).
    pub(super) fn shrink(&mut self) {
        if self.entries.capacity() > 64 && self.entries.capacity() > 4 * self.entries.len() {
            self.entries.shrink_to_fit();
            if let Some(costs) = &mut self.costs {
                costs.cumulative.shrink_to_fit();
            }
        }
    }
}

#[cfg(test)]
mod tests;
