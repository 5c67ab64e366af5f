//! `acquire`: waits (tokio's sleep, time paused) until the binding tier frees, or gives the
//! denial at once when the wait would pass `max_wait`.

use std::time::Duration;

use tiered_ratelimit::{CheckRequest, ManualClock, Tier, UserKey};

use crate::common::{limits, TestBackend};
use crate::{follow_tokio_time, limiter};

const SEC: Duration = Duration::from_secs(1);
/// Slack for the tokio time that passes while a Redis command is in flight: the follower
/// ticks 5 ms of tokio's time per half a millisecond of real time while the runtime waits on
/// the socket, so a Redis reply held up 10 ms by a loaded machine costs 100 ms of it. Memory
/// never waits on a socket: there the slack is only the ticks' own granularity.
fn slack(b: &TestBackend) -> Duration {
    match b {
        TestBackend::Memory => Duration::from_millis(100),
        TestBackend::Redis(_) | TestBackend::Cluster(..) => Duration::from_secs(1),
    }
}

fn start() -> ManualClock {
    ManualClock::at(Duration::from_secs(1_000_000))
}

pub async fn waits_until_the_user_tier_frees(b: TestBackend) {
    let slack = slack(&b);
    let clock = start();
    let limiter = limiter(&b, limits(2, 0, 0, SEC), &clock).await;
    let t0 = follow_tokio_time(&clock);
    assert!(limiter.check("alice", "/a").await.allowed());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(limiter.check("alice", "/a").await.allowed());
    let decision = limiter.acquire("alice", "/a", 5 * SEC).await;
    let waited = t0.elapsed();
    assert!(decision.allowed(), "{decision:?}");
    // The first entry leaves the window 1 s (and 1 µs) after it was recorded.
    assert!(waited > SEC && waited < SEC + slack, "waited {waited:?}");
    // The admission was recorded: the tier is full again.
    let next = limiter.check("alice", "/a").await;
    assert_eq!(next.blocked_by(), Some(Tier::User), "{next:?}");
}

pub async fn gives_the_denial_at_once_when_the_wait_is_too_long(b: TestBackend) {
    let slack = slack(&b);
    let clock = start();
    let limiter = limiter(&b, limits(1, 0, 0, 10 * SEC), &clock).await;
    let t0 = follow_tokio_time(&clock);
    assert!(limiter.check("alice", "/a").await.allowed());
    let denied = limiter.acquire("alice", "/a", 9 * SEC).await;
    let waited = t0.elapsed();
    assert_eq!(denied.blocked_by(), Some(Tier::User), "{denied:?}");
    assert!(waited < slack, "returned after {waited:?}, not at once");
    let retry = denied.retry_after();
    assert!(
        retry > 9 * SEC && retry <= 10 * SEC + Duration::from_micros(1),
        "retry_after {retry:?}"
    );
    // max_wait of zero is a plain check.
    assert!(!limiter
        .acquire("alice", "/a", Duration::ZERO)
        .await
        .allowed());
    // Just long enough: it waits, and is admitted.
    let admitted = limiter.acquire("alice", "/a", 10 * SEC + slack).await;
    assert!(admitted.allowed(), "{admitted:?}");
    assert!(t0.elapsed() > 10 * SEC, "admitted after {:?}", t0.elapsed());
}

pub async fn a_costly_request_waits_for_its_whole_cost(b: TestBackend) {
    let slack = slack(&b);
    let clock = start();
    let limiter = limiter(&b, limits(5, 0, 0, SEC), &clock).await;
    let t0 = follow_tokio_time(&clock);
    assert!(limiter.check_n("alice", "/a", 3).await.allowed());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(limiter.check_n("alice", "/a", 2).await.allowed());
    // 4 units need both entries gone: the first leaving (at 1 s) frees only 3.
    let request = CheckRequest::new(UserKey::Id("alice"), Some("/a")).with_cost(4);
    let decision = limiter.acquire_request(request, 5 * SEC).await;
    let waited = t0.elapsed();
    assert!(decision.allowed(), "{decision:?}");
    assert_eq!(decision.remaining(), 1);
    let expected = Duration::from_millis(1_300);
    assert!(
        waited > expected && waited < expected + slack,
        "waited {waited:?}"
    );
}

pub async fn a_cost_that_can_never_fit_is_denied_at_once(b: TestBackend) {
    let slack = slack(&b);
    let clock = start();
    let limiter = limiter(&b, limits(5, 0, 0, SEC), &clock).await;
    let t0 = follow_tokio_time(&clock);
    let request = CheckRequest::new(UserKey::Id("alice"), Some("/a")).with_cost(6);
    let denied = limiter
        .acquire_request(request, Duration::from_secs(3_600))
        .await;
    assert!(denied.cost_exceeds_limit(), "{denied:?}");
    assert!(t0.elapsed() < slack, "returned after {:?}", t0.elapsed());
    // So too behind a full tier whose wait would come true: the user tier is full, and the
    // global limit of 3 can never take a cost of 4 (an outside audit: it waited for the user
    // tier, then was denied all the same).
    let behind = crate::limiter(&b, limits(5, 0, 3, SEC), &clock).await;
    for _ in 0..3 {
        assert!(behind.check("bob", "/a").await.allowed());
    }
    let t0 = tokio::time::Instant::now();
    let request = CheckRequest::new(UserKey::Id("bob"), Some("/a")).with_cost(4);
    let denied = behind
        .acquire_request(request, Duration::from_secs(3_600))
        .await;
    assert_eq!(denied.blocked_by(), Some(Tier::Global), "{denied:?}");
    assert!(denied.cost_exceeds_limit(), "{denied:?}");
    assert!(t0.elapsed() < slack, "returned after {:?}", t0.elapsed());
}

/// Ten waiters on a tier of 3 that frees 3 slots after 1 s: exactly 3 get in, the others give
/// up when the next slot (2 s) is past their `max_wait` — never more than the limit.
pub async fn concurrent_waiters_never_over_admit(b: TestBackend) {
    let slack = slack(&b);
    let clock = start();
    let limiter = limiter(&b, limits(3, 0, 0, SEC), &clock).await;
    let t0 = follow_tokio_time(&clock);
    for _ in 0..3 {
        assert!(limiter.check("alice", "/a").await.allowed());
    }
    let waiters: Vec<_> = (0..10)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let d = limiter
                    .acquire("alice", "/a", Duration::from_millis(1_500))
                    .await;
                (d.allowed(), tokio::time::Instant::now())
            })
        })
        .collect();
    let mut admitted = 0;
    for waiter in waiters {
        let (allowed, at) = waiter.await.unwrap();
        if allowed {
            admitted += 1;
            let waited = at - t0;
            assert!(
                waited > SEC && waited < SEC + slack,
                "admitted after {waited:?}"
            );
        }
    }
    assert_eq!(admitted, 3);
    assert!(t0.elapsed() < Duration::from_millis(1_500) + slack);
}

crate::on_every_backend!(acquire:
    waits_until_the_user_tier_frees,
    gives_the_denial_at_once_when_the_wait_is_too_long,
    a_costly_request_waits_for_its_whole_cost,
    a_cost_that_can_never_fit_is_denied_at_once,
    concurrent_waiters_never_over_admit,
);

/// Memory underneath, counting the checks that reach it.
#[derive(Clone, Default)]
struct Counting {
    memory: tiered_ratelimit::store::MemoryStore,
    checks: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl tiered_ratelimit::store::Store for Counting {
    fn check(
        &self,
        request: &tiered_ratelimit::store::StoreRequest<'_>,
    ) -> impl std::future::Future<
        Output = Result<tiered_ratelimit::store::StoreOutcome, tiered_ratelimit::store::StoreError>,
    > + Send {
        self.checks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tiered_ratelimit::store::Store::check(&self.memory, request)
    }
    fn reset(
        &self,
        tier: Tier,
        id: &str,
    ) -> impl std::future::Future<Output = Result<(), tiered_ratelimit::store::StoreError>> + Send
    {
        tiered_ratelimit::store::Store::reset(&self.memory, tier, id)
    }
    fn backend(&self) -> tiered_ratelimit::Backend {
        tiered_ratelimit::Backend::Custom
    }
}

/// A wait of 10 s is a sleep, not a loop: the store sees the first check, the one after the
/// wake-up, and at most one more (the manual clock follows tokio's in 5 ms ticks, so a waiter
/// can wake a tick before the limiter's clock says the entry has gone).
#[tokio::test]
async fn waiting_is_sleeping_not_spinning() {
    let clock = start();
    let store = Counting::default();
    let config = limits(1, 0, 0, 10 * SEC).build().unwrap();
    let limiter = tiered_ratelimit::RateLimiter::builder(config)
        .clock(clock.clone())
        .store(store.clone())
        .build();
    let t0 = follow_tokio_time(&clock);
    assert!(limiter.check("alice", "/a").await.allowed());
    let decision = limiter.acquire("alice", "/a", 20 * SEC).await;
    assert!(decision.allowed(), "{decision:?}");
    assert!(t0.elapsed() > 10 * SEC, "admitted after {:?}", t0.elapsed());
    let checks = store.checks.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        (3..=4).contains(&checks),
        "{checks} checks reached the store"
    );
}
