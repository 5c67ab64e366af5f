//! The in-memory store on its own: exactness under many threads, no trace of denied requests
//! under concurrency, eviction of idle keys, and the inspection API (`entries`, `oldest`,
//! `tracked_keys`, `clear`); plans by resolver are `tests/memory_store/plans.rs`, its key cap
//! `tests/memory_key_cap.rs`. Driven by a `ManualClock`: no sleeps.

mod common;
#[path = "memory_store/plans.rs"]
mod plans;

use std::collections::HashMap;
use std::time::Duration;

use common::limits;
use common::memory::{admitted_by, hammer, limiter_on, secs, MINUTE, T0, US};
use tiered_ratelimit::key::encode_id;
use tiered_ratelimit::store::{MemoryStore, Store, StoreOutcome, StoreRequest, TierCheck};
use tiered_ratelimit::{Backend, ManualClock, RateLimitConfig, RateLimiter, Tier};

// ------------------------------------------------------------------------ exactness

#[test]
fn many_threads_admit_exactly_the_global_limit() {
    const USERS: usize = 16;
    const ENDPOINTS: usize = 4;
    let clock = ManualClock::at(T0); // never moves: every check is in one window
    let store = MemoryStore::new();
    let limiter = limiter_on(limits(100, 400, 1_000, MINUTE), &clock, &store);
    // 8 threads x 1,000 checks; every user meets every endpoint many times, so neither the
    // user tier (16 x 100) nor the endpoint tier (4 x 400) can stop the burst before global.
    let results = hammer(&limiter, 8, 1_000, |t, i| {
        (
            format!("user-{}", (i + t) % USERS),
            format!("/ep/{}", (i / USERS + t) % ENDPOINTS),
        )
    });
    assert_eq!(results.len(), 8_000);
    let admitted = results.iter().filter(|r| r.2.allowed()).count();
    assert_eq!(admitted, 1_000, "exactly the global limit is admitted");
    assert_eq!(store.entries(Tier::Global, ""), 1_000);

    let per_user = admitted_by(&results, |r| &r.0);
    let per_endpoint = admitted_by(&results, |r| &r.1);
    for u in 0..USERS {
        let id = format!("user-{u}");
        let n = per_user.get(id.as_str()).copied().unwrap_or(0);
        assert!(n <= 100, "{id} admitted {n} > 100");
        assert_eq!(
            store.entries(Tier::User, &id),
            n,
            "{id}'s log holds its admissions"
        );
    }
    for e in 0..ENDPOINTS {
        let id = format!("/ep/{e}");
        let n = per_endpoint.get(id.as_str()).copied().unwrap_or(0);
        assert!(n <= 400, "{id} admitted {n} > 400");
        assert_eq!(store.entries(Tier::Endpoint, &id), n);
    }
    // Every denial came after global filled, and names a tier that really was full.
    for (user, endpoint, d) in results.iter().filter(|r| !r.2.allowed()) {
        match d.blocked_by() {
            Some(Tier::User) => assert_eq!(per_user[user.as_str()], 100),
            Some(Tier::Endpoint) => assert_eq!(per_endpoint[endpoint.as_str()], 400),
            Some(Tier::Global) => {}
            None => panic!("a denial without a tier: {d:?}"),
        }
        assert_eq!(d.retry_after(), MINUTE + US);
    }
    // Whoever took the last global slot was told nothing remains.
    let mut remaining: Vec<u64> = results
        .iter()
        .filter(|r| r.2.allowed())
        .map(|r| r.2.remaining())
        .collect();
    remaining.sort_unstable();
    assert_eq!(remaining[0], 0);
    assert!(remaining.iter().all(|&r| r < 1_000));
}

#[test]
fn many_threads_on_one_hot_user_admit_exactly_its_limit() {
    let clock = ManualClock::at(T0);
    let store = MemoryStore::new();
    let limiter = limiter_on(limits(37, 0, 0, MINUTE), &clock, &store);
    let results = hammer(&limiter, 8, 500, |_, _| ("hot".into(), "/items".into()));
    let admitted = results.iter().filter(|r| r.2.allowed()).count();
    assert_eq!(admitted, 37);
    assert_eq!(store.entries(Tier::User, "hot"), 37);
    // Each remaining value 36..=0 was handed out exactly once.
    let mut remaining: Vec<u64> = results
        .iter()
        .filter(|r| r.2.allowed())
        .map(|r| r.2.remaining())
        .collect();
    remaining.sort_unstable();
    assert_eq!(remaining, (0..37).collect::<Vec<u64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn many_tokio_tasks_are_exact() {
    for (user_limit, global_limit, expect_total) in [(37u64, 100u64, 100usize), (20, 100, 80)] {
        let clock = ManualClock::at(T0);
        let store = MemoryStore::new();
        let limiter = limiter_on(limits(user_limit, 0, global_limit, MINUTE), &clock, &store);
        let handles: Vec<_> = (0..4_000)
            .map(|i| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    let user = format!("hot{}", i % 4);
                    let d = limiter.check(&user, "/items").await;
                    (user, d.allowed())
                })
            })
            .collect();
        let mut per_user: HashMap<String, usize> = HashMap::new();
        for h in handles {
            let (user, ok) = h.await.unwrap();
            *per_user.entry(user).or_default() += usize::from(ok);
        }
        let total: usize = per_user.values().sum();
        assert_eq!(
            total, expect_total,
            "user {user_limit}, global {global_limit}"
        );
        for (user, n) in &per_user {
            assert!(*n as u64 <= user_limit, "{user}: {n}");
            assert_eq!(store.entries(Tier::User, user), *n);
        }
        assert_eq!(store.entries(Tier::Global, ""), expect_total);
    }
}

#[test]
fn later_tier_denials_leave_no_trace_under_concurrency() {
    // Global is tight: thousands of denials by the global tier, none recorded in user/endpoint.
    let clock = ManualClock::at(T0);
    let store = MemoryStore::new();
    let limiter = limiter_on(limits(1_000, 1_000, 100, MINUTE), &clock, &store);
    let results = hammer(&limiter, 8, 500, |t, i| {
        (format!("u{}", (i * 7 + t) % 50), format!("/e{}", i % 5))
    });
    assert_eq!(results.iter().filter(|r| r.2.allowed()).count(), 100);
    assert!(results
        .iter()
        .filter(|r| !r.2.allowed())
        .all(|r| r.2.blocked_by() == Some(Tier::Global)));
    let user_entries: usize = (0..50)
        .map(|u| store.entries(Tier::User, &format!("u{u}")))
        .sum();
    let endpoint_entries: usize = (0..5)
        .map(|e| store.entries(Tier::Endpoint, &format!("/e{e}")))
        .sum();
    assert_eq!(user_entries, 100, "denied requests leaked into user logs");
    assert_eq!(
        endpoint_entries, 100,
        "denied requests leaked into endpoint logs"
    );
    assert_eq!(store.entries(Tier::Global, ""), 100);

    // Endpoints are tight (4 x 25): denials by the endpoint tier leave users and global clean.
    let store = MemoryStore::new();
    let limiter = limiter_on(limits(1_000, 25, 10_000, MINUTE), &clock, &store);
    let results = hammer(&limiter, 8, 500, |t, i| {
        (format!("u{}", (i + t) % 50), format!("/e{}", (i / 3) % 4))
    });
    assert_eq!(results.iter().filter(|r| r.2.allowed()).count(), 100);
    let user_entries: usize = (0..50)
        .map(|u| store.entries(Tier::User, &format!("u{u}")))
        .sum();
    assert_eq!(user_entries, 100);
    assert_eq!(store.entries(Tier::Global, ""), 100);
    for e in 0..4 {
        assert_eq!(store.entries(Tier::Endpoint, &format!("/e{e}")), 25);
    }

    // Users are tight (20 x 5): the endpoint and global tiers record only the admissions.
    let store = MemoryStore::new();
    let limiter = limiter_on(limits(5, 10_000, 10_000, MINUTE), &clock, &store);
    let results = hammer(&limiter, 8, 500, |t, i| {
        (format!("u{}", (i + t) % 20), "/only".to_owned())
    });
    assert_eq!(results.iter().filter(|r| r.2.allowed()).count(), 100);
    assert_eq!(store.entries(Tier::Endpoint, "/only"), 100);
    assert_eq!(store.entries(Tier::Global, ""), 100);
}

// ------------------------------------------------------------------------- eviction

#[tokio::test]
async fn idle_keys_are_evicted_after_a_window() {
    let clock = ManualClock::at(T0);
    let store = MemoryStore::with_max_keys(1_000);
    let limiter = limiter_on(limits(5, 50, 0, MINUTE), &clock, &store);
    for u in 0..10 {
        assert!(limiter.check(&format!("user{u}"), "/items").await.allowed());
    }
    assert_eq!(store.tracked_keys(), 11, "10 users and one endpoint");
    clock.advance(MINUTE + secs(60) + US);
    assert!(limiter.check("late", "/items").await.allowed());
    // Every old key was idle: only `late` and the re-created `/items` remain.
    assert_eq!(store.tracked_keys(), 2);
    for u in 0..10 {
        assert_eq!(store.entries(Tier::User, &format!("user{u}")), 0);
        assert_eq!(store.oldest(Tier::User, &format!("user{u}")), None);
    }
    assert_eq!(store.entries(Tier::Endpoint, "/items"), 1);
}

#[tokio::test]
async fn the_sweep_keeps_keys_with_live_entries() {
    let clock = ManualClock::at(T0);
    let store = MemoryStore::new();
    let limiter = limiter_on(limits(2, 0, 0, MINUTE), &clock, &store);
    assert!(limiter.check("old", "/items").await.allowed()); // t0
    clock.set(T0 + secs(50));
    assert!(limiter.check("live", "/items").await.allowed()); // t0 + 50
    assert!(limiter.check("live", "/items").await.allowed());
    clock.set(T0 + secs(61));
    assert!(limiter.check("new", "/items").await.allowed());
    assert_eq!(store.tracked_keys(), 2, "old is evicted; live and new stay");
    assert_eq!(store.entries(Tier::User, "old"), 0);
    // The sweep forgot nothing that still counts: `live` is still full.
    assert_eq!(store.entries(Tier::User, "live"), 2);
    let d = limiter.check("live", "/items").await;
    assert_eq!(d.blocked_by(), Some(Tier::User));
    assert_eq!(d.retry_after(), secs(49) + US);
}

#[tokio::test]
async fn reset_user_untracks_the_key() {
    let clock = ManualClock::at(T0);
    let store = MemoryStore::new();
    let limiter = limiter_on(limits(1, 1, 0, MINUTE), &clock, &store);
    assert!(limiter.check("alice", "/a").await.allowed());
    assert!(limiter.check("bob", "/b").await.allowed());
    assert_eq!(store.tracked_keys(), 4);
    limiter.reset_user("alice").await.expect("reset");
    assert_eq!(store.tracked_keys(), 3);
    assert_eq!(store.entries(Tier::User, "alice"), 0);
    limiter.reset_endpoint("/b").await.expect("reset");
    assert_eq!(store.tracked_keys(), 2);
    // Unknown keys: nothing to forget, and the count must not drift.
    limiter.reset_user("nobody").await.expect("reset");
    limiter.reset_user("alice").await.expect("reset");
    assert_eq!(store.tracked_keys(), 2);
}

// --------------------------------------------------------------- inspection and trim

#[tokio::test]
async fn entries_and_oldest() {
    let clock = ManualClock::at(T0);
    let store = MemoryStore::new();
    let limiter = limiter_on(limits(10, 10, 10, MINUTE), &clock, &store);
    assert_eq!(store.entries(Tier::User, "alice"), 0);
    assert_eq!(store.oldest(Tier::User, "alice"), None);
    assert_eq!(store.oldest(Tier::Global, ""), None);
    for at in [0, 5, 5, 9] {
        clock.set(T0 + secs(at));
        assert!(limiter.check("alice", "/items").await.allowed());
    }
    assert!(limiter.check("bob", "/other").await.allowed());
    assert_eq!(store.entries(Tier::User, "alice"), 4);
    assert_eq!(store.entries(Tier::User, "bob"), 1);
    assert_eq!(store.entries(Tier::Endpoint, "/items"), 4);
    assert_eq!(store.entries(Tier::Endpoint, "/other"), 1);
    assert_eq!(store.entries(Tier::Global, "ignored"), 5);
    assert_eq!(store.oldest(Tier::User, "alice"), Some(T0));
    assert_eq!(store.oldest(Tier::User, "bob"), Some(T0 + secs(9)));
    assert_eq!(store.oldest(Tier::Global, ""), Some(T0));
    // A denied request changes nothing.
    let limiter1 = limiter_on(limits(1, 0, 0, MINUTE), &clock, &store);
    assert!(!limiter1.check("alice", "/items").await.allowed());
    assert_eq!(store.entries(Tier::User, "alice"), 4);
    assert_eq!(store.tracked_keys(), 4);
}

#[tokio::test]
async fn entries_take_encoded_ids() {
    let clock = ManualClock::at(T0);
    let store = MemoryStore::new();
    let limiter = limiter_on(limits(10, 10, 0, MINUTE), &clock, &store);
    let long = "q".repeat(10_000);
    for id in ["{x}", "a b", "é", long.as_str()] {
        assert!(limiter.check(id, "/items/{id}").await.allowed());
        assert_eq!(store.entries(Tier::User, &encode_id(id)), 1, "{:.10}", id);
    }
    assert_eq!(store.entries(Tier::Endpoint, "/items/%7Bid%7D"), 4);
    assert_eq!(store.entries(Tier::User, "%7Bx%7D"), 1);
    assert_eq!(store.tracked_keys(), 5);
}

#[tokio::test]
async fn clear_forgets_every_key() {
    let clock = ManualClock::at(T0);
    let store = MemoryStore::new();
    let limiter = limiter_on(limits(2, 2, 3, MINUTE), &clock, &store);
    assert!(limiter.check("alice", "/a").await.allowed());
    assert!(limiter.check("alice", "/a").await.allowed());
    assert!(limiter.check("bob", "/b").await.allowed());
    assert!(!limiter.check("carol", "/c").await.allowed());
    assert_eq!(store.entries(Tier::User, "carol"), 0);
    assert!(store.tracked_keys() >= 4);
    store.clear();
    assert_eq!(store.tracked_keys(), 0);
    assert_eq!(store.entries(Tier::User, "alice"), 0);
    assert_eq!(store.entries(Tier::Endpoint, "/a"), 0);
    assert_eq!(store.entries(Tier::Global, ""), 0);
    assert_eq!(store.oldest(Tier::Global, ""), None);
    // Full capacity at the same instant, and the store keeps working after a clear.
    let d = limiter.check("alice", "/a").await;
    assert!(d.allowed());
    assert_eq!(d.remaining(), 1);
    assert!(limiter.check("alice", "/a").await.allowed());
    assert_eq!(
        limiter.check("alice", "/a").await.blocked_by(),
        Some(Tier::User)
    );
    assert!(limiter.check("dave", "/d").await.allowed());
    assert_eq!(
        limiter.check("erin", "/e").await.blocked_by(),
        Some(Tier::Global)
    );
    assert_eq!(store.entries(Tier::User, "alice"), 2);
    assert_eq!(store.entries(Tier::Global, ""), 3);
}

#[tokio::test]
async fn entries_are_trimmed_after_the_window() {
    let clock = ManualClock::at(T0);
    let store = MemoryStore::new();
    let limiter = limiter_on(limits(10, 0, 0, MINUTE), &clock, &store);
    for at in [0, 10, 20] {
        clock.set(T0 + secs(at));
        assert!(limiter.check("alice", "/items").await.allowed());
    }
    clock.set(T0 + secs(30));
    assert!(limiter.check("bob", "/items").await.allowed());
    assert_eq!(store.entries(Tier::User, "alice"), 3);
    assert_eq!(store.oldest(Tier::User, "alice"), Some(T0));
    // t0 + 75 s: cutoff t0 + 15 s drops the entries at t0 and t0 + 10 s.
    clock.set(T0 + secs(75));
    let d = limiter.check("alice", "/items").await;
    assert!(d.allowed());
    assert_eq!(d.remaining(), 8);
    assert_eq!(store.entries(Tier::User, "alice"), 2);
    assert_eq!(store.oldest(Tier::User, "alice"), Some(T0 + secs(20)));
    // An entry exactly at the cutoff stays: at t0 + 80 s, t0 + 20 s is exactly a window old.
    clock.set(T0 + secs(80));
    assert!(limiter.check("alice", "/items").await.allowed());
    assert_eq!(store.oldest(Tier::User, "alice"), Some(T0 + secs(20)));
    assert_eq!(store.entries(Tier::User, "alice"), 3);
    clock.set(T0 + secs(80) + US);
    assert!(limiter.check("alice", "/items").await.allowed());
    assert_eq!(store.oldest(Tier::User, "alice"), Some(T0 + secs(75)));
    assert_eq!(store.entries(Tier::User, "alice"), 3);
}

#[tokio::test]
async fn a_clock_stepped_back_never_records_out_of_order() {
    let clock = ManualClock::at(T0 + secs(100));
    let store = MemoryStore::new();
    let limiter = limiter_on(limits(2, 0, 0, MINUTE), &clock, &store);
    assert!(limiter.check("alice", "/items").await.allowed());
    clock.set(T0 + secs(50));
    assert!(limiter.check("alice", "/items").await.allowed());
    // The second entry is recorded at the newest time, never before it.
    assert_eq!(store.oldest(Tier::User, "alice"), Some(T0 + secs(100)));
    clock.set(T0 + secs(160));
    assert!(!limiter.check("alice", "/items").await.allowed());
    clock.set(T0 + secs(160) + US);
    let d = limiter.check("alice", "/items").await;
    assert!(d.allowed());
    assert_eq!(
        d.remaining(),
        1,
        "both entries at t0 + 100 s expired together"
    );
}

#[tokio::test]
async fn two_limiters_share_one_store() {
    let clock = ManualClock::at(T0);
    let store = MemoryStore::new();
    let one = limiter_on(limits(3, 0, 0, MINUTE), &clock, &store);
    let two = limiter_on(limits(3, 0, 0, MINUTE), &clock, &store);
    assert!(one.check("alice", "/a").await.allowed());
    assert!(two.check("alice", "/a").await.allowed());
    assert_eq!(one.check("alice", "/a").await.remaining(), 0);
    assert_eq!(
        two.check("alice", "/a").await.blocked_by(),
        Some(Tier::User)
    );
    assert_eq!(store.entries(Tier::User, "alice"), 3);
}

// ------------------------------------------------------------------ the Store trait

#[tokio::test]
async fn store_trait_checks_costs_and_rejects_duplicate_or_unordered_tiers() {
    let store = MemoryStore::new();
    let tiers = [
        TierCheck::new(Tier::User, "alice", 5),
        TierCheck::new(Tier::Global, "", 100),
    ];
    let request = |now: Duration, cost: u64| StoreRequest::new(now, MINUTE, cost, &tiers);
    assert_eq!(
        Store::check(&store, &request(T0, 3)).await.unwrap(),
        // The three units at T0 leave a window (and 1 µs) later.
        StoreOutcome::admitted(2, Tier::User, MINUTE + US)
    );
    assert_eq!(
        store.entries(Tier::User, "alice"),
        1,
        "a request is one entry, whatever its cost"
    );
    // Another 3 do not fit in 5: room comes when the three units of T0 expire.
    assert_eq!(
        Store::check(&store, &request(T0 + secs(10), 3))
            .await
            .unwrap(),
        StoreOutcome::denied(Tier::User, secs(50) + US)
    );
    // More than the limit can never fit: a full window is the floor.
    assert_eq!(
        Store::check(&store, &request(T0 + secs(10), 6))
            .await
            .unwrap(),
        StoreOutcome::denied(Tier::User, MINUTE)
    );
    assert_eq!(store.entries(Tier::User, "alice"), 1);
    assert_eq!(store.entries(Tier::Global, ""), 1);
    assert_eq!(
        Store::check(&store, &request(T0 + secs(10), 2))
            .await
            .unwrap(),
        StoreOutcome::admitted(0, Tier::User, secs(50) + US)
    );

    let duplicate = [tiers[0], tiers[0]];
    let bad = StoreRequest::new(T0, MINUTE, 1, &duplicate);
    assert!(Store::check(&store, &bad).await.is_err());
    // Tiers out of their order (most specific first) are refused too, recording nothing.
    let reversed = [tiers[1], tiers[0]];
    let bad = StoreRequest::new(T0, MINUTE, 1, &reversed);
    let error = Store::check(&store, &bad).await.unwrap_err();
    assert!(error.to_string().contains("most specific first"), "{error}");
    assert_eq!(store.entries(Tier::Global, ""), 2);
    assert_eq!(
        store.entries(Tier::User, "alice"),
        2,
        "two requests (3 + 2 units)"
    );

    Store::reset(&store, Tier::User, "alice").await.unwrap();
    assert_eq!(store.entries(Tier::User, "alice"), 0);
    Store::reset(&store, Tier::Global, "").await.unwrap();
    assert_eq!(store.entries(Tier::Global, ""), 0);
    assert_eq!(Store::backend(&store), Backend::Memory);
}

#[test]
fn default_store_and_config_defaults() {
    let store = MemoryStore::default();
    assert_eq!(store.tracked_keys(), 0);
    assert_eq!(store.entries(Tier::Global, ""), 0);
    let config = RateLimitConfig::builder().build().unwrap();
    assert_eq!(config.max_tracked_keys(), 1_000_000);
    // A cap below two is raised to two keys (one request may need a user key and an endpoint
    // key) rather than refusing everything.
    let clock = ManualClock::at(T0);
    for cap in [0, 1] {
        let store = MemoryStore::with_max_keys(cap);
        let limiter = limiter_on(limits(1, 1, 0, MINUTE), &clock, &store);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            assert!(limiter.check("one", "/").await.allowed());
            assert!(!limiter.check("two", "/").await.allowed());
        });
        assert_eq!(store.tracked_keys(), 2);
    }
}

#[test]
fn overrides_come_from_the_config_file_and_are_validated() {
    let text = r#"
        window = "1m"
        user_limit = 50
        [routes."/login"]
        user_limit = 5
        [plans.premium]
        user_limit = 500
        [users]
        alice = "premium"
    "#;
    let config: tiered_ratelimit::RateLimitConfig = toml::from_str(text).unwrap();
    assert_eq!(config.route("/login").unwrap().user_limit, Some(5));
    assert_eq!(config.plan_of("alice").unwrap().user_limit, 500);
    assert!(config.plan_of("bob").is_none());
    let bad = "window = \"1m\"\n[users]\nalice = \"gold\"\n";
    let e = toml::from_str::<tiered_ratelimit::RateLimitConfig>(bad).unwrap_err();
    assert!(e.to_string().contains("users.alice"), "{e}");
}

/// The memory store's running cost totals pass 2^64 over a key's life (here: 70,000 requests of
/// 2^48 units, a quarter of the largest limit, on a key that never goes idle) and still count
/// exactly: they used to overflow (`attempt to add with overflow` in debug builds).
#[tokio::test]
async fn running_cost_totals_wrap_around_u64_and_stay_exact() {
    let max = tiered_ratelimit::config::MAX_LIMIT;
    let quarter = max / 4;
    let half_window = MINUTE / 2 + US;
    let clock = ManualClock::at(T0);
    let store = MemoryStore::new();
    let limiter = limiter_on(limits(max, 0, 0, MINUTE), &clock, &store);
    for _ in 0..2 {
        assert!(limiter.check_n("alice", "/", quarter).await.allowed());
    }
    // Each half window: the two requests of a window ago have left, two more fit, no third.
    for step in 0..35_000u64 {
        clock.advance(half_window);
        for left in [1, 0] {
            let d = limiter.check_n("alice", "/", quarter).await;
            assert!(d.allowed(), "step {step}: {d:?}");
            assert_eq!(d.remaining(), left * quarter, "step {step}");
        }
        let d = limiter.check_n("alice", "/", quarter).await;
        assert_eq!(d.blocked_by(), Some(Tier::User), "step {step}");
        assert_eq!(d.retry_after(), MINUTE / 2, "step {step}");
    }
    assert_eq!(store.entries(Tier::User, "alice"), 4);
}

/// `RateLimiter::check`'s docs: on memory the decision is made, and recorded, when `check` is
/// called, and the future is then ready at once. A future never polled still counts (the limit
/// of 1 is taken), and the next one is ready at its first poll, with no waker ever woken.
#[test]
fn on_memory_a_check_is_decided_when_called_and_its_future_is_ready_at_once() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    let config = limits(1, 0, 0, MINUTE).build().unwrap();
    let limiter = RateLimiter::builder(config)
        .clock(ManualClock::new())
        .build();
    drop(limiter.check("u", "/"));
    let mut next = std::pin::pin!(limiter.check("u", "/"));
    let mut cx = Context::from_waker(Waker::noop());
    match next.as_mut().poll(&mut cx) {
        Poll::Ready(decision) => {
            assert_eq!(decision.blocked_by(), Some(Tier::User), "{decision:?}")
        }
        Poll::Pending => panic!("a memory check waited"),
    }
}
