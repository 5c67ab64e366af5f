//! Blocks that hold on every instance: [`RateLimiter::block`] and [`RateLimiter::unblock`].

use std::time::Duration;

use super::RateLimiter;
use crate::block::{BlockError, BlockTarget, MAX_BLOCK};

impl RateLimiter {
    /// Refuses every request of `target` (a user, a client address, a route) for `duration`,
    /// on every instance sharing the store, whatever the counts: a check answers a denial
    /// whose [`Decision::by_block`](crate::Decision::by_block) is true and whose
    /// `retry_after` is the block's time left, and records nothing. The 429 says it is a block.
    ///
    /// Blocking again replaces the end (longer or shorter). The block ends by itself and then
    /// takes no room (Redis: a key with an expiry; memory: dropped by the next check or sweep
    /// that meets it). It holds on the tier it names in every bucket the configuration counts
    /// that tier in (a user's per-route buckets included), in shadow mode too. On Redis, every
    /// instance's local denial cache is emptied (pub/sub), so the next check anywhere is
    /// refused, and named a block once the invalidation has arrived (docs/OPERATIONS.md); the
    /// duration is counted on Redis's clock, to the millisecond, rounded up. At most
    /// [`MAX_BLOCK`](crate::MAX_BLOCK).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tiered_ratelimit::{BlockTarget, RateLimitConfig, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = RateLimiter::new(RateLimitConfig::builder().user_limit(100).build()?);
    /// limiter.block(BlockTarget::User("mallory"), Duration::from_secs(3600)).await?;
    /// let denied = limiter.check("mallory", "/items").await;
    /// assert!(!denied.allowed() && denied.by_block());
    /// assert_eq!(denied.retry_after_secs(), 3600);
    /// limiter.unblock(BlockTarget::User("mallory")).await?;
    /// assert!(limiter.check("mallory", "/items").await.allowed());
    /// # Ok(()) }
    /// ```
    pub async fn block(
        &self,
        target: BlockTarget<'_>,
        duration: Duration,
    ) -> Result<(), BlockError> {
        if duration.is_zero() {
            return Err(BlockError::ZeroDuration);
        }
        if duration > MAX_BLOCK {
            return Err(BlockError::TooLong {
                asked: duration,
                max: MAX_BLOCK,
            });
        }
        let parts = self.block_parts(target)?;
        let now = self.inner.clock.now();
        let tier = target.tier();
        for part in &parts {
            self.inner.store.block(tier, part, now, duration).await?;
        }
        self.inner.watch_backend();
        crate::observe::block_changed("block");
        tracing::info!(?target, ?duration, "rate limit block set");
        Ok(())
    }

    /// Ends `target`'s block at once, on every instance sharing the store, in every bucket it
    /// was set in (a user's per-route buckets too, whatever routes the configuration names by
    /// now). Nothing happens if there is none; it is never refused for a switched-off tier.
    pub async fn unblock(&self, target: BlockTarget<'_>) -> Result<(), BlockError> {
        let tier = target.tier();
        self.inner.store.unblock(tier, &target.own_part()?).await?;
        self.inner.watch_backend();
        crate::observe::block_changed("unblock");
        tracing::info!(?target, "rate limit block lifted");
        Ok(())
    }

    /// The key parts `target` is counted under in the running configuration.
    fn block_parts(&self, target: BlockTarget<'_>) -> Result<Vec<String>, BlockError> {
        let config = self.config();
        let parts = target.key_parts(&config)?;
        if parts.is_empty() {
            return Err(BlockError::TierOff(target.tier()));
        }
        Ok(parts)
    }
}
