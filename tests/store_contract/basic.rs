//! The store contract: TestBasic: under the limit, then denied; headers on both answers.

use super::*;

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

pub async fn independent_user_counters(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(2, 0, 0, MINUTE), &clock).await;
    assert_admitted(&limiter.check("alice", "/items").await, 1);
    assert_admitted(&limiter.check("alice", "/items").await, 0);
    assert_denied(
        &limiter.check("alice", "/items").await,
        Tier::User,
        MINUTE + US,
    );
    // Bob has his own, untouched counter, on the same endpoint and at the same instant.
    assert_admitted(&limiter.check("bob", "/items").await, 1);
    assert_admitted(&limiter.check("bob", "/items").await, 0);
    assert_denied(
        &limiter.check("bob", "/items").await,
        Tier::User,
        MINUTE + US,
    );
    // Alice is still blocked; Carol is still fresh.
    assert!(!limiter.check("alice", "/other").await.allowed());
    assert_admitted(&limiter.check("carol", "/items").await, 1);
    assert_still_on(&b, &limiter);
}

pub async fn headers_present_when_allowed(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(5, 0, 0, MINUTE), &clock).await;
    let d = limiter.check("alice", "/items").await;
    assert!(d.allowed());
    let headers = headers_of(&d, &limiter);
    assert_eq!(headers.len(), 2, "{headers:?}");
    assert_eq!(header(&headers, "x-ratelimit-remaining"), "4");
    assert_eq!(header(&headers, "retry-after"), "0");
    assert_eq!(
        headers.get(&tiered_ratelimit::headers::X_RATELIMIT_REMAINING),
        headers.get("X-RateLimit-Remaining")
    );
    let d = limiter.check("alice", "/items").await;
    assert_eq!(
        header(&headers_of(&d, &limiter), "x-ratelimit-remaining"),
        "3"
    );
    assert_still_on(&b, &limiter);
}

pub async fn headers_present_when_denied(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(1, 0, 0, MINUTE), &clock).await;
    assert!(limiter.check("alice", "/items").await.allowed());
    clock.advance(Duration::from_millis(10_500));
    let d = limiter.check("alice", "/items").await;
    assert!(!d.allowed());
    let headers = headers_of(&d, &limiter);
    assert_eq!(header(&headers, "x-ratelimit-remaining"), "0");
    // 60 s + 1 µs - 10.5 s = 49.500001 s, rounded up.
    assert_eq!(header(&headers, "retry-after"), "50");
    // headers::write replaces stale values rather than appending.
    let mut map = http::HeaderMap::new();
    map.insert("retry-after", http::HeaderValue::from_static("999"));
    tiered_ratelimit::headers::write(&d, limiter.config().headers(), &mut map);
    assert_eq!(map.get_all("retry-after").iter().count(), 1);
    assert_eq!(header(&map, "retry-after"), "50");
    assert_still_on(&b, &limiter);
}

pub async fn denied_requests_are_not_counted(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(2, 0, 0, MINUTE), &clock).await;
    assert!(limiter.check("alice", "/items").await.allowed());
    assert!(limiter.check("alice", "/items").await.allowed());
    // Hammering while blocked must not push the block further out.
    clock.advance(secs(30));
    for _ in 0..20 {
        assert_denied(
            &limiter.check("alice", "/items").await,
            Tier::User,
            secs(30) + US,
        );
    }
    clock.advance(secs(30) + US);
    // Both slots are free again: the 20 denials at t+30s were recorded nowhere.
    assert_admitted(&limiter.check("alice", "/items").await, 1);
    assert_admitted(&limiter.check("alice", "/items").await, 0);
    assert_still_on(&b, &limiter);
}
