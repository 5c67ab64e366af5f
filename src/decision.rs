//! [`Decision`]: the answer to one check, as plain data: allowed or not, what remains, when to
//! retry, and which tiers applied with which limits. It knows no HTTP: the layer renders it
//! into headers and a 429 (see [`headers`](crate::headers)).

use std::time::Duration;

use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};

use crate::tier::Tier;

/// The outcome of one check.
///
/// It serializes (the design note's `as_dict`) as
/// `{"allowed": bool, "remaining": n, "retry_after": secs, "blocked_by": "user" | null}`, where
/// `retry_after` is the whole seconds sent in the `Retry-After` header (with
/// `"shadow_blocked_by"` for a shadow denial, and `"block": true` for an operator's block).
///
/// ```
/// use std::time::Duration;
/// use tiered_ratelimit::{ManualClock, RateLimitConfig, RateLimiter, Tier};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tiered_ratelimit::ConfigError> {
/// let config = RateLimitConfig::builder().user_limit(1).global_limit(100).build()?;
/// let limiter = RateLimiter::builder(config).clock(ManualClock::new()).build();
/// let first = limiter.check("alice", "/items").await;
/// assert!(first.allowed());
/// assert_eq!(first.remaining(), 0); // the user tier is the closest to its limit
/// assert_eq!(first.limit(Tier::Global), Some(100));
///
/// let second = limiter.check("alice", "/items").await;
/// assert_eq!(second.blocked_by(), Some(Tier::User));
/// assert_eq!(second.retry_after(), Duration::from_secs(60) + Duration::from_micros(1));
/// assert_eq!(second.retry_after_secs(), 61);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub(crate) remaining: u64,
    /// The wait, in µs rounded up (every store counts in µs), so that a decision is small to
    /// move: it is made, returned and rendered on every request.
    retry_after_us: u64,
    /// When the binding tier next gains capacity (µs, rounded up).
    resets_in_us: u64,
    /// The limit of each tier that applied, indexed by tier (0: the tier did not apply).
    pub(crate) limits: [u64; 3],
    /// The window the limits are counted over.
    pub(crate) window: Duration,
    /// The request's cost.
    cost: u64,
    allowed: bool,
    blocked_by: Option<Tier>,
    shadow_blocked_by: Option<Tier>,
    /// The tier closest to its limit (it next gains capacity after `resets_in_us`).
    binding: Option<Tier>,
    /// Denied by an operator's block, not by a full window.
    by_block: bool,
}

impl Decision {
    /// Allowed with nothing to say about any tier (the base of the others).
    #[inline]
    fn base(remaining: u64) -> Self {
        Self {
            remaining,
            retry_after_us: 0,
            resets_in_us: 0,
            limits: [0; 3],
            window: Duration::ZERO,
            cost: 1,
            allowed: true,
            blocked_by: None,
            shadow_blocked_by: None,
            binding: None,
            by_block: false,
        }
    }

    /// Allowed, `remaining` left in the `binding` tier, which gains capacity after
    /// `resets_in_us`.
    #[inline]
    pub(crate) fn admit(remaining: u64, binding: Tier, resets_in_us: u64) -> Self {
        Self {
            binding: Some(binding),
            resets_in_us,
            ..Self::base(remaining)
        }
    }

    /// Let through because the store could not answer: nothing remaining, no tier binding.
    #[inline]
    pub(crate) fn let_through() -> Self {
        Self::base(0)
    }

    /// No tier applies to a request of `cost`: allowed, nothing to count down, no header.
    #[inline]
    pub(crate) fn unlimited(cost: u64) -> Self {
        Self {
            cost,
            ..Self::base(u64::MAX)
        }
    }

    /// Denied by `tier`, which has room after `retry_after_us`.
    #[inline]
    pub(crate) fn deny(tier: Tier, retry_after_us: u64) -> Self {
        Self {
            allowed: false,
            blocked_by: Some(tier),
            shadow_blocked_by: None,
            ..Self::shadow_deny(tier, retry_after_us)
        }
    }

    /// Denied by an operator's block on `tier`, which ends after `retry_after_us`.
    #[inline]
    pub(crate) fn block(tier: Tier, retry_after_us: u64) -> Self {
        Self {
            by_block: true,
            ..Self::deny(tier, retry_after_us)
        }
    }

    /// Allowed only because `tier` is in shadow mode: the headers say what enforcing it would
    /// have said (`X-RateLimit-Remaining: 0`, `Retry-After: n`).
    #[inline]
    pub(crate) fn shadow_deny(tier: Tier, retry_after_us: u64) -> Self {
        // At least 1 µs (so `Retry-After` at least 1), whatever a custom store answered.
        let wait = retry_after_us.max(1);
        Self {
            remaining: 0,
            retry_after_us: wait,
            shadow_blocked_by: Some(tier),
            binding: Some(tier),
            resets_in_us: wait,
            ..Self::base(0)
        }
    }

    /// Sets the request's cost (a denial's reason is then a cost above the blocking tier's
    /// limit when it is: see [`cost_limit`](Self::cost_limit)).
    #[inline]
    pub(crate) fn set_cost(&mut self, cost: u64) {
        self.cost = cost;
    }

    /// Sets the tiers that applied, with their limits, and the window.
    #[cfg(test)]
    pub(crate) fn set_tiers(
        &mut self,
        tiers: impl IntoIterator<Item = (Tier, u64)>,
        window: Duration,
    ) {
        for (tier, limit) in tiers {
            self.limits[tier as usize] = limit;
        }
        self.window = window;
    }

    /// Whether the request may go on.
    #[inline]
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// The smallest capacity left over the enabled tiers after this request (0 when denied).
    ///
    /// `u64::MAX` when no tier applies (every limit 0, or only a user limit and no user); such a
    /// decision writes no header.
    #[inline]
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// How long until the blocking tier has room: zero when allowed, except for a request
    /// allowed only by shadow mode ([`shadow_blocked_by`](Self::shadow_blocked_by) is `Some`),
    /// which carries the wait enforcing that tier would have given.
    ///
    /// Exact to the microsecond. An entry at exactly `now - window` still counts, so room comes
    /// one microsecond after the entry's window ends: a request recorded at `t` in a 60 s window
    /// frees its slot at `t + 60 s + 1 µs`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tiered_ratelimit::{ManualClock, RateLimitConfig, RateLimiter, Tier};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tiered_ratelimit::ConfigError> {
    /// let config = RateLimitConfig::builder().user_limit(1).shadow(true).build()?;
    /// let limiter = RateLimiter::builder(config).clock(ManualClock::new()).build();
    /// assert_eq!(limiter.check("bob", "/").await.retry_after(), Duration::ZERO);
    ///
    /// let shadowed = limiter.check("bob", "/").await;
    /// assert!(shadowed.allowed()); // shadow mode never blocks...
    /// assert_eq!(shadowed.shadow_blocked_by(), Some(Tier::User));
    /// assert_eq!(shadowed.retry_after_secs(), 61); // ...but says what enforcing would have
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn retry_after(&self) -> Duration {
        Duration::from_micros(self.retry_after_us)
    }

    /// The `Retry-After` value: whole seconds rounded up; 0 when allowed, at least 1 when denied
    /// (or allowed only by shadow mode).
    #[inline]
    pub fn retry_after_secs(&self) -> u64 {
        if self.retry_after_us == 0 {
            return 0;
        }
        self.retry_after_us.div_ceil(1_000_000).max(1)
    }

    /// The tier that denied the request, if any.
    #[inline]
    pub fn blocked_by(&self) -> Option<Tier> {
        self.blocked_by
    }

    /// Whether the request was refused by an operator's block
    /// ([`RateLimiter::block`](crate::RateLimiter::block)) rather than by a full window: then
    /// [`blocked_by`](Self::blocked_by) names the blocked tier and
    /// [`retry_after`](Self::retry_after) is the block's time left.
    #[inline]
    pub fn by_block(&self) -> bool {
        self.by_block
    }

    /// Whether the request was denied because its cost is above the blocking tier's limit: it
    /// can never be admitted, however long the client waits (`Retry-After` then says one
    /// window).
    #[inline]
    pub fn cost_exceeds_limit(&self) -> bool {
        self.cost_limit().is_some()
    }

    /// The units the request spent (or would have): 1 unless checked with a cost.
    #[inline]
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The shadow-mode tier that would have denied this (allowed) request, if any.
    #[inline]
    pub fn shadow_blocked_by(&self) -> Option<Tier> {
        self.shadow_blocked_by
    }

    /// Whether any tier applied (else there was nothing to count, and no rate-limit header is
    /// sent): false when every limit is 0, or only a user limit is set and the request has
    /// neither a user id nor a client address.
    #[inline]
    pub fn is_limited(&self) -> bool {
        self.limits.iter().any(|&l| l > 0)
    }

    /// The limit `tier` had for this request (after route overrides and plans), if it applied.
    #[inline]
    pub fn limit(&self, tier: Tier) -> Option<u64> {
        Some(self.limits[tier as usize]).filter(|&l| l > 0)
    }

    /// The tiers that applied, most specific first, with their limits.
    pub fn limits(&self) -> impl Iterator<Item = (Tier, u64)> + '_ {
        [Tier::User, Tier::Endpoint, Tier::Global]
            .into_iter()
            .filter_map(|t| self.limit(t).map(|l| (t, l)))
    }

    /// The sliding window the limits are counted over (zero when no tier applied).
    #[inline]
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The tier closest to its limit (the blocking tier on a denial), and how long until it
    /// next gains capacity; `None` when no tier applied.
    #[inline]
    pub fn binding(&self) -> Option<(Tier, Duration)> {
        self.binding
            .map(|tier| (tier, Duration::from_micros(self.resets_in_us)))
    }

    /// The blocking tier's limit when the request's cost is above it (see
    /// [`cost_exceeds_limit`](Self::cost_exceeds_limit)).
    #[inline]
    pub fn cost_limit(&self) -> Option<u64> {
        // Derived, not kept: a decision is made and moved on every request.
        match self.blocked_by {
            Some(tier) if !self.by_block => {
                Some(self.limits[tier as usize]).filter(|&limit| limit != 0 && limit < self.cost)
            }
            _ => None,
        }
    }
}

impl Serialize for Decision {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let shadow = self.shadow_blocked_by.is_some();
        let fields = 4 + usize::from(shadow) + usize::from(self.by_block);
        let mut st = s.serialize_struct("Decision", fields)?;
        st.serialize_field("allowed", &self.allowed)?;
        st.serialize_field("remaining", &self.remaining)?;
        st.serialize_field("retry_after", &self.retry_after_secs())?;
        st.serialize_field("blocked_by", &self.blocked_by)?;
        if shadow {
            st.serialize_field("shadow_blocked_by", &self.shadow_blocked_by)?;
        }
        if self.by_block {
            st.serialize_field("block", &true)?;
        }
        st.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_secs_round_up_and_are_at_least_one_on_a_denial() {
        let d = Decision::deny(Tier::User, 1_500_000);
        assert_eq!(d.retry_after_secs(), 2);
        let d = Decision::deny(Tier::User, 1);
        assert_eq!(d.retry_after_secs(), 1);
        assert_eq!(Decision::admit(7, Tier::User, 0).retry_after_secs(), 0);
    }

    #[test]
    fn limits_are_reported_per_tier() {
        let mut d = Decision::admit(3, Tier::User, 0);
        d.set_tiers(
            [(Tier::User, 5), (Tier::Global, 100)],
            Duration::from_secs(60),
        );
        assert!(d.is_limited());
        assert_eq!(d.limit(Tier::Endpoint), None);
        assert_eq!(
            d.limits().collect::<Vec<_>>(),
            [(Tier::User, 5), (Tier::Global, 100)]
        );
        assert!(!Decision::unlimited(3).is_limited());
    }
}
