//! A hostile review of blocks and the admin routes: each test is one finding of that review,
//! written to fail on the defect it found, and now the guard that it stays fixed.
#![cfg(all(feature = "admin", feature = "redis"))]

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use http::{Request, StatusCode};
use tiered_ratelimit::{
    admin, BlockError, BlockTarget, ManualClock, RateLimitConfigBuilder, RateLimitLayer,
    RateLimiter, RouteLimits, Tier, MAX_BLOCK,
};
use tower::ServiceExt;

use crate::common::{impatient_limiter, limits, RedisCluster, RedisServer, TestBackend};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

fn clock() -> ManualClock {
    ManualClock::at(Duration::from_secs(1_000_000))
}

fn login_override(b: RateLimitConfigBuilder) -> RateLimitConfigBuilder {
    b.route(
        "/login",
        RouteLimits {
            user_limit: Some(5),
            endpoint_limit: None,
        },
    )
}

// ---------------------------------------------------------------------------------------------
// Found (fixed) 1: `unblock` works out the key parts from the *running* configuration. A block set
// while a route had a user limit of its own leaves `<user>@<route>` blocked when that route's
// override is gone at unblock time; when the override comes back, the "unblocked" user is
// refused again, by a block the operator lifted.
// ---------------------------------------------------------------------------------------------

async fn unblock_after_reconfigure_lifts_every_bucket(b: TestBackend) {
    let clock = clock();
    let with = || login_override(limits(100, 100, 0, MINUTE));
    let limiter = b.limiter(with(), &clock).await;
    limiter
        .block(BlockTarget::User("mallory"), HOUR)
        .await
        .unwrap();
    assert!(limiter.check("mallory", "/login").await.by_block());

    // The operator drops the /login override, then lifts the block.
    limiter
        .reconfigure(b.config(limits(100, 100, 0, MINUTE)))
        .unwrap();
    limiter.unblock(BlockTarget::User("mallory")).await.unwrap();
    assert!(limiter.check("mallory", "/items").await.allowed());

    // The override comes back: mallory was unblocked, yet /login still refuses her.
    limiter.reconfigure(b.config(with())).unwrap();
    let d = limiter.check("mallory", "/login").await;
    assert!(
        d.allowed(),
        "unblocked user still refused on /login by the leftover `mallory@/login` block: {d:?}"
    );
}

#[tokio::test]
async fn memory_unblock_after_reconfigure_lifts_every_bucket() {
    unblock_after_reconfigure_lifts_every_bucket(TestBackend::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_unblock_after_reconfigure_lifts_every_bucket() {
    unblock_after_reconfigure_lifts_every_bucket(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_unblock_after_reconfigure_lifts_every_bucket() {
    unblock_after_reconfigure_lifts_every_bucket(TestBackend::cluster()).await;
}

// ---------------------------------------------------------------------------------------------
// Found (fixed) by a later audit: the empty user id had an empty key part, so its per-route
// bucket (`@/login`) took an address's form. Unblocking it lifted every address's block on
// memory (the prefix `@`), and on Redis left its own `/login` bucket blocked. Its key part is
// now `%` (src/key.rs).
// ---------------------------------------------------------------------------------------------

async fn unblocking_the_empty_user_lifts_its_buckets_and_no_address(b: TestBackend) {
    let clock = clock();
    let limiter = b
        .limiter(login_override(limits(100, 100, 0, MINUTE)), &clock)
        .await;
    let ip: IpAddr = "192.0.2.7".parse().unwrap();
    limiter.block(BlockTarget::Ip(ip), HOUR).await.unwrap();
    limiter.block(BlockTarget::User(""), HOUR).await.unwrap();
    for route in ["/items", "/login"] {
        assert!(limiter.check("", route).await.by_block(), "{route}");
    }
    limiter.unblock(BlockTarget::User("")).await.unwrap();
    for route in ["/items", "/login"] {
        let d = limiter.check("", route).await;
        assert!(d.allowed(), "the empty user on {route}, unblocked: {d:?}");
        let d = limiter
            .check_request(tiered_ratelimit::CheckRequest::new(
                tiered_ratelimit::UserKey::Ip(ip),
                Some(route),
            ))
            .await;
        assert!(d.by_block(), "the address's block stays, on {route}: {d:?}");
    }
}

#[tokio::test]
async fn memory_unblocking_the_empty_user_lifts_its_buckets_and_no_address() {
    unblocking_the_empty_user_lifts_its_buckets_and_no_address(TestBackend::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_unblocking_the_empty_user_lifts_its_buckets_and_no_address() {
    unblocking_the_empty_user_lifts_its_buckets_and_no_address(TestBackend::redis()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_unblocking_the_empty_user_lifts_its_buckets_and_no_address() {
    unblocking_the_empty_user_lifts_its_buckets_and_no_address(TestBackend::cluster()).await;
}

/// `BlockTarget::Net` is no range block (OPERATIONS.md): an IPv6 network of another length than
/// the layer's grouping blocks the one bucket at its base address, and no other client of the
/// range. An audit found the docs saying it stopped nothing.
#[tokio::test]
async fn an_ipv6_network_of_another_length_blocks_only_the_bucket_at_its_base() {
    let b = TestBackend::memory();
    let limiter = b.limiter(limits(100, 100, 0, MINUTE), &clock()).await;
    let net: ipnet::IpNet = "2001:db8::/32".parse().unwrap();
    limiter.block(BlockTarget::Net(net), HOUR).await.unwrap();
    // The layer keys an IPv6 client by its /64 (the address masked to it).
    let check = |bucket: &'static str| {
        let ip: IpAddr = bucket.parse().unwrap();
        let limiter = limiter.clone();
        async move {
            limiter
                .check_request(tiered_ratelimit::CheckRequest::new(
                    tiered_ratelimit::UserKey::Ip(ip),
                    Some("/items"),
                ))
                .await
        }
    };
    assert!(check("2001:db8::").await.by_block(), "the /64 at the base");
    for other in ["2001:db8:0:1::", "2001:db8:ffff:ffff::"] {
        assert!(
            check(other).await.allowed(),
            "{other}/64, in the /32 but not at its base"
        );
    }
    // A longer network than the grouping blocks nothing unless its base is a bucket's.
    let host: ipnet::IpNet = "2001:db8:0:7::5/128".parse().unwrap();
    limiter.block(BlockTarget::Net(host), HOUR).await.unwrap();
    assert!(
        check("2001:db8:0:7::").await.allowed(),
        "the /64 holding the /128"
    );
}

// ---------------------------------------------------------------------------------------------
// Found (fixed) 2: `unblock` is refused with `TierOff` when the tier was switched off after the block:
// the block cannot be lifted at all, and it comes back with the tier.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn unblock_works_after_the_tier_was_switched_off() {
    let b = TestBackend::memory();
    let clock = clock();
    let limiter = b.limiter(limits(5, 100, 0, MINUTE), &clock).await;
    limiter
        .block(BlockTarget::User("mallory"), HOUR)
        .await
        .unwrap();
    limiter
        .reconfigure(b.config(limits(0, 100, 0, MINUTE)))
        .unwrap();
    let lifted = limiter.unblock(BlockTarget::User("mallory")).await;
    limiter
        .reconfigure(b.config(limits(5, 100, 0, MINUTE)))
        .unwrap();
    let d = limiter.check("mallory", "/items").await;
    assert!(
        lifted.is_ok() && d.allowed(),
        "unblock answered {lifted:?}; afterwards: {d:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Found (fixed) 3: `BlockTarget::Ip` always masks IPv6 to /64, but the layer groups by its own
// `ipv6_prefix` (48 here). The block lands (Ok, and 200 from the admin route) and stops nothing.
// ---------------------------------------------------------------------------------------------

fn app_with(limiter: &RateLimiter, layer: RateLimitLayer) -> Router {
    let _ = limiter;
    Router::new()
        .route("/items", get(|| async { "items" }))
        .route_layer(layer)
}

async fn get_from(app: &Router, peer: &str, path: &str) -> http::Response<Body> {
    let peer: SocketAddr = peer.parse().unwrap();
    let mut req = Request::get(path).body(Body::empty()).unwrap();
    req.extensions_mut().insert(ConnectInfo(peer));
    app.clone().oneshot(req).await.unwrap()
}

#[tokio::test]
async fn a_net_block_matches_a_layer_grouping_ipv6_by_48() {
    let limiter = RateLimiter::new(limits(100, 100, 0, MINUTE).build().unwrap());
    let layer = RateLimitLayer::from_limiter(limiter.clone()).ipv6_prefix(48);
    let app = app_with(&limiter, layer);
    // `Ip` blocks the /64 the layer groups by default: with a /48 layer that is no bucket.
    let ip: IpAddr = "2001:db8:1:2::7".parse().unwrap();
    limiter.block(BlockTarget::Ip(ip), HOUR).await.unwrap();
    let resp = get_from(&app, "[2001:db8:1:2::7]:4000", "/items").await;
    assert_eq!(resp.status(), StatusCode::OK, "documented: Ip is a /64");
    // `Net` names the layer's bucket: the whole /48 is refused, whichever address.
    let net = "2001:db8:1::/48".parse().unwrap();
    limiter.block(BlockTarget::Net(net), HOUR).await.unwrap();
    for peer in ["[2001:db8:1:2::7]:4000", "[2001:db8:1:ffff::1]:4000"] {
        let resp = get_from(&app, peer, "/items").await;
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS, "{peer}");
    }
    let resp = get_from(&app, "[2001:db8:2::1]:4000", "/items").await;
    assert_eq!(resp.status(), StatusCode::OK, "another /48");
}

// ---------------------------------------------------------------------------------------------
// Found (fixed) 4: `GET /admin/usage?ip=ADDR` keys the address as given, not as the layer (and
// `BlockTarget::Ip`) do: an IPv6 client's /64 and an IPv4-mapped address's IPv4 form. The
// operator reads an empty bucket for a client that is at its limit.
// ---------------------------------------------------------------------------------------------

async fn admin_get(router: &Router, uri: &str) -> (StatusCode, serde_json::Value) {
    let req = Request::get(uri).body(Body::empty()).unwrap();
    let resp = router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    (status, serde_json::from_slice(&body).unwrap_or_default())
}

#[tokio::test]
async fn admin_usage_by_ip_reads_the_bucket_the_layer_counts() {
    let limiter = RateLimiter::new(limits(3, 0, 0, MINUTE).build().unwrap());
    let app = app_with(&limiter, RateLimitLayer::from_limiter(limiter.clone()));
    let admin = admin::router(limiter.clone());
    for _ in 0..3 {
        let r = get_from(&app, "[2001:db8::7]:4000", "/items").await;
        assert_eq!(r.status(), 200);
    }
    for _ in 0..2 {
        let r = get_from(&app, "[::ffff:192.0.2.9]:4000", "/items").await;
        assert_eq!(r.status(), 200);
    }
    let used = |v: &serde_json::Value| v.to_string();
    let (s6, v6) = admin_get(&admin, "/usage?ip=2001:db8::7").await;
    let (s4, v4) = admin_get(&admin, "/usage?ip=::ffff:192.0.2.9").await;
    assert_eq!((s6, s4), (StatusCode::OK, StatusCode::OK));
    assert!(
        used(&v6).contains("\"used\":3") && used(&v4).contains("\"used\":2"),
        "usage of the clients the layer counted: v6 {v6} / mapped v4 {v4}"
    );
}

// ---------------------------------------------------------------------------------------------
// Found (fixed) 5: the admin POST routes take any content type. A `text/plain` body is a CORS
// "simple" request: a page on another origin can `fetch(.., {mode: "no-cors", body})` the block
// route of an app whose admin routes sit behind cookie authentication (the module docs'
// "behind its own authentication"). Expected 415 for anything but `application/json`.
// Also: an oversized body is a plain-text 413, not the problem+json every error promises.
// ---------------------------------------------------------------------------------------------

async fn admin_post(
    router: &Router,
    uri: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> (StatusCode, String) {
    let mut req = Request::post(uri);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let resp = router
        .clone()
        .oneshot(req.body(Body::from(body)).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let kind = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, kind)
}

#[tokio::test]
async fn admin_posts_refuse_bodies_not_sent_as_json() {
    let limiter = RateLimiter::new(limits(100, 0, 0, MINUTE).build().unwrap());
    let admin = admin::router(limiter.clone());
    let body = br#"{"user":"victim","seconds":31622400}"#.to_vec();
    let (status, _) = admin_post(&admin, "/block", Some("text/plain"), body.clone()).await;
    let (status_form, _) = admin_post(
        &admin,
        "/block",
        Some("application/x-www-form-urlencoded"),
        body.clone(),
    )
    .await;
    // A body sent with no type at all is no JSON either (a page can send one without a
    // preflight).
    let (status_none, _) = admin_post(&admin, "/block", None, body).await;
    let victim_blocked = limiter.check("victim", "/x").await.by_block();
    assert_eq!(
        (status, status_form, status_none, victim_blocked),
        (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            false
        ),
        "a simple (CORS-preflight-free) request blocked a user for a year"
    );
}

#[tokio::test]
async fn admin_oversized_body_is_problem_json() {
    let limiter = RateLimiter::new(limits(100, 0, 0, MINUTE).build().unwrap());
    let admin = admin::router(limiter);
    let mut body = br#"{"user":""#.to_vec();
    body.extend(std::iter::repeat_n(b'a', 3 << 20));
    body.extend(br#"","seconds":5}"#);
    let (status, kind) = admin_post(&admin, "/block", Some("application/json"), body).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        kind, "application/problem+json",
        "every error is problem+json"
    );
}

// ---------------------------------------------------------------------------------------------
// Found (fixed) 6: a block sent while Redis is paused times out: `block` returns `Err` (the admin
// route's 503 says "the block did not land"), yet the SET was queued and lands on resume. The
// user is then blocked for the full duration though the operator was told it failed. (The same
// for unblock: "failed", then lifted.)
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_block_says_it_may_land_and_repeating_settles_it() {
    let server = RedisServer::start();
    let limiter = impatient_limiter(&server).await;
    let admin = admin::router(limiter.clone());
    // The admin route's answer to `req` while Redis is paused: its status and problem detail.
    let paused = |req: Request<Body>| {
        let (admin, server) = (admin.clone(), &server);
        async move {
            server.pause();
            let resp = admin.oneshot(req).await.unwrap();
            server.resume();
            let status = resp.status();
            let bytes = axum::body::to_bytes(resp.into_body(), 1 << 16)
                .await
                .unwrap();
            let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            (status, body["detail"].as_str().unwrap().to_owned())
        }
    };
    let req = Request::post("/block")
        .header("content-type", "application/json")
        .body(Body::from(r#"{"user":"mallory","seconds":3600}"#))
        .unwrap();
    let (status, detail) = paused(req).await;
    // The honest answer: a 503 that says the change may still land, and is safe to repeat.
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(detail.contains("may still land later") && detail.contains("safe to repeat"));
    // A read that times out changed nothing, and says so (not "may not have landed").
    let req = Request::get("/usage?user=mallory")
        .body(Body::empty())
        .unwrap();
    let (status, detail) = paused(req).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        detail.contains("Nothing was changed") && !detail.contains("land"),
        "{detail}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Repeating the unblock (or the block) settles it, whatever the paused commands did (a
    // repeat that meets the connection still catching up is itself repeated, as a client would).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match limiter.unblock(BlockTarget::User("mallory")).await {
            Ok(_) => break,
            Err(e) if std::time::Instant::now() < deadline => {
                eprintln!("unblock repeated: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the unblock never landed: {e}"),
        }
    }
    assert!(limiter.check("mallory", "/items").await.allowed());
}

// ---------------------------------------------------------------------------------------------
// Found (fixed) 7: on a cluster with a sharded global tier, a request is denied by "every shard known
// full" before any block is read: a blocked user gets a plain global denial (by_block false,
// Retry-After up to a window) instead of the block (docs: "Blocks win ... answers before a full
// tier does").
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_block_answers_before_a_full_sharded_global() {
    let cluster = RedisCluster::shared();
    let clock = clock();
    let config = limits(100, 0, 6, MINUTE)
        .key_prefix("attack-shards-block")
        .redis_url(cluster.url())
        .redis_command_timeout(Duration::from_secs(2))
        .redis_time_source(tiered_ratelimit::TimeSource::App)
        .redis_global_shards(3)
        .build()
        .unwrap();
    let limiter = RateLimiter::builder(config).clock(clock.clone()).build();
    limiter.wait_connected().await;
    limiter
        .block(BlockTarget::User("mallory"), HOUR)
        .await
        .unwrap();
    // Others fill the global tier; the walk that finds every shard full remembers it.
    let mut admitted = 0;
    for i in 0..10 {
        clock.advance(Duration::from_millis(1));
        admitted += u32::from(limiter.check(&format!("u{i}"), "/x").await.allowed());
    }
    assert_eq!(admitted, 6);
    let d = limiter.check("mallory", "/x").await;
    assert!(
        d.by_block() && d.blocked_by() == Some(Tier::User) && d.retry_after() > MINUTE,
        "a blocked user answered as a full global tier: {d:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Found (fixed) 8: docs: "an instance meets a block set by another at its next check of that key".
// Another instance that remembers a full window answers its next check from its denial cache
// (by_block false, Retry-After of the window) until the pub/sub `*` arrives.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_instance_refuses_at_its_next_check_and_names_the_block_soon() {
    let server = RedisServer::start();
    let clock = clock();
    let b = TestBackend::Redis(server);
    let a = b.limiter(limits(2, 0, 0, MINUTE), &clock).await;
    let other = b.limiter(limits(2, 0, 0, MINUTE), &clock).await;
    tokio::time::sleep(Duration::from_millis(200)).await; // subscriptions up
    let mut unlabelled = 0;
    for round in 0..20 {
        let user = format!("frank{round}");
        assert!(other.check(&user, "/items").await.allowed());
        assert!(other.check(&user, "/items").await.allowed());
        assert!(!other.check(&user, "/items").await.allowed());
        a.block(BlockTarget::User(&user), HOUR).await.unwrap();
        // Refused at its very next check, always; until the invalidation arrives it may be
        // answered as the full window it remembers (docs/OPERATIONS.md says so).
        let d = other.check(&user, "/items").await;
        assert!(!d.allowed(), "round {round}: {d:?}");
        unlabelled += u32::from(!d.by_block());
        let sent = std::time::Instant::now();
        while !other.check(&user, "/items").await.by_block() {
            // Soon, not at once: a loaded machine's scheduling is in it.
            assert!(sent.elapsed() < Duration::from_secs(5), "round {round}");
            tokio::task::yield_now().await;
        }
    }
    println!("{unlabelled} of 20 next checks answered from the remembered window");
}

// ---------------------------------------------------------------------------------------------
// Found (fixed) 9: `POST /admin/reset` answers 200 `{"reset":..}` when Redis is down (the docs: `503`
// when the store failed); worse, the failed reset swaps the whole limiter to memory, where the
// blocks kept in Redis are no longer seen.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_reset_with_redis_down_is_a_503_and_stays_on_redis() {
    let mut server = RedisServer::start();
    let limiter = impatient_limiter(&server).await;
    let admin = admin::router(limiter.clone());
    server.kill();
    let (status, _) = admin_post(
        &admin,
        "/reset",
        Some("application/json"),
        br#"{"user":"alice"}"#.to_vec(),
    )
    .await;
    assert_eq!(
        (status, limiter.backend()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            tiered_ratelimit::Backend::Redis
        ),
        "reset on a dead Redis"
    );
}

// ---------------------------------------------------------------------------------------------
// Found (fixed) 10: `RateLimiter::block` with a long Duration: memory saturates and blocks "forever",
// Redis refuses (`SET .. PX 9223372036854775807`: invalid expire time) and the block does not
// land. The same call, two answers.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_too_long_block_is_the_same_error_everywhere() {
    let memory = RateLimiter::new(limits(5, 0, 0, MINUTE).build().unwrap());
    let b = TestBackend::redis();
    let redis = b.limiter(limits(5, 0, 0, MINUTE), &clock()).await;
    // The same answer on both: too long is a typed error, the longest block lands on both.
    let long = Duration::from_secs(u64::MAX / 1000);
    for limiter in [&memory, &redis] {
        let err = limiter
            .block(BlockTarget::User("m"), long)
            .await
            .unwrap_err();
        assert!(matches!(err, BlockError::TooLong { .. }), "{err}");
        limiter
            .block(BlockTarget::User("m"), MAX_BLOCK)
            .await
            .unwrap();
        let d = limiter.check("m", "/").await;
        assert!(d.by_block() && d.retry_after() + Duration::from_secs(2) > MAX_BLOCK);
    }
    // Redis keeps the block to the millisecond, rounded up (1 µs is 1 ms, never 0).
    redis
        .block(BlockTarget::User("brief"), Duration::from_micros(1))
        .await
        .unwrap();
    let pttl = b
        .server()
        .unwrap()
        .cli(&["PTTL", "{rate_limit:user:brief}#block"]);
    assert!(["1", "0", "-2"].contains(&pttl.trim()), "{pttl}");
}

// ---------------------------------------------------------------------------------------------
// Probe (not a finding if it passes): without a token, paths the admin router does not serve and
// wrong methods answer like everything else (401), not 404/405 that map the routes.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn without_a_token_unknown_paths_and_methods_are_401_too() {
    let limiter = RateLimiter::new(limits(5, 0, 0, MINUTE).build().unwrap());
    let app = Router::new().nest(
        "/admin",
        admin::require_bearer(admin::router(limiter), "tok"),
    );
    let mut seen = Vec::new();
    for (method, path) in [
        ("GET", "/admin/block"),
        ("GET", "/admin/nope"),
        ("DELETE", "/admin/usage"),
        ("POST", "/admin/usage"),
    ] {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        seen.push((method, path, resp.status().as_u16()));
    }
    assert!(seen.iter().all(|s| s.2 == 401), "{seen:?}");
}
