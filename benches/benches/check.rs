//! In-memory check cost, side by side with governor's keyed limiter (one `check_key` per tier,
//! three in all), in one run: `cargo bench -p tiered-ratelimit-benches --bench check`;
//! docs/BENCHMARKS.md has the figures. The cases are set up in
//! `benches/examples/shared/memory_cases.rs`, which `pair_check` runs too.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tiered_ratelimit::{Clock, ManualClock, RateLimitConfig, RateLimiter};

#[path = "../examples/shared/memory_cases.rs"]
mod memory_cases;

use memory_cases::{ready, Case, Setup, HUGE};

/// Both sides of `case`, as a criterion group of the case's name.
fn compare(c: &mut Criterion, case: Case) {
    let setup = Setup::new(case);
    let mut group = c.benchmark_group(case.name());
    group.throughput(Throughput::Elements(1));
    group.bench_function(BenchmarkId::new("tiered_ratelimit", "memory"), |b| {
        b.iter_custom(|iters| setup.ours(iters))
    });
    group.bench_function(BenchmarkId::new("governor_keyed_x3", "memory"), |b| {
        b.iter_custom(|iters| setup.governor(iters))
    });
    group.finish();
}

fn hot_keys(c: &mut Criterion) {
    compare(c, Case::HotKeys);
}

fn contention_and_spread(c: &mut Criterion) {
    compare(c, Case::SameKeys);
    compare(c, Case::Users { threads: 2 });
    compare(c, Case::Users { threads: 1 });
}

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
