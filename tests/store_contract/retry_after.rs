//! The store contract: TestRetryAfter: the wait the blocking tier gives, rounded up to whole
//! seconds.

use super::*;

pub async fn retry_after_decreases_as_time_advances(b: TestBackend) {
    let t0 = secs(1_000);
    let clock = ManualClock::at(t0);
    let limiter = b.limiter(limits(1, 0, 0, MINUTE), &clock).await;
    assert!(limiter.check("alice", "/items").await.allowed());
    let mut last = Duration::MAX;
    for (offset, expect, expect_secs) in [
        (Duration::ZERO, MINUTE + US, 61),
        (secs(10), secs(50) + US, 51),
        (secs(30), secs(30) + US, 31),
        (
            Duration::from_millis(59_500),
            Duration::from_micros(500_001),
            1,
        ),
        (MINUTE - US, Duration::from_micros(2), 1),
        (MINUTE, US, 1),
    ] {
        clock.set(t0 + offset);
        let d = limiter.check("alice", "/items").await;
        assert_denied(&d, Tier::User, expect);
        assert_eq!(d.retry_after_secs(), expect_secs, "at +{offset:?}");
        assert!(d.retry_after() < last);
        last = d.retry_after();
    }
    clock.set(t0 + MINUTE + US);
    assert_admitted(&limiter.check("alice", "/items").await, 0);
    assert_still_on(&b, &limiter);
}

pub async fn retry_after_zero_when_allowed(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(3, 3, 3, MINUTE), &clock).await;
    for _ in 0..3 {
        let d = limiter.check("alice", "/items").await;
        assert!(d.allowed());
        assert_eq!(d.retry_after(), Duration::ZERO);
        assert_eq!(d.retry_after_secs(), 0);
        assert_eq!(header(&headers_of(&d, &limiter), "retry-after"), "0");
        clock.advance(secs(7));
    }
    let d = limiter.check("alice", "/items").await;
    assert!(!d.allowed());
    assert!(d.retry_after() > Duration::ZERO);
    assert_ne!(header(&headers_of(&d, &limiter), "retry-after"), "0");
    assert_still_on(&b, &limiter);
}

pub async fn retry_after_comes_from_the_blocking_tiers_oldest_entry(b: TestBackend) {
    let t0 = secs(1_000);
    let clock = ManualClock::at(t0);
    let limiter = b.limiter(limits(3, 2, 0, MINUTE), &clock).await;
    assert!(limiter.check("alice", "/e").await.allowed()); // t0
    clock.set(t0 + secs(20));
    assert!(limiter.check("bob", "/e").await.allowed()); // t0 + 20
    clock.set(t0 + secs(30));
    // /e's oldest entry (t0) frees first: 60 s + 1 µs after it.
    assert_denied(
        &limiter.check("carol", "/e").await,
        Tier::Endpoint,
        secs(30) + US,
    );
    clock.set(t0 + MINUTE + US);
    assert!(limiter.check("carol", "/e").await.allowed());
    // Now bob's entry at t0 + 20 is the oldest.
    assert_denied(&limiter.check("dave", "/e").await, Tier::Endpoint, secs(20));
    assert_still_on(&b, &limiter);
}

/// docs/POLICIES.md: `Retry-After` is the blocking tier's wait, the first full one; a
/// later tier that stays full longer answers the retry with its own 429 and wait.
pub async fn retry_after_is_the_first_full_tiers_wait_not_a_later_ones(b: TestBackend) {
    let t0 = secs(1_000);
    let clock = ManualClock::at(t0);
    let limiter = b.limiter(limits(1, 2, 0, MINUTE), &clock).await;
    assert!(limiter.check("alice", "/x").await.allowed()); // alice full until t0 + 60 s
    clock.set(t0 + secs(30));
    assert!(limiter.check("bob", "/e").await.allowed());
    assert!(limiter.check("carol", "/e").await.allowed()); // /e full until t0 + 90 s
    clock.set(t0 + secs(40));
    assert_denied(
        &limiter.check("alice", "/e").await,
        Tier::User,
        secs(20) + US,
    );
    clock.set(t0 + MINUTE + US);
    assert_denied(
        &limiter.check("alice", "/e").await,
        Tier::Endpoint,
        secs(30),
    );
    clock.set(t0 + secs(90) + US);
    assert!(limiter.check("alice", "/e").await.allowed());
    assert_still_on(&b, &limiter);
}
