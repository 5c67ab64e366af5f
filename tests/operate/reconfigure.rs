//! `reconfigure`: the whole configuration swapped at once. Checks running during the swap see
//! the old configuration or the new one, never a mix, and no tier admits more than the
//! configuration it was checked under allows; clones and layers see the change; entries
//! recorded before count under the new limits and window; store settings are refused.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tiered_ratelimit::{
    CheckRequest, HeaderStyle, ManualClock, RateLimitConfigBuilder, RateLimitLayer, Tier, UserKey,
};

use crate::common::{limits, TestBackend};
use crate::{config, config_prefixed, limiter};

const MINUTE: Duration = Duration::from_secs(60);
const SEC: Duration = Duration::from_secs(1);

fn start() -> ManualClock {
    ManualClock::at(Duration::from_secs(1_000_000))
}

/// Eight tasks hammer one user and endpoint while the limits go from 5/6/7 to 50/60/70 (and
/// the header style changes): every decision's limits are all old or all new (and new for a
/// check begun after the swap); the old limits admitted at most 5; in all exactly 50 were
/// admitted (the user tier of the new config, counting the entries recorded before).
pub async fn concurrent_checks_never_see_a_mixed_config(b: TestBackend) {
    let clock = start();
    let limiter = limiter(&b, limits(5, 6, 7, MINUTE), &clock).await;
    let new = config(&b, limits(50, 60, 70, MINUTE).headers(HeaderStyle::Ietf));
    let seen = Arc::new(AtomicUsize::new(0));
    let swapped = Arc::new(AtomicBool::new(false));
    let decisions = Arc::new(Mutex::new(Vec::new()));
    // Each task checks until it has begun 10 checks after the swap: at least 80 checks run
    // wholly under the new config, enough to fill its user tier of 50.
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let limiter = limiter.clone();
            let (seen, swapped, decisions) = (seen.clone(), swapped.clone(), decisions.clone());
            tokio::spawn(async move {
                let mut after_swap = 0;
                while after_swap < 10 {
                    let after = swapped.load(Ordering::Acquire);
                    let d = limiter.check("alice", "/a").await;
                    after_swap += usize::from(after);
                    seen.fetch_add(1, Ordering::Relaxed);
                    decisions.lock().unwrap().push((after, d));
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    while seen.load(Ordering::Relaxed) < 12 {
        tokio::task::yield_now().await;
    }
    limiter.reconfigure(new).expect("same store settings");
    swapped.store(true, Ordering::Release);
    for task in tasks {
        task.await.unwrap();
    }
    let decisions = decisions.lock().unwrap();
    assert!(decisions.len() >= 12 + 80, "{} checks", decisions.len());
    let limits = |d: &tiered_ratelimit::Decision| {
        [Tier::User, Tier::Endpoint, Tier::Global].map(|t| d.limit(t).unwrap_or(0))
    };
    let (mut old_admitted, mut new_admitted, mut new_seen) = (0, 0, 0);
    for (after_swap, d) in decisions.iter() {
        match limits(d) {
            [5, 6, 7] if *after_swap => panic!("a check begun after the swap saw the old config"),
            [5, 6, 7] => old_admitted += usize::from(d.allowed()),
            [50, 60, 70] => {
                new_seen += 1;
                new_admitted += usize::from(d.allowed());
            }
            mixed => panic!("a check saw a mixed config: {mixed:?} in {d:?}"),
        }
        assert!(d.remaining() < limits(d)[0], "{d:?}");
    }
    assert!(old_admitted <= 5, "old limits admitted {old_admitted}");
    assert!(new_seen >= 80, "{new_seen} checks under the new config");
    let before_swap = decisions
        .iter()
        .filter(|(_, d)| d.limit(Tier::User) == Some(5));
    assert!(before_swap.count() > 0, "no check ran before the swap");
    assert_eq!(
        old_admitted + new_admitted,
        50,
        "the new user limit, exactly"
    );
    assert_eq!(limiter.config().headers(), HeaderStyle::Ietf);
}

/// Entries recorded before the change count under the new limits and the new window.
pub async fn recorded_entries_count_under_the_new_config(b: TestBackend) {
    let clock = start();
    let limiter = limiter(&b, limits(3, 0, 0, MINUTE), &clock).await;
    for _ in 0..3 {
        assert!(limiter.check("alice", "/a").await.allowed());
    }
    assert!(!limiter.check("alice", "/a").await.allowed());
    // A lower limit: 3 used of 2, denied.
    limiter
        .reconfigure(config(&b, limits(2, 0, 0, MINUTE)))
        .unwrap();
    let d = limiter.check("alice", "/a").await;
    assert_eq!(
        (d.blocked_by(), d.limit(Tier::User)),
        (Some(Tier::User), Some(2))
    );
    // A higher one: 3 used of 5, two more.
    limiter
        .reconfigure(config(&b, limits(5, 0, 0, MINUTE)))
        .unwrap();
    assert!(limiter.check("alice", "/a").await.allowed());
    assert_eq!(limiter.usage("alice", "/a").await.unwrap().tiers[0].used, 4);
    // A shorter window: the entries are 11 s old, outside 10 s, no longer counted.
    clock.advance(11 * SEC);
    limiter
        .reconfigure(config(&b, limits(1, 0, 0, 10 * SEC)))
        .unwrap();
    let d = limiter.check("alice", "/a").await;
    assert!(d.allowed(), "{d:?}");
    assert_eq!(d.window(), 10 * SEC);
    assert!(!limiter.check("alice", "/a").await.allowed());
}

/// docs/OPERATIONS.md, what a reconfiguration may give back (an outside review's two cases):
/// a route's own user limit counts in a bucket of its own, so adding one starts that route's
/// user counts afresh; and a check under a shorter window drops older entries for good, so a
/// window shortened and lengthened again no longer counts them.
pub async fn what_a_new_route_limit_or_a_window_there_and_back_gives_back(b: TestBackend) {
    let clock = start();
    let limiter = limiter(&b, limits(3, 0, 0, MINUTE), &clock).await;
    for _ in 0..3 {
        assert!(limiter.check("alice", "/login").await.allowed());
    }
    assert!(!limiter.check("alice", "/login").await.allowed());
    let route = tiered_ratelimit::RouteLimits {
        user_limit: Some(2),
        endpoint_limit: None,
    };
    limiter
        .reconfigure(config(&b, limits(3, 0, 0, MINUTE).route("/login", route)))
        .unwrap();
    assert!(limiter.check("alice", "/login").await.allowed());
    assert!(limiter.check("alice", "/login").await.allowed());
    assert!(!limiter.check("alice", "/login").await.allowed());
    // The general bucket is untouched: still full for alice elsewhere.
    assert!(!limiter.check("alice", "/other").await.allowed());

    // 60 s -> 1 s -> 60 s: bob's two entries, 2 s old, are dropped by the check under 1 s.
    limiter
        .reconfigure(config(&b, limits(2, 0, 0, MINUTE)))
        .unwrap();
    assert!(limiter.check("bob", "/a").await.allowed());
    assert!(limiter.check("bob", "/a").await.allowed());
    assert!(!limiter.check("bob", "/a").await.allowed());
    clock.advance(2 * SEC);
    limiter
        .reconfigure(config(&b, limits(2, 0, 0, SEC)))
        .unwrap();
    assert!(limiter.check("bob", "/a").await.allowed());
    limiter
        .reconfigure(config(&b, limits(2, 0, 0, MINUTE)))
        .unwrap();
    assert!(
        limiter.check("bob", "/a").await.allowed(),
        "the old two are gone"
    );
    assert!(!limiter.check("bob", "/a").await.allowed());

    // The same for a key denied as a request's first tier and trimmed as a later one: an
    // anonymous request's first tier is the endpoint.
    limiter
        .reconfigure(config(&b, limits(5, 2, 0, MINUTE)))
        .unwrap();
    let anonymous = || CheckRequest::new(UserKey::Anonymous, Some("/e"));
    assert!(limiter.check_request(anonymous()).await.allowed());
    assert!(limiter.check_request(anonymous()).await.allowed());
    assert!(!limiter.check_request(anonymous()).await.allowed());
    clock.advance(2 * SEC);
    limiter
        .reconfigure(config(&b, limits(5, 2, 0, SEC)))
        .unwrap();
    assert!(limiter.check("carol", "/e").await.allowed());
    limiter
        .reconfigure(config(&b, limits(5, 2, 0, MINUTE)))
        .unwrap();
    let d = limiter.check_request(anonymous()).await;
    assert!(d.allowed(), "only carol's entry counts: {d:?}");
    assert!(!limiter.check_request(anonymous()).await.allowed());
}

/// A setting the store was built from cannot change: refused, naming it, the running config
/// kept.
pub async fn store_settings_need_a_new_limiter(b: TestBackend) {
    let clock = start();
    let limiter = limiter(&b, limits(3, 0, 0, MINUTE), &clock).await;
    let refused = |builder: RateLimitConfigBuilder| {
        let error = limiter.reconfigure(config(&b, builder)).unwrap_err();
        assert!(error.to_string().contains("new limiter"), "{error}");
        error.field()
    };
    let other_url = limits(9, 0, 0, MINUTE).redis_url("redis://127.0.0.1:1");
    let error = limiter.reconfigure(other_url.build().unwrap()).unwrap_err();
    assert_eq!(error.field(), "redis.url", "{error}");
    let other_prefix = config_prefixed(&b, limits(9, 0, 0, MINUTE), Some("other"));
    let error = limiter.reconfigure(other_prefix).unwrap_err();
    assert_eq!(error.field(), "key_prefix", "{error}");
    assert_eq!(
        refused(limits(9, 0, 0, MINUTE).max_tracked_keys(7)),
        "max_tracked_keys"
    );
    if !matches!(b, TestBackend::Memory) {
        // Each Redis setting is named, not only `redis` (the test's config sets the timeouts
        // and the time source itself).
        let sharded = limits(9, 0, 0, MINUTE).redis_global_shards(2);
        assert_eq!(refused(sharded), "redis.global_shards");
        let recovering =
            limits(9, 0, 0, MINUTE).redis_recovery(Duration::from_secs(1), Duration::from_secs(2));
        assert_eq!(refused(recovering), "redis.recovery");
    }
    assert_eq!(limiter.config().user_limit(), 3);
    assert_eq!(
        limiter.check("alice", "/a").await.limit(Tier::User),
        Some(3)
    );
}

/// Plans resolved before the change are resolved again: the old plan limits are not reused.
pub async fn plans_follow_the_new_config(b: TestBackend) {
    let clock = start();
    let builder = |pro: u64| limits(1, 0, 0, MINUTE).plan("pro", pro);
    let limiter = tiered_ratelimit::RateLimiter::builder(config(&b, builder(2)))
        .clock(clock.clone())
        .plan_resolver(Duration::from_secs(3_600), |_| Some("pro".to_owned()))
        .build();
    limiter.wait_connected().await;
    assert_eq!(
        limiter.check("alice", "/a").await.limit(Tier::User),
        Some(2)
    );
    limiter.reconfigure(config(&b, builder(4))).unwrap();
    let clone = limiter.clone();
    assert_eq!(clone.check("alice", "/a").await.limit(Tier::User), Some(4));
}

/// A layer built from the limiter answers with the new limits and header style.
pub async fn layers_see_the_change(b: TestBackend) {
    use tower::ServiceExt;
    let clock = start();
    let limiter = limiter(&b, limits(1, 0, 0, MINUTE), &clock).await;
    let app = axum::Router::new()
        .route("/a", axum::routing::get(|| async { "ok" }))
        .route_layer(RateLimitLayer::from_limiter(limiter.clone()).user_id_header("x-user"));
    let get = || {
        http::Request::get("/a")
            .header("x-user", "alice")
            .body(axum::body::Body::empty())
            .unwrap()
    };
    let first = app.clone().oneshot(get()).await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["x-ratelimit-remaining"], "0");
    assert_eq!(app.clone().oneshot(get()).await.unwrap().status(), 429);
    limiter
        .reconfigure(config(
            &b,
            limits(3, 0, 0, MINUTE).headers(HeaderStyle::Ietf),
        ))
        .unwrap();
    let after = app.oneshot(get()).await.unwrap();
    assert_eq!(after.status(), 200);
    assert!(
        after.headers().get("x-ratelimit-limit").is_none(),
        "{:?}",
        after.headers()
    );
    let policy = after.headers()["ratelimit-policy"].to_str().unwrap();
    assert!(policy.contains("q=3"), "{policy}");
}

crate::on_every_backend!(reconfigure, threaded:
    concurrent_checks_never_see_a_mixed_config,
    recorded_entries_count_under_the_new_config,
    what_a_new_route_limit_or_a_window_there_and_back_gives_back,
    store_settings_need_a_new_limiter,
    plans_follow_the_new_config,
    layers_see_the_change,
);
