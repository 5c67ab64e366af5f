//! Instruction-count harness of the HTTP comparison: N requests through one of `bench_http`'s
//! ten servers (`bare`, `headers`, `ours`, `inner`, `inner_handler`, `governor`,
//! `governor_headers`, `governor_handler`, `floor`, `floor_handler`), called in process (no
//! socket, no runtime: every future here is ready at once), for `valgrind --tool=callgrind` to
//! count.
//! `benches/count_http.sh` counts only the requests' loop (`requests`), not the set-up, and
//! runs each mode with N and 2N requests and divides the difference by N: the instructions one
//! request costs in user space, without the kernel's TCP work that wrk's figures also hold.
//!
//! ```text
//! cargo build --release -p tiered-ratelimit-benches --example count_http
//! valgrind --tool=callgrind --toggle-collect='count_http::requests' \
//!   target/release/examples/count_http ours 20000
//! ```
//!
//! Each request is `GET /` with `x-user-id: alice`, through the router finished once with
//! `with_state(())` as `axum::serve` does, so that routes are not rebuilt per request. Ours
//! (and `inner`, `inner_handler`) runs on a manual clock moved 100 µs per request (its 1 s logs
//! fill up to 10,000 entries, then trim one per request, as under steady load), so that its
//! count is the same on every run; the peers' work does not depend on the time.

use std::future::Future;
use std::pin::pin;
use std::process::ExitCode;
use std::task::{Context, Poll, Waker};

use axum::body::Body;
use http::Request;
use tower::Service;

#[path = "shared/http_app.rs"]
mod http_app;

use std::time::Duration;

use http_app::{app_with_clock, Mode};
use tiered_ratelimit::ManualClock;

fn ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("every server here answers at once"),
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(mode), Some(n)) = (
        args.next().as_deref().and_then(Mode::parse),
        args.next().and_then(|n| n.parse::<u64>().ok()),
    ) else {
        eprintln!(
            "usage: count_http bare|headers|ours|inner|inner_handler|governor|governor_headers|governor_handler|floor|floor_handler N"
        );
        return ExitCode::from(2);
    };
    let clock = ManualClock::at(Duration::from_secs(1_000_000));
    let mut router = match app_with_clock(mode, Some(clock.clone())) {
        Ok(router) => router.with_state(()),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let ok = requests(&mut router, &clock, n);
    if ok != n {
        eprintln!("error: {} of {n} requests were not answered 200", n - ok);
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// The requests alone: `benches/count_http.sh` counts only what runs in here and in the
/// functions it calls, not the set-up (tower_governor's clock calibrates itself when its
/// layer is made, for a number of rounds that depends on time). How many were answered 200.
#[inline(never)]
fn requests(router: &mut axum::Router, clock: &ManualClock, n: u64) -> u64 {
    let mut ok = 0u64;
    for _ in 0..n {
        clock.advance(Duration::from_micros(100));
        let request = Request::get("/")
            .header("x-user-id", "alice")
            .body(Body::empty())
            .expect("valid request");
        let response = ready(router.call(request)).expect("infallible");
        ok += u64::from(response.status().is_success());
    }
    ok
}
