//! The three ways to name the user id (an owning closure, a header, a borrowing closure) over
//! real HTTP: they decide alike, an empty id (from any of them) or a header a client garbles
//! (not UTF-8) is no id
//! (the client address stands in), a UTF-8 id is its own user, and the borrowed id survives the
//! waiting path of the Redis store.
#![cfg(all(feature = "axum", feature = "redis"))]

mod common;

use std::borrow::Cow;
use std::net::SocketAddr;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use http::{HeaderValue, StatusCode};
use tiered_ratelimit::store::MemoryStore;
use tiered_ratelimit::{Backend, RateLimitConfig, RateLimitLayer, RateLimiter, Tier};

use common::RedisServer;

fn config(user: u64) -> RateLimitConfig {
    RateLimitConfig::builder()
        .window(Duration::from_secs(60))
        .user_limit(user)
        .endpoint_limit(0)
        .global_limit(0)
        .build()
        .unwrap()
}

async fn serve(layer: RateLimitLayer) -> String {
    let app = Router::new()
        .route("/items", get(|| async { "ok" }))
        .route_layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    format!("http://{addr}/items")
}

/// Sends `x-user-id: value` (no header for `None`); the status and `X-RateLimit-Remaining`.
async fn get_as(url: &str, value: Option<&[u8]>) -> (StatusCode, Option<String>) {
    let mut req = reqwest::Client::new().get(url);
    if let Some(value) = value {
        req = req.header("x-user-id", HeaderValue::from_bytes(value).unwrap());
    }
    let resp = req.send().await.unwrap();
    let remaining = resp
        .headers()
        .get("x-ratelimit-remaining")
        .map(|v| v.to_str().unwrap().to_owned());
    (resp.status(), remaining)
}

type Named = fn(RateLimitLayer) -> RateLimitLayer;

const SOURCES: [(&str, Named); 3] = [
    ("owning closure", |layer| {
        layer.user_id(|parts| {
            // An empty id is passed on as it is: the layer takes it for no id.
            let id = std::str::from_utf8(parts.headers.get("x-user-id")?.as_bytes()).ok()?;
            Some(id.to_owned())
        })
    }),
    ("header", |layer| layer.user_id_header("x-user-id")),
    ("borrowing closure", |layer| {
        layer.user_id_ref(|parts| {
            let id = std::str::from_utf8(parts.headers.get("x-user-id")?.as_bytes()).ok()?;
            Some(Cow::Borrowed(id))
        })
    }),
];

#[tokio::test]
async fn every_way_of_naming_the_user_decides_alike() {
    // A sequence of ids, including ones a hostile client sends: empty, not UTF-8 (Latin-1
    // obs-text bytes), and ids that spell the fallback key of an address; and a UTF-8 id
    // that is not ASCII, a user of its own.
    let ids: [Option<&[u8]>; 16] = [
        Some(b"alice"),
        Some(b"alice"),
        Some(b"bob"),
        Some(b"alice"),
        None,
        Some(b""),
        Some(b"caf\xe9"),
        None,
        Some(b"@127.0.0.1"),
        Some(b"bob"),
        Some(b"bob"),
        Some(b"alice"),
        Some("josé".as_bytes()),
        Some("josé".as_bytes()),
        Some("josé".as_bytes()),
        Some("josé".as_bytes()),
    ];
    let mut answers = Vec::new();
    for (name, named) in SOURCES {
        let store = MemoryStore::new();
        let limiter = RateLimiter::builder(config(3))
            .memory_store(store.clone())
            .build();
        let url = serve(named(RateLimitLayer::from_limiter(limiter))).await;
        let mut seen = Vec::new();
        for id in ids {
            seen.push(get_as(&url, id).await);
        }
        // No id, an empty one and a garbled one all counted against the client's address.
        assert_eq!(store.entries(Tier::User, "@127.0.0.1"), 3, "{name}");
        assert_eq!(store.entries(Tier::User, "alice"), 3, "{name}");
        assert_eq!(store.entries(Tier::User, "bob"), 3, "{name}");
        answers.push((name, seen));
    }
    let (_, first) = &answers[0];
    assert_eq!(first[3].0, StatusCode::OK, "alice's third");
    assert_eq!(first[11].0, StatusCode::TOO_MANY_REQUESTS, "alice's fourth");
    assert_eq!(
        first[7].0,
        StatusCode::TOO_MANY_REQUESTS,
        "the address's fourth"
    );
    let statuses: Vec<StatusCode> = first[12..].iter().map(|(status, _)| *status).collect();
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ],
        "josé's own three, then a 429"
    );
    for (name, seen) in &answers[1..] {
        assert_eq!(
            seen, first,
            "{name} decided otherwise than the owning closure"
        );
    }
}

/// `RateLimitLayer::user_id_of` reads a request's id as the layer charges it, whatever the
/// source: what a handler reporting the caller's own usage asks with.
#[test]
fn the_layer_tells_the_id_it_charges() {
    let heads: [(Option<&[u8]>, Option<&str>); 5] = [
        (Some(b"alice"), Some("alice")),
        (Some("josé".as_bytes()), Some("josé")),
        (Some(b""), None),
        (Some(b"caf\xe9"), None),
        (None, None),
    ];
    for (name, named) in SOURCES {
        let layer = named(RateLimitLayer::new(config(3)));
        for (value, want) in heads {
            let mut request = http::Request::builder();
            if let Some(value) = value {
                request = request.header("x-user-id", HeaderValue::from_bytes(value).unwrap());
            }
            let (parts, ()) = request.body(()).unwrap().into_parts();
            assert_eq!(
                layer.user_id_of(&parts).as_deref(),
                want,
                "{name}: {value:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_borrowed_user_id_is_counted_on_redis_too() {
    let server = RedisServer::start();
    let config = RateLimitConfig::builder()
        .window(Duration::from_secs(60))
        .user_limit(2)
        .endpoint_limit(0)
        .global_limit(0)
        .redis_url(server.url())
        .build()
        .unwrap();
    let limiter = RateLimiter::new(config);
    limiter.wait_connected().await;
    assert_eq!(limiter.backend(), Backend::Redis);
    let url =
        serve(RateLimitLayer::from_limiter(limiter.clone()).user_id_header("x-user-id")).await;
    let answers = [
        get_as(&url, Some(b"dora")).await,
        get_as(&url, Some(b"dora")).await,
        get_as(&url, Some(b"dora")).await,
        get_as(&url, Some(b"eve")).await,
    ];
    let statuses: Vec<_> = answers.iter().map(|a| a.0.as_u16()).collect();
    assert_eq!(statuses, [200, 200, 429, 200]);
    assert_eq!(answers[1].1.as_deref(), Some("0"));
    assert_eq!(server.cli(&["ZCARD", "rate_limit:user:dora"]).trim(), "2");
    assert_eq!(server.cli(&["ZCARD", "rate_limit:user:eve"]).trim(), "1");
    assert_eq!(limiter.backend(), Backend::Redis);
}

#[test]
#[should_panic(expected = "is not a valid header name")]
fn an_invalid_header_name_is_refused_when_the_layer_is_built() {
    let _ = RateLimitLayer::new(config(1)).user_id_header("x user id");
}
