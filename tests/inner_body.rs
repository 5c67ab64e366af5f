//! `RateLimitLayer::inner_body`: responses carry the inner service's own body type. Over real
//! HTTP in memory and on Redis (the store that waits), allowed and denied alike; a rejection of
//! one's own with an empty body; a plain tower service with `Full<Bytes>`; the types axum sees;
//! and the allocation it saves under axum, counted.
#![cfg(all(feature = "axum", feature = "redis"))]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tiered_ratelimit::{
    Backend, InnerBody, ManualClock, RateLimit, RateLimitConfig, RateLimitLayer, RateLimiter,
};
use tower::{Service, ServiceExt};

use common::RedisServer;

/// Counts the allocations of the thread that makes them (tests run on threads of their own).
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: forwarded as it came.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as it came.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

fn config(user: u64) -> RateLimitConfig {
    RateLimitConfig::builder()
        .window(Duration::from_secs(60))
        .user_limit(user)
        .endpoint_limit(0)
        .global_limit(0)
        .build()
        .unwrap()
}

fn router(layer: RateLimitLayer<InnerBody>) -> Router {
    Router::new()
        .route("/items", get(|| async { "ok" }))
        .route_layer(layer)
}

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/items")
}

struct Reply {
    status: StatusCode,
    remaining: Option<String>,
    retry_after: Option<String>,
    content_type: Option<String>,
    body: String,
}

async fn get_as(url: &str, user: &str) -> Reply {
    let resp = reqwest::Client::new()
        .get(url)
        .header("x-user-id", user)
        .send()
        .await
        .unwrap();
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    Reply {
        status: resp.status(),
        remaining: header("x-ratelimit-remaining"),
        retry_after: header("retry-after"),
        content_type: header("content-type"),
        body: resp.text().await.unwrap(),
    }
}

/// Two requests of `user` admitted (remaining 1, 0), the third a 429 with the problem body.
async fn two_then_429(url: &str, user: &str) {
    for remaining in ["1", "0"] {
        let r = get_as(url, user).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.body, "ok");
        assert_eq!(r.remaining.as_deref(), Some(remaining));
        assert_eq!(r.retry_after.as_deref(), Some("0"));
        assert_eq!(r.content_type.as_deref(), Some("text/plain; charset=utf-8"));
    }
    let r = get_as(url, user).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.remaining.as_deref(), Some("0"));
    assert_eq!(r.retry_after.as_deref(), Some("60"));
    assert_eq!(r.content_type.as_deref(), Some("application/problem+json"));
    let problem: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["policy"], "user");
    assert_eq!(problem["retry_after"], 60);
}

#[tokio::test]
async fn in_memory_over_http_allowed_and_denied_answer_as_the_wrapped_body_does() {
    let layer = RateLimitLayer::new(config(2)).user_id_header("x-user-id");
    let url = serve(router(layer.inner_body())).await;
    two_then_429(&url, "ann").await;
    // Another user is not affected.
    assert_eq!(get_as(&url, "ben").await.status, StatusCode::OK);
}

#[tokio::test]
async fn on_redis_the_waiting_path_answers_alike() {
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
    let layer = RateLimitLayer::from_limiter(limiter.clone()).user_id_header("x-user-id");
    let url = serve(router(layer.inner_body())).await;
    two_then_429(&url, "cleo").await;
    assert_eq!(server.cli(&["ZCARD", "rate_limit:user:cleo"]).trim(), "2");
    assert_eq!(limiter.backend(), Backend::Redis);
}

#[tokio::test]
async fn a_rejection_of_ones_own_keeps_its_status_body_and_headers() {
    let empty = RateLimitLayer::new(config(1))
        .user_id_header("x-user-id")
        .on_rejection(|_| {
            let mut response = Response::new(Bytes::new());
            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            response
        })
        .inner_body();
    let url = serve(router(empty)).await;
    assert_eq!(get_as(&url, "dan").await.status, StatusCode::OK);
    let r = get_as(&url, "dan").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.body, "");
    assert_eq!(r.remaining.as_deref(), Some("0"));
    assert_eq!(r.retry_after.as_deref(), Some("60"));
}

#[tokio::test]
async fn any_tower_service_whose_body_is_made_from_bytes() {
    let svc = tower::service_fn(|_req: Request<String>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
    });
    let layer = RateLimitLayer::new(RateLimitConfig::builder().global_limit(1).build().unwrap())
        .endpoint(|parts| Some(parts.uri.path().to_owned()))
        .inner_body();
    let svc = tower::Layer::layer(&layer, svc);
    // The service answers the inner body's own type.
    let ok: Response<Full<Bytes>> = svc
        .clone()
        .oneshot(Request::new(String::new()))
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(ok.headers()[http::header::RETRY_AFTER], "0");
    assert_eq!(ok.into_body().collect().await.unwrap().to_bytes(), "hello");
    let denied: Response<Full<Bytes>> = svc.oneshot(Request::new(String::new())).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let body = denied.into_body().collect().await.unwrap().to_bytes();
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["policy"], "global");
}

/// The service a route gets answers axum's own `Body`: axum has nothing to box.
#[test]
fn under_axum_the_service_answers_axums_body() {
    fn answers_axum_body<S>(_: &S)
    where
        S: Service<Request<Body>, Response = Response<Body>>,
    {
    }
    let layer = RateLimitLayer::new(config(1)).inner_body();
    let route = tower::service_fn(|_: Request<Body>| async {
        Ok::<_, Infallible>(Response::new(Body::from("ok")))
    });
    let svc: RateLimit<_, InnerBody> = tower::Layer::layer(&layer, route);
    answers_axum_body(&svc);
}

fn ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("in memory every answer is ready at once"),
    }
}

/// Allocations per request through a finished router, after a warm-up (the user's key and
/// the route's paths are tracked by then).
fn allocations_per_request(app: Router) -> u64 {
    let mut app = app.with_state::<()>(());
    let mut send = || {
        let request = Request::get("/items")
            .header("x-user-id", "eve")
            .body(Body::empty())
            .unwrap();
        let response = ready(app.call(request)).unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    };
    for _ in 0..10 {
        send();
    }
    const N: u64 = 200;
    let before = allocations();
    for _ in 0..N {
        send();
    }
    (allocations() - before) / N
}

#[test]
fn under_axum_a_response_costs_one_allocation_less() {
    let make = || {
        let limiter = RateLimiter::builder(config(1 << 40))
            .clock(ManualClock::new())
            .build();
        RateLimitLayer::from_limiter(limiter).user_id_header("x-user-id")
    };
    let wrapped = allocations_per_request(
        Router::new()
            .route("/items", get(|| async { "ok" }))
            .route_layer(make()),
    );
    let inner = allocations_per_request(router(make().inner_body()));
    assert_eq!(inner + 1, wrapped, "inner_body {inner}, wrapped {wrapped}");
}
