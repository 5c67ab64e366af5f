//! The in-memory store's cap on tracked keys (`max_tracked_keys`): new keys are denied only
//! until room frees, idle keys are reclaimed first, a flood never passes the cap, and a tier in
//! shadow mode lets new ids through, reported. Driven by a `ManualClock`: no sleeps.

mod common;

use std::time::Duration;

use common::limits;
use common::memory::{hammer, limiter_on, secs, MINUTE, T0, US};
use tiered_ratelimit::store::MemoryStore;
use tiered_ratelimit::{Backend, Decision, ManualClock, RateLimiter, Tier};

#[tokio::test]
async fn key_cap_denies_new_users_only_until_room_frees() {
    let clock = ManualClock::at(T0);
    let store = MemoryStore::with_max_keys(10);
    let limiter = limiter_on(limits(5, 0, 0, MINUTE), &clock, &store);
    for u in 0..10 {
        let d = limiter.check(&format!("user{u}"), "/items").await;
        assert!(d.allowed(), "user{u}: {d:?}");
    }
    assert_eq!(store.tracked_keys(), 10);

    // An 11th user is a new key at the cap: denied by its tier, with an honest retry.
    let d = limiter.check("user10", "/items").await;
    assert!(!d.allowed());
    assert_eq!(d.blocked_by(), Some(Tier::User));
    assert_eq!(d.remaining(), 0);
    assert!(d.retry_after() > Duration::ZERO, "{d:?}");
    assert!(d.retry_after() <= MINUTE + US, "{d:?}");
    assert!(d.retry_after_secs() >= 1);
    assert_eq!(store.tracked_keys(), 10);
    let retry_after = d.retry_after();

    // Existing users are served as usual.
    clock.set(T0 + secs(10));
    let d = limiter.check("user0", "/items").await;
    assert!(d.allowed());
    assert_eq!(d.remaining(), 3);
    assert!(!limiter.check("user10", "/items").await.allowed());

    // When the retry comes due, idle keys make room and new users get in again.
    clock.set(T0 + retry_after);
    let d = limiter.check("user10", "/items").await;
    assert!(d.allowed(), "after Retry-After: {d:?}");
    assert_eq!(d.remaining(), 4);
    // user1..user9 were idle and went; user0 (live since t0 + 10) and user10 stay, and the
    // sweep trimmed user0's expired entry at t0.
    assert_eq!(store.tracked_keys(), 2);
    assert_eq!(store.entries(Tier::User, "user0"), 1);
    assert_eq!(store.oldest(Tier::User, "user0"), Some(T0 + secs(10)));
    for u in 11..19 {
        assert!(limiter.check(&format!("user{u}"), "/items").await.allowed());
    }
    assert_eq!(store.tracked_keys(), 10);
    assert!(!limiter.check("user19", "/items").await.allowed());
}

/// At the cap, a window shortened by `reconfigure` frees room as soon as the keys are idle
/// under the new window (README: keys without a live entry are reclaimed first; OPERATIONS.md:
/// a shorter window stops counting older entries at once). An audit saw new ids denied for a
/// minute more, with a `Retry-After` of the old window's hour.
#[tokio::test]
async fn at_the_cap_a_window_shortened_by_reconfigure_frees_room_by_the_new_window() {
    let clock = ManualClock::at(T0);
    let store = MemoryStore::with_max_keys(2);
    let hour = secs(3_600);
    let limiter = limiter_on(limits(5, 0, 0, hour), &clock, &store);
    assert!(limiter.check("a", "/items").await.allowed());
    assert!(limiter.check("b", "/items").await.allowed());
    let d = limiter.check("c", "/items").await;
    assert_eq!(
        d.blocked_by(),
        Some(Tier::User),
        "a new key at the cap: {d:?}"
    );
    limiter
        .reconfigure(limits(5, 0, 0, secs(1)).build().unwrap())
        .unwrap();
    clock.set(T0 + secs(10));
    let d = limiter.check("d", "/items").await;
    assert!(d.allowed(), "a and b are idle under the new window: {d:?}");
    assert_eq!(store.tracked_keys(), 1);
    // At the cap again, the wait is the new window's, not the hour's.
    assert!(limiter.check("e", "/items").await.allowed());
    let d = limiter.check("f", "/items").await;
    assert!(!d.allowed());
    assert!(d.retry_after() <= secs(1) + US, "{d:?}");
}

/// The hardening issue's repro, at a small cap: a flood of distinct user ids on one route,
/// nearly all denied by the endpoint tier, used to leave an empty user key per request and
/// lock brand-new users out at the cap for up to a window.
#[tokio::test]
async fn a_flood_denied_by_a_later_tier_leaves_no_keys_and_locks_nobody_out() {
    let clock = ManualClock::at(T0);
    let store = MemoryStore::with_max_keys(50);
    let limiter = limiter_on(limits(5, 20, 0, MINUTE), &clock, &store);
    let mut admitted = 0;
    for i in 0..5_000 {
        let d = limiter.check(&format!("flood-{i}"), "/flooded").await;
        admitted += usize::from(d.allowed());
        if !d.allowed() {
            assert_eq!(d.blocked_by(), Some(Tier::Endpoint), "{d:?}");
        }
    }
    assert_eq!(admitted, 20);
    // 20 user keys and one endpoint key: the denied requests left nothing.
    assert_eq!(store.tracked_keys(), 21);
    assert_eq!(store.entries(Tier::User, "flood-4999"), 0);
    let d = limiter.check("newcomer", "/other").await;
    assert!(d.allowed(), "a new user on another route: {d:?}");

    // The same with the global tier denying: still no key.
    let store = MemoryStore::with_max_keys(50);
    let limiter = limiter_on(limits(5, 0, 10, MINUTE), &clock, &store);
    for i in 0..1_000 {
        let _ = limiter.check(&format!("flood-{i}"), "/flooded").await;
    }
    assert_eq!(store.tracked_keys(), 10);
    // A request costing more than a limit records nothing either.
    let d = limiter.check_n("costly", "/flooded", 6).await;
    assert!(d.cost_exceeds_limit(), "{d:?}");
    assert_eq!(store.tracked_keys(), 10);
}

/// At the cap, keys without a live entry are reclaimed before a new key is refused.
#[tokio::test]
async fn at_the_cap_idle_keys_are_reclaimed_before_anything_is_denied() {
    let clock = ManualClock::at(T0);
    let store = MemoryStore::with_max_keys(5);
    let limiter = limiter_on(limits(5, 0, 0, MINUTE), &clock, &store);
    for u in 0..5 {
        assert!(limiter.check(&format!("old{u}"), "/").await.allowed());
    }
    assert_eq!(store.tracked_keys(), 5);
    // Every entry has left the window, but no periodic sweep ran in between.
    clock.advance(MINUTE + US);
    let d = limiter.check("newcomer", "/").await;
    assert!(d.allowed(), "{d:?}");
    assert_eq!(store.tracked_keys(), 1);
}

#[tokio::test]
async fn key_cap_counts_endpoints_too() {
    let clock = ManualClock::at(T0);
    let store = MemoryStore::with_max_keys(3);
    let limiter = limiter_on(limits(5, 5, 0, MINUTE), &clock, &store);
    assert!(limiter.check("alice", "/a").await.allowed());
    assert!(limiter.check("alice", "/b").await.allowed());
    assert_eq!(store.tracked_keys(), 3);
    // A new endpoint for a known user: denied by the endpoint tier.
    let d = limiter.check("alice", "/c").await;
    assert_eq!(d.blocked_by(), Some(Tier::Endpoint));
    assert!(d.retry_after() > Duration::ZERO);
    // The user tier was not charged for it.
    assert_eq!(store.entries(Tier::User, "alice"), 2);
    // Known keys still work.
    assert!(limiter.check("alice", "/a").await.allowed());
}

/// The smallest cap accepted (2) admits a request that needs a user key and an endpoint key
/// at once, and the `Retry-After` it gives a newcomer comes true. (A cap of 1, which would
/// admit no such request ever, is refused by the configuration: tests/config.rs.)
#[tokio::test]
async fn at_the_smallest_cap_a_user_and_an_endpoint_key_fit_and_the_retry_comes_true() {
    let clock = ManualClock::at(T0);
    let config = limits(5, 100, 0, MINUTE)
        .max_tracked_keys(tiered_ratelimit::config::MIN_TRACKED_KEYS)
        .build()
        .unwrap();
    let limiter = RateLimiter::builder(config).clock(clock.clone()).build();
    assert!(limiter.check("alice", "/items").await.allowed());
    // A second user is a third key: denied at the cap, told when to come back.
    let d = limiter.check("bob", "/items").await;
    assert_eq!(d.blocked_by(), Some(Tier::User), "{d:?}");
    clock.advance(d.retry_after());
    let d = limiter.check("bob", "/items").await;
    assert!(d.allowed(), "after its Retry-After: {d:?}");
}

/// README: shadow mode "never blocks". At the key cap a new key of a shadow tier is not
/// tracked (the store never forgets a live key, and the cap holds), so the request is let
/// through and reported as what enforcing the tier would have done; an enforced tier still
/// fails closed. (An outside audit: 11 of 20 new users got a 429 with every tier in shadow.)
#[tokio::test]
async fn at_the_key_cap_a_shadow_tier_lets_new_ids_through_and_reports_them() {
    let clock = ManualClock::at(T0);
    let store = MemoryStore::with_max_keys(10);
    let all_shadow = limits(100, 1_000, 0, MINUTE).shadow(true);
    let limiter = limiter_on(all_shadow, &clock, &store);
    for u in 0..20 {
        let d = limiter.check(&format!("user{u}"), "/x").await;
        assert!(d.allowed(), "user{u}: {d:?}");
        if u >= 9 {
            // user0..user8 and the endpoint key fill the cap.
            assert_eq!(d.shadow_blocked_by(), Some(Tier::User), "user{u}: {d:?}");
            assert!(d.retry_after() > Duration::ZERO, "user{u}: {d:?}");
        } else {
            assert_eq!(d.shadow_blocked_by(), None, "user{u}: {d:?}");
        }
        assert!(store.tracked_keys() <= 10);
    }
    // The endpoint key is tracked, so the endpoint tier counted all twenty.
    let usage = limiter.usage("user0", "/x").await.unwrap();
    let endpoint = usage
        .tiers
        .iter()
        .find(|u| u.tier == Tier::Endpoint)
        .unwrap();
    assert_eq!(endpoint.used, 20);

    // The user tier in shadow, the endpoint tier enforced: a new endpoint key at the cap is
    // still denied by the endpoint tier, and records nothing.
    let store = MemoryStore::with_max_keys(2);
    let config = limits(100, 1_000, 0, MINUTE).shadow_tier(Tier::User);
    let limiter = limiter_on(config, &clock, &store);
    assert!(limiter.check("a", "/x").await.allowed());
    let d = limiter.check("b", "/x").await;
    assert!(d.allowed(), "{d:?}");
    assert_eq!(d.shadow_blocked_by(), Some(Tier::User), "{d:?}");
    let d = limiter.check("a", "/y").await;
    assert!(!d.allowed(), "{d:?}");
    assert_eq!(d.blocked_by(), Some(Tier::Endpoint), "{d:?}");
    assert_eq!(store.entries(Tier::User, "a"), 1);
    assert_eq!(store.tracked_keys(), 2);
}

/// At the cap, a shadow tier reports what enforcing it would have given, after the same sweep:
/// the same wait when no room is found, and no denial at all when the sweep makes room (a
/// review: without the sweep it reported a stale 1 µs, and a false denial).
#[tokio::test]
async fn at_the_key_cap_a_shadow_tier_reports_what_enforcing_it_would_give() {
    async fn last(shadow: bool, cap: usize, at: &[(&str, u64)]) -> (Decision, MemoryStore) {
        let clock = ManualClock::at(T0);
        let store = MemoryStore::with_max_keys(cap);
        let limiter = limiter_on(limits(100, 0, 0, MINUTE).shadow(shadow), &clock, &store);
        let mut d = None;
        for (user, t) in at {
            clock.set(T0 + secs(*t));
            d = Some(limiter.check(user, "/x").await);
        }
        (d.unwrap(), store)
    }
    // Every tracked key is live when d comes: no room either way, the same wait.
    let at = [
        ("z", 0),
        ("a", 50),
        ("b", 55),
        ("c", 61),
        ("a", 100),
        ("d", 111),
    ];
    let (enforced, _) = last(false, 3, &at).await;
    let (shadow, store) = last(true, 3, &at).await;
    assert_eq!(enforced.blocked_by(), Some(Tier::User), "{enforced:?}");
    assert!(shadow.allowed(), "{shadow:?}");
    assert_eq!(shadow.shadow_blocked_by(), Some(Tier::User), "{shadow:?}");
    assert_eq!(shadow.retry_after(), enforced.retry_after());
    assert_eq!(shadow.retry_after_secs(), 5);
    assert_eq!(store.entries(Tier::User, "d"), 0);
    // a is idle when c comes: the sweep makes room, and c is admitted and counted either way.
    let at = [("z", 0), ("a", 30), ("b", 61), ("c", 100)];
    let (enforced, _) = last(false, 2, &at).await;
    let (shadow, store) = last(true, 2, &at).await;
    assert!(enforced.allowed() && enforced.shadow_blocked_by().is_none());
    assert!(shadow.allowed(), "{shadow:?}");
    assert_eq!(shadow.shadow_blocked_by(), None, "{shadow:?}");
    assert_eq!(shadow.remaining(), 99);
    assert_eq!(store.entries(Tier::User, "c"), 1);
}

/// Through the `Store` trait, an untracked shadow tier's outcome follows the algorithm's rule
/// for a full shadow tier: it binds, with its wait (a review: the binding stayed the endpoint
/// tier's, with the endpoint's reset).
#[tokio::test]
async fn an_untracked_shadow_tier_binds_in_the_stores_outcome() {
    use tiered_ratelimit::store::{Store, StoreOutcome, StoreRequest, TierCheck};
    async fn check(store: &MemoryStore, tiers: &[TierCheck<'_>]) -> StoreOutcome {
        store
            .check(&StoreRequest::new(T0, MINUTE, 1, tiers))
            .await
            .unwrap()
    }
    let store = MemoryStore::with_max_keys(2);
    check(&store, &[TierCheck::new(Tier::Endpoint, "e1", 10)]).await;
    check(&store, &[TierCheck::new(Tier::Endpoint, "e2", 10)]).await;
    let outcome = check(
        &store,
        &[
            TierCheck::new(Tier::User, "new", 100).shadow(true),
            TierCheck::new(Tier::Endpoint, "e1", 10),
        ],
    )
    .await;
    let StoreOutcome::Admitted {
        remaining,
        binding,
        resets_in,
        shadow_denied: Some((shadowed, wait)),
        ..
    } = outcome
    else {
        panic!("{outcome:?}");
    };
    assert_eq!((remaining, binding, shadowed), (0, Tier::User, Tier::User));
    assert_eq!(resets_in, wait);
    assert!(wait > Duration::ZERO);
    assert_eq!(store.entries(Tier::Endpoint, "e1"), 2);
    assert_eq!(store.tracked_keys(), 2);
}

#[tokio::test]
async fn config_max_tracked_keys_reaches_the_default_store() {
    let clock = ManualClock::at(T0);
    let config = limits(5, 0, 0, MINUTE).max_tracked_keys(3).build().unwrap();
    let limiter = RateLimiter::builder(config).clock(clock.clone()).build();
    assert_eq!(limiter.backend(), Backend::Memory);
    for u in 0..3 {
        assert!(limiter.check(&format!("u{u}"), "/").await.allowed());
    }
    assert_eq!(
        limiter.check("u3", "/").await.blocked_by(),
        Some(Tier::User)
    );
}

#[tokio::test]
async fn a_flood_of_distinct_ids_never_exceeds_the_cap() {
    let clock = ManualClock::at(T0);
    let store = MemoryStore::with_max_keys(10);
    let limiter = limiter_on(limits(1, 0, 0, MINUTE), &clock, &store);
    let mut admitted = 0;
    for i in 0..10_000 {
        let d = limiter.check(&format!("flood-{i}"), "/items").await;
        admitted += usize::from(d.allowed());
        assert!(
            store.tracked_keys() <= 10,
            "after {i}: {}",
            store.tracked_keys()
        );
        if i % 1_000 == 999 {
            clock.advance(Duration::from_millis(1)); // time moves, but less than a window
        }
    }
    assert_eq!(admitted, 10);
    assert_eq!(store.tracked_keys(), 10);
}

#[test]
fn a_concurrent_flood_of_distinct_ids_never_exceeds_the_cap() {
    let clock = ManualClock::at(T0);
    let store = MemoryStore::with_max_keys(10);
    let limiter = limiter_on(limits(1, 0, 0, MINUTE), &clock, &store);
    let results = hammer(&limiter, 8, 1_250, |t, i| {
        (format!("flood-{t}-{i}"), "/items".to_owned())
    });
    let admitted: Vec<&str> = results
        .iter()
        .filter(|r| r.2.allowed())
        .map(|r| r.0.as_str())
        .collect();
    assert_eq!(admitted.len(), 10, "{admitted:?}");
    assert_eq!(store.tracked_keys(), 10);
    for id in admitted {
        assert_eq!(store.entries(Tier::User, id), 1);
    }
    assert!(results
        .iter()
        .filter(|r| !r.2.allowed())
        .all(|r| r.2.blocked_by() == Some(Tier::User) && r.2.retry_after() > Duration::ZERO));
}
