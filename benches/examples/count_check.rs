//! Instruction-count harness of the memory check, side by side with its baseline: N three-tier
//! checks on hot keys, ours (`RateLimiter::check`) or governor's (three `check_key`s, one per
//! tier, as `benches/benches/check.rs` does), for `valgrind --tool=callgrind` to count.
//! `benches/count_check.sh` counts only the checks' loop (`ours_checks`, `governor_checks`),
//! not the set-up, where governor's clock calibrates itself for a time-dependent number of
//! rounds; it runs each mode with N and 2N checks and divides the difference by N, so that the
//! loop's own fixed costs cancel out too.
//!
//! ```text
//! cargo build --profile instructions -p tiered-ratelimit-benches --example count_check
//! valgrind --tool=callgrind --toggle-collect='count_check::*_checks' \
//!   target/instructions/examples/count_check ours 20000
//! ```
//!
//! Ours: a `ManualClock` moving 1 µs per check and a 1 ms window, so that every log holds about
//! 1,000 live entries and trims one per check (a real log's steady state); limits never
//! reached. Governor: `DefaultKeyedRateLimiter<String>` per tier, a quota never reached, on its
//! default clock. `ours_route` is ours on `/api/v1/items/{id}`, a route whose key part needs
//! encoding (the limiter keeps it encoded). `ours_none`, `ours_global`, `ours_user` and
//! `ours_endpoint` are ours with only that tier on (`none`: every limit 0, so that no tier
//! applies): what a check costs whatever its tiers, and what each tier adds
//! (`TIERS=1 benches/count_check.sh`); `ours_user_endpoint`, with those two tiers, checks that
//! split: it should cost what the parts add up to.
use std::future::Future;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::pin::pin;
use std::process::ExitCode;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use governor::{DefaultKeyedRateLimiter, Quota};
use tiered_ratelimit::{ManualClock, RateLimitConfig, RateLimiter};

fn ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the memory store never waits"),
    }
}

/// A limit never reached.
const HUGE: u64 = 1 << 40;

fn ours(route: &str, n: u64) -> u64 {
    ours_with([HUGE; 3], route, n)
}

/// Ours with these user, endpoint and global limits (0: the tier is off).
fn ours_with([user, endpoint, global]: [u64; 3], route: &str, n: u64) -> u64 {
    let config = RateLimitConfig::builder()
        .window(Duration::from_millis(1))
        .user_limit(user)
        .endpoint_limit(endpoint)
        .global_limit(global)
        .build()
        .expect("valid config");
    let clock = ManualClock::at(Duration::from_secs(1_000_000));
    let limiter = RateLimiter::builder(config).clock(clock.clone()).build();
    ours_checks(&limiter, &clock, route, n)
}

/// The checks alone (`benches/count_check.sh` counts only what runs in here and in the
/// functions it calls, not the set-up).
#[inline(never)]
fn ours_checks(limiter: &RateLimiter, clock: &ManualClock, route: &str, n: u64) -> u64 {
    let mut allowed = 0u64;
    for _ in 0..n {
        clock.advance(Duration::from_micros(1));
        let decision = ready(limiter.check(black_box("alice"), black_box(route)));
        allowed += u64::from(decision.allowed());
    }
    allowed
}

fn governor(n: u64) -> u64 {
    let tier = || DefaultKeyedRateLimiter::<String>::keyed(Quota::per_second(NonZeroU32::MAX));
    let (user, endpoint, global) = (tier(), tier(), tier());
    let keys = [
        "alice".to_owned(),
        "/api/v1/items".to_owned(),
        "global".to_owned(),
    ];
    governor_checks([&user, &endpoint, &global], &keys, n)
}

/// The checks alone (see [`ours_checks`]): governor's clock calibrates itself when the first
/// limiter is made, for a number of rounds that depends on time, so a count with the set-up
/// moves by millions of instructions from one process to the next.
#[inline(never)]
fn governor_checks(
    [user, endpoint, global]: [&DefaultKeyedRateLimiter<String>; 3],
    [u, e, g]: &[String; 3],
    n: u64,
) -> u64 {
    let mut allowed = 0u64;
    for _ in 0..n {
        let ok = user.check_key(black_box(u)).is_ok()
            && endpoint.check_key(black_box(e)).is_ok()
            && global.check_key(black_box(g)).is_ok();
        allowed += u64::from(ok);
    }
    allowed
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    let usage = "usage: count_check ours|ours_route|ours_none|ours_user|ours_endpoint|ours_global|ours_user_endpoint|governor N";
    let Some(n) = args.next().and_then(|n| n.parse::<u64>().ok()) else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    let allowed = match mode.as_str() {
        "ours" => ours("/api/v1/items", n),
        "ours_route" => ours("/api/v1/items/{id}", n),
        "ours_none" => ours_with([0; 3], "/api/v1/items", n),
        "ours_user" => ours_with([HUGE, 0, 0], "/api/v1/items", n),
        "ours_endpoint" => ours_with([0, HUGE, 0], "/api/v1/items", n),
        "ours_global" => ours_with([0, 0, HUGE], "/api/v1/items", n),
        "ours_user_endpoint" => ours_with([HUGE, HUGE, 0], "/api/v1/items", n),
        "governor" => governor(n),
        _ => {
            eprintln!("{usage}");
            return ExitCode::from(2);
        }
    };
    assert_eq!(allowed, n, "every check is admitted");
    ExitCode::SUCCESS
}
