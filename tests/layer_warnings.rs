//! What the layer logs for the operator's usual mistakes, in a test binary of its own (the
//! "once per process" warnings keep their state in statics): serving without `ConnectInfo`,
//! trusting every address as a proxy, the layer outside the router; and what the in-memory store logs when its key cap
//! denies new keys.

mod common;

use std::convert::Infallible;

use http::{Request, Response, StatusCode};
use http_body_util::Full;
use tiered_ratelimit::{IpNet, RateLimitConfig, RateLimitLayer};
use tower::ServiceExt;

use common::logs::Logs;

fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
    common::logs::capture("tiered_ratelimit=warn")
}

fn text(logs: &Logs) -> String {
    logs.text()
}

/// Without `ConnectInfo` (and without a user id) the user tier cannot apply: the requests go
/// through with no rate-limit header, and one warning (not one per request) names the fix.
#[tokio::test(flavor = "current_thread")]
async fn serving_without_connect_info_warns_once_and_sends_no_useless_header() {
    let (logs, _guard) = capture();
    let config = RateLimitConfig::builder().user_limit(1).build().unwrap();
    let svc = tower::service_fn(|_req: Request<String>| async {
        Ok::<_, Infallible>(Response::new(Full::new(bytes::Bytes::from_static(b"ok"))))
    });
    let svc = tower::Layer::layer(&RateLimitLayer::new(config), svc);
    for _ in 0..3 {
        let response = svc
            .clone()
            .oneshot(Request::new(String::new()))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.headers().get("x-ratelimit-remaining").is_none());
        assert!(response.headers().get("retry-after").is_none());
    }
    let text = text(&logs);
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(
        warnings[0].contains("into_make_service_with_connect_info"),
        "{text}"
    );
}

/// Trusting `0.0.0.0/0` lets every client name its own address: the layer says so, as an error.
#[test]
fn trusting_every_address_is_logged_as_an_error() {
    let (logs, _guard) = capture();
    let config = RateLimitConfig::builder().user_limit(5).build().unwrap();
    let _layer = RateLimitLayer::new(config.clone())
        .trusted_proxies(["10.0.0.0/8".parse::<IpNet>().unwrap()]);
    assert!(!text(&logs).contains("ERROR"), "{}", text(&logs));
    let _layer = RateLimitLayer::new(config.clone()).trusted_proxies(
        ["10.0.0.0/8", "11.0.0.0/8", "::ffff:12.0.0.0/104"].map(|n| n.parse::<IpNet>().unwrap()),
    );
    assert!(!text(&logs).contains("ERROR"), "{}", text(&logs));
    // Every address in one network, or in several that cover a whole family together (an
    // outside review: two halves passed the check made one network at a time).
    let everything: [&[&str]; 5] = [
        &["0.0.0.0/0"],
        &["::/0"],
        &["0.0.0.0/1", "128.0.0.0/1"],
        &["::/1", "10.0.0.0/8", "8000::/1"],
        &["::ffff:0.0.0.0/97", "128.0.0.0/1"],
    ];
    for nets in everything {
        let _layer = RateLimitLayer::new(config.clone())
            .trusted_proxies(nets.iter().map(|n| n.parse::<IpNet>().unwrap()));
    }
    let text = text(&logs);
    let errors: Vec<&str> = text.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(errors.len(), 5, "{text}");
    assert!(
        errors.iter().all(|e| e.contains("trusts every client")),
        "{text}"
    );
}

/// At the key cap, with every key live, new keys are denied as their tier's denials (a new
/// endpoint key as "endpoint", though the route is untouched): the decision cannot tell that
/// apart from a full tier, so the store says so in the log: one warning per 10 s of flood,
/// not one per request.
#[tokio::test(flavor = "current_thread")]
async fn a_key_cap_that_denies_new_keys_is_logged_at_most_once_per_ten_seconds() {
    use std::time::Duration;
    use tiered_ratelimit::store::MemoryStore;
    use tiered_ratelimit::{ManualClock, RateLimiter, Tier};
    let (logs, _guard) = capture();
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let store = MemoryStore::with_max_keys(4);
    let config = RateLimitConfig::builder()
        .window(Duration::from_secs(60))
        .user_limit(5)
        .endpoint_limit(100)
        .build()
        .unwrap();
    let limiter = RateLimiter::builder(config)
        .clock(clock.clone())
        .store(store.clone())
        .build();
    assert!(limiter.check("alice", "/a").await.allowed());
    for i in 0..2 {
        assert!(limiter.check(&format!("flood{i}"), "/a").await.allowed());
    }
    // The cap (4 keys: three users, one endpoint) is reached and every key is live.
    assert!(text(&logs).is_empty(), "{}", text(&logs));
    let d = limiter.check("alice", "/untouched").await;
    assert_eq!(d.blocked_by(), Some(Tier::Endpoint));
    for i in 0..1_000 {
        clock.advance(Duration::from_millis(5)); // 5 s in all: sweeps are due again and again
        assert!(!limiter.check(&format!("new{i}"), "/a").await.allowed());
    }
    let logged = text(&logs);
    assert_eq!(logged.matches("key cap is reached").count(), 1, "{logged}");
    assert!(logged.contains("max_tracked_keys=4"), "{logged}");
    assert!(logged.contains("WARN"), "{logged}");
    clock.advance(Duration::from_secs(6));
    assert!(!limiter.check("later", "/a").await.allowed());
    assert_eq!(
        text(&logs).matches("key cap is reached").count(),
        2,
        "{}",
        text(&logs)
    );
}

/// The layer wrapped around the whole `Router` (not `route_layer`) sees no `MatchedPath`: every
/// request shares the unmatched endpoint key and no route's own limits apply. An outside review
/// found `/login`'s user limit of 2 admitting 10 of 10 that way, with nothing logged. The
/// limits stay as they are (the layer cannot know the route); one WARN says why.
#[tokio::test(flavor = "current_thread")]
async fn a_layer_outside_the_router_with_route_limits_warns_once() {
    use tiered_ratelimit::RouteLimits;
    let (logs, _guard) = capture();
    let config = RateLimitConfig::builder()
        .user_limit(100)
        .route(
            "/login",
            RouteLimits {
                user_limit: Some(2),
                endpoint_limit: None,
            },
        )
        .build()
        .unwrap();
    let layer = RateLimitLayer::new(config.clone()).user_id_header("x-user-id");
    let inside = axum::Router::new()
        .route("/login", axum::routing::post(|| async { "ok" }))
        .route_layer(layer.clone());
    let mut admitted = 0;
    for _ in 0..5 {
        let request = Request::post("/login")
            .header("x-user-id", "mallory")
            .body(axum::body::Body::empty())
            .unwrap();
        let response = inside.clone().oneshot(request).await.unwrap();
        admitted += usize::from(response.status() == StatusCode::OK);
    }
    assert_eq!(admitted, 2, "under route_layer the route's limit holds");
    assert!(!text(&logs).contains("MatchedPath"), "{}", text(&logs));

    // Under `Router::layer` a 404 has no MatchedPath either, but matched requests do: no
    // warning, however many 404s.
    let router_layer = axum::Router::new()
        .route("/login", axum::routing::post(|| async { "ok" }))
        .layer(RateLimitLayer::new(config.clone()).user_id_header("x-user-id"));
    let post = |path: &str| {
        Request::post(path)
            .header("x-user-id", "eve")
            .body(axum::body::Body::empty())
            .unwrap()
    };
    assert_eq!(
        router_layer
            .clone()
            .oneshot(post("/login"))
            .await
            .unwrap()
            .status(),
        200
    );
    for i in 0..40 {
        let response = router_layer
            .clone()
            .oneshot(post(&format!("/nope{i}")))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
    }
    assert!(!text(&logs).contains("MatchedPath"), "{}", text(&logs));

    // Wrapped around the Router from outside: no request carries it. One warning, from this
    // layer, though another layer of the process was placed right.
    let outside = tower::Layer::layer(
        &RateLimitLayer::new(config).user_id_header("x-user-id"),
        axum::Router::new().route("/login", axum::routing::post(|| async { "ok" })),
    );
    // README: the warning comes "once 16 requests have reached it and none carried
    // `MatchedPath`": not after 15, at the 16th, and never again.
    let warned = || text(&logs).matches("MatchedPath").count();
    for n in 1..=40 {
        let response = outside.clone().oneshot(post("/login")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(warned(), usize::from(n >= 16), "after {n} requests");
    }
    let text = text(&logs);
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains("MatchedPath")).collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(
        warnings[0].contains("WARN") && warnings[0].contains("route_layer"),
        "{text}"
    );
}

/// A route template axum 0.8 never names (0.7's `:id`, no leading `/`) is accepted, since a
/// custom endpoint closure may name any string, but each is warned about where a limiter takes
/// it, at build and at reconfigure; a template axum names is not (an outside audit: `/items/:id`
/// with `user_limit = 1` was silently never applied).
#[test]
fn route_templates_axum_never_names_are_warned_about() {
    use tiered_ratelimit::{RateLimiter, RouteLimits};
    let (logs, _guard) = capture();
    let one = RouteLimits {
        user_limit: Some(1),
        endpoint_limit: None,
    };
    let config = RateLimitConfig::builder()
        .user_limit(2)
        .route("/api/v1/items/:id", one)
        .route("/api/v1/items/{id}", one)
        .build()
        .unwrap();
    let limiter = RateLimiter::builder(config).build();
    let text = text(&logs);
    assert_eq!(text.matches("WARN").count(), 1, "{text}");
    assert!(
        text.contains("/api/v1/items/:id") && text.contains("{id}"),
        "{text}"
    );
    let config = RateLimitConfig::builder()
        .user_limit(2)
        .route("api/v1/login", one)
        .build()
        .unwrap();
    limiter.reconfigure(config).unwrap();
    let text = logs.text();
    assert_eq!(text.matches("WARN").count(), 2, "{text}");
    assert!(text.contains("does not start with `/`"), "{text}");
}
