//! The sliding-log decision, written once and pure: from what each tier's log holds (after
//! trimming) to the verdict. No I/O, no locks, no clock, no HTTP: the stores gather the facts
//! under their locks (or in their script), call [`decide`], and record where it says.
//!
//! The rules (the README's contract):
//! - A tier can take a request of `cost` when `count + cost <= limit`.
//! - The first tier, in order, that cannot take it denies (unless it is in shadow mode); the
//!   wait is until enough of its entries have left the window for the request to fit: an entry
//!   recorded at `t` leaves at `t + window + 1 µs`. A cost above the limit can never fit: its
//!   wait is one window, the honest floor. (When an earlier tier is full too, the limiter
//!   names the denial after the tier that can never fit, for every store alike:
//!   `limiter/check.rs`, `never_fits_or`.)
//! - Admitted: every tier with room records it; a full shadow tier does not, and the first one
//!   is reported with the wait enforcing it would have given.
//! - `remaining` is the smallest capacity left over the tiers (0 for a full shadow tier); the
//!   binding tier is the first with that capacity, and it gains capacity again when its oldest entry (or
//!   this request's, in an empty log) leaves the window.

/// What one tier's log holds at the moment of the check, after trimming.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TierFacts {
    /// The tier's limit for this request (never 0).
    pub(crate) limit: u64,
    /// Shadow mode: full, it does not deny.
    pub(crate) shadow: bool,
    /// The units live in the window.
    pub(crate) count: u64,
    /// The oldest live entry's time (µs), if any.
    pub(crate) oldest: Option<u64>,
}

/// The verdict on one request, by tier index (the order of the facts given).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Recorded nowhere.
    Denied {
        /// The first enforced tier without room.
        index: usize,
        /// How long until it has room for this request (µs, at least 1).
        retry_after_us: u64,
    },
    /// Recorded in every tier where `records` says.
    Admitted {
        /// Which tiers record the request: all but full shadow tiers.
        records: [bool; 3],
        /// The smallest capacity left over the tiers, after this request.
        remaining: u64,
        /// The first tier with that capacity.
        binding: usize,
        /// When the binding tier next gains capacity (µs).
        resets_in_us: u64,
        /// The first full shadow tier, and the wait (µs) enforcing it would have given.
        shadow_denied: Option<(usize, u64)>,
    },
}

/// How long from `now` until an entry recorded at `entry` has left the window (µs): it still
/// counts at exactly `now - window`, so it leaves 1 µs later.
#[inline]
pub(crate) fn until_gone(entry: u64, window: u64, now: u64) -> u64 {
    entry
        .saturating_add(window)
        .saturating_add(1)
        .saturating_sub(now)
}

/// Decides a request of `cost` at `now` (µs) over `tiers` (at most 3, most specific first).
///
/// `expiry_of(i, units)` is asked only for a tier without room: the time of the entry of tier
/// `i` whose leaving frees `units` units (the store searches its log for it).
#[inline]
pub(crate) fn decide(
    tiers: &[TierFacts],
    now: u64,
    window: u64,
    cost: u64,
    mut expiry_of: impl FnMut(usize, u64) -> Option<u64>,
) -> Verdict {
    let mut remaining = u64::MAX;
    let mut binding = 0usize;
    let mut shadow_denied = None;
    let mut records = [false; 3];
    for (i, t) in tiers.iter().enumerate().take(3) {
        if t.count.saturating_add(cost) > t.limit {
            let wait = if cost > t.limit {
                window
            } else {
                let entry = expiry_of(i, t.count + cost - t.limit).unwrap_or(now);
                until_gone(entry, window, now)
            };
            let retry_after = wait.max(1);
            if !t.shadow {
                return Verdict::Denied {
                    index: i,
                    retry_after_us: retry_after,
                };
            }
            shadow_denied = shadow_denied.or(Some((i, retry_after)));
            if remaining > 0 {
                remaining = 0;
                binding = i;
            }
            continue;
        }
        records[i] = true;
        let left = t.limit - t.count - cost;
        if left < remaining {
            remaining = left;
            binding = i;
        }
    }
    let resets_in = match shadow_denied {
        Some((i, retry_after)) if i == binding => retry_after,
        _ => {
            let oldest = tiers.get(binding).and_then(|t| t.oldest).unwrap_or(now);
            until_gone(oldest, window, now)
        }
    };
    Verdict::Admitted {
        records,
        remaining,
        binding,
        resets_in_us: resets_in,
        shadow_denied,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: u64 = 60_000_000;

    fn tier(limit: u64, count: u64, oldest: Option<u64>) -> TierFacts {
        TierFacts {
            limit,
            shadow: false,
            count,
            oldest,
        }
    }

    fn never(_: usize, _: u64) -> Option<u64> {
        panic!("no tier is full")
    }

    #[test]
    fn admits_with_the_smallest_remaining_and_the_first_of_equals() {
        let now = 1_000 * W;
        let v = decide(
            &[
                tier(5, 2, Some(now - 10)),
                tier(10, 7, Some(now - 20)),
                tier(3, 0, None),
            ],
            now,
            W,
            1,
            never,
        );
        assert_eq!(
            v,
            Verdict::Admitted {
                records: [true, true, true],
                remaining: 2,
                binding: 0,
                resets_in_us: W + 1 - 10,
                shadow_denied: None,
            }
        );
    }

    #[test]
    fn the_first_full_tier_denies_until_enough_has_left() {
        let now = 1_000 * W;
        // Tier 1 holds 4 of 5; a cost of 3 needs 2 units gone: the entry at now - 5 s.
        let v = decide(
            &[
                tier(10, 0, None),
                tier(5, 4, Some(now - 9)),
                tier(1, 1, Some(now)),
            ],
            now,
            W,
            3,
            |i, units| {
                assert_eq!((i, units), (1, 2));
                Some(now - 5_000_000)
            },
        );
        assert_eq!(
            v,
            Verdict::Denied {
                index: 1,
                retry_after_us: W + 1 - 5_000_000,
            }
        );
    }

    #[test]
    fn a_cost_above_the_limit_waits_a_window_and_an_entry_at_the_boundary_counts() {
        let now = 1_000 * W;
        let v = decide(&[tier(2, 0, None)], now, W, 3, never);
        assert_eq!(
            v,
            Verdict::Denied {
                index: 0,
                retry_after_us: W,
            }
        );
        assert_eq!(until_gone(now - W, W, now), 1);
        assert_eq!(until_gone(now, W, now), W + 1);
    }

    #[test]
    fn a_full_shadow_tier_does_not_record_and_is_reported() {
        let now = 1_000 * W;
        let shadow = TierFacts {
            shadow: true,
            ..tier(1, 1, Some(now - 7))
        };
        let v = decide(&[shadow, tier(5, 0, None)], now, W, 1, |_, _| Some(now - 7));
        let wait = W + 1 - 7;
        assert_eq!(
            v,
            Verdict::Admitted {
                records: [false, true, false],
                remaining: 0,
                binding: 0,
                resets_in_us: wait,
                shadow_denied: Some((0, wait)),
            }
        );
    }
}
