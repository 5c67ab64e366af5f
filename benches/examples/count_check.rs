//! Instruction-count harness: N three-tier memory checks on hot keys, a ManualClock moving
//! 1 µs per check and a 1 ms window (so every log holds ~1000 live entries and trims one per
//! check). Run under `valgrind --tool=callgrind`; compare the instructions with N and 2N to
//! get the instructions per check:
//! `cargo build --release -p tiered-ratelimit-benches --example count_check`, then
//! `valgrind --tool=callgrind target/release/examples/count_check N` (docs/BENCHMARKS.md).
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tiered_ratelimit::{ManualClock, RateLimitConfig, RateLimiter};

fn ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the memory store never waits"),
    }
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let config = RateLimitConfig::builder()
        .window(Duration::from_millis(1))
        .user_limit(1 << 40)
        .endpoint_limit(1 << 40)
        .global_limit(1 << 40)
        .build()
        .unwrap();
    let clock = ManualClock::at(Duration::from_secs(1_000_000));
    let limiter = RateLimiter::builder(config).clock(clock.clone()).build();
    let mut allowed = 0u64;
    for _ in 0..n {
        clock.advance(Duration::from_micros(1));
        allowed += u64::from(
            ready(limiter.check(
                std::hint::black_box("alice"),
                std::hint::black_box("/api/v1/items"),
            ))
            .allowed(),
        );
    }
    assert_eq!(allowed, n);
}
