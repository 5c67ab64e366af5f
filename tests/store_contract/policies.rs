//! The store contract: policies beside the plain limits: shadow tiers, IETF headers, route
//! overrides, plans, and costs.

use super::*;

pub async fn shadow_mode_never_blocks_and_records_nothing_in_a_full_tier(b: TestBackend) {
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let limiter = b
        .limiter(limits(2, 0, 0, MINUTE).shadow(true), &clock)
        .await;
    assert_eq!(limiter.check("u", "/").await.remaining(), 1);
    assert_eq!(limiter.check("u", "/").await.remaining(), 0);
    clock.advance(Duration::from_secs(30));
    for _ in 0..3 {
        let d = limiter.check("u", "/").await;
        assert!(d.allowed(), "shadow mode never blocks");
        assert_eq!(d.blocked_by(), None);
        assert_eq!(d.shadow_blocked_by(), Some(Tier::User));
        assert_eq!(d.remaining(), 0);
        // What enforcing it would have said: the t0 entries free up at t0 + 60 s + 1 µs.
        assert_eq!(d.retry_after(), Duration::from_secs(30) + US);
        assert_eq!(headers_of(&d, &limiter)["retry-after"], "31");
        assert_eq!(headers_of(&d, &limiter)["x-ratelimit-remaining"], "0");
    }
    // The shadow-denied requests were not recorded in the full tier: once the two t0
    // entries expire the tier is empty again.
    clock.advance(Duration::from_secs(30) + US);
    let d = limiter.check("u", "/").await;
    assert_eq!((d.remaining(), d.shadow_blocked_by()), (1, None));
    assert_eq!(limiter.backend(), b.expected_backend());
}

pub async fn a_shadow_tier_lets_through_and_the_others_still_count_and_block(b: TestBackend) {
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let config = limits(1, 0, 3, MINUTE).shadow_tier(Tier::User);
    let limiter = b.limiter(config, &clock).await;
    assert!(limiter.check("a", "/").await.allowed());
    for _ in 0..2 {
        let d = limiter.check("a", "/").await;
        assert!(d.allowed());
        assert_eq!(d.shadow_blocked_by(), Some(Tier::User));
    }
    // Those two were served, so the (enforced) global tier counted them: it is full.
    let d = limiter.check("b", "/").await;
    assert!(!d.allowed());
    assert_eq!(d.blocked_by(), Some(Tier::Global));
    assert_eq!(limiter.backend(), b.expected_backend());
}

pub async fn ietf_headers_name_every_policy_and_the_one_closest_to_its_limit(b: TestBackend) {
    use tiered_ratelimit::HeaderStyle;
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let config = limits(5, 10, 100, MINUTE).headers(HeaderStyle::Both);
    let limiter = b.limiter(config, &clock).await;
    let policy = "\"user\";q=5;w=60, \"endpoint\";q=10;w=60, \"global\";q=100;w=60";
    let h = headers_of(&limiter.check("u", "/e").await, &limiter);
    assert_eq!(h["ratelimit-policy"], policy);
    // The user tier is closest to its limit; its oldest entry leaves in 60 s + 1 µs.
    assert_eq!(h["ratelimit"], "\"user\";r=4;t=61");
    assert_eq!(h["x-ratelimit-remaining"], "4");
    assert_eq!(h["retry-after"], "0");
    clock.advance(Duration::from_secs(10));
    let h = headers_of(&limiter.check("u", "/e").await, &limiter);
    assert_eq!(h["ratelimit"], "\"user\";r=3;t=51");
    // Other users fill the endpoint tier: it becomes the closest to its limit.
    for i in 0..6 {
        limiter.check(&format!("o{i}"), "/e").await;
    }
    let h = headers_of(&limiter.check("v", "/e").await, &limiter);
    assert_eq!(h["ratelimit"], "\"endpoint\";r=1;t=51");
    // A denial names its tier with r=0 and the time until room.
    limiter.check("w", "/e").await;
    let d = limiter.check("w", "/e").await;
    assert_eq!(d.blocked_by(), Some(Tier::Endpoint));
    let h = headers_of(&d, &limiter);
    assert_eq!(h["ratelimit"], "\"endpoint\";r=0;t=51");
    assert_eq!(h["retry-after"], "51");
    assert_eq!(limiter.backend(), b.expected_backend());
}

pub async fn ietf_only_headers_leave_out_the_legacy_ones(b: TestBackend) {
    use tiered_ratelimit::HeaderStyle;
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let config = limits(1, 0, 0, MINUTE).headers(HeaderStyle::Ietf);
    let limiter = b.limiter(config, &clock).await;
    let h = headers_of(&limiter.check("u", "/e").await, &limiter);
    assert_eq!(h["ratelimit-policy"], "\"user\";q=1;w=60");
    assert_eq!(h["ratelimit"], "\"user\";r=0;t=61");
    assert!(h.get("x-ratelimit-remaining").is_none());
    assert!(
        h.get("retry-after").is_none(),
        "no Retry-After on an allowed response"
    );
    let h = headers_of(&limiter.check("u", "/e").await, &limiter);
    assert_eq!(h["retry-after"], "61");
    assert!(h.get("x-ratelimit-remaining").is_none());
}

pub async fn a_route_carries_its_own_user_and_endpoint_limits(b: TestBackend) {
    use tiered_ratelimit::RouteLimits;
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let login = RouteLimits {
        user_limit: Some(2),
        endpoint_limit: Some(3),
    };
    let config = limits(50, 100, 0, MINUTE).route("/login", login);
    let limiter = b.limiter(config, &clock).await;
    assert!(limiter.check("alice", "/login").await.allowed());
    let d = limiter.check("alice", "/login").await;
    assert_eq!(d.remaining(), 0, "2 per user on /login");
    let d = limiter.check("alice", "/login").await;
    assert_eq!(d.blocked_by(), Some(Tier::User));
    // /login has a bucket of its own: the general one was not charged.
    assert_eq!(limiter.check("alice", "/items").await.remaining(), 49);
    // /login's endpoint limit is 3: alice's two, then one more from anyone.
    assert!(limiter.check("bob", "/login").await.allowed());
    let d = limiter.check("carol", "/login").await;
    assert_eq!(d.blocked_by(), Some(Tier::Endpoint));
    assert!(limiter.check("carol", "/items").await.allowed());
    assert_eq!(limiter.backend(), b.expected_backend());
}

pub async fn users_on_a_plan_get_its_user_limit(b: TestBackend) {
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let config = limits(2, 0, 0, MINUTE)
        .plan("premium", 5)
        .user_plan("alice", "premium");
    let limiter = b.limiter(config, &clock).await;
    let mut alice = 0;
    let mut bob = 0;
    for _ in 0..8 {
        alice += usize::from(limiter.check("alice", "/").await.allowed());
        bob += usize::from(limiter.check("bob", "/").await.allowed());
    }
    assert_eq!((alice, bob), (5, 2));
    assert_eq!(limiter.backend(), b.expected_backend());
}

pub async fn a_request_can_spend_several_units(b: TestBackend) {
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let limiter = b.limiter(limits(10, 0, 0, MINUTE), &clock).await;
    assert_eq!(limiter.check_n("u", "/", 4).await.remaining(), 6);
    clock.advance(Duration::from_secs(10));
    assert_eq!(limiter.check_n("u", "/", 4).await.remaining(), 2);
    clock.advance(Duration::from_secs(10));
    // 8 + 3 > 10: one unit must expire, and the first to go are t0's four.
    let d = limiter.check_n("u", "/", 3).await;
    assert_eq!(d.blocked_by(), Some(Tier::User));
    assert!(!d.cost_exceeds_limit());
    assert_eq!(d.retry_after(), Duration::from_secs(40) + US);
    // Denied requests spend nothing: 2 still fit.
    let d = limiter.check_n("u", "/", 2).await;
    assert_eq!((d.allowed(), d.remaining()), (true, 0));
    // After t0's four expire: 4 + 2 recorded, 4 more fit.
    clock.advance(Duration::from_secs(41));
    assert_eq!(limiter.check_n("u", "/", 4).await.remaining(), 0);
    assert_eq!(limiter.backend(), b.expected_backend());
}

pub async fn unit_and_costly_requests_mix(b: TestBackend) {
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let limiter = b.limiter(limits(10, 0, 20, MINUTE), &clock).await;
    for _ in 0..3 {
        limiter.check("u", "/").await;
        clock.advance(SEC);
    }
    assert_eq!(limiter.check_n("u", "/", 5).await.remaining(), 2);
    clock.advance(SEC);
    assert_eq!(limiter.check("u", "/").await.remaining(), 1);
    assert_eq!(limiter.check("u", "/").await.remaining(), 0);
    // Full: the first unit entry (t0) frees the next unit.
    let d = limiter.check("u", "/").await;
    assert_eq!(d.retry_after(), Duration::from_secs(56) + US);
    // Three units need the three unit entries to go: the third was at t0 + 2 s.
    let d = limiter.check_n("u", "/", 3).await;
    assert_eq!(d.retry_after(), Duration::from_secs(58) + US);
    // Six need the five-unit entry too (t0 + 3 s).
    let d = limiter.check_n("u", "/", 6).await;
    assert_eq!(d.retry_after(), Duration::from_secs(59) + US);
    assert_eq!(limiter.backend(), b.expected_backend());
}

pub async fn a_cost_above_the_limit_is_denied_and_says_why(b: TestBackend) {
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let limiter = b.limiter(limits(5, 0, 100, MINUTE), &clock).await;
    let d = limiter.check_n("u", "/", 6).await;
    assert_eq!(d.blocked_by(), Some(Tier::User));
    assert!(d.cost_exceeds_limit());
    assert_eq!(d.cost(), 6);
    assert_eq!(d.retry_after(), MINUTE);
    // Nothing was spent anywhere.
    let d = limiter.check_n("u", "/", 5).await;
    assert_eq!((d.allowed(), d.remaining()), (true, 0));
    assert_eq!(limiter.backend(), b.expected_backend());
}

/// docs/POLICIES.md: "A cost above a tier's limit can never be admitted: it is denied by
/// that tier". So too when a tier before it is full: the full tier's wait would come true
/// and the request would be denied all the same (an outside audit: `Retry-After: 61`, then
/// a denial by the endpoint after the wait; `acquire` waited for it). A shadow tier never
/// denies, so it does not count; a block still answers first.
pub async fn a_cost_that_can_never_fit_is_named_even_behind_a_full_tier(b: TestBackend) {
    use tiered_ratelimit::RouteLimits;
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let e = RouteLimits {
        user_limit: None,
        endpoint_limit: Some(3),
    };
    let limiter = b
        .limiter(limits(5, 100, 100, MINUTE).route("/e", e), &clock)
        .await;
    assert!(limiter.check_n("alice", "/other", 5).await.allowed());
    let d = limiter.check_n("alice", "/e", 4).await;
    assert_eq!(d.blocked_by(), Some(Tier::Endpoint), "{d:?}");
    assert!(d.cost_exceeds_limit(), "{d:?}");
    assert_eq!(d.cost_limit(), Some(3));
    assert_eq!(d.retry_after(), MINUTE);
    // A cost that fits every limit is still denied by the full user tier, with its wait.
    let d = limiter.check_n("alice", "/e", 3).await;
    assert_eq!(d.blocked_by(), Some(Tier::User), "{d:?}");
    assert!(!d.cost_exceeds_limit());
    assert_eq!(d.retry_after(), MINUTE + US);
    // Nothing was recorded by either denial: the endpoint still takes 3.
    let d = limiter.check_n("bob", "/e", 3).await;
    assert_eq!((d.allowed(), d.remaining()), (true, 0), "{d:?}");
    assert_eq!(limiter.backend(), b.expected_backend());
}

/// docs/POLICIES.md: a tier in shadow mode never denies, not even a cost above its limit.
pub async fn a_shadow_tier_never_denies_a_cost_above_its_limit(b: TestBackend) {
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let config = limits(2, 4, 0, MINUTE).shadow_tier(Tier::User);
    let limiter = b.limiter(config, &clock).await;
    let d = limiter.check_n("u", "/e", 3).await;
    assert!(d.allowed(), "{d:?}");
    assert_eq!(d.shadow_blocked_by(), Some(Tier::User), "{d:?}");
    // The endpoint (enforced) counted those 3: 3 more do not fit, and it is the endpoint
    // that denies, with its wait, not the shadow tier for a cost it can never take.
    clock.advance(SEC);
    let d = limiter.check_n("v", "/e", 3).await;
    assert_eq!(d.blocked_by(), Some(Tier::Endpoint), "{d:?}");
    assert!(!d.cost_exceeds_limit(), "{d:?}");
    assert_eq!(d.retry_after(), MINUTE - SEC + US);
    assert_eq!(limiter.backend(), b.expected_backend());
}

/// docs/POLICIES.md: a plan replaces the default user limit, not a route's own, which wins.
pub async fn a_routes_own_user_limit_wins_over_a_plan(b: TestBackend) {
    use tiered_ratelimit::RouteLimits;
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let login = RouteLimits {
        user_limit: Some(2),
        endpoint_limit: None,
    };
    let config = limits(1, 0, 0, MINUTE)
        .route("/login", login)
        .plan("premium", 5)
        .user_plan("alice", "premium");
    let limiter = b.limiter(config, &clock).await;
    assert_eq!(
        admitted(&limiter, "alice", "/login").await,
        2,
        "the route's own limit"
    );
    assert_eq!(admitted(&limiter, "alice", "/items").await, 5, "the plan's");
    assert_eq!(admitted(&limiter, "bob", "/items").await, 1, "the default");
    assert_eq!(limiter.backend(), b.expected_backend());
}

/// How many of six requests of `user` on `route` `limiter` admits.
async fn admitted(limiter: &RateLimiter, user: &str, route: &str) -> usize {
    let mut n = 0;
    for _ in 0..6 {
        n += usize::from(limiter.check(user, route).await.allowed());
    }
    n
}
