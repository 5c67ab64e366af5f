//! The store contract: every test body is written once and runs against every backend
//! (`memory::*` and `redis::*`), each Redis test on a `redis-server` of its own.

mod common;

mod contract {
    use std::time::Duration;

    use tiered_ratelimit::{ManualClock, Tier};

    use crate::common::{limits, TestBackend};

    const MINUTE: Duration = Duration::from_secs(60);

    pub async fn allows_under_limit_then_denies(b: TestBackend) {
        let clock = ManualClock::new();
        let limiter = b.limiter(limits(3, 0, 0, MINUTE), &clock).await;
        for left in (0..3).rev() {
            let d = limiter.check("alice", "/items").await;
            assert!(d.allowed());
            assert_eq!(d.remaining(), left);
            assert_eq!(d.retry_after_secs(), 0);
        }
        let d = limiter.check("alice", "/items").await;
        assert!(!d.allowed());
        assert_eq!(d.blocked_by(), Some(Tier::User));
        assert_eq!(d.remaining(), 0);
        assert_eq!(d.retry_after(), MINUTE + Duration::from_micros(1));
    }

    pub async fn window_boundary_entry_still_counts(b: TestBackend) {
        let clock = ManualClock::at(Duration::from_secs(1_000));
        let limiter = b.limiter(limits(1, 0, 0, MINUTE), &clock).await;
        assert!(limiter.check("u", "/e").await.allowed());
        clock.advance(MINUTE);
        let d = limiter.check("u", "/e").await;
        assert!(
            !d.allowed(),
            "an entry at exactly now - window still counts"
        );
        assert_eq!(d.retry_after(), Duration::from_micros(1));
        assert_eq!(d.retry_after_secs(), 1);
        clock.advance(Duration::from_micros(1));
        assert!(limiter.check("u", "/e").await.allowed());
    }
}

contract_tests!(
    allows_under_limit_then_denies,
    window_boundary_entry_still_counts
);
