//! The store contract: TestSlidingWindow: entries leave the window one by one, at its boundary
//! to the microsecond.

use super::*;

pub async fn stale_entries_expire_after_window(b: TestBackend) {
    let t0 = secs(1_000);
    let clock = ManualClock::at(t0);
    let limiter = b.limiter(limits(3, 0, 0, MINUTE), &clock).await;
    for _ in 0..3 {
        assert!(limiter.check("alice", "/items").await.allowed());
    }
    assert!(!limiter.check("alice", "/items").await.allowed());
    clock.set(t0 + MINUTE + US);
    // The whole capacity is back, not just one slot.
    assert_admitted(&limiter.check("alice", "/items").await, 2);
    assert_admitted(&limiter.check("alice", "/items").await, 1);
    assert_admitted(&limiter.check("alice", "/items").await, 0);
    assert!(!limiter.check("alice", "/items").await.allowed());
    assert_still_on(&b, &limiter);
}

pub async fn gradual_recovery_one_slot_at_a_time(b: TestBackend) {
    let t0 = secs(1_000);
    let clock = ManualClock::at(t0);
    let limiter = b.limiter(limits(3, 0, 0, MINUTE), &clock).await;
    for at in [0, 10, 20] {
        clock.set(t0 + secs(at));
        assert!(limiter.check("alice", "/items").await.allowed());
    }
    clock.set(t0 + secs(30));
    assert_denied(
        &limiter.check("alice", "/items").await,
        Tier::User,
        secs(30) + US,
    );
    // Each entry frees exactly its own slot, one window (and a microsecond) after it.
    // After the third, the log holds the three re-admitted requests, the oldest 40 s old.
    for (at, next_room) in [(0u64, secs(10)), (10, secs(10)), (20, secs(40) + US)] {
        clock.set(t0 + secs(at) + MINUTE + US);
        assert_admitted(&limiter.check("alice", "/items").await, 0);
        // Only one slot came back: the next entry still holds the log full.
        assert_denied(
            &limiter.check("alice", "/items").await,
            Tier::User,
            next_room,
        );
    }
    assert_still_on(&b, &limiter);
}

pub async fn not_a_fixed_window(b: TestBackend) {
    // A fixed window [0 s, 60 s) would forget the requests at 50 s and 55 s at 60 s.
    let clock = ManualClock::new();
    let limiter = b.limiter(limits(2, 0, 0, MINUTE), &clock).await;
    clock.set(secs(50));
    assert!(limiter.check("alice", "/items").await.allowed());
    clock.set(secs(55));
    assert!(limiter.check("alice", "/items").await.allowed());
    clock.set(secs(61));
    assert_denied(
        &limiter.check("alice", "/items").await,
        Tier::User,
        secs(49) + US,
    );
    clock.set(secs(109));
    assert_denied(
        &limiter.check("alice", "/items").await,
        Tier::User,
        SEC + US,
    );
    clock.set(secs(110) + US);
    assert_admitted(&limiter.check("alice", "/items").await, 0);
    assert_denied(&limiter.check("alice", "/items").await, Tier::User, secs(5));
    clock.set(secs(115) + US);
    assert_admitted(&limiter.check("alice", "/items").await, 0);
    assert_still_on(&b, &limiter);
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

pub async fn window_boundary_with_several_entries(b: TestBackend) {
    let t0 = secs(5_000);
    let clock = ManualClock::at(t0);
    let limiter = b.limiter(limits(0, 2, 0, MINUTE), &clock).await;
    assert!(limiter.check("a", "/e").await.allowed());
    clock.set(t0 + SEC);
    assert!(limiter.check("b", "/e").await.allowed());
    clock.set(t0 + MINUTE);
    assert_denied(&limiter.check("c", "/e").await, Tier::Endpoint, US);
    clock.set(t0 + MINUTE + US);
    assert_admitted(&limiter.check("c", "/e").await, 0);
    // The entry at t0 + 1 s is exactly at the boundary at t0 + 61 s: still counted.
    clock.set(t0 + MINUTE + SEC);
    assert_denied(&limiter.check("d", "/e").await, Tier::Endpoint, US);
    assert_still_on(&b, &limiter);
}

pub async fn microsecond_resolution(b: TestBackend) {
    let t0 = Duration::from_micros(1_000_000_123_457);
    let clock = ManualClock::at(t0);
    let window = Duration::from_millis(1_500);
    let limiter = b.limiter(limits(1, 0, 0, window), &clock).await;
    assert!(limiter.check("alice", "/items").await.allowed());
    clock.set(t0 + window - US);
    assert_denied(
        &limiter.check("alice", "/items").await,
        Tier::User,
        Duration::from_micros(2),
    );
    clock.set(t0 + window);
    assert_denied(&limiter.check("alice", "/items").await, Tier::User, US);
    clock.set(t0 + window + US);
    assert_admitted(&limiter.check("alice", "/items").await, 0);
    assert_still_on(&b, &limiter);
}

pub async fn realistic_epoch_times_are_exact(b: TestBackend) {
    // 2024-ish in microseconds: ~1.7e15, well past f64's 14-digit default formatting.
    let t0 = Duration::from_micros(1_717_171_717_171_717);
    let clock = ManualClock::at(t0);
    let limiter = b.limiter(limits(2, 0, 0, MINUTE), &clock).await;
    assert!(limiter.check("alice", "/items").await.allowed());
    clock.advance(US);
    assert!(limiter.check("alice", "/items").await.allowed());
    clock.set(t0 + MINUTE);
    assert_denied(&limiter.check("alice", "/items").await, Tier::User, US);
    clock.set(t0 + MINUTE + US);
    assert_admitted(&limiter.check("alice", "/items").await, 0);
    assert_denied(&limiter.check("alice", "/items").await, Tier::User, US);
    assert_still_on(&b, &limiter);
}
