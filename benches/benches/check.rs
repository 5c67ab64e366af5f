//! In-memory check cost, side by side with governor's keyed limiter (one `check_key` per tier,
//! three in all), in one run: `cargo bench -p tiered-ratelimit-benches --bench check`;
//! docs/BENCHMARKS.md has the figures.

use std::future::Future;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use governor::{DefaultKeyedRateLimiter, Quota};
use tiered_ratelimit::{Clock, ManualClock, RateLimitConfig, RateLimiter};

/// Limits never reached in a bench: the admitted path, the one every served request takes.
const HUGE: u64 = 1 << 40;
const USERS: usize = 100_000;

/// Polls a future that completes without waiting (the memory store never waits).
fn ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the memory store never waits"),
    }
}

fn ours(window: Duration) -> RateLimiter {
    RateLimiter::new(
        RateLimitConfig::builder()
            .window(window)
            .user_limit(HUGE)
            .endpoint_limit(HUGE)
            .global_limit(HUGE)
            .build()
            .unwrap(),
    )
}

struct Governor {
    user: DefaultKeyedRateLimiter<String>,
    endpoint: DefaultKeyedRateLimiter<String>,
    global: DefaultKeyedRateLimiter<String>,
}

impl Governor {
    fn new() -> Self {
        let quota = || Quota::per_second(NonZeroU32::MAX);
        Self {
            user: DefaultKeyedRateLimiter::keyed(quota()),
            endpoint: DefaultKeyedRateLimiter::keyed(quota()),
            global: DefaultKeyedRateLimiter::keyed(quota()),
        }
    }

    fn check(&self, user: &String, endpoint: &String, global: &String) -> bool {
        self.user.check_key(user).is_ok()
            && self.endpoint.check_key(endpoint).is_ok()
            && self.global.check_key(global).is_ok()
    }
}

fn user_ids() -> Vec<String> {
    (0..USERS).map(|i| format!("user-{i}")).collect()
}

/// Target 1: one thread, one set of hot keys.
fn hot_keys(c: &mut Criterion) {
    let mut group = c.benchmark_group("hot_keys_1_thread");
    group.throughput(Throughput::Elements(1));
    let limiter = ours(Duration::from_secs(1));
    group.bench_function(BenchmarkId::new("tiered_ratelimit", "memory"), |b| {
        b.iter(|| ready(limiter.check(black_box("alice"), black_box("/api/v1/items"))).allowed())
    });
    let gov = Governor::new();
    let (u, e, g) = (
        "alice".to_owned(),
        "/api/v1/items".to_owned(),
        "global".to_owned(),
    );
    group.bench_function(BenchmarkId::new("governor_keyed_x3", "memory"), |b| {
        b.iter(|| gov.check(black_box(&u), black_box(&e), black_box(&g)))
    });
    group.finish();
}

/// Runs `per_thread(thread, iters)` on `threads` threads at once; the time of the slowest.
fn on_threads(threads: usize, iters: u64, per_thread: impl Fn(usize, u64) + Sync) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let f = &per_thread;
            s.spawn(move || f(t, iters / threads as u64));
        }
    });
    start.elapsed()
}

/// Target 2: two threads contending on the same keys; and spread over 100,000 users.
fn contention_and_spread(c: &mut Criterion) {
    let ids = Arc::new(user_ids());
    let mut group = c.benchmark_group("two_threads_same_keys");
    group.throughput(Throughput::Elements(1));
    let limiter = ours(Duration::from_secs(1));
    group.bench_function(BenchmarkId::new("tiered_ratelimit", "memory"), |b| {
        b.iter_custom(|iters| {
            on_threads(2, iters, |_, n| {
                for _ in 0..n {
                    black_box(ready(limiter.check("alice", "/api/v1/items")).allowed());
                }
            })
        })
    });
    let gov = Governor::new();
    let (u, e, g) = (
        "alice".to_owned(),
        "/api/v1/items".to_owned(),
        "global".to_owned(),
    );
    group.bench_function(BenchmarkId::new("governor_keyed_x3", "memory"), |b| {
        b.iter_custom(|iters| {
            on_threads(2, iters, |_, n| {
                for _ in 0..n {
                    black_box(gov.check(&u, &e, &g));
                }
            })
        })
    });
    group.finish();

    spread(c, &ids, 2, "two_threads_100k_users");
    spread(c, &ids, 1, "one_thread_100k_users");
}

/// 100,000 users checked by `threads` threads at once (each its own half of them, in a stride
/// that defeats the prefetcher), every check on one endpoint and the global key. Two threads
/// is target 2's case; one thread is there to tell the cache misses of many keys (which one
/// thread pays alone) from the contention on the shared tiers (which only two threads meet).
fn spread(c: &mut Criterion, ids: &[String], threads: usize, name: &str) {
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(1));
    // A 100 ms window keeps the logs short while 100,000 users cycle through.
    let limiter = ours(Duration::from_millis(100));
    for id in ids {
        ready(limiter.check(id, "/api/v1/items"));
    }
    group.bench_function(BenchmarkId::new("tiered_ratelimit", "memory"), |b| {
        b.iter_custom(|iters| {
            on_threads(threads, iters, |t, n| {
                for i in 0..n as usize {
                    let id = &ids[(i * 7919 + t * 50_000) % USERS];
                    black_box(ready(limiter.check(id, "/api/v1/items")).allowed());
                }
            })
        })
    });
    let gov = Governor::new();
    let (e, g) = ("/api/v1/items".to_owned(), "global".to_owned());
    for id in ids {
        gov.check(id, &e, &g);
    }
    group.bench_function(BenchmarkId::new("governor_keyed_x3", "memory"), |b| {
        b.iter_custom(|iters| {
            on_threads(threads, iters, |t, n| {
                for i in 0..n as usize {
                    let id = &ids[(i * 7919 + t * 50_000) % USERS];
                    black_box(gov.check(id, &e, &g));
                }
            })
        })
    });
    group.finish();
}

/// Target 3: the cost does not grow with the entries in the window, a key holding 1,000,000
/// live entries against one holding 10.
///
/// A manual clock moves 1 µs a check and the window is as many µs as entries, so each check
/// expires one entry and records one: the count stays put.
fn live_entries(c: &mut Criterion) {
    let mut group = c.benchmark_group("live_entries_per_key");
    group.throughput(Throughput::Elements(1));
    for entries in [10u64, 1_000_000] {
        let clock = ManualClock::at(Duration::from_secs(1_000));
        let limiter = RateLimiter::builder(
            RateLimitConfig::builder()
                .window(Duration::from_micros(entries - 1))
                .user_limit(HUGE)
                .build()
                .unwrap(),
        )
        .clock(clock.clone())
        .build();
        for _ in 0..entries {
            ready(limiter.check("hot", "/"));
            clock.advance(Duration::from_micros(1));
        }
        let before = ready(limiter.check("hot", "/")).remaining();
        assert_eq!(HUGE - before, entries, "the window holds {entries} entries");
        group.bench_function(BenchmarkId::new("tiered_ratelimit", entries), |b| {
            b.iter(|| {
                clock.advance(Duration::from_micros(1));
                ready(limiter.check("hot", "/")).remaining()
            })
        });
        let after = ready(limiter.check("hot", "/")).remaining();
        assert!(
            HUGE - after <= entries + 1,
            "still about {entries} live entries"
        );
        let _ = clock.now();
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = hot_keys, contention_and_spread, live_entries
}
criterion_main!(benches);
