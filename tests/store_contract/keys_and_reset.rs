//! The store contract: keys (ids and templates that never collide) and resets.

use super::*;

pub async fn weird_user_ids_never_collide(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(1, 0, 0, MINUTE), &clock).await;
    let long = "x".repeat(10 * 1024);
    let long_hashed = encode_id(&long).into_owned();
    let mut long_twin = "x".repeat(10 * 1024 - 1);
    long_twin.push('y');
    let ids: Vec<String> = vec![
        String::new(),
        long.clone(),
        long_twin,
        format!("{long}x"),
        long_hashed,
        "x".into(),
        "{x}".into(),
        "%7Bx%7D".into(),
        "{x".into(),
        "x}".into(),
        "@1.2.3.4".into(),
        "%401.2.3.4".into(),
        "1.2.3.4".into(),
        "ユーザー".into(),
        "é".into(),
        "%C3%A9".into(),
        "e\u{301}".into(), // the same é, decomposed: another byte string
        "a\nb".into(),
        "a%0Ab".into(),
        "a b".into(),
        "a\u{0}b".into(),
        "%".into(),
        "%25".into(),
        "#".into(),
        "user:alice".into(),
        "alice".into(),
        "ALICE".into(),
    ];
    // Each id is a new user with limit 1: any collision shows as a denial here.
    for id in &ids {
        let d = limiter.check(id, "/items").await;
        assert!(d.allowed(), "id {:?} collided: {d:?}", truncate(id));
        assert_eq!(d.remaining(), 0);
    }
    // And each one is now blocked, on its own key.
    for id in &ids {
        let d = limiter.check(id, "/other").await;
        assert_eq!(d.blocked_by(), Some(Tier::User), "id {:?}", truncate(id));
    }
    // Resetting one weird id frees only that id.
    limiter.reset_user("{x}").await.expect("reset");
    assert!(limiter.check("{x}", "/items").await.allowed());
    assert!(!limiter.check("%7Bx%7D", "/items").await.allowed());
    assert!(!limiter.check("x", "/items").await.allowed());
    limiter.reset_user(&long).await.expect("reset");
    assert!(limiter.check(&long, "/items").await.allowed());
    assert!(!limiter.check(&format!("{long}x"), "/items").await.allowed());
    assert_still_on(&b, &limiter);
}

fn truncate(s: &str) -> String {
    s.chars().take(20).collect()
}

pub async fn weird_endpoint_templates(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(0, 2, 0, MINUTE), &clock).await;
    // One template is one endpoint, whoever asks.
    assert_admitted(&limiter.check("alice", "/items/{id}").await, 1);
    assert_admitted(&limiter.check("bob", "/items/{id}").await, 0);
    assert_denied(
        &limiter.check("carol", "/items/{id}").await,
        Tier::Endpoint,
        MINUTE + US,
    );
    // Different templates, including the encoded spelling of this one, are other endpoints.
    for route in [
        "/items/{name}",
        "/items/%7Bid%7D",
        "/items/",
        "/items/{id}/",
        "/users/{id}/items/{item_id}",
        "/",
        "",
        "/ünïcode/{id}",
    ] {
        assert_admitted(&limiter.check("alice", route).await, 1);
    }
    assert_still_on(&b, &limiter);
}

pub async fn reset_user_unblocks_only_that_user(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(2, 6, 0, MINUTE), &clock).await;
    for user in ["alice", "bob"] {
        assert!(limiter.check(user, "/items").await.allowed());
        assert!(limiter.check(user, "/items").await.allowed());
        assert!(!limiter.check(user, "/items").await.allowed());
    }
    limiter.reset_user("alice").await.expect("reset");
    // Full capacity back for alice, at the same instant.
    assert_admitted(&limiter.check("alice", "/other").await, 1);
    assert_admitted(&limiter.check("alice", "/other").await, 0);
    assert_denied(
        &limiter.check("alice", "/other").await,
        Tier::User,
        MINUTE + US,
    );
    // Bob is still blocked.
    assert_denied(
        &limiter.check("bob", "/items").await,
        Tier::User,
        MINUTE + US,
    );
    // The endpoint tier kept alice's and bob's four admitted requests on /items.
    limiter.reset_user("bob").await.expect("reset");
    assert_admitted(&limiter.check("bob", "/items").await, 1); // user 1, endpoint 6 - 5
    assert_admitted(&limiter.check("carol", "/items").await, 0); // endpoint 6 - 6
    assert_denied(
        &limiter.check("dave", "/items").await,
        Tier::Endpoint,
        MINUTE + US,
    );
    // Resetting an unknown user is harmless.
    limiter.reset_user("nobody").await.expect("reset");
    assert_still_on(&b, &limiter);
}

pub async fn reset_endpoint_unblocks_only_that_endpoint(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(0, 1, 0, MINUTE), &clock).await;
    assert!(limiter.check("a", "/items/{id}").await.allowed());
    assert!(limiter.check("a", "/other").await.allowed());
    assert!(!limiter.check("a", "/items/{id}").await.allowed());
    limiter.reset_endpoint("/items/{id}").await.expect("reset");
    assert_admitted(&limiter.check("a", "/items/{id}").await, 0);
    assert_denied(
        &limiter.check("a", "/other").await,
        Tier::Endpoint,
        MINUTE + US,
    );
    assert_still_on(&b, &limiter);
}

pub async fn full_capacity_returns_after_a_quiet_window(b: TestBackend) {
    let t0 = secs(1_000);
    let clock = ManualClock::at(t0);
    let limiter = b.limiter(limits(5, 8, 20, MINUTE), &clock).await;
    for i in 0..20u64 {
        limiter
            .check(&format!("u{}", i % 4), &format!("/e{}", i % 3))
            .await;
    }
    assert!(!limiter.check("new", "/new").await.allowed());
    clock.set(t0 + secs(3_600));
    // Everything is an hour old: back to min(5, 8, 20) - 1.
    assert_admitted(&limiter.check("u0", "/e0").await, 4);
    assert_still_on(&b, &limiter);
}
