//! A user's own `Store` through the one seam: the limiter holds it as it holds its own stores,
//! takes its synchronous fast path when it offers one, and tells `on_backend_change` listeners
//! about its switches even when the store does not call them itself.

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
