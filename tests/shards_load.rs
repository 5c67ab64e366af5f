//! `redis.global_shards = 3` on a three-master Redis Cluster of this test's own, under real
//! concurrent load (Redis `TIME`, two limiters standing for two app instances): the limit is
//! never passed, at least 99% of it is admitted at demand 2x the limit, and the global tier's
//! scripts spread over the three masters. The same load with one global key is the baseline.
//! Then a shard's master dies: the limiter falls back to memory, like any Redis failure.
//!
//! ```sh
//! cargo test --release --test shards_load -- --nocapture   # prints the figures of BENCHMARKS.md
//! ```
#![cfg(feature = "redis")]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::RedisCluster;
use tiered_ratelimit::shards::ShardLayout;
use tiered_ratelimit::{Backend, RateLimitConfig, RateLimiter};

const WINDOW: Duration = Duration::from_secs(4);
const LIMIT: u64 = 2_000;
/// Every request is sent within this span, well inside one window: the global tier may then
/// admit at most `LIMIT` of them, and an exact single log would admit exactly `LIMIT`.
const SPAN: Duration = Duration::from_secs(3);
const TASKS_PER_LIMITER: u64 = 16;

/// The two load tests run one at a time: each paces real-time load against its own three
/// masters, and two of them at once on a 2-core machine would stretch each other's pacing.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `INFO commandstats` of `evalsha` on one master: (calls, µs spent).
fn evalsha_stats(cluster: &RedisCluster, node: usize) -> (u64, u64) {
    let info = cluster.nodes[node].cli(&["INFO", "commandstats"]);
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
        .unwrap_or("calls=0,usec=0");
    let field = |name: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("calls="), field("usec="))
}

async fn limiter(cluster: &RedisCluster, prefix: &str, shards: u32) -> RateLimiter {
    limiter_with(cluster, prefix, shards, WINDOW, LIMIT).await
}

async fn limiter_with(
    cluster: &RedisCluster,
    prefix: &str,
    shards: u32,
    window: Duration,
    limit: u64,
) -> RateLimiter {
    let config = RateLimitConfig::builder()
        .window(window)
        .global_limit(limit)
        .key_prefix(prefix)
        .redis_url(cluster.url())
        .redis_command_timeout(Duration::from_secs(2))
        .redis_global_shards(shards)
        .build()
        .unwrap();
    let limiter = RateLimiter::builder(config).build();
    limiter.wait_connected().await;
    assert_eq!(limiter.backend(), Backend::Redis);
    limiter
}

/// Demand `2 * LIMIT` requests over `SPAN`, half through each limiter, from many tasks at an
/// even pace. Returns how many were admitted.
async fn load(limiters: &[RateLimiter; 2]) -> u64 {
    load_for(limiters, 2 * LIMIT, SPAN).await
}

/// `requests` over `span`, half through each limiter, from many tasks at an even pace.
async fn load_for(limiters: &[RateLimiter; 2], requests: u64, span: Duration) -> u64 {
    let admitted = Arc::new(AtomicU64::new(0));
    let per_task = requests / (2 * TASKS_PER_LIMITER);
    let gap = span / per_task as u32;
    let mut tasks = Vec::new();
    for (l, limiter) in limiters.iter().enumerate() {
        for t in 0..TASKS_PER_LIMITER {
            let (limiter, admitted) = (limiter.clone(), admitted.clone());
            // Staggered, so that the tasks do not send in step.
            let offset = gap * (t * 2 + l as u64) as u32 / (2 * TASKS_PER_LIMITER) as u32;
            tasks.push(tokio::spawn(async move {
                let start = Instant::now() + offset;
                for i in 0..per_task {
                    tokio::time::sleep_until((start + gap * i as u32).into()).await;
                    if limiter.check(&format!("u{t}"), "/items").await.allowed() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    admitted.load(Ordering::Relaxed)
}

fn reset_stats(cluster: &RedisCluster) {
    for node in &cluster.nodes {
        node.cli(&["CONFIG", "RESETSTAT"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_shards_admit_the_limit_and_spread_over_the_masters() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let cluster = RedisCluster::start();
    let mut busiest = Vec::new();
    for shards in [1, 3] {
        let prefix = format!("load{shards}");
        let limiters = [
            limiter(&cluster, &prefix, shards).await,
            limiter(&cluster, &prefix, shards).await,
        ];
        reset_stats(&cluster);
        let started = Instant::now();
        let admitted = load(&limiters).await;
        let took = started.elapsed();
        let stats: Vec<(u64, u64)> = (0..3).map(|n| evalsha_stats(&cluster, n)).collect();
        let calls: u64 = stats.iter().map(|s| s.0).sum();
        println!(
            "S = {shards}: demand {} in {took:?}, admitted {admitted} of limit {LIMIT} ({:.2}%); \
             EVALSHA per master (calls, µs) {stats:?}, {:.3} scripts per check",
            2 * LIMIT,
            100.0 * admitted as f64 / LIMIT as f64,
            calls as f64 / (2 * LIMIT) as f64,
        );
        assert!(took < WINDOW, "the load must fit in one window: {took:?}");
        assert!(admitted <= LIMIT, "over the limit: {admitted}");
        assert!(admitted * 100 >= LIMIT * 99, "short of 99%: {admitted}");
        if shards == 3 {
            let layout = ShardLayout::new(3);
            let mut total = 0;
            for i in 0..3 {
                let key = format!("{prefix}:global:{{{}}}", layout.tag(i));
                let card: u64 = cluster
                    .cli_for(&key, &["ZCARD", &key])
                    .trim()
                    .parse()
                    .unwrap();
                assert!(card <= layout.cap(LIMIT, i), "{key}: {card}");
                total += card;
            }
            assert_eq!(total, admitted, "what Redis holds is what was admitted");
            for (node, &(node_calls, _)) in stats.iter().enumerate() {
                let third = calls as f64 / 3.0;
                let off = (node_calls as f64 - third).abs() / third;
                assert!(off <= 0.2, "master {node}: {node_calls} of {calls} calls");
            }
        }
        let (calls, usec) = stats.iter().copied().max_by_key(|s| s.1).unwrap();
        busiest.push((shards, calls, usec));
    }
    for (shards, calls, usec) in &busiest {
        println!(
            "S = {shards}: busiest master ran {calls} scripts in {usec} µs: {:.2} µs per check",
            *usec as f64 / (2 * LIMIT) as f64
        );
    }
    assert!(
        busiest[1].1 * 2 < busiest[0].1,
        "the busiest master's share fell: {busiest:?}"
    );

    // A shard's master dies: like any Redis failure, the limiter falls back to memory.
    let mut cluster = cluster;
    let prefix = "load-fail";
    let l = limiter(&cluster, prefix, 3).await;
    let key = format!("{prefix}:global:{{{}}}", ShardLayout::new(3).tag(1));
    let owner = cluster.owner_of(&key);
    cluster.nodes[owner].kill();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut checks = 0;
    while l.backend() != Backend::Memory {
        assert!(
            Instant::now() < deadline,
            "no fallback after {checks} checks"
        );
        let _ = l.check("u", "/items").await;
        checks += 1;
    }
    println!("a dead shard master: fell back to memory after {checks} checks");
}

/// Steady demand at 2x the limit for several windows, so shards free while requests walk them:
/// three shards admit at least 99% of what one exact key admits under the same load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_shards_admit_as_much_as_one_key_over_several_windows() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let cluster = RedisCluster::start();
    let (window, limit, windows) = (Duration::from_secs(1), 500, 5);
    let mut admitted = Vec::new();
    for shards in [1, 3] {
        let prefix = format!("steady{shards}");
        let limiters = [
            limiter_with(&cluster, &prefix, shards, window, limit).await,
            limiter_with(&cluster, &prefix, shards, window, limit).await,
        ];
        let started = Instant::now();
        let n = load_for(&limiters, 2 * limit * windows, window * windows as u32).await;
        let took = started.elapsed();
        // Sliding windows over a span of k windows admit at most k + 1 limits' worth; a loaded
        // machine may stretch the span past the `windows` it was paced for.
        let spanned = took.as_micros().div_ceil(window.as_micros()) as u64;
        assert!(
            n <= limit * (spanned.max(windows) + 1),
            "S = {shards}: {n} admitted in {took:?}"
        );
        println!(
            "S = {shards}: {} requests over {windows} windows of {window:?} at 2x a limit of \
             {limit}: admitted {n} ({:.3} of the limit per window)",
            2 * limit * windows,
            n as f64 / (limit * windows) as f64
        );
        admitted.push(n);
    }
    assert!(admitted[1] * 100 >= admitted[0] * 99, "{admitted:?}");
}
