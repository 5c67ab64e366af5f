//! The instruction-count harness behind `scripts/instructions.sh` (the CI guard): runs one
//! workload N times, for `valgrind --tool=callgrind` to count. The script runs each workload
//! with N and 2N and divides the difference by N, so that start-up cancels out.
//!
//! ```text
//! cargo run --profile instructions --example instructions -- <workload> <N>
//! ```
//!
//! Workloads:
//! - `check`: one three-tier memory check on hot keys (`RateLimiter::check`), a
//!   `ManualClock` moving 1 µs per check and a 1 ms window, so that every log holds about
//!   1,000 live entries and drops one per check.
//! - `check_route`: the same on a route template with a parameter (`/api/v1/items/{id}`),
//!   whose key part needs encoding (`{` and `}`): the limiter keeps it encoded once.
//! - `router`: one request through an axum router, no limiter (the baseline of `layer`).
//! - `layer`: the same router behind `RateLimitLayer` (memory store, three tiers, the user id
//!   from a header, borrowed): `layer − router` is the layer's work per request.
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::Request;
use tiered_ratelimit::{ManualClock, RateLimitConfig, RateLimitLayer, RateLimiter};
use tower::Service;

fn ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the memory store and the router never wait"),
    }
}

/// Limits that are never reached, on a 1 ms window: every check is admitted and trims one.
/// The user limit is a real API's size (about 1,000 left), so the headers are as a real
/// response's.
fn config() -> RateLimitConfig {
    RateLimitConfig::builder()
        .window(Duration::from_millis(1))
        .user_limit(2_000)
        .endpoint_limit(1 << 40)
        .global_limit(1 << 40)
        .build()
        .expect("valid config")
}

fn check(route: &str, n: u64) {
    let clock = ManualClock::at(Duration::from_secs(1_000_000));
    let limiter = RateLimiter::builder(config()).clock(clock.clone()).build();
    let mut allowed = 0u64;
    for _ in 0..n {
        clock.advance(Duration::from_micros(1));
        let decision =
            ready(limiter.check(std::hint::black_box("alice"), std::hint::black_box(route)));
        allowed += u64::from(decision.allowed());
    }
    assert_eq!(allowed, n);
}

fn serve(mut app: Router, clock: Option<&ManualClock>, n: u64) {
    let mut ok = 0u64;
    for _ in 0..n {
        if let Some(clock) = clock {
            clock.advance(Duration::from_micros(1));
        }
        let request = Request::get("/api/v1/items")
            .header("x-user-id", "alice")
            .body(Body::empty())
            .expect("valid request");
        let response = ready(app.call(request)).expect("infallible");
        ok += u64::from(response.status().is_success());
    }
    assert_eq!(ok, n);
}

fn router() -> Router {
    Router::new().route("/api/v1/items", get(|| async { "items" }))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let workload = args.next().unwrap_or_else(|| "check".into());
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    match workload.as_str() {
        "check" => check("/api/v1/items", n),
        "check_route" => check("/api/v1/items/{id}", n),
        "router" => serve(router().with_state(()), None, n),
        "layer" => {
            let clock = ManualClock::at(Duration::from_secs(1_000_000));
            let limiter = RateLimiter::builder(config()).clock(clock.clone()).build();
            let layer = RateLimitLayer::from_limiter(limiter).user_id_header("x-user-id");
            serve(router().route_layer(layer).with_state(()), Some(&clock), n);
        }
        other => {
            eprintln!("unknown workload {other:?}: check, check_route, router or layer");
            std::process::exit(2);
        }
    }
}
