//! Blocks (issue 13, item 3): a user, an address (its /64 for IPv6) or a route refused for a
//! while on every instance sharing the store, with `Retry-After` the block's time left and a
//! 429 that says it is a block; blocks end by themselves and leave nothing behind.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use tiered_ratelimit::store::MemoryStore;
use tiered_ratelimit::{
    BlockError, BlockTarget, CheckRequest, ManualClock, RateLimitConfigBuilder, RateLimitLayer,
    RateLimiter, RouteLimits, Tier, UserKey,
};

use crate::common::{limits, TestBackend};
use crate::config;

const MINUTE: Duration = Duration::from_secs(60);

/// Two limiters (two app instances) on `b`'s one store: on memory, one `MemoryStore` shared.
async fn instances(
    b: &TestBackend,
    builder: impl Fn() -> RateLimitConfigBuilder,
    clock: &ManualClock,
) -> (RateLimiter, RateLimiter, Option<MemoryStore>) {
    let memory = matches!(b, TestBackend::Memory).then(MemoryStore::new);
    let one = || {
        let mut l = RateLimiter::builder(config(b, builder())).clock(clock.clone());
        if let Some(store) = &memory {
            l = l.memory_store(store.clone());
        }
        l.build()
    };
    let (a, other) = (one(), one());
    a.wait_connected().await;
    other.wait_connected().await;
    assert_eq!(a.backend(), b.expected_backend());
    (a, other, memory)
}

fn clock() -> ManualClock {
    ManualClock::at(Duration::from_secs(1_000_000))
}

/// Whether `user` on `route` is refused by a block of `tier` with about `left` to go (Redis
/// counts the block on its own clock, in milliseconds: a little has passed).
async fn refused_by_block(
    limiter: &RateLimiter,
    user: &str,
    route: &str,
    tier: Tier,
    left: Duration,
) {
    let d = limiter.check(user, route).await;
    assert!(!d.allowed() && d.by_block(), "{user} on {route}: {d:?}");
    assert_eq!(d.blocked_by(), Some(tier));
    let slack = Duration::from_secs(2);
    assert!(
        d.retry_after() <= left && d.retry_after() + slack > left,
        "{d:?}"
    );
    assert_eq!(d.retry_after_secs(), left.as_secs(), "rounded up: {d:?}");
}

pub async fn a_block_refuses_records_nothing_and_is_lifted(b: TestBackend) {
    let clock = clock();
    let (a, _, _) = instances(&b, || limits(100, 100, 1_000, MINUTE), &clock).await;
    let hour = Duration::from_secs(3600);
    a.block(BlockTarget::User("mallory"), hour).await.unwrap();
    for _ in 0..5 {
        refused_by_block(&a, "mallory", "/items", Tier::User, hour).await;
    }
    let usage = a.usage("mallory", "/items").await.unwrap();
    let counted: Vec<u64> = usage.tiers.iter().map(|t| t.used).collect();
    assert_eq!(counted, [0, 0, 0], "a refused request is recorded nowhere");
    assert!(a.check("alice", "/items").await.allowed(), "others go on");
    // Blocking again replaces the end, shorter or longer.
    a.block(BlockTarget::User("mallory"), MINUTE).await.unwrap();
    refused_by_block(&a, "mallory", "/items", Tier::User, MINUTE).await;
    a.unblock(BlockTarget::User("mallory")).await.unwrap();
    assert!(a.check("mallory", "/items").await.allowed());
    // Unblocking what is not blocked is no error.
    a.unblock(BlockTarget::User("nobody")).await.unwrap();
}

pub async fn a_block_ends_by_itself_and_leaves_nothing(b: TestBackend) {
    let clock = clock();
    let (a, _, memory) = instances(&b, || limits(100, 100, 0, MINUTE), &clock).await;
    let short = Duration::from_millis(300);
    a.block(BlockTarget::User("brief"), short).await.unwrap();
    a.block(BlockTarget::Endpoint("/hot"), short).await.unwrap();
    assert!(a.check("brief", "/x").await.by_block());
    assert!(a.check("anyone", "/hot").await.by_block());
    // Memory counts on the limiter's clock, Redis on its own: let both pass.
    clock.advance(Duration::from_secs(1));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(a.check("brief", "/x").await.allowed());
    assert!(a.check("anyone", "/hot").await.allowed());
    match (&b, memory) {
        (_, Some(store)) => assert_eq!(store.blocked_keys(), 0, "ended blocks are dropped"),
        (TestBackend::Redis(server), None) => {
            assert_eq!(server.cli(&["KEYS", "*#block"]).trim(), "", "expired");
        }
        (TestBackend::Cluster(cluster, prefix), None) => {
            let key = format!("{{{prefix}:user:brief}}#block");
            assert_eq!(cluster.cli_for(&key, &["EXISTS", &key]).trim(), "0");
        }
        _ => unreachable!(),
    }
}

pub async fn a_block_set_on_one_instance_holds_on_another_at_its_next_check(b: TestBackend) {
    let clock = clock();
    let (a, other, _) = instances(&b, || limits(2, 100, 0, MINUTE), &clock).await;
    let hour = Duration::from_secs(3600);
    a.block(BlockTarget::User("eve"), hour).await.unwrap();
    refused_by_block(&other, "eve", "/items", Tier::User, hour).await;
    other.unblock(BlockTarget::User("eve")).await.unwrap();
    assert!(
        a.check("eve", "/items").await.allowed(),
        "lifted everywhere"
    );

    // The other instance remembers a full window (its denial cache, on Redis): the block
    // still reaches it, with the block's Retry-After, not the window's.
    assert!(other.check("frank", "/items").await.allowed());
    assert!(other.check("frank", "/items").await.allowed());
    assert!(!other.check("frank", "/items").await.by_block());
    a.block(BlockTarget::User("frank"), hour).await.unwrap();
    let sent = std::time::Instant::now();
    loop {
        let d = other.check("frank", "/items").await;
        if d.by_block() {
            assert!(d.retry_after() > MINUTE, "{d:?}");
            break;
        }
        // Soon, not at once: a loaded machine's scheduling is in it.
        assert!(
            sent.elapsed() < Duration::from_secs(5),
            "never saw the block"
        );
        tokio::task::yield_now().await;
    }
}

pub async fn a_user_is_blocked_on_every_route_and_an_address_by_its_64(b: TestBackend) {
    let clock = clock();
    let builder = || {
        limits(100, 100, 0, MINUTE).route(
            "/login",
            RouteLimits {
                user_limit: Some(5),
                endpoint_limit: None,
            },
        )
    };
    let (a, _, _) = instances(&b, builder, &clock).await;
    let day = Duration::from_secs(86_400);
    a.block(BlockTarget::User("mallory"), day).await.unwrap();
    refused_by_block(&a, "mallory", "/login", Tier::User, day).await;
    refused_by_block(&a, "mallory", "/items", Tier::User, day).await;

    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    a.block(BlockTarget::Ip(ip("2001:db8:7:7::1")), day)
        .await
        .unwrap();
    let by_ip = |addr: &str| CheckRequest::new(UserKey::Ip(ip(addr)), Some("/items"));
    // The layer keys an IPv6 client by its /64 network (the address with the rest zeroed).
    let d = a.check_request(by_ip("2001:db8:7:7::")).await;
    assert!(d.by_block() && d.blocked_by() == Some(Tier::User), "{d:?}");
    assert!(a.check_request(by_ip("2001:db8:7:8::")).await.allowed());
    assert!(
        a.check("2001:db8:7:7::1", "/items").await.allowed(),
        "a user id is not an address"
    );

    a.block(BlockTarget::Endpoint("/export/{id}"), day)
        .await
        .unwrap();
    refused_by_block(&a, "alice", "/export/{id}", Tier::Endpoint, day).await;
    assert!(a.check("alice", "/items").await.allowed());
}

pub async fn a_block_wins_over_full_tiers_and_shadow_mode(b: TestBackend) {
    let clock = clock();
    let builder = || limits(1, 100, 0, MINUTE).shadow_tier(Tier::User);
    let (a, _, _) = instances(&b, builder, &clock).await;
    // Shadow mode lets a full user tier through, but never a block.
    assert!(a.check("sam", "/a").await.allowed());
    assert!(a.check("sam", "/a").await.shadow_blocked_by().is_some());
    let hour = Duration::from_secs(3600);
    a.block(BlockTarget::User("sam"), hour).await.unwrap();
    refused_by_block(&a, "sam", "/a", Tier::User, hour).await;

    // A full user tier and a blocked route: the block answers, with the block's time.
    let enforced = || limits(1, 100, 0, MINUTE);
    let (c, _, _) = instances(&b, enforced, &clock).await;
    assert!(c.check("tom", "/b").await.allowed());
    assert!(!c.check("tom", "/b").await.by_block());
    c.block(BlockTarget::Endpoint("/b"), hour).await.unwrap();
    refused_by_block(&c, "tom", "/b", Tier::Endpoint, hour).await;
}

/// The model's shrunk find: a user's full window, remembered (Redis's denial cache) from one
/// route, must not answer for that user on a route blocked before.
pub async fn a_remembered_full_window_never_hides_a_blocked_route(b: TestBackend) {
    let clock = clock();
    let (a, _, _) = instances(&b, || limits(1, 4, 0, MINUTE), &clock).await;
    let hour = Duration::from_secs(3600);
    a.block(BlockTarget::Endpoint("/b"), hour).await.unwrap();
    assert!(a.check("u1", "/a").await.allowed());
    for _ in 0..3 {
        assert_eq!(a.check("u1", "/a").await.blocked_by(), Some(Tier::User));
    }
    refused_by_block(&a, "u1", "/b", Tier::Endpoint, hour).await;
    assert_eq!(a.check("u1", "/a").await.blocked_by(), Some(Tier::User));
}

/// docs/OPERATIONS.md: a request that meets several blocks waits for the longest's time left.
pub async fn a_denial_by_several_blocks_waits_for_the_longest(b: TestBackend) {
    let clock = clock();
    let (a, _, _) = instances(&b, || limits(100, 100, 0, MINUTE), &clock).await;
    let (hour, day) = (Duration::from_secs(3600), Duration::from_secs(86_400));
    a.block(BlockTarget::User("mallory"), hour).await.unwrap();
    a.block(BlockTarget::Endpoint("/a"), day).await.unwrap();
    refused_by_block(&a, "mallory", "/a", Tier::User, day).await;
    a.block(BlockTarget::User("mallory"), day + hour)
        .await
        .unwrap();
    refused_by_block(&a, "mallory", "/a", Tier::User, day + hour).await;
}

pub async fn blocks_that_would_stop_nothing_are_refused(b: TestBackend) {
    let clock = clock();
    let (a, _, _) = instances(&b, || limits(0, 10, 100, MINUTE), &clock).await;
    let err = a.block(BlockTarget::User("x"), MINUTE).await.unwrap_err();
    assert!(matches!(err, BlockError::TierOff(Tier::User)), "{err}");
    assert!(
        err.to_string().contains("user tier is switched off"),
        "{err}"
    );
    let err = a
        .block(BlockTarget::Endpoint("/a"), Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(err, BlockError::ZeroDuration), "{err}");
}

/// Over real HTTP: the 429 of a block says so, with `Retry-After` the block's time left.
pub async fn the_429_of_a_block_says_it_is_a_block(b: TestBackend) {
    let clock = clock();
    let (a, _, _) = instances(&b, || limits(100, 100, 0, MINUTE), &clock).await;
    let layer = RateLimitLayer::from_limiter(a.clone()).user_id_header("x-user-id");
    let app = Router::new()
        .route("/items", get(|| async { "ok" }))
        .route_layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    a.block(BlockTarget::User("mallory"), Duration::from_secs(90))
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let get = |user: &'static str| {
        client
            .get(format!("http://{addr}/items"))
            .header("x-user-id", user)
            .send()
    };
    let resp = get("mallory").await.unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "90");
    let body: serde_json::Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    assert_eq!(body["block"], true, "{body}");
    assert_eq!(body["policy"], "user", "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("blocked"),
        "{body}"
    );
    assert_eq!(get("alice").await.unwrap().status(), 200);
}

crate::on_every_backend!(block:
    a_block_refuses_records_nothing_and_is_lifted,
    a_block_ends_by_itself_and_leaves_nothing,
    a_user_is_blocked_on_every_route_and_an_address_by_its_64,
    a_block_wins_over_full_tiers_and_shadow_mode,
    a_remembered_full_window_never_hides_a_blocked_route,
    a_denial_by_several_blocks_waits_for_the_longest,
    blocks_that_would_stop_nothing_are_refused,
);

mod threaded {
    crate::on_every_backend!(block, threaded:
        a_block_set_on_one_instance_holds_on_another_at_its_next_check,
        the_429_of_a_block_says_it_is_a_block,
    );
}
