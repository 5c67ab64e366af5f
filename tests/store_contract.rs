//! The store contract: every test body is written once and runs against every backend
//! (`memory::*` and `redis::*`), each Redis test on a `redis-server` of its own.
//!
//! The bodies follow the design note's test table (TestBasic, TestSlidingWindow, TestTiers,
//! TestRetryAfter, the edge cases, TestResultType), all driven by a `ManualClock`: no sleeps.
//! Redis-only checks of the keys themselves are in `tests/redis_keys.rs`.

mod common;

mod contract {
    use std::net::IpAddr;
    use std::time::Duration;

    use tiered_ratelimit::key::encode_id;
    use tiered_ratelimit::{
        Backend, CheckRequest, Decision, ManualClock, RateLimiter, Tier, UserKey,
    };

    use crate::common::{limits, TestBackend};

    const MINUTE: Duration = Duration::from_secs(60);
    const US: Duration = Duration::from_micros(1);
    const SEC: Duration = Duration::from_secs(1);

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// The rate-limit headers the layer would send for `d`, in `limiter`'s style.
    fn headers_of(d: &Decision, limiter: &RateLimiter) -> http::HeaderMap {
        tiered_ratelimit::headers::to_header_map(d, limiter.config().headers())
    }

    /// The limiter never fell back to memory: the test really ran on its backend.
    fn assert_still_on(b: &TestBackend, limiter: &RateLimiter) {
        assert_eq!(
            limiter.backend(),
            b.expected_backend(),
            "the limiter fell back during the test: {:?}",
            limiter.fallback_cause()
        );
    }

    fn assert_admitted(d: &Decision, remaining: u64) {
        assert!(d.allowed(), "expected admitted, got {d:?}");
        assert_eq!(d.remaining(), remaining, "remaining of {d:?}");
        assert_eq!(d.retry_after(), Duration::ZERO, "{d:?}");
        assert_eq!(d.retry_after_secs(), 0, "{d:?}");
        assert_eq!(d.blocked_by(), None, "{d:?}");
    }

    fn assert_denied(d: &Decision, tier: Tier, retry_after: Duration) {
        assert!(!d.allowed(), "expected denied, got {d:?}");
        assert_eq!(d.blocked_by(), Some(tier), "{d:?}");
        assert_eq!(d.remaining(), 0, "{d:?}");
        assert_eq!(d.retry_after(), retry_after, "retry_after of {d:?}");
        assert!(d.retry_after_secs() >= 1, "{d:?}");
    }

    fn header<'a>(headers: &'a http::HeaderMap, name: &str) -> &'a str {
        headers
            .get(name)
            .unwrap_or_else(|| panic!("header {name} missing from {headers:?}"))
            .to_str()
            .expect("ASCII header")
    }

    // ---------------------------------------------------------------- TestBasic

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

    // ---------------------------------------------------------- TestSlidingWindow

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

    // ------------------------------------------------------------------ TestTiers

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

    // -------------------------------------------------------------- TestRetryAfter

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

    // -------------------------------------------------------------- TestEdgeCases

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

    // ------------------------------------------------------------- TestResultType

    pub async fn decision_serializes_when_allowed(b: TestBackend) {
        let clock = ManualClock::at(secs(1_000));
        let limiter = b.limiter(limits(3, 0, 0, MINUTE), &clock).await;
        let d = limiter.check("alice", "/items").await;
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "allowed": true,
                "remaining": 2,
                "retry_after": 0,
                "blocked_by": null,
            })
        );
        assert_eq!(
            serde_json::to_string(&d).unwrap(),
            r#"{"allowed":true,"remaining":2,"retry_after":0,"blocked_by":null}"#
        );
        assert_still_on(&b, &limiter);
    }

    pub async fn decision_serializes_when_denied(b: TestBackend) {
        let clock = ManualClock::at(secs(1_000));
        let limiter = b.limiter(limits(1, 1, 1, MINUTE), &clock).await;
        assert!(limiter.check("alice", "/a").await.allowed());
        clock.advance(Duration::from_millis(100));
        for (user, endpoint, tier) in [
            ("alice", "/a", "user"),
            ("bob", "/a", "endpoint"),
            ("bob", "/b", "global"),
        ] {
            let d = limiter.check(user, endpoint).await;
            assert_eq!(
                serde_json::to_value(&d).unwrap(),
                serde_json::json!({
                    "allowed": false,
                    "remaining": 0,
                    // 59.900001 s, rounded up like the Retry-After header
                    "retry_after": 60,
                    "blocked_by": tier,
                })
            );
        }
        assert_still_on(&b, &limiter);
    }

    pub async fn decision_serializes_unlimited(b: TestBackend) {
        let clock = ManualClock::at(secs(1_000));
        let limiter = b.limiter(limits(0, 0, 0, MINUTE), &clock).await;
        let d = limiter.check("alice", "/a").await;
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["remaining"], serde_json::json!(u64::MAX));
        assert_eq!(json["allowed"], serde_json::json!(true));
        assert_eq!(json.as_object().unwrap().len(), 4);
        assert_still_on(&b, &limiter);
    }

    // ------------------------------------------------------------ keys and reset

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
}

contract_tests!(
    a_cost_that_can_never_fit_is_named_even_behind_a_full_tier,
    a_request_can_spend_several_units,
    unit_and_costly_requests_mix,
    a_cost_above_the_limit_is_denied_and_says_why,
    a_route_carries_its_own_user_and_endpoint_limits,
    users_on_a_plan_get_its_user_limit,
    ietf_headers_name_every_policy_and_the_one_closest_to_its_limit,
    ietf_only_headers_leave_out_the_legacy_ones,
    shadow_mode_never_blocks_and_records_nothing_in_a_full_tier,
    a_shadow_tier_lets_through_and_the_others_still_count_and_block,
    allows_under_limit_then_denies,
    independent_user_counters,
    headers_present_when_allowed,
    headers_present_when_denied,
    denied_requests_are_not_counted,
    stale_entries_expire_after_window,
    gradual_recovery_one_slot_at_a_time,
    not_a_fixed_window,
    window_boundary_entry_still_counts,
    window_boundary_with_several_entries,
    microsecond_resolution,
    realistic_epoch_times_are_exact,
    user_blocks_first_when_tightest,
    remaining_is_smallest_over_tiers,
    endpoint_independence,
    global_blocks_across_users,
    tier_order_when_several_are_full,
    endpoint_denial_leaves_no_trace_in_user_tier,
    global_denial_leaves_no_trace_in_earlier_tiers,
    user_denial_leaves_no_trace_in_later_tiers,
    retry_after_decreases_as_time_advances,
    retry_after_zero_when_allowed,
    retry_after_comes_from_the_blocking_tiers_oldest_entry,
    retry_after_is_the_first_full_tiers_wait_not_a_later_ones,
    limit_of_one,
    limit_zero_switches_the_tier_off,
    all_limits_zero_always_allows,
    same_timestamp_burst,
    concurrent_same_timestamp_burst,
    clock_at_epoch_does_not_underflow,
    largest_window_at_epoch,
    large_window_3600s,
    large_limit_million,
    largest_limit,
    largest_limit_and_costs_stay_exact_over_a_long_life,
    mixed_tiers,
    anonymous_requests_skip_the_user_tier,
    client_ip_does_not_collide_with_user_ids,
    decision_serializes_when_allowed,
    decision_serializes_when_denied,
    decision_serializes_unlimited,
    weird_user_ids_never_collide,
    weird_endpoint_templates,
    reset_user_unblocks_only_that_user,
    reset_endpoint_unblocks_only_that_endpoint,
    full_capacity_returns_after_a_quiet_window,
);
