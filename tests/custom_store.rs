//! A user's own `Store` through the one seam: the limiter holds it as it holds its own stores,
//! takes its synchronous fast path when it offers one, and tells `on_backend_change` listeners
//! about its switches even when the store does not call them itself; and the memory store
//! decides the same through that seam as through the limiter's own path to it.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tiered_ratelimit::store::{MemoryStore, Store, StoreError, StoreOutcome, StoreRequest};
use tiered_ratelimit::{Backend, ManualClock, RateLimitConfig, RateLimiter, Tier};

/// Memory underneath; says `Custom` until `switched`, then `Memory`; counts awaited checks.
#[derive(Clone, Default)]
struct Wrapped {
    memory: MemoryStore,
    switched: Arc<AtomicBool>,
    fast_path: bool,
    awaited: Arc<AtomicUsize>,
}

impl Store for Wrapped {
    fn check(
        &self,
        request: &StoreRequest<'_>,
    ) -> impl Future<Output = Result<StoreOutcome, StoreError>> + Send {
        self.awaited.fetch_add(1, Ordering::Relaxed);
        Store::check(&self.memory, request)
    }

    fn check_now(&self, request: &StoreRequest<'_>) -> Option<Result<StoreOutcome, StoreError>> {
        if self.fast_path {
            Store::check_now(&self.memory, request)
        } else {
            None
        }
    }

    fn reset(&self, tier: Tier, id: &str) -> impl Future<Output = Result<(), StoreError>> + Send {
        Store::reset(&self.memory, tier, id)
    }

    fn backend(&self) -> Backend {
        if self.switched.load(Ordering::Relaxed) {
            Backend::Memory
        } else {
            Backend::Custom
        }
    }
}

fn config() -> RateLimitConfig {
    RateLimitConfig::builder()
        .window(Duration::from_secs(60))
        .user_limit(2)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_custom_store_decides_through_the_seam_and_its_switches_reach_the_listener() {
    let store = Wrapped::default();
    let heard = Arc::new(Mutex::new(Vec::new()));
    let seen = heard.clone();
    let limiter = RateLimiter::builder(config())
        .clock(ManualClock::new())
        .store(store.clone())
        .on_backend_change(move |b| seen.lock().unwrap().push(b))
        .build();
    assert_eq!(limiter.backend(), Backend::Custom);
    assert!(limiter.check("alice", "/").await.allowed());
    assert!(limiter.check("alice", "/").await.allowed());
    let denied = limiter.check("alice", "/").await;
    assert_eq!(denied.blocked_by(), Some(Tier::User));
    assert_eq!(
        store.awaited.load(Ordering::Relaxed),
        3,
        "no fast path offered"
    );
    assert!(heard.lock().unwrap().is_empty());

    store.switched.store(true, Ordering::Relaxed);
    assert!(!limiter.check("alice", "/").await.allowed());
    assert_eq!(*heard.lock().unwrap(), [Backend::Memory], "told once");
    assert!(!limiter.check("alice", "/").await.allowed());
    assert_eq!(*heard.lock().unwrap(), [Backend::Memory]);
}

#[tokio::test]
async fn a_custom_store_with_a_fast_path_is_never_awaited() {
    let store = Wrapped {
        fast_path: true,
        ..Wrapped::default()
    };
    let limiter = RateLimiter::builder(config())
        .clock(ManualClock::new())
        .store(store.clone())
        .build();
    for _ in 0..2 {
        assert!(limiter.check("bob", "/").await.allowed());
    }
    assert!(!limiter.check("bob", "/").await.allowed());
    assert_eq!(store.awaited.load(Ordering::Relaxed), 0);
    assert_eq!(store.memory.entries(Tier::User, "bob"), 2);
}

/// A custom store written before blocks keeps compiling, and a block on it says why it did not
/// land (the trait's default), instead of pretending.
#[tokio::test]
async fn a_custom_store_without_blocks_says_so() {
    let limiter = RateLimiter::builder(config())
        .clock(ManualClock::new())
        .store(Wrapped::default())
        .build();
    let target = tiered_ratelimit::BlockTarget::User("mallory");
    let err = limiter
        .block(target, Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(
        matches!(err, tiered_ratelimit::BlockError::Store(_)),
        "{err}"
    );
    assert!(err.to_string().contains("does not keep blocks"), "{err}");
    assert!(limiter.unblock(target).await.is_err());
    assert!(
        limiter.check("mallory", "/").await.allowed(),
        "nothing was blocked"
    );
}

/// A store that denies with no wait at all (a zero `Duration`, as a hasty custom store may).
#[derive(Clone)]
struct DeniesWithoutWait {
    blocked: bool,
    shadow: bool,
}

impl Store for DeniesWithoutWait {
    fn check(
        &self,
        _request: &StoreRequest<'_>,
    ) -> impl Future<Output = Result<StoreOutcome, StoreError>> + Send {
        let outcome = match (self.blocked, self.shadow) {
            (true, _) => StoreOutcome::blocked(Tier::User, Duration::ZERO),
            (_, true) => StoreOutcome::admitted(0, Tier::User, Duration::ZERO)
                .with_shadow_denied(Tier::User, Duration::ZERO),
            _ => StoreOutcome::denied(Tier::User, Duration::ZERO),
        };
        std::future::ready(Ok(outcome))
    }

    fn reset(&self, _tier: Tier, _id: &str) -> impl Future<Output = Result<(), StoreError>> + Send {
        std::future::ready(Ok(()))
    }

    fn backend(&self) -> Backend {
        Backend::Custom
    }
}

/// README: `Retry-After` is at least 1 on a 429, whatever the store. An outside review's custom
/// store denied with a zero wait and the 429 said `Retry-After: 0` (and `t=0`): retry at once.
#[tokio::test]
async fn a_denial_with_no_wait_from_a_custom_store_still_says_retry_after_one() {
    let config = RateLimitConfig::builder()
        .window(Duration::from_secs(60))
        .user_limit(2)
        .headers(tiered_ratelimit::HeaderStyle::Both)
        .build()
        .unwrap();
    for (blocked, shadow) in [(false, false), (true, false), (false, true)] {
        let limiter = RateLimiter::builder(config.clone())
            .clock(ManualClock::new())
            .store(DeniesWithoutWait { blocked, shadow })
            .build();
        let d = limiter.check("alice", "/").await;
        assert_eq!(d.allowed(), shadow, "{d:?}");
        assert_eq!(d.retry_after_secs(), 1, "{d:?}");
        assert!(d.retry_after() > Duration::ZERO, "{d:?}");
        let headers = tiered_ratelimit::headers::to_header_map(&d, config.headers());
        assert_eq!(headers["retry-after"], "1", "{headers:?}");
        let ratelimit = headers["ratelimit"].to_str().unwrap();
        assert!(ratelimit.ends_with(";t=1"), "{ratelimit}");
    }
}

/// Every call to the memory store underneath, through the `Store` trait (answers as
/// `StoreOutcome`s, waits as `Duration`s); `fast_path`: offers `check_now`, else is awaited.
#[derive(Clone)]
struct Through {
    memory: MemoryStore,
    fast_path: bool,
}

impl Store for Through {
    fn check(
        &self,
        request: &StoreRequest<'_>,
    ) -> impl Future<Output = Result<StoreOutcome, StoreError>> + Send {
        Store::check(&self.memory, request)
    }

    fn check_now(&self, request: &StoreRequest<'_>) -> Option<Result<StoreOutcome, StoreError>> {
        if self.fast_path {
            Store::check_now(&self.memory, request)
        } else {
            None
        }
    }

    fn reset(&self, tier: Tier, id: &str) -> impl Future<Output = Result<(), StoreError>> + Send {
        Store::reset(&self.memory, tier, id)
    }

    fn block(
        &self,
        tier: Tier,
        id: &str,
        now: Duration,
        duration: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        Store::block(&self.memory, tier, id, now, duration)
    }

    fn unblock(&self, tier: Tier, id: &str) -> impl Future<Output = Result<(), StoreError>> + Send {
        Store::unblock(&self.memory, tier, id)
    }

    fn backend(&self) -> Backend {
        Backend::Custom
    }
}

/// The limiter takes the memory store's answers as the store makes them (in whole µs), and a
/// custom store's through the `Store` trait (`StoreOutcome`, `Duration`): both must give the
/// same decision, field by field. Three limiters, one on the memory store itself and two on a
/// memory store behind the trait (its fast path, and awaited), run one seeded random sequence:
/// mixed costs, a shadow tier, a route with limits of its own, blocks, resets, clock steps at
/// the window's edges and of 0–2 µs, and a key cap below the keys the sequence names (so that
/// new keys are denied at the cap too).
#[tokio::test]
async fn the_memory_store_decides_the_same_directly_and_through_the_store_trait() {
    /// Fewer than the 9 keys the sequence can name (3 users, 3 routes, 3 users' buckets on
    /// `/big`).
    const KEYS: usize = 7;
    let window = Duration::from_millis(50);
    let config = RateLimitConfig::builder()
        .window(window)
        .user_limit(5)
        .endpoint_limit(3)
        .global_limit(30)
        .shadow_tier(Tier::Endpoint)
        .route(
            "/big",
            tiered_ratelimit::RouteLimits {
                user_limit: Some(3),
                endpoint_limit: Some(2),
            },
        )
        .build()
        .unwrap();
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let direct = MemoryStore::with_max_keys(KEYS);
    let limiter = |store: Option<Through>| {
        let builder = RateLimiter::builder(config.clone()).clock(clock.clone());
        match store {
            Some(store) => builder.store(store),
            None => builder.memory_store(direct.clone()),
        }
        .build()
    };
    let limiters = [
        limiter(None),
        limiter(Some(Through {
            memory: MemoryStore::with_max_keys(KEYS),
            fast_path: true,
        })),
        limiter(Some(Through {
            memory: MemoryStore::with_max_keys(KEYS),
            fast_path: false,
        })),
    ];
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let (users, routes) = (["alice", "bob", "carol"], ["/a", "/b", "/big"]);
    let (mut denied, mut shadow, mut blocked, mut at_cap) = (0, 0, 0, 0);
    for step in 0..4_000 {
        match next(20) {
            0 | 4 | 5 => {
                let us = window.as_micros() as u64;
                let by = [1, us - 1, us, us + 1, next(us)][next(5) as usize];
                clock.advance(Duration::from_micros(by));
            }
            1 => clock.advance(Duration::from_micros(next(3))),
            2 if next(4) == 0 => {
                let user = users[next(3) as usize];
                let target = tiered_ratelimit::BlockTarget::User(user);
                let how_long = Duration::from_micros(1 + next(40_000));
                for l in &limiters {
                    l.block(target, how_long).await.unwrap();
                }
            }
            3 if next(8) == 0 => {
                let user = users[next(3) as usize];
                for l in &limiters {
                    l.reset_user(user).await.unwrap();
                }
            }
            _ => {
                let (user, route) = (users[next(3) as usize], routes[next(3) as usize]);
                let cost = [1, 1, 1, 2, 3, 7][next(6) as usize];
                let mut decisions = Vec::new();
                for l in &limiters {
                    decisions.push(l.check_n(user, route, cost).await);
                }
                let d = &decisions[0];
                assert_eq!(d, &decisions[1], "step {step}: the trait's fast path");
                assert_eq!(d, &decisions[2], "step {step}: the awaited path");
                denied += u32::from(!d.allowed());
                shadow += u32::from(d.shadow_blocked_by().is_some());
                blocked += u32::from(d.by_block());
                at_cap += u32::from(direct.tracked_keys() == KEYS);
            }
        }
    }
    // The sequence reached every kind of answer, and checks at the key cap (where a new key is
    // denied).
    assert!(
        denied > 500 && shadow > 200 && blocked > 50 && at_cap > 500,
        "{denied} {shadow} {blocked} {at_cap}"
    );
}
