//! The layer end to end: axum routers served on real TCP listeners, hit with real HTTP requests.
//! What the README and docs/POLICIES.md show of its answers is `tests/http/answers.rs`.
#![cfg(feature = "axum")]

#[path = "http/answers.rs"]
mod answers;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tiered_ratelimit::store::MemoryStore;
use tiered_ratelimit::{
    HeaderStyle, ManualClock, RateLimitConfig, RateLimitLayer, RateLimiter, Tier,
};
use tower::ServiceExt;

mod common;

use common::http::{config, get_as, header_user_id, items_router, send_as, serve, MINUTE};

#[tokio::test]
async fn burst_gets_exactly_the_user_limit_then_429_with_headers() {
    let app = items_router().route_layer(header_user_id(RateLimitLayer::new(config(5, 100, 1000))));
    let base = serve(app, true).await;
    let client = reqwest::Client::new();
    for i in 0..5 {
        let r = get_as(&client, &format!("{base}/api/v1/items/{i}"), Some("bob")).await;
        assert_eq!(r.status, StatusCode::OK, "request {i}");
        assert_eq!(r.remaining.as_deref(), Some((4 - i).to_string().as_str()));
        assert_eq!(r.retry_after.as_deref(), Some("0"));
        assert_eq!(r.body, "item");
    }
    for _ in 0..3 {
        let r = get_as(&client, &format!("{base}/api/v1/items/7"), Some("bob")).await;
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.remaining.as_deref(), Some("0"));
        let retry: u64 = r.retry_after.unwrap().parse().unwrap();
        assert!((1..=60).contains(&retry), "retry-after {retry}");
        let problem: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(problem["status"], 429);
        assert_eq!(problem["policy"], "user", "{}", r.body);
        assert_eq!(problem["title"], "Too Many Requests");
        assert_eq!(problem["retry_after"].as_u64(), Some(retry));
    }
    // Another user is not affected.
    let r = get_as(&client, &format!("{base}/api/v1/items/7"), Some("carol")).await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test]
async fn retry_after_is_exact_and_rounded_up_over_http() {
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let limiter = RateLimiter::builder(config(1, 0, 0))
        .clock(clock.clone())
        .build();
    let app = items_router().route_layer(header_user_id(RateLimitLayer::from_limiter(limiter)));
    let base = serve(app, false).await;
    let client = reqwest::Client::new();
    let url = format!("{base}/api/v1/items");
    assert_eq!(
        get_as(&client, &url, Some("u")).await.status,
        StatusCode::OK
    );
    clock.advance(Duration::from_millis(20_500));
    let r = get_as(&client, &url, Some("u")).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.retry_after.as_deref(), Some("40")); // 39.5 s + 1 µs, rounded up
    clock.advance(Duration::from_millis(39_500));
    let r = get_as(&client, &url, Some("u")).await;
    assert_eq!(
        r.retry_after.as_deref(),
        Some("1"),
        "at exactly the boundary: still 1"
    );
    clock.advance(Duration::from_micros(1));
    let r = get_as(&client, &url, Some("u")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.retry_after.as_deref(), Some("0"));
}

/// README: `Retry-After` is `0` on an allowed response. That is the limiter's own header: a
/// service that answers with a `Retry-After` of its own (a 503 during maintenance, a 429 passed
/// on from upstream) keeps it, in every header style, shadow denials included; a 429 of the
/// limiter carries the limiter's. (An outside audit: the layer replaced the service's `120`
/// with `0`, telling clients to retry a maintenance 503 at once.)
#[tokio::test]
async fn a_services_own_retry_after_is_kept() {
    let own = || async {
        Response::builder()
            .status(StatusCode::SERVICE_UNAVAILABLE)
            .header("retry-after", "120")
            .body(axum::body::Body::empty())
            .unwrap()
    };
    for (style, shadow) in [
        (HeaderStyle::Legacy, false),
        (HeaderStyle::Both, false),
        (HeaderStyle::Ietf, false),
        (HeaderStyle::Legacy, true),
    ] {
        let config = RateLimitConfig::builder()
            .window(Duration::from_secs(60))
            .user_limit(2)
            .headers(style)
            .shadow(shadow)
            .build()
            .unwrap();
        let limiter = RateLimiter::builder(config).build();
        let app = Router::new()
            .route("/down", get(own))
            .route("/up", get(|| async { "ok" }))
            .route_layer(header_user_id(RateLimitLayer::from_limiter(limiter)));
        let base = serve(app, false).await;
        let client = reqwest::Client::new();
        let r = get_as(&client, &format!("{base}/down"), Some("u")).await;
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.retry_after.as_deref(), Some("120"), "{style:?}");
        let legacy = style != HeaderStyle::Ietf;
        assert_eq!(r.remaining.as_deref(), legacy.then_some("1"), "{style:?}");
        let r = get_as(&client, &format!("{base}/up"), Some("u")).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.retry_after.as_deref(), legacy.then_some("0"), "{style:?}");
        // The user's limit is reached: the limiter's 429 (or, in shadow, the shadow denial on
        // the service's 503) carries a wait of the limiter's only where the service set none.
        let r = get_as(&client, &format!("{base}/down"), Some("u")).await;
        if shadow {
            assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(r.retry_after.as_deref(), Some("120"));
            let r = get_as(&client, &format!("{base}/up"), Some("u")).await;
            assert_eq!(r.status, StatusCode::OK);
            assert_eq!(r.retry_after.as_deref(), Some("60"));
        } else {
            assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{style:?}");
            assert_eq!(r.retry_after.as_deref(), Some("60"), "{style:?}");
        }
    }
}

/// A memory store and a limiter on it with an endpoint limit of 3 a minute (no user or global
/// tier).
fn endpoint_limit_of_three() -> (MemoryStore, RateLimiter) {
    let store = MemoryStore::new();
    let limiter = RateLimiter::builder(config(0, 3, 0))
        .memory_store(store.clone())
        .build();
    (store, limiter)
}

/// Three requests to three paths no route matches, answered `status`, fill an endpoint limit
/// of 3 (the remaining count falling 2, 1, 0), and a fourth path is denied: one key, the fixed
/// key of unmatched requests, holding three entries.
async fn fill_the_unmatched_key(
    client: &reqwest::Client,
    base: &str,
    status: StatusCode,
    store: &MemoryStore,
) {
    for i in 0..3 {
        let r = get_as(client, &format!("{base}/random/{i}/path"), None).await;
        assert_eq!(r.status, status);
        assert_eq!(r.remaining.as_deref(), Some((2 - i).to_string().as_str()));
    }
    let r = get_as(client, &format!("{base}/yet/another"), None).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(store.entries(Tier::Endpoint, "@unmatched"), 3);
    assert_eq!(store.tracked_keys(), 1, "random paths never create keys");
}

/// Three requests to three paths of `/api/v1/items/{id}` fill an endpoint limit of 3 (the
/// remaining count falling 2, 1, 0), and a fourth path is denied by the endpoint tier: one key,
/// the template's, holding three entries.
async fn fill_the_item_template(client: &reqwest::Client, base: &str, store: &MemoryStore) {
    for id in 1..=3 {
        let r = get_as(client, &format!("{base}/api/v1/items/{id}"), None).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.remaining.as_deref(), Some((3 - id).to_string().as_str()));
    }
    let r = get_as(client, &format!("{base}/api/v1/items/99"), None).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(r.body.contains("\"policy\":\"endpoint\""), "{}", r.body);
    assert_eq!(store.entries(Tier::Endpoint, "/api/v1/items/%7Bid%7D"), 3);
    assert_eq!(
        store.tracked_keys(),
        1,
        "one key for the template, none per path"
    );
}

#[tokio::test]
async fn route_templates_share_one_endpoint_key() {
    let (store, limiter) = endpoint_limit_of_three();
    let app = items_router().route_layer(RateLimitLayer::from_limiter(limiter));
    let base = serve(app, true).await;
    let client = reqwest::Client::new();
    fill_the_item_template(&client, &base, &store).await;
    // The list route is another endpoint.
    let r = get_as(&client, &format!("{base}/api/v1/items"), None).await;
    assert_eq!(r.status, StatusCode::OK);
}

/// The layer on one handler (axum's `Handler::layer`, which README.md offers as a placement)
/// still counts under the route's template, not the raw path; limits that handler alone; is
/// not reached by a method the route does not serve (its 405 is neither counted nor given
/// headers, unlike under `route_layer`); and under `nest` counts the nested route's full
/// template.
#[tokio::test]
async fn a_layer_on_one_handler_counts_under_its_route_template() {
    use axum::handler::Handler;
    let (store, limiter) = endpoint_limit_of_three();
    let layer = RateLimitLayer::from_limiter(limiter).inner_body();
    let nested = Router::new().route(
        "/items/{id}",
        get((|| async { "nested" }).layer(layer.clone())),
    );
    let app = Router::new()
        .route("/api/v1/items", get(|| async { "list" }))
        .route(
            "/api/v1/items/{id}",
            get((|| async { "item" }).layer(layer)),
        )
        .nest("/api/v2", nested);
    let base = serve(app, true).await;
    let client = reqwest::Client::new();
    fill_the_item_template(&client, &base, &store).await;
    // The other route's handler has no layer.
    let r = get_as(&client, &format!("{base}/api/v1/items"), None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.remaining, None);
    // A method the route does not serve never reaches a handler's layer: a 405, not a 429,
    // without headers, and nothing counted.
    let r = client
        .post(format!("{base}/api/v1/items/1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert!(r.headers().get("x-ratelimit-remaining").is_none());
    assert_eq!(store.entries(Tier::Endpoint, "/api/v1/items/%7Bid%7D"), 3);
    // Under `nest`, the full template; a HEAD request, which axum answers with the GET
    // handler, is counted too. Both handlers' layers are clones of one: one limiter, one store.
    let r = get_as(&client, &format!("{base}/api/v2/items/7"), None).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = client
        .head(format!("{base}/api/v2/items/8"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["x-ratelimit-remaining"], "1");
    assert_eq!(store.entries(Tier::Endpoint, "/api/v2/items/%7Bid%7D"), 2);
    assert_eq!(store.tracked_keys(), 2);
}

/// A router's fallback carries no `MatchedPath`: the layer on a fallback handler counts every
/// request it sees under the one fixed key of unmatched requests.
#[tokio::test]
async fn a_layer_on_a_fallback_handler_counts_under_one_fixed_key() {
    use axum::handler::Handler;
    let (store, limiter) = endpoint_limit_of_three();
    let layer = RateLimitLayer::from_limiter(limiter).inner_body();
    let app = items_router().fallback((|| async { "fallback" }).layer(layer));
    let base = serve(app, true).await;
    let client = reqwest::Client::new();
    fill_the_unmatched_key(&client, &base, StatusCode::OK, &store).await;
    // The routes have no layer.
    let r = get_as(&client, &format!("{base}/api/v1/items/1"), None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.remaining, None);
}

#[tokio::test]
async fn unmatched_paths_share_one_fixed_key_under_router_layer() {
    let (store, limiter) = endpoint_limit_of_three();
    let app = items_router().layer(RateLimitLayer::from_limiter(limiter));
    let base = serve(app, true).await;
    let client = reqwest::Client::new();
    fill_the_unmatched_key(&client, &base, StatusCode::NOT_FOUND, &store).await;
    // Matched routes have their own key.
    let r = get_as(&client, &format!("{base}/api/v1/items/1"), None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(store.tracked_keys(), 2);
}

#[tokio::test]
async fn route_layer_leaves_404s_and_other_routes_alone() {
    let api = items_router().route_layer(RateLimitLayer::new(config(0, 0, 1)));
    let app = Router::new()
        .route("/health", get(|| async { "ok" }))
        .merge(api);
    let base = serve(app, true).await;
    let client = reqwest::Client::new();
    assert_eq!(
        get_as(&client, &format!("{base}/api/v1/items"), None)
            .await
            .status,
        StatusCode::OK
    );
    let denied = get_as(&client, &format!("{base}/api/v1/items"), None).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    for _ in 0..5 {
        let health = get_as(&client, &format!("{base}/health"), None).await;
        assert_eq!(health.status, StatusCode::OK);
        assert_eq!(health.remaining, None, "the health route is not limited");
        let missing = get_as(&client, &format!("{base}/missing"), None).await;
        assert_eq!(missing.status, StatusCode::NOT_FOUND);
    }
}

#[tokio::test]
async fn without_user_id_the_client_ip_is_the_user() {
    let store = MemoryStore::new();
    let limiter = RateLimiter::builder(config(2, 0, 0))
        .memory_store(store.clone())
        .build();
    let app = items_router().route_layer(header_user_id(RateLimitLayer::from_limiter(limiter)));
    let base = serve(app, true).await;
    let client = reqwest::Client::new();
    let url = format!("{base}/api/v1/items");
    assert_eq!(get_as(&client, &url, None).await.status, StatusCode::OK);
    assert_eq!(get_as(&client, &url, None).await.status, StatusCode::OK);
    let r = get_as(&client, &url, None).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(store.entries(Tier::User, "@127.0.0.1"), 2);
    // A user id that spells the address is another key: no one can spend another's quota.
    assert_eq!(
        get_as(&client, &url, Some("@127.0.0.1")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        get_as(&client, &url, Some("127.0.0.1")).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn without_user_id_or_address_the_user_tier_is_skipped() {
    let app = items_router().route_layer(header_user_id(RateLimitLayer::new(config(1, 0, 3))));
    let base = serve(app, false).await;
    let client = reqwest::Client::new();
    let url = format!("{base}/api/v1/items");
    for left in ["2", "1", "0"] {
        let r = get_as(&client, &url, None).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.remaining.as_deref(), Some(left));
    }
    let r = get_as(&client, &url, None).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(r.body.contains("\"policy\":\"global\""), "{}", r.body);
}

#[tokio::test]
async fn layer_outside_the_router_sees_no_route_and_uses_the_fixed_key() {
    let store = MemoryStore::new();
    let limiter = RateLimiter::builder(config(0, 2, 0))
        .memory_store(store.clone())
        .build();
    let app = tower::ServiceBuilder::new()
        .layer(RateLimitLayer::from_limiter(limiter))
        .service(items_router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let app = tower::Layer::layer(
            &tower::util::MapResponseLayer::new(axum::response::IntoResponse::into_response),
            app,
        );
        axum::serve(listener, tower::make::Shared::new(app))
            .await
            .unwrap();
    });
    let client = reqwest::Client::new();
    assert_eq!(
        get_as(&client, &format!("http://{addr}/api/v1/items/1"), None)
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        get_as(&client, &format!("http://{addr}/api/v1/items"), None)
            .await
            .status,
        StatusCode::OK
    );
    let r = get_as(&client, &format!("http://{addr}/api/v1/items/2"), None).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(store.entries(Tier::Endpoint, "@unmatched"), 2);
}

#[tokio::test]
async fn clones_of_the_layer_share_one_limiter() {
    let layer = RateLimitLayer::new(config(0, 0, 2));
    let a = Router::new()
        .route("/a", get(|| async { "a" }))
        .route_layer(layer.clone());
    let b = Router::new()
        .route("/b", get(|| async { "b" }))
        .route_layer(layer);
    let base_a = serve(a, false).await;
    let base_b = serve(b, false).await;
    let client = reqwest::Client::new();
    assert_eq!(
        get_as(&client, &format!("{base_a}/a"), None).await.status,
        StatusCode::OK
    );
    assert_eq!(
        get_as(&client, &format!("{base_b}/b"), None).await.status,
        StatusCode::OK
    );
    assert_eq!(
        get_as(&client, &format!("{base_a}/a"), None).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn strange_and_huge_user_ids_never_cause_a_5xx() {
    let store = MemoryStore::new();
    let limiter = RateLimiter::builder(config(1, 0, 0))
        .memory_store(store.clone())
        .build();
    let app = items_router().route_layer(header_user_id(RateLimitLayer::from_limiter(limiter)));
    let base = serve(app, true).await;
    let client = reqwest::Client::new();
    let url = format!("{base}/api/v1/items");
    let huge = "h".repeat(16 * 1024);
    let ids = [
        huge.as_str(),
        "{tag}",
        "a b",
        "%41",
        "#x",
        "..",
        "rate_limit:global",
        "x\ty",
    ];
    for id in ids {
        let r = get_as(&client, &url, Some(id)).await;
        assert_eq!(r.status, StatusCode::OK, "first request of {id:?}");
        let r = get_as(&client, &url, Some(id)).await;
        assert_eq!(
            r.status,
            StatusCode::TOO_MANY_REQUESTS,
            "second request of {id:?}"
        );
    }
    assert_eq!(
        store.tracked_keys(),
        ids.len(),
        "one key each, no collisions"
    );
    // Non-UTF-8 header bytes: the closure returns None and the client IP stands in.
    let resp = client
        .get(&url)
        .header(
            "x-user-id",
            reqwest::header::HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert!(resp.status() == StatusCode::OK || resp.status() == StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn any_tower_service_with_any_bytes_body() {
    let svc = tower::service_fn(|_req: Request<String>| async {
        Ok::<_, Infallible>(Response::new(Full::new(bytes::Bytes::from_static(
            b"hello",
        ))))
    });
    let layer =
        RateLimitLayer::new(config(0, 0, 1)).endpoint(|parts| Some(parts.uri.path().to_owned()));
    let svc = tower::Layer::layer(&layer, svc);
    let ok = svc
        .clone()
        .oneshot(Request::new(String::new()))
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(
        ok.headers()[&tiered_ratelimit::headers::X_RATELIMIT_REMAINING],
        "0"
    );
    assert_eq!(ok.headers()[http::header::RETRY_AFTER], "0");
    assert_eq!(ok.into_body().collect().await.unwrap().to_bytes(), "hello");
    let denied = svc.oneshot(Request::new(String::new())).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.headers()[http::header::RETRY_AFTER], "60");
    assert_eq!(
        denied.headers()[http::header::CONTENT_TYPE],
        "application/problem+json"
    );
    let body = denied.into_body().collect().await.unwrap().to_bytes();
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["policy"], "global");
    assert_eq!(problem["retry_after"], 60);
}

/// An endpoint closure's empty name is no name: counted under the unmatched-route key, with the
/// requests it names none for (never under an empty endpoint).
#[tokio::test]
async fn an_empty_endpoint_name_is_the_unmatched_route() {
    let svc = tower::service_fn(|_req: Request<String>| async {
        Ok::<_, Infallible>(Response::new(Full::new(bytes::Bytes::from_static(b"ok"))))
    });
    let layer = RateLimitLayer::new(config(0, 1, 0))
        .endpoint(|parts| (parts.uri.path() == "/empty").then(String::new));
    let svc = tower::Layer::layer(&layer, svc);
    let request = |path: &str| Request::builder().uri(path).body(String::new()).unwrap();
    let first = svc.clone().oneshot(request("/empty")).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let second = svc.oneshot(request("/none")).await.unwrap();
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS, "one bucket");
}

#[tokio::test]
async fn mock_connect_info_is_read_too() {
    use axum::extract::connect_info::MockConnectInfo;
    let app = items_router()
        .route_layer(RateLimitLayer::new(config(1, 0, 0)))
        .layer(MockConnectInfo(SocketAddr::from(([10, 1, 2, 3], 4000))));
    let first = app
        .clone()
        .oneshot(
            Request::get("/api/v1/items")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let second = app
        .oneshot(
            Request::get("/api/v1/items")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn post_and_get_on_one_route_share_its_endpoint_key() {
    let app = items_router().route_layer(RateLimitLayer::new(config(0, 2, 0)));
    let base = serve(app, true).await;
    let client = reqwest::Client::new();
    let url = format!("{base}/api/v1/items");
    assert_eq!(
        client.post(&url).send().await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        client.get(&url).send().await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        client.post(&url).send().await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// README: under `route_layer`, a method the route does not serve still matched it, so its
/// 405 is counted there like any other request.
#[tokio::test]
async fn a_method_the_route_does_not_serve_is_counted_on_the_route() {
    let app = items_router().route_layer(RateLimitLayer::new(config(0, 2, 0)));
    let base = serve(app, true).await;
    let client = reqwest::Client::new();
    let url = format!("{base}/api/v1/items/1");
    let mut seen = Vec::new();
    for method in [http::Method::DELETE, http::Method::PUT, http::Method::GET] {
        let reply = send_as(&client, method, &url, None).await;
        seen.push((reply.status, reply.remaining));
    }
    assert_eq!(
        seen,
        [
            (StatusCode::METHOD_NOT_ALLOWED, Some("1".to_owned())),
            (StatusCode::METHOD_NOT_ALLOWED, Some("0".to_owned())),
            (StatusCode::TOO_MANY_REQUESTS, Some("0".to_owned())),
        ]
    );
}

/// `RateLimitLayer::cost`'s documented closure, over real HTTP: a chunked upload (no
/// `Content-Length`) costs the most the service accepts, not nothing. An outside review priced
/// the old example's way (`unwrap_or(0)`) and got 400 KiB through a budget of 4 KiB a minute.
#[tokio::test]
async fn an_upload_without_a_declared_length_costs_the_body_limit() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const MAX_BODY_KIB: u64 = 2 * 1024;
    let layer = header_user_id(RateLimitLayer::new(config(3_000, 0, 0))).cost(|parts| {
        let declared = parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        match declared {
            Some(bytes) => bytes.div_ceil(1024).clamp(1, MAX_BODY_KIB),
            None if parts.method == http::Method::GET || parts.method == http::Method::HEAD => 1,
            None => MAX_BODY_KIB,
        }
    });
    let app = Router::new()
        .route(
            "/upload",
            axum::routing::post(|body: String| async move { format!("stored {}", body.len()) }),
        )
        .route_layer(layer);
    let base = serve(app, true).await;
    let addr = base.trim_start_matches("http://").to_owned();
    let chunked = || async {
        let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let chunk = "x".repeat(100 * 1024);
        let head = "POST /upload HTTP/1.1\r\nHost: t\r\nX-User-Id: mallory\r\n\
                    Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
        let body = format!("{:x}\r\n{chunk}\r\n0\r\n\r\n", chunk.len());
        tcp.write_all(head.as_bytes()).await.unwrap();
        tcp.write_all(body.as_bytes()).await.unwrap();
        let mut reply = String::new();
        tcp.read_to_string(&mut reply).await.unwrap();
        reply
    };
    let first = chunked().await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(
        first
            .to_ascii_lowercase()
            .contains("x-ratelimit-remaining: 952"),
        "2,048 units spent: {first}"
    );
    let second = chunked().await;
    assert!(second.starts_with("HTTP/1.1 429"), "{second}");
    // A declared 5 KiB costs 5.
    let reply = reqwest::Client::new()
        .post(format!("{base}/upload"))
        .header("x-user-id", "mallory")
        .body(vec![b'x'; 5 * 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), StatusCode::OK);
    assert_eq!(reply.headers()["x-ratelimit-remaining"], "947");
}

/// The items route served with a user limit of 1 a minute, in `style`, enforced or in shadow
/// mode: its URL.
async fn one_a_minute(shadow: bool, style: HeaderStyle) -> String {
    let config = RateLimitConfig::builder()
        .window(MINUTE)
        .user_limit(1)
        .shadow(shadow)
        .headers(style)
        .build()
        .unwrap();
    let app = items_router().route_layer(header_user_id(RateLimitLayer::new(config)));
    let base = serve(app, true).await;
    format!("{base}/api/v1/items")
}

#[tokio::test]
async fn shadow_mode_serves_over_limit_requests_with_the_headers_enforcement_would_send() {
    let url = one_a_minute(true, HeaderStyle::Legacy).await;
    let client = reqwest::Client::new();
    let r = get_as(&client, &url, Some("s")).await;
    assert_eq!(
        (r.status, r.retry_after.as_deref()),
        (StatusCode::OK, Some("0"))
    );
    let r = get_as(&client, &url, Some("s")).await;
    assert_eq!(r.status, StatusCode::OK, "shadow mode never blocks");
    assert_eq!(r.body, "list");
    assert_eq!(r.remaining.as_deref(), Some("0"));
    let retry: u64 = r.retry_after.unwrap().parse().unwrap();
    assert!(
        (1..=60).contains(&retry),
        "the Retry-After enforcement would send: {retry}"
    );
}

/// In the IETF style too, a shadow denial's 200 carries the `Retry-After` the 429 would have
/// carried (README "Shadow mode"; an audit found it missing there), beside `RateLimit`.
#[tokio::test]
async fn under_ietf_headers_a_shadow_denial_carries_the_retry_after_of_the_429() {
    for shadow in [false, true] {
        let url = one_a_minute(shadow, HeaderStyle::Ietf).await;
        let client = reqwest::Client::new();
        let r = get_as(&client, &url, Some("s")).await;
        assert_eq!((r.status, r.retry_after.as_deref()), (StatusCode::OK, None));
        let r = get_as(&client, &url, Some("s")).await;
        let status = if shadow {
            StatusCode::OK
        } else {
            StatusCode::TOO_MANY_REQUESTS
        };
        assert_eq!(r.status, status, "shadow: {shadow}");
        assert_eq!(r.retry_after.as_deref(), Some("60"), "shadow: {shadow}");
        assert_eq!(r.remaining, None, "no legacy header in the IETF style");
    }
}

#[test]
fn shadow_tiers_come_from_the_config_file() {
    let config: RateLimitConfig =
        toml::from_str("window = \"60s\"\nuser_limit = 5\nshadow = [\"user\"]\n").unwrap();
    assert!(config.is_shadow(Tier::User));
    assert!(!config.is_shadow(Tier::Global));
    let e =
        toml::from_str::<RateLimitConfig>("window = \"60s\"\nshadow = [\"users\"]\n").unwrap_err();
    assert!(e.to_string().contains("users"), "{e}");
}

#[tokio::test]
async fn the_rejection_can_be_replaced_and_keeps_the_headers() {
    let layer = RateLimitLayer::new(config(1, 0, 0)).on_rejection(|decision| {
        let mut response = Response::new(bytes::Bytes::from(format!(
            "busy: {}",
            decision.blocked_by().unwrap()
        )));
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        response
    });
    let app = items_router().route_layer(header_user_id(layer));
    let base = serve(app, false).await;
    let client = reqwest::Client::new();
    let url = format!("{base}/api/v1/items");
    assert_eq!(
        get_as(&client, &url, Some("r")).await.status,
        StatusCode::OK
    );
    let r = get_as(&client, &url, Some("r")).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.body, "busy: user");
    assert_eq!(r.remaining.as_deref(), Some("0"));
    assert_eq!(r.retry_after.as_deref(), Some("60"));
}

#[tokio::test]
async fn ietf_headers_over_http() {
    let config = RateLimitConfig::builder()
        .window(MINUTE)
        .user_limit(2)
        .global_limit(100)
        .headers(tiered_ratelimit::HeaderStyle::Ietf)
        .build()
        .unwrap();
    let app = items_router().route_layer(header_user_id(RateLimitLayer::new(config)));
    let base = serve(app, false).await;
    let client = reqwest::Client::new();
    let resp = client
        .get(format!("{base}/api/v1/items"))
        .header("x-user-id", "i")
        .send()
        .await
        .unwrap();
    let h = resp.headers();
    assert_eq!(
        h["ratelimit-policy"],
        "\"user\";q=2;w=60, \"global\";q=100;w=60"
    );
    let value = h["ratelimit"].to_str().unwrap();
    assert!(value.starts_with("\"user\";r=1;t="), "{value}");
    assert!(h.get("x-ratelimit-remaining").is_none());
}

#[tokio::test]
async fn the_layer_takes_the_cost_from_a_closure_and_explains_a_cost_over_the_limit() {
    // One unit per started KiB of declared body, at least 1.
    let layer = RateLimitLayer::new(config(4, 0, 0)).cost(|parts| {
        let bytes = parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .unwrap_or(0);
        bytes.div_ceil(1024).max(1)
    });
    let app = items_router().route_layer(header_user_id(layer));
    let base = serve(app, false).await;
    let client = reqwest::Client::new();
    let url = format!("{base}/api/v1/items");
    let post = |kib: usize| {
        client
            .post(&url)
            .header("x-user-id", "c")
            .body(vec![b'x'; kib * 1024])
            .send()
    };
    let r = post(3).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["x-ratelimit-remaining"], "1");
    let r = post(2).await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let r = post(5).await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let problem: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(problem["cost"], 5);
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("costs 5 units, more than the user limit of 4"),
        "{detail}"
    );
    assert_eq!(post(1).await.unwrap().status(), StatusCode::OK);
}
