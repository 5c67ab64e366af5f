//! Waiting instead of failing: [`RateLimiter::acquire`] checks, and while the binding tier
//! is full sleeps until it frees, as long as the caller's `max_wait` allows.

use std::time::Duration;

use tokio::time::Instant;

use super::RateLimiter;
use crate::decision::Decision;
use crate::request::{CheckRequest, UserKey};

impl RateLimiter {
    /// Checks one request from `user` to `endpoint` like [`check`](Self::check), but when it
    /// is denied waits until the denying tier has room and tries again, for at most
    /// `max_wait` in all: for code that would rather be late than refused (a job calling a
    /// third-party API), not for answering an HTTP client.
    ///
    /// Returns the admitted decision (recorded, as `check` records it), or, as soon as the
    /// next wait would take it past `max_wait`, the denial at once, without sleeping for
    /// nothing. A request that can never fit (its cost above a tier's limit,
    /// [`Decision::cost_exceeds_limit`]) is denied at once too. A denial's wait is the
    /// blocking tier's (docs/POLICIES.md, "Headers"): when a later tier is full for longer,
    /// the next attempt meets that tier, so a call may sleep once and then give up.
    ///
    /// Waiting is a `tokio::time::sleep` of the denial's `retry_after` between checks: no
    /// spinning, no lock held, nothing reserved while asleep (needs a tokio runtime with
    /// time enabled). Each attempt is a check, so a wait costs one check per wake-up, and the
    /// denied attempts are counted in the metrics like any denial.
    ///
    /// **Waiters are not served in arrival order.** Several tasks waiting on one full tier
    /// wake when it frees and race for the room: any of them may get it, and the others
    /// sleep again (or give up at `max_wait`). No tier ever admits more than its limit
    /// either way; a caller that needs first-come first-served must queue its own tasks.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tiered_ratelimit::{RateLimitConfig, RateLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tiered_ratelimit::ConfigError> {
    /// let config = RateLimitConfig::builder()
    ///     .window(Duration::from_millis(200))
    ///     .user_limit(1)
    ///     .build()?;
    /// let limiter = RateLimiter::new(config);
    /// assert!(limiter.acquire("job-7", "/upstream", Duration::ZERO).await.allowed());
    /// // Full: with no time to wait, the denial comes at once.
    /// let denied = limiter.acquire("job-7", "/upstream", Duration::ZERO).await;
    /// assert!(!denied.allowed());
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, user: &str, endpoint: &str, max_wait: Duration) -> Decision {
        let request = CheckRequest::new(UserKey::Id(user), Some(endpoint));
        self.acquire_request(request, max_wait).await
    }

    /// [`acquire`](Self::acquire) for any [`CheckRequest`]: a cost of several units, an
    /// anonymous or address-keyed caller. A costly request waits until its whole cost fits.
    pub async fn acquire_request(&self, request: CheckRequest<'_>, max_wait: Duration) -> Decision {
        let started = Instant::now();
        loop {
            let decision = self.check_request(request).await;
            if decision.allowed() || decision.cost_exceeds_limit() {
                return decision;
            }
            // A denial always names a wait of at least 1 µs; tokio's timer rounds it up to
            // its 1 ms tick, so a waiter never spins.
            let wait = decision.retry_after().max(Duration::from_micros(1));
            if started.elapsed().saturating_add(wait) > max_wait {
                return decision;
            }
            tokio::time::sleep(wait).await;
        }
    }
}
