//! [`StoreOutcome`]: a store's answer to one [`StoreRequest`](super::StoreRequest), as plain
//! data; and [`Answer`], the same in the crate's own unit (whole µs), as the limiter takes it.

use std::time::Duration;

use super::TierCheck;
use crate::algorithm::Verdict;
use crate::clock::micros_up;
use crate::tier::Tier;

/// A store's answer. Variants and fields may be added: a store builds one with
/// [`StoreOutcome::admitted`] or [`StoreOutcome::denied`], and matches with `..`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreOutcome {
    /// Recorded in every tier with room.
    #[non_exhaustive]
    Admitted {
        /// The smallest capacity left over the tiers, after this request.
        remaining: u64,
        /// The tier with that smallest capacity (the first, in tier order, of equals).
        binding: Tier,
        /// How long until that tier next gains capacity: its oldest live entry leaves the
        /// window (for a full shadow tier, when it would have room). Not "reset": in this
        /// crate a reset ([`Store::reset`](super::Store::reset)) forgets a key.
        resets_in: Duration,
        /// The first shadow tier that was full (and so did not record the request), and when
        /// it would have had room: what enforcing it would have answered.
        shadow_denied: Option<(Tier, Duration)>,
    },
    /// Refused by an operator's block (see [`Store::block`](super::Store::block)), whatever the counts; recorded
    /// nowhere.
    #[non_exhaustive]
    Blocked {
        /// The first tier, in order, whose key is blocked.
        tier: Tier,
        /// How long until the last of the request's blocks ends (the block's remaining time).
        retry_after: Duration,
    },
    /// Recorded nowhere.
    #[non_exhaustive]
    Denied {
        /// The first tier, in order, without room.
        tier: Tier,
        /// How long until that tier has room for this request.
        retry_after: Duration,
    },
}

impl StoreOutcome {
    /// Admitted: `remaining` in the `binding` tier, which next gains capacity after `resets_in`.
    pub fn admitted(remaining: u64, binding: Tier, resets_in: Duration) -> Self {
        Self::Admitted {
            remaining,
            binding,
            resets_in,
            shadow_denied: None,
        }
    }

    /// Admitted only because `tier`, in shadow mode, did not enforce; enforcing it would have
    /// said `retry_after`.
    #[must_use]
    pub fn with_shadow_denied(self, tier: Tier, retry_after: Duration) -> Self {
        match self {
            Self::Admitted {
                remaining,
                binding,
                resets_in,
                ..
            } => Self::Admitted {
                remaining,
                binding,
                resets_in,
                shadow_denied: Some((tier, retry_after)),
            },
            denied => denied,
        }
    }

    /// Denied by `tier`, which has room for the request after `retry_after`.
    pub fn denied(tier: Tier, retry_after: Duration) -> Self {
        Self::Denied { tier, retry_after }
    }

    /// Refused by a block on `tier`'s key, which ends after `retry_after`.
    pub fn blocked(tier: Tier, retry_after: Duration) -> Self {
        Self::Blocked { tier, retry_after }
    }

    /// The answer to a request with no tier to count (an empty [`StoreRequest::tiers`](super::StoreRequest::tiers)):
    /// admitted, with no limit anywhere.
    pub fn nothing_to_count() -> Self {
        Self::Admitted {
            remaining: u64::MAX,
            binding: Tier::Global,
            resets_in: Duration::ZERO,
            shadow_denied: None,
        }
    }
}

/// A store's answer as the limiter takes it: [`StoreOutcome`]'s cases, with every wait in whole
/// µs (rounded up), the unit the algorithm, the memory store and [`Decision`](crate::Decision)
/// count in. The memory store's answer thus reaches the decision without a round trip through
/// `Duration`; a custom store's outcome is converted once ([`of_outcome`](Self::of_outcome)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// [`StoreOutcome::Admitted`].
    Admitted {
        remaining: u64,
        binding: Tier,
        resets_in_us: u64,
        shadow_denied: Option<(Tier, u64)>,
    },
    /// [`StoreOutcome::Denied`].
    Denied { tier: Tier, retry_after_us: u64 },
    /// [`StoreOutcome::Blocked`].
    Blocked { tier: Tier, retry_after_us: u64 },
}

impl Answer {
    /// The answer the algorithm's `verdict` gives, its tier indices naming `tiers`.
    #[inline]
    pub(crate) fn of_verdict(verdict: &Verdict, tiers: &[TierCheck<'_>]) -> Self {
        match *verdict {
            Verdict::Denied {
                index,
                retry_after_us,
            } => Self::Denied {
                tier: tiers[index].tier,
                retry_after_us,
            },
            Verdict::Admitted {
                remaining,
                binding,
                resets_in_us,
                shadow_denied,
                ..
            } => Self::Admitted {
                remaining,
                binding: tiers[binding].tier,
                resets_in_us,
                shadow_denied: shadow_denied.map(|(i, wait)| (tiers[i].tier, wait)),
            },
        }
    }

    /// This answer, an admission that the memory store's key cap left untracked in
    /// `untracked`'s shadow tier (with the cap's wait, µs): that tier counts as a full shadow
    /// tier does in the [algorithm](crate::algorithm). It is reported unless a tier before it
    /// is (the first full shadow tier is), and binds unless a tier before it has nothing left
    /// already (the first tier with the least capacity binds).
    #[inline(always)]
    pub(crate) fn with_untracked_shadow(self, untracked: Option<(Tier, u64)>) -> Self {
        let (
            Self::Admitted {
                remaining,
                binding,
                resets_in_us,
                shadow_denied,
            },
            Some((tier, wait)),
        ) = (self, untracked)
        else {
            return self;
        };
        let before = |other: Tier| (other as usize) < (tier as usize);
        let shadow_denied = match shadow_denied {
            Some((first, first_wait)) if before(first) => Some((first, first_wait)),
            _ => Some((tier, wait)),
        };
        let (binding, resets_in_us) = if remaining == 0 && before(binding) {
            (binding, resets_in_us)
        } else {
            (tier, wait)
        };
        Self::Admitted {
            remaining: 0,
            binding,
            resets_in_us,
            shadow_denied,
        }
    }

    /// A store's outcome, its waits rounded up to whole µs.
    #[inline]
    pub(crate) fn of_outcome(outcome: StoreOutcome) -> Self {
        match outcome {
            StoreOutcome::Admitted {
                remaining,
                binding,
                resets_in,
                shadow_denied,
            } => Self::Admitted {
                remaining,
                binding,
                resets_in_us: micros_up(resets_in),
                shadow_denied: shadow_denied.map(|(tier, wait)| (tier, micros_up(wait))),
            },
            StoreOutcome::Denied { tier, retry_after } => Self::Denied {
                tier,
                retry_after_us: micros_up(retry_after),
            },
            StoreOutcome::Blocked { tier, retry_after } => Self::Blocked {
                tier,
                retry_after_us: micros_up(retry_after),
            },
        }
    }

    /// The same answer as a [`StoreOutcome`] (what the memory store answers through
    /// [`Store`](super::Store)).
    #[inline]
    pub(crate) fn outcome(self) -> StoreOutcome {
        match self {
            Self::Admitted {
                remaining,
                binding,
                resets_in_us,
                shadow_denied,
            } => StoreOutcome::Admitted {
                remaining,
                binding,
                resets_in: Duration::from_micros(resets_in_us),
                shadow_denied: shadow_denied
                    .map(|(tier, wait)| (tier, Duration::from_micros(wait))),
            },
            Self::Denied {
                tier,
                retry_after_us,
            } => StoreOutcome::denied(tier, Duration::from_micros(retry_after_us)),
            Self::Blocked {
                tier,
                retry_after_us,
            } => StoreOutcome::blocked(tier, Duration::from_micros(retry_after_us)),
        }
    }
}
