//! Resets: `reset_user` forgets a user everywhere the running configuration counts it, its
//! general bucket and its bucket on each route with a user limit of its own, on every instance
//! sharing the store. (An audit: the admin API's `POST /reset {"user": ...}` answered 200 and
//! the user stayed refused on such a route, a 429 of a full minute.)

use std::time::Duration;

use tiered_ratelimit::{ManualClock, RouteLimits, Tier};

use crate::common::{limits, TestBackend};

const MINUTE: Duration = Duration::from_secs(60);

pub async fn a_reset_user_is_forgotten_on_routes_with_limits_of_their_own(b: TestBackend) {
    let clock = ManualClock::at(Duration::from_secs(1_000_000));
    let builder = limits(3, 0, 0, MINUTE).route(
        "/api/v1/items/{id}",
        RouteLimits {
            user_limit: Some(2),
            endpoint_limit: None,
        },
    );
    let limiter = crate::limiter(&b, builder, &clock).await;
    for (route, limit) in [("/api/v1/items/{id}", 2), ("/api/v1/items", 3)] {
        for _ in 0..limit {
            assert!(limiter.check("eve", route).await.allowed());
        }
        let d = limiter.check("eve", route).await;
        assert_eq!(d.blocked_by(), Some(Tier::User), "{route}: {d:?}");
    }
    limiter.reset_user("eve").await.expect("reset");
    for (route, limit) in [("/api/v1/items/{id}", 2), ("/api/v1/items", 3)] {
        let d = limiter.check("eve", route).await;
        assert!(d.allowed(), "{route} after the reset: {d:?}");
        assert_eq!(d.remaining(), limit - 1, "{route}: a fresh bucket");
    }
    // Another user's buckets are untouched.
    assert!(limiter.check("bob", "/api/v1/items/{id}").await.allowed());
    assert!(limiter.check("bob", "/api/v1/items/{id}").await.allowed());
    limiter.reset_user("eve").await.expect("reset");
    assert!(!limiter.check("bob", "/api/v1/items/{id}").await.allowed());
}

crate::on_every_backend!(reset:
    a_reset_user_is_forgotten_on_routes_with_limits_of_their_own,
);
