//! The store contract: TestTiers: user, endpoint, global, the first full one denies, and a denial leaves no trace.

use super::*;

pub async fn user_blocks_first_when_tightest(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(2, 5, 10, MINUTE), &clock).await;
    assert_admitted(&limiter.check("alice", "/items").await, 1);
    assert_admitted(&limiter.check("alice", "/items").await, 0);
    assert_denied(
        &limiter.check("alice", "/items").await,
        Tier::User,
        MINUTE + US,
    );
    // The endpoint and global tiers still have room for others.
    assert_admitted(&limiter.check("bob", "/items").await, 1);
    assert_still_on(&b, &limiter);
}

pub async fn remaining_is_smallest_over_tiers(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(5, 3, 10, MINUTE), &clock).await;
    // endpoint is tightest: 3 - 1
    assert_admitted(&limiter.check("alice", "/a").await, 2);
    // on /b, alice's user tier (5 - 2 = 3) and the endpoint (3 - 1 = 2): 2
    assert_admitted(&limiter.check("alice", "/b").await, 2);
    assert_admitted(&limiter.check("alice", "/c").await, 2);
    // user: 5 - 4 = 1 is now the smallest
    assert_admitted(&limiter.check("alice", "/d").await, 1);
    // global: 10 - 5 = 5, endpoint /e: 2, user bob: 4
    assert_admitted(&limiter.check("bob", "/e").await, 2);
    for user in ["c1", "c2", "c3", "c4"] {
        limiter.check(user, &format!("/{user}")).await;
    }
    // global: 10 - 10 = 0 is the smallest now
    assert_admitted(&limiter.check("d", "/f").await, 0);
    assert_still_on(&b, &limiter);
}

pub async fn endpoint_independence(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(100, 2, 0, MINUTE), &clock).await;
    assert_admitted(&limiter.check("alice", "/a").await, 1);
    assert_admitted(&limiter.check("bob", "/a").await, 0);
    // /a is full for everyone, whoever asks.
    assert_denied(
        &limiter.check("carol", "/a").await,
        Tier::Endpoint,
        MINUTE + US,
    );
    assert_denied(
        &limiter.check("alice", "/a").await,
        Tier::Endpoint,
        MINUTE + US,
    );
    // /b has its own counter.
    assert_admitted(&limiter.check("alice", "/b").await, 1);
    assert_admitted(&limiter.check("carol", "/b").await, 0);
    assert_denied(
        &limiter.check("dave", "/b").await,
        Tier::Endpoint,
        MINUTE + US,
    );
    assert_still_on(&b, &limiter);
}

pub async fn global_blocks_across_users(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(10, 10, 3, MINUTE), &clock).await;
    assert_admitted(&limiter.check("a", "/1").await, 2);
    clock.advance(secs(5));
    assert_admitted(&limiter.check("b", "/2").await, 1);
    assert_admitted(&limiter.check("c", "/3").await, 0);
    // A fresh user on a fresh endpoint is still blocked: the whole service is full.
    assert_denied(&limiter.check("d", "/4").await, Tier::Global, secs(55) + US);
    assert_denied(&limiter.check("a", "/1").await, Tier::Global, secs(55) + US);
    clock.set(secs(1_060) + US);
    assert_admitted(&limiter.check("d", "/4").await, 0);
    assert_still_on(&b, &limiter);
}

pub async fn tier_order_when_several_are_full(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(2, 2, 2, MINUTE), &clock).await;
    assert!(limiter.check("alice", "/a").await.allowed());
    assert!(limiter.check("alice", "/a").await.allowed());
    // All three of alice's, /a's and the global tier are full: user is checked first.
    assert_denied(&limiter.check("alice", "/a").await, Tier::User, MINUTE + US);
    // Bob's user tier is empty; /a and global are full: endpoint comes before global.
    assert_denied(
        &limiter.check("bob", "/a").await,
        Tier::Endpoint,
        MINUTE + US,
    );
    // Only global is full for bob on /b.
    assert_denied(&limiter.check("bob", "/b").await, Tier::Global, MINUTE + US);
    // alice on /b: user and global full, endpoint free: user still wins.
    assert_denied(&limiter.check("alice", "/b").await, Tier::User, MINUTE + US);
    assert_still_on(&b, &limiter);
}

pub async fn endpoint_denial_leaves_no_trace_in_user_tier(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(3, 1, 0, MINUTE), &clock).await;
    assert!(limiter.check("alice", "/x").await.allowed());
    for _ in 0..5 {
        assert_denied(
            &limiter.check("bob", "/x").await,
            Tier::Endpoint,
            MINUTE + US,
        );
    }
    // Bob's user tier still has its full capacity of 3: (user 3, endpoint 1) per endpoint.
    for (i, endpoint) in ["/y1", "/y2", "/y3"].iter().enumerate() {
        let d = limiter.check("bob", endpoint).await;
        assert!(d.allowed(), "bob request {i}: {d:?}");
        assert_eq!(d.remaining(), 0, "the fresh endpoint's 1 - 1 is smallest");
    }
    assert_denied(&limiter.check("bob", "/y4").await, Tier::User, MINUTE + US);
    assert_still_on(&b, &limiter);
}

pub async fn global_denial_leaves_no_trace_in_earlier_tiers(b: TestBackend) {
    let t0 = secs(1_000);
    let clock = ManualClock::at(t0);
    let limiter = b.limiter(limits(3, 3, 4, MINUTE), &clock).await;
    for _ in 0..3 {
        assert!(limiter.check("alice", "/a").await.allowed());
    }
    assert!(limiter.check("carol", "/c").await.allowed());
    clock.set(t0 + secs(10));
    for _ in 0..3 {
        assert_denied(
            &limiter.check("bob", "/b").await,
            Tier::Global,
            secs(50) + US,
        );
    }
    // Alice's and Carol's entries are gone; the denials at t0 + 10 s would still count.
    clock.set(t0 + MINUTE + US);
    for left in [2, 1, 0] {
        // min(user 3 - k, endpoint 3 - k, global 4 - k): bob and /b start from zero.
        assert_admitted(&limiter.check("bob", "/b").await, left);
    }
    assert_denied(&limiter.check("bob", "/b").await, Tier::User, MINUTE + US);
    assert_still_on(&b, &limiter);
}

pub async fn user_denial_leaves_no_trace_in_later_tiers(b: TestBackend) {
    let clock = ManualClock::at(secs(1_000));
    let limiter = b.limiter(limits(1, 3, 3, MINUTE), &clock).await;
    assert_admitted(&limiter.check("alice", "/a").await, 0);
    for _ in 0..10 {
        assert_denied(&limiter.check("alice", "/a").await, Tier::User, MINUTE + US);
    }
    // /a and global took only alice's one admitted request: 2 left on each.
    let d = limiter.check("bob", "/a").await;
    assert_admitted(&d, 0); // bob's user tier: 1 - 1
    assert!(limiter.check("carol", "/a").await.allowed());
    assert_denied(
        &limiter.check("dave", "/a").await,
        Tier::Endpoint,
        MINUTE + US,
    );
    assert_still_on(&b, &limiter);
}
