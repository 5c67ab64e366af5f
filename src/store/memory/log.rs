//! One key's sliding log: the admitted requests' times, oldest first, and (once a request
//! cost more than one unit) running totals of their costs, so that a request of any cost is
//! one entry and a count is O(1).

use std::collections::VecDeque;

use super::ring::Ring;
use crate::algorithm::TierFacts;
use crate::store::TierCheck;

/// One key's sliding log: the admitted requests' timestamps (µs since the epoch), oldest first.
#[derive(Debug, Default)]
pub(super) struct Log {
    pub(super) entries: Ring,
    /// Only once a request costing more than 1 was recorded here: running totals, so that a
    /// request of any cost is one entry and the count stays O(1).
    pub(super) costs: Option<Box<Costs>>,
}

/// The running total of costs up to and including each entry (parallel to `Log::entries`),
/// and the total of the entries already dropped.
#[derive(Debug, Default)]
pub(super) struct Costs {
    pub(super) cumulative: VecDeque<u64>,
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
        let gone = self.entries.pop_below(cutoff);
        if gone > 0 {
            if let Some(costs) = &mut self.costs {
                costs.drop_front(gone);
            }
        }
    }

    /// The units live at `cutoff` (entries at or after it) and the oldest of those entries,
    /// read without trimming anything.
    pub(super) fn live(&self, cutoff: u64) -> (u64, Option<u64>) {
        let gone = self.entries.partition_point(|t| t < cutoff);
        let oldest = self.entries.get(gone);
        let units = match &self.costs {
            None => (self.entries.len() - gone) as u64,
            Some(c) => {
                let before = gone.checked_sub(1).map_or(c.dropped, |i| c.cumulative[i]);
                c.cumulative
                    .back()
                    .map_or(0, |&last| last.wrapping_sub(before))
            }
        };
        (units, oldest)
    }

    /// The timestamp of the entry whose expiry brings the count down by `units` (≥ 1).
    #[inline]
    pub(super) fn expiry_of(&self, units: u64) -> Option<u64> {
        let index = match &self.costs {
            None => usize::try_from(units - 1).ok()?,
            Some(c) => c
                .cumulative
                .partition_point(|&total| total.wrapping_sub(c.dropped) < units),
        };
        self.entries.get(index)
    }

    /// Trims the log at `cutoff` and tells what it holds for the algorithm, as `tier`.
    #[inline(always)]
    pub(super) fn facts(&mut self, tier: &TierCheck<'_>, cutoff: u64) -> TierFacts {
        let (gone, left, oldest) = self.entries.trim(cutoff);
        let count = match &mut self.costs {
            None => left as u64,
            Some(costs) => {
                if gone > 0 {
                    costs.drop_front(gone);
                }
                costs.units()
            }
        };
        TierFacts {
            limit: tier.limit,
            shadow: tier.shadow,
            count,
            oldest,
        }
    }

    /// Records one request of `cost` units at `now`, or at the newest entry's time if that is
    /// later: the log stays sorted even when threads read the clock in one order and lock in
    /// another.
    #[inline(always)]
    pub(super) fn record_at_least(&mut self, now: u64, cost: u64) {
        self.entries.push_at_least(now);
        if cost != 1 || self.costs.is_some() {
            self.record_cost(cost);
        }
    }

    /// The running total of the entry just recorded, for a log with costs (or its first cost).
    #[cold]
    #[inline(never)]
    fn record_cost(&mut self, cost: u64) {
        let len = self.entries.len() as u64;
        let costs = self.costs.get_or_insert_with(|| {
            // Until now every entry cost 1.
            Box::new(Costs {
                cumulative: (1..len).collect(),
                dropped: 0,
            })
        });
        let last = costs.cumulative.back().copied().unwrap_or(costs.dropped);
        costs.cumulative.push_back(last.wrapping_add(cost));
    }

    /// Whether every entry is older than `cutoff`, so that forgetting the log changes nothing.
    pub(super) fn idle(&self, cutoff: u64) -> bool {
        self.entries.back().is_none_or(|t| t < cutoff)
    }
}
