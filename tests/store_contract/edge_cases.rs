//! The store contract: TestEdgeCases: limits of 0 and 1, bursts at one instant, the epoch,
//! the largest windows and limits, mixed tiers, anonymous requests and client addresses.

use super::*;

pub async fn limit_of_one(b: TestBackend) {
    let t0 = secs(1_000);
    let clock = ManualClock::at(t0);
    let limiter = b.limiter(limits(1, 1, 1, MINUTE), &clock).await;
    assert_admitted(&limiter.check("alice", "/items").await, 0);
    assert_denied(
        &limiter.check("alice", "/items").await,
        Tier::User,
        MINUTE + US,
    );
    assert_denied(
        &limiter.check("bob", "/items").await,
        Tier::Endpoint,
        MINUTE + US,
    );
    assert_denied(
        &limiter.check("bob", "/other").await,
        Tier::Global,
        MINUTE + US,
    );
    clock.set(t0 + MINUTE + US);
    assert_admitted(&limiter.check("bob", "/other").await, 0);
    assert_still_on(&b, &limiter);
}

pub async fn limit_zero_switches_the_tier_off(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    // No user limit: one user may spend the whole endpoint budget.
    let limiter = b.limiter(limits(0, 4, 0, MINUTE), &clock).await;
    for left in [3, 2, 1, 0] {
        assert_admitted(&limiter.check("alice", "/items").await, left);
    }
    assert_denied(
        &limiter.check("alice", "/items").await,
        Tier::Endpoint,
        MINUTE + US,
    );
    // No endpoint or global limit: only the user tier counts, on any endpoint.
    let limiter = b.limiter(limits(3, 0, 0, MINUTE), &clock).await;
    for (i, left) in [2, 1, 0].into_iter().enumerate() {
        assert_admitted(&limiter.check("zed", &format!("/e{i}")).await, left);
    }
    assert_denied(&limiter.check("zed", "/e9").await, Tier::User, MINUTE + US);
    assert_admitted(&limiter.check("yan", "/e0").await, 2);
    assert_still_on(&b, &limiter);
}

pub async fn all_limits_zero_always_allows(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(0, 0, 0, MINUTE), &clock).await;
    for i in 0..200 {
        let d = limiter.check("alice", "/items").await;
        assert_admitted(&d, u64::MAX);
        // Nothing to count: no rate-limit header (a remaining of u64::MAX helps no one).
        assert!(
            headers_of(&d, &limiter).is_empty(),
            "{:?}",
            headers_of(&d, &limiter)
        );
        if i % 50 == 0 {
            clock.advance(US);
        }
    }
    if let Some(server) = b.server() {
        assert_eq!(server.cli(&["DBSIZE"]).trim(), "0", "nothing is recorded");
    }
    assert_still_on(&b, &limiter);
}

pub async fn same_timestamp_burst(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(3, 0, 0, MINUTE), &clock).await;
    let mut allowed = 0;
    let mut blocked = 0;
    for _ in 0..5 {
        let d = limiter.check("alice", "/items").await;
        if d.allowed() {
            allowed += 1;
        } else {
            assert_denied(&d, Tier::User, MINUTE + US);
            blocked += 1;
        }
    }
    assert_eq!((allowed, blocked), (3, 2));
    assert_still_on(&b, &limiter);
}

pub async fn concurrent_same_timestamp_burst(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(3, 7, 0, MINUTE), &clock).await;
    let mut handles = Vec::new();
    for i in 0..40 {
        let limiter = limiter.clone();
        handles.push(tokio::spawn(async move {
            // Users u0..u3 (3 each at most) on one endpoint (7 at most).
            let user = format!("u{}", i % 4);
            (user.clone(), limiter.check(&user, "/items").await)
        }));
    }
    let mut admitted = std::collections::HashMap::<String, u64>::new();
    let mut remaining_seen = Vec::new();
    for h in handles {
        let (user, d) = h.await.unwrap();
        if d.allowed() {
            *admitted.entry(user).or_default() += 1;
            remaining_seen.push(d.remaining());
        } else {
            assert_eq!(d.retry_after(), MINUTE + US, "{d:?}");
        }
    }
    // The users could take 12 in all, so the endpoint is what stops the burst, at exactly 7.
    let total: u64 = admitted.values().sum();
    assert_eq!(
        total, 7,
        "the endpoint admits exactly its limit: {admitted:?}"
    );
    assert!(admitted.values().all(|&n| n <= 3), "{admitted:?}");
    assert!(remaining_seen.iter().all(|&r| r <= 2), "{remaining_seen:?}");
    // Whoever took the endpoint's last slot was told 0 remain.
    assert!(remaining_seen.contains(&0), "{remaining_seen:?}");
    assert_still_on(&b, &limiter);
}

pub async fn clock_at_epoch_does_not_underflow(b: TestBackend) {
    // now - window is "negative" at the epoch: nothing may crash or wrap.
    let clock = ManualClock::new();
    let limiter = b
        .limiter(limits(2, 0, 0, Duration::from_secs(3_600)), &clock)
        .await;
    assert_admitted(&limiter.check("alice", "/items").await, 1);
    clock.set(US);
    assert_admitted(&limiter.check("alice", "/items").await, 0);
    clock.set(secs(5));
    assert_denied(
        &limiter.check("alice", "/items").await,
        Tier::User,
        Duration::from_secs(3_595) + US,
    );
    clock.set(Duration::from_secs(3_600) + US);
    assert_admitted(&limiter.check("alice", "/items").await, 0);
    assert_still_on(&b, &limiter);
}

pub async fn largest_window_at_epoch(b: TestBackend) {
    let window = tiered_ratelimit::config::MAX_WINDOW;
    let clock = ManualClock::new();
    let limiter = b.limiter(limits(2, 0, 0, window), &clock).await;
    assert!(limiter.check("alice", "/items").await.allowed());
    assert!(limiter.check("alice", "/items").await.allowed());
    assert_denied(
        &limiter.check("alice", "/items").await,
        Tier::User,
        window + US,
    );
    clock.set(window);
    assert_denied(&limiter.check("alice", "/items").await, Tier::User, US);
    clock.set(window + US);
    // Both entries were at the epoch: both slots are free again.
    assert_admitted(&limiter.check("alice", "/items").await, 1);
    assert_still_on(&b, &limiter);
}

pub async fn large_window_3600s(b: TestBackend) {
    let hour = Duration::from_secs(3_600);
    let t0 = secs(1_000_000);
    let clock = ManualClock::at(t0);
    let limiter = b.limiter(limits(2, 0, 0, hour), &clock).await;
    assert!(limiter.check("alice", "/items").await.allowed());
    clock.set(t0 + secs(1_800));
    assert!(limiter.check("alice", "/items").await.allowed());
    // Well past a minute, an hour-long window still holds both.
    clock.set(t0 + secs(3_599));
    let d = limiter.check("alice", "/items").await;
    assert_denied(&d, Tier::User, SEC + US);
    assert_eq!(d.retry_after_secs(), 2);
    clock.set(t0 + hour + US);
    assert_admitted(&limiter.check("alice", "/items").await, 0);
    assert_denied(
        &limiter.check("alice", "/items").await,
        Tier::User,
        secs(1_800),
    );
    assert_still_on(&b, &limiter);
}

pub async fn large_limit_million(b: TestBackend) {
    let limit = 1_000_000;
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(limit, limit, limit, MINUTE), &clock).await;
    // Each Redis check is a round trip: fewer there, the same property either way.
    let n: u64 = if b.expected_backend() == Backend::Redis {
        1_000
    } else {
        10_000
    };
    for i in 0..n {
        let d = limiter.check("alice", "/items").await;
        assert!(d.allowed(), "check {i}: {d:?}");
        assert_eq!(d.remaining(), limit - i - 1, "check {i}");
        if i % 3 == 0 {
            clock.advance(US);
        }
    }
    if let Some(server) = b.server() {
        assert_eq!(
            server.cli(&["ZCARD", "rate_limit:user:alice"]).trim(),
            n.to_string()
        );
    }
    assert_still_on(&b, &limiter);
}

pub async fn largest_limit(b: TestBackend) {
    let max = tiered_ratelimit::config::MAX_LIMIT;
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(max, max, max, MINUTE), &clock).await;
    assert_admitted(&limiter.check("alice", "/items").await, max - 1);
    assert_admitted(&limiter.check("bob", "/items").await, max - 2);
    assert_still_on(&b, &limiter);
}

/// The hardening issue's precision repro: at the largest limit, requests of a quarter of it
/// each. Four fit, the fifth is denied, and a key kept alive over many windows (its running
/// totals passing 2^53 many times over) still counts exactly.
pub async fn largest_limit_and_costs_stay_exact_over_a_long_life(b: TestBackend) {
    let max = tiered_ratelimit::config::MAX_LIMIT;
    let quarter = max / 4;
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(max, 0, max, MINUTE), &clock).await;
    for round in 0..40u64 {
        for k in 1..=4u64 {
            let d = limiter.check_n("alice", "/items", quarter).await;
            assert_admitted(&d, max - k * quarter);
        }
        let d = limiter.check_n("alice", "/items", quarter).await;
        assert_denied(&d, Tier::User, MINUTE + US);
        // One unit fits nowhere either; the largest cost can never fit.
        assert_denied(
            &limiter.check("alice", "/items").await,
            Tier::User,
            MINUTE + US,
        );
        let d = limiter.check_n("alice", "/items", max + 1).await;
        assert!(d.cost_exceeds_limit(), "round {round}: {d:?}");
        if let Some(server) = b.server() {
            let zcard = server.cli(&["ZCARD", "rate_limit:user:alice"]);
            assert_eq!(zcard.trim(), "4", "round {round}");
        }
        clock.advance(MINUTE + US);
    }
    // Mixed: one costly request, then units, then exactly the rest.
    let d = limiter.check_n("bob", "/items", max - 3).await;
    assert_admitted(&d, 3);
    let d = limiter.check_n("bob", "/items", 2).await;
    assert_admitted(&d, 1);
    assert_denied(
        &limiter.check_n("bob", "/items", 2).await,
        Tier::User,
        MINUTE + US,
    );
    assert_admitted(&limiter.check("bob", "/items").await, 0);
    assert_still_on(&b, &limiter);
}

pub async fn mixed_tiers(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    // User and global on, endpoint off.
    let limiter = b.limiter(limits(3, 0, 5, MINUTE), &clock).await;
    for (i, left) in [2, 1, 0].into_iter().enumerate() {
        assert_admitted(&limiter.check("alice", &format!("/a{i}")).await, left);
    }
    assert_denied(&limiter.check("alice", "/z").await, Tier::User, MINUTE + US);
    // bob: user 3 - 1 = 2, global 5 - 4 = 1
    assert_admitted(&limiter.check("bob", "/z").await, 1);
    assert_admitted(&limiter.check("bob", "/z").await, 0);
    assert_denied(
        &limiter.check("carol", "/q").await,
        Tier::Global,
        MINUTE + US,
    );
    assert_denied(&limiter.check("alice", "/q").await, Tier::User, MINUTE + US);
    assert_still_on(&b, &limiter);
}

pub async fn anonymous_requests_skip_the_user_tier(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(1, 3, 0, MINUTE), &clock).await;
    let anon = CheckRequest::new(UserKey::Anonymous, Some("/items"));
    // The user limit is 1, but anonymous requests have no user tier: the endpoint decides.
    for left in [2, 1, 0] {
        assert_admitted(&limiter.check_request(anon).await, left);
    }
    assert_denied(
        &limiter.check_request(anon).await,
        Tier::Endpoint,
        MINUTE + US,
    );
    // Requests that matched no route share one endpoint key, distinct from any route.
    let unmatched = CheckRequest::new(UserKey::Anonymous, None);
    for left in [2, 1, 0] {
        assert_admitted(&limiter.check_request(unmatched).await, left);
    }
    assert_denied(
        &limiter.check_request(unmatched).await,
        Tier::Endpoint,
        MINUTE + US,
    );
    let route_named_like_it = CheckRequest::new(UserKey::Anonymous, Some("@unmatched"));
    assert_admitted(&limiter.check_request(route_named_like_it).await, 2);
    assert_still_on(&b, &limiter);
}

pub async fn client_ip_does_not_collide_with_user_ids(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(1, 0, 0, MINUTE), &clock).await;
    let ip: IpAddr = "1.2.3.4".parse().unwrap();
    let by_ip = CheckRequest::new(UserKey::Ip(ip), Some("/items"));
    assert_admitted(&limiter.check_request(by_ip).await, 0);
    assert_denied(&limiter.check_request(by_ip).await, Tier::User, MINUTE + US);
    // Ids spelling the address, or its key, are other users.
    for id in ["1.2.3.4", "@1.2.3.4", "%401.2.3.4"] {
        assert_admitted(&limiter.check(id, "/items").await, 0);
    }
    let v6: IpAddr = "::1".parse().unwrap();
    let by_v6 = CheckRequest::new(UserKey::Ip(v6), Some("/items"));
    assert_admitted(&limiter.check_request(by_v6).await, 0);
    assert_still_on(&b, &limiter);
}
