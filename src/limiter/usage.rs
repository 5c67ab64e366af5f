//! Usage without recording: [`RateLimiter::usage`] answers, per enabled tier, the limit, the
//! units used in the current window, what is left and when the next unit frees.

use std::time::Duration;

use serde::Serialize;

use super::RateLimiter;
use crate::request::{CheckRequest, Keys, UserKey, NO_TIER};
use crate::store::{StoreError, TierUsage};

/// A caller's usage at one moment, per enabled tier (most specific first): plain data, as
/// GitHub's `/rate_limit` answers it. Fields may be added.
///
/// Serializes as `{"window_secs": 60.0, "tiers": [{"tier": "user", "limit": 5, "used": 2,
/// "remaining": 3, "next_free_in_secs": 41.5, "shadow": false}, ...]}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Usage {
    /// The window the limits are counted over.
    #[serde(rename = "window_secs", serialize_with = "crate::store::usage_secs")]
    pub window: Duration,
    /// Each enabled tier (a limit of 0 leaves a tier out), in tier order.
    pub tiers: Vec<TierUsage>,
}

impl Usage {
    /// The usage of one tier, if it is enabled for this caller.
    pub fn tier(&self, tier: crate::Tier) -> Option<&TierUsage> {
        self.tiers.iter().find(|t| t.tier == tier)
    }
}

impl RateLimiter {
    /// What `user` has used of each enabled tier on `endpoint` (a route template), **recording
    /// nothing**: no entry, no trim, no key made for a caller never seen. The limits are the
    /// ones a check would apply (route overrides, the user's plan); the global tier is shared
    /// by everyone.
    ///
    /// One round trip on Redis (a read-only script), one per tier on a cluster; memory answers
    /// at once. Unlike a check, it can fail: a Redis error (returned as is: it does not make
    /// the limiter fall back), or a custom [`Store`](crate::store::Store) that does not
    /// implement [`usage`](crate::store::Store::usage).
    ///
    /// ```
    /// use tiered_ratelimit::{RateLimitConfig, RateLimiter, Tier};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::new(RateLimitConfig::builder().user_limit(5).build()?);
    /// limiter.check_n("alice", "/items", 2).await;
    /// let usage = limiter.usage("alice", "/items").await?;
    /// let user = usage.tier(Tier::User).unwrap();
    /// assert_eq!((user.limit, user.used, user.remaining), (5, 2, 3));
    /// # Ok(()) }
    /// ```
    pub async fn usage(&self, user: &str, endpoint: &str) -> Result<Usage, StoreError> {
        self.usage_request(CheckRequest::new(UserKey::Id(user), Some(endpoint)))
            .await
    }

    /// [`usage`](Self::usage) for any [`CheckRequest`] (an address-keyed or anonymous caller,
    /// an unmatched route). Its cost is ignored.
    pub async fn usage_request(&self, request: CheckRequest<'_>) -> Result<Usage, StoreError> {
        let live = self.inner.live.load_full();
        let config = &*live.config;
        let now = self.inner.clock.now();
        let keys = Keys::new(config, request, live.plan_limit(request.user, now));
        let mut tiers = [NO_TIER; 3];
        let window = config.window();
        let Some(req) = keys.store_request(now, config, &mut tiers) else {
            return Ok(Usage {
                window,
                tiers: Vec::new(),
            });
        };
        let tiers = self.inner.store.usage(&req).await;
        self.inner.watch_backend();
        Ok(Usage {
            window,
            tiers: tiers?,
        })
    }
}
