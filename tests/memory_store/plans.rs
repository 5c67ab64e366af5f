//! Plans by resolver: who is asked when, and the cache of its answers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tiered_ratelimit::{ManualClock, RateLimitConfig, RateLimiter};

use crate::common::limits;
use crate::common::memory::{MINUTE, T0};

#[tokio::test]
async fn a_plan_resolver_is_asked_once_per_user_and_ttl() {
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let clock = ManualClock::at(T0);
    let config = limits(1, 0, 0, MINUTE)
        .plan("premium", 3)
        .user_plan("listed", "premium")
        .build()
        .unwrap();
    let limiter = RateLimiter::builder(config)
        .clock(clock.clone())
        .plan_resolver(Duration::from_secs(30), move |user| {
            counter.fetch_add(1, Ordering::SeqCst);
            user.starts_with("p-").then(|| "premium".to_owned())
        })
        .build();
    let mut admitted = 0;
    for _ in 0..5 {
        admitted += usize::from(limiter.check("p-1", "/").await.allowed());
    }
    assert_eq!(admitted, 3, "premium through the resolver");
    assert_eq!(asked.load(Ordering::SeqCst), 1, "cached");
    assert!(limiter.check("free", "/").await.allowed());
    assert!(
        !limiter.check("free", "/").await.allowed(),
        "default limit 1"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    // The config's map comes first: no call for a listed user.
    for _ in 0..3 {
        assert!(limiter.check("listed", "/").await.allowed());
    }
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    // Past the TTL the resolver is asked again.
    clock.advance(Duration::from_secs(31));
    limiter.check("p-1", "/").await;
    assert_eq!(asked.load(Ordering::SeqCst), 3);
}

/// docs/POLICIES.md, plans: "its answers are cached per user for `ttl` ..., at most 100,000
/// users at once (a full cache is emptied)".
#[tokio::test]
async fn the_plan_cache_holds_100_000_users_and_is_emptied_when_full() {
    let config = RateLimitConfig::builder()
        .user_limit(5)
        .plan("premium", 50)
        .build()
        .unwrap();
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let limiter = RateLimiter::builder(config)
        .clock(ManualClock::new())
        .plan_resolver(Duration::from_secs(3600), move |_| {
            counter.fetch_add(1, Ordering::Relaxed);
            Some("premium".to_owned())
        })
        .build();
    for i in 0..100_000 {
        limiter.check(&format!("u{i}"), "/").await;
    }
    assert_eq!(asked.load(Ordering::Relaxed), 100_000);
    // All 100,000 are cached: asking again costs no call.
    limiter.check("u0", "/").await;
    limiter.check("u99999", "/").await;
    assert_eq!(asked.load(Ordering::Relaxed), 100_000);
    // One more user: the full cache is emptied, and u1 is asked again.
    let d = limiter.check("u100000", "/").await;
    assert_eq!(d.remaining(), 49, "on the plan");
    assert_eq!(asked.load(Ordering::Relaxed), 100_001);
    limiter.check("u1", "/").await;
    assert_eq!(asked.load(Ordering::Relaxed), 100_002);
}
