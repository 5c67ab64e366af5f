//! Live reconfiguration: [`RateLimiter::reconfigure`] swaps the whole configuration at once.

use std::sync::Arc;

use super::{Live, RateLimiter};
use crate::config::{ConfigError, RateLimitConfig};
use crate::plan::PlanResolver;

impl RateLimiter {
    /// Replaces the configuration while the limiter serves: limits, route overrides, plans and
    /// users, shadow flags, the window and the header style. Every clone of this limiter, and
    /// every layer built from it, sees the change at once.
    ///
    /// **Atomic with respect to checks:** the configuration is swapped whole (one pointer,
    /// `arc-swap`), and a check loads it once, at its start: each check is decided with the
    /// old configuration or the new one entirely, never a mix (its limits, window, shadow
    /// flags and response headers all come from one). A check already in flight finishes
    /// under the configuration it started with. Plans resolved by the
    /// [plan resolver](crate::RateLimiterBuilder::plan_resolver) are resolved afresh (the
    /// cache of the old configuration's plan limits is left behind); on Redis, denials the
    /// store remembers locally are used only by checks under the same limits and window.
    ///
    /// **What was recorded stays:** entries are times, not configuration, so they count
    /// against the new limits at once (lowering a limit below what a caller already used
    /// denies them until enough entries leave the window). A new window applies from the next
    /// check: a shorter one stops counting older entries at once; a longer one counts the
    /// entries the store still holds — all of them in memory, but on Redis a key idle since
    /// before the change expires one *old* window after its last admission (its expiry was
    /// set then), so for one old window a caller idle across the change may get more than the
    /// new window allows (never more than the old limit in the old window).
    ///
    /// **The store is fixed:** the Redis settings (`redis`: URL, timeouts, TLS, ...), the key
    /// prefix and the key cap (`max_tracked_keys`) built the store; a new configuration that
    /// changes one is refused with [`ConfigError::NeedsNewLimiter`] naming it, and the running
    /// configuration stays. Build a new limiter for a new store.
    ///
    /// ```
    /// use tiered_ratelimit::{RateLimitConfig, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tiered_ratelimit::ConfigError> {
    /// let limiter = RateLimiter::new(RateLimitConfig::builder().user_limit(1).build()?);
    /// let layer_side = limiter.clone(); // what a RateLimitLayer holds
    /// assert!(limiter.check("alice", "/").await.allowed());
    /// assert!(!limiter.check("alice", "/").await.allowed());
    ///
    /// limiter.reconfigure(RateLimitConfig::builder().user_limit(2).build()?)?;
    /// assert!(layer_side.check("alice", "/").await.allowed()); // the old entry counts
    /// assert!(!layer_side.check("alice", "/").await.allowed());
    ///
    /// let other_prefix = RateLimitConfig::builder().key_prefix("other").build()?;
    /// assert_eq!(limiter.reconfigure(other_prefix).unwrap_err().field(), "key_prefix");
    /// # Ok(()) }
    /// ```
    pub fn reconfigure(&self, config: RateLimitConfig) -> Result<(), ConfigError> {
        let _writer = self
            .inner
            .reconfiguring
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let old = self.inner.live.load();
        store_settings_unchanged(&old.config, &config)?;
        // The same resolver, with an empty cache: the old one holds the old plans' limits.
        let plans = old.plans.as_ref().map(PlanResolver::emptied);
        drop(old);
        crate::config::template::warn_never_matched(&config);
        self.inner.hot.publish(&config);
        self.inner.live.store(Arc::new(Live {
            config: Arc::new(config),
            plans,
        }));
        Ok(())
    }
}

/// `Err` naming the first store setting that differs: the store was built from `old`'s.
fn store_settings_unchanged(
    old: &RateLimitConfig,
    new: &RateLimitConfig,
) -> Result<(), ConfigError> {
    let redis = match (old.redis(), new.redis()) {
        (Some(a), Some(b)) => a.first_difference(b),
        (None, None) => None,
        _ => Some("redis.url"),
    };
    if let Some(field) = redis {
        return Err(ConfigError::NeedsNewLimiter(field));
    }
    if old.key_prefix() != new.key_prefix() {
        return Err(ConfigError::NeedsNewLimiter("key_prefix"));
    }
    if old.max_tracked_keys() != new.max_tracked_keys() {
        return Err(ConfigError::NeedsNewLimiter("max_tracked_keys"));
    }
    Ok(())
}
