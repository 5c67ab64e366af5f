//! `RateLimitLayer::inner_body`: responses carry the inner service's own body type. Over real
//! HTTP in memory, on Redis (the store that waits) and on the cluster: the same bytes on the wire as the
//! default wrapped body, request by request, under `route_layer` and `Router::layer`, with
//! shadow mode, IETF headers and rejections of one's own; a plain tower service with
//! `Full<Bytes>`; and the allocation it saves on an allowed response under axum, counted.
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
    Backend, InnerBody, ManualClock, RateLimitConfig, RateLimitConfigBuilder, RateLimitLayer,
    RateLimiter,
};
use tower::{Service, ServiceExt};

use common::TestBackend;

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

/// A minute's window, `user` requests a user in it, the other tiers off.
fn builder(user: u64) -> RateLimitConfigBuilder {
    RateLimitConfig::builder()
        .window(Duration::from_secs(60))
        .user_limit(user)
        .endpoint_limit(0)
        .global_limit(0)
}

fn config(user: u64) -> RateLimitConfig {
    builder(user).build().unwrap()
}

fn router(layer: RateLimitLayer<InnerBody>) -> Router {
    Router::new()
        .route("/items", get(|| async { "ok" }))
        .route_layer(layer)
}

/// Serves `app` on a free port; its address.
async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr.to_string()
}

/// The `/items` route of the app served at `addr`.
fn items(addr: &str) -> String {
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

/// Two requests of `user` admitted (remaining 1, 0), the third a 429 with the problem body
/// (the limiter on a clock that does not move).
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
    // On a clock that stands still, the first slot frees a window and 1 µs later: 61 s.
    assert_eq!(r.retry_after.as_deref(), Some("61"));
    assert_eq!(r.content_type.as_deref(), Some("application/problem+json"));
    let problem: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["policy"], "user");
    assert_eq!(problem["retry_after"], 61);
}

#[tokio::test]
async fn in_memory_over_http_two_are_admitted_then_a_429_with_the_problem_body() {
    let limiter = TestBackend::memory()
        .limiter(builder(2), &ManualClock::new())
        .await;
    let layer = RateLimitLayer::from_limiter(limiter).user_id_header("x-user-id");
    let url = items(&serve(router(layer.inner_body())).await);
    two_then_429(&url, "ann").await;
    // Another user is not affected.
    assert_eq!(get_as(&url, "ben").await.status, StatusCode::OK);
}

#[tokio::test]
async fn on_redis_the_waiting_path_admits_two_then_answers_the_problem_body() {
    let backend = TestBackend::redis();
    let limiter = backend.limiter(builder(2), &ManualClock::new()).await;
    let layer = RateLimitLayer::from_limiter(limiter.clone()).user_id_header("x-user-id");
    let url = items(&serve(router(layer.inner_body())).await);
    two_then_429(&url, "cleo").await;
    let TestBackend::Redis(server) = &backend else {
        unreachable!("a Redis backend")
    };
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
    let url = items(&serve(router(empty)).await);
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
fn under_axum_an_allowed_response_costs_one_allocation_less() {
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

/// Where the layer goes: on the matched routes only, or on the whole router (a 404 counted).
#[derive(Clone, Copy, Debug)]
enum Attach {
    RouteLayer,
    Layer,
}

/// A body of two frames, sent chunked.
struct TwoChunks(u8);

impl http_body::Body for TwoChunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        self.0 += 1;
        Poll::Ready(match self.0 {
            1 => Some(Ok(http_body::Frame::data(Bytes::from_static(b"ab")))),
            2 => Some(Ok(http_body::Frame::data(Bytes::from_static(b"cd")))),
            _ => None,
        })
    }
}

/// Routes with a text, an empty and a chunked body.
fn routes() -> Router {
    Router::new()
        .route("/items", get(|| async { "ok" }).post(|| async { "made" }))
        .route("/empty", get(|| async { "" }))
        .route("/chunks", get(|| async { Body::new(TwoChunks(0)) }))
}

/// [`routes`] with `$layer` attached as `$attach` says (a macro: the two body modes are two
/// types).
macro_rules! attached {
    ($attach:expr, $layer:expr) => {
        match $attach {
            Attach::RouteLayer => routes().route_layer($layer),
            Attach::Layer => routes().layer($layer),
        }
    };
}

/// The whole answer to one HTTP/1.1 request, as bytes on the wire, less its `Date` line.
async fn raw(addr: &str, method: &str, path: &str, user: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\nx-user-id: {user}\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer)
        .split("\r\n")
        .filter(|line| !line.to_ascii_lowercase().starts_with("date:"))
        .collect::<Vec<_>>()
        .join("\r\n")
}

/// Three requests of each kind (the user limit is 2): allowed, allowed, denied.
const SEQUENCE: [(&str, &str, &str); 7] = [
    ("GET", "/items", "get"),
    ("HEAD", "/items", "head"),
    ("GET", "/empty", "empty"),
    ("GET", "/chunks", "chunks"),
    ("POST", "/items", "post"),
    ("GET", "/nowhere", "lost"),
    ("HEAD", "/nowhere", "lost-head"),
];

type Configure = fn(RateLimitConfigBuilder) -> RateLimitConfigBuilder;
type Customize = fn(RateLimitLayer) -> RateLimitLayer;

/// What the wrapped and the inner body answer to the same requests, each on a backend of its
/// own made by `backend` (a Redis server each, or a key prefix each on the cluster), compared
/// byte for byte.
async fn same_bytes_on_the_wire(
    configure: Configure,
    customize: Customize,
    denies: bool,
    backend: fn() -> TestBackend,
) {
    for attach in [Attach::RouteLayer, Attach::Layer] {
        let clock = ManualClock::new();
        let backends = [backend(), backend()];
        let mut layers = Vec::new();
        for backend in &backends {
            let limiter = backend.limiter(configure(builder(2)), &clock).await;
            layers.push(customize(
                RateLimitLayer::from_limiter(limiter).user_id_header("x-user-id"),
            ));
        }
        let inner = layers.pop().unwrap().inner_body();
        let wrapped = layers.pop().unwrap();
        let wrapped = &serve(attached!(attach, wrapped)).await;
        let inner = &serve(attached!(attach, inner)).await;
        let mut denied = 0;
        for (method, path, user) in SEQUENCE {
            for n in 1..=3 {
                let expected = raw(wrapped, method, path, user).await;
                if expected.starts_with("HTTP/1.1 429") || expected.starts_with("HTTP/1.1 503") {
                    denied += 1;
                }
                assert_eq!(
                    raw(inner, method, path, user).await,
                    expected,
                    "{attach:?} {method} {path} #{n}"
                );
            }
        }
        // The third of each kind is denied, unless in shadow mode; under `route_layer` the
        // unmatched path is not limited at all.
        let kinds = match attach {
            Attach::RouteLayer => 5,
            Attach::Layer => 7,
        };
        assert_eq!(denied, if denies { kinds } else { 0 }, "{attach:?}");
    }
}

fn as_configured(builder: RateLimitConfigBuilder) -> RateLimitConfigBuilder {
    builder
}

fn shadow(builder: RateLimitConfigBuilder) -> RateLimitConfigBuilder {
    builder.shadow(true)
}

fn both_styles(builder: RateLimitConfigBuilder) -> RateLimitConfigBuilder {
    builder.headers(tiered_ratelimit::HeaderStyle::Both)
}

fn as_built(layer: RateLimitLayer) -> RateLimitLayer {
    layer
}

fn empty_503(layer: RateLimitLayer) -> RateLimitLayer {
    layer.on_rejection(|_| {
        let mut response = Response::new(Bytes::new());
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        response
    })
}

fn plain_text(layer: RateLimitLayer) -> RateLimitLayer {
    layer.on_rejection(|_| {
        Response::builder()
            .status(StatusCode::TOO_MANY_REQUESTS)
            .header(http::header::CONTENT_TYPE, "text/plain")
            .body(Bytes::from_static(b"slow down"))
            .unwrap()
    })
}

/// Each case: its name, its configuration and layer, whether it denies (not in shadow mode).
const CASES: [(&str, Configure, Customize, bool); 5] = [
    ("the problem body", as_configured, as_built, true),
    ("shadow mode", shadow, as_built, false),
    ("IETF and legacy headers", both_styles, as_built, true),
    ("an empty 503 of one's own", as_configured, empty_503, true),
    ("a text 429 of one's own", both_styles, plain_text, true),
];

/// Every case on a pair of backends made by `backend`.
async fn every_case(backend: fn() -> TestBackend) {
    for (case, configure, customize, denies) in CASES {
        eprintln!("{case}");
        same_bytes_on_the_wire(configure, customize, denies, backend).await;
    }
}

#[tokio::test]
async fn in_memory_the_inner_body_puts_the_same_bytes_on_the_wire() {
    every_case(TestBackend::memory).await;
}

#[tokio::test]
async fn on_redis_the_inner_body_puts_the_same_bytes_on_the_wire() {
    every_case(TestBackend::redis).await;
}

#[tokio::test]
async fn on_the_cluster_the_inner_body_puts_the_same_bytes_on_the_wire() {
    every_case(TestBackend::cluster).await;
}
