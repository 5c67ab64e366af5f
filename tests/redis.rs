//! The Redis store against real `redis-server` processes this test starts: sharing between
//! limiters, one round trip per check, and the fallback when Redis is absent, killed or paused.
#![cfg(feature = "redis")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{connected, free_port, limits, RedisServer};
use tiered_ratelimit::{Backend, ManualClock, RateLimitConfig, RateLimiter, Tier, TimeSource};

const MINUTE: Duration = Duration::from_secs(60);
/// The command timeout of the tests that make Redis fail (kill, pause, absent).
const TIMEOUT: Duration = Duration::from_millis(100);
/// The command and connect timeouts of the tests where Redis stays up: longer than any
/// scheduling hiccup of a loaded machine, so that no check there falls back by accident.
const STEADY: Duration = Duration::from_secs(5);

/// A config on `server` for a test where Redis stays up.
fn redis_config(server: &RedisServer, user: u64, endpoint: u64, global: u64) -> RateLimitConfig {
    config_with_timeout(server, user, endpoint, global, STEADY)
}

/// A config on `server` for a test that makes Redis fail: the short [`TIMEOUT`].
fn failing_config(server: &RedisServer, user: u64, endpoint: u64, global: u64) -> RateLimitConfig {
    config_with_timeout(server, user, endpoint, global, TIMEOUT)
}

fn config_with_timeout(
    server: &RedisServer,
    user: u64,
    endpoint: u64,
    global: u64,
    timeout: Duration,
) -> RateLimitConfig {
    limits(user, endpoint, global, MINUTE)
        .redis_url(server.url())
        .redis_time_source(TimeSource::App) // driven by a ManualClock
        .redis_command_timeout(timeout)
        .redis_connect_timeout(STEADY)
        .build()
        .unwrap()
}

/// Runs `per_limiter` concurrent checks on each limiter at once; returns admitted counts.
async fn burst(limiters: &[RateLimiter], per_limiter: usize, users: usize) -> Vec<usize> {
    let mut handles = Vec::new();
    for (li, limiter) in limiters.iter().enumerate() {
        for i in 0..per_limiter {
            let limiter = limiter.clone();
            handles.push(tokio::spawn(async move {
                let user = format!("user-{}", (i + li) % users);
                let d = limiter.check(&user, "/api/v1/items").await;
                (li, d.allowed())
            }));
        }
    }
    let mut admitted = vec![0; limiters.len()];
    for h in handles {
        let (li, ok) = h.await.unwrap();
        admitted[li] += usize::from(ok);
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_limiters_on_one_redis_admit_exactly_the_global_limit() {
    let server = RedisServer::start();
    let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
    let a = connected(redis_config(&server, 0, 0, 100), &clock).await;
    let b = connected(redis_config(&server, 0, 0, 100), &clock).await;
    let admitted = burst(&[a.clone(), b.clone()], 300, 50).await;
    assert_eq!(
        admitted.iter().sum::<usize>(),
        100,
        "admitted per limiter: {admitted:?}"
    );
    // Same microsecond for all 100: the members are unique, so all 100 are in the set.
    let zcard = server.cli(&["ZCARD", "rate_limit:global"]);
    assert_eq!(zcard.trim(), "100");
    assert!(!a.check("late", "/x").await.allowed());
    assert_eq!(a.backend(), Backend::Redis);
    assert_eq!(b.backend(), Backend::Redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_limiters_share_every_tier_exactly() {
    let server = RedisServer::start();
    let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
    let a = connected(redis_config(&server, 3, 40, 1000), &clock).await;
    let b = connected(redis_config(&server, 3, 40, 1000), &clock).await;
    // 10 users × 3 = 30 < 40: the user tier binds.
    let admitted = burst(&[a.clone(), b.clone()], 200, 10).await;
    assert_eq!(admitted.iter().sum::<usize>(), 30, "{admitted:?}");
    for u in 0..10 {
        let card = server.cli(&["ZCARD", &format!("rate_limit:user:user-{u}")]);
        assert_eq!(card.trim(), "3", "user-{u}");
    }
    // A denied request left no trace: the endpoint and global tiers hold exactly 30.
    assert_eq!(
        server
            .cli(&["ZCARD", "rate_limit:endpoint:/api/v1/items"])
            .trim(),
        "30"
    );
    assert_eq!(server.cli(&["ZCARD", "rate_limit:global"]).trim(), "30");
    // 30 users × 3 = 90 > 40: now the endpoint tier binds.
    clock.advance(MINUTE * 2);
    let admitted = burst(&[a, b], 200, 30).await;
    assert_eq!(admitted.iter().sum::<usize>(), 40, "{admitted:?}");
}

/// docs/REDIS.md, "Batches": under a steady load the two batches on their way carry the
/// checks in halves. 16 callers, each checking again as soon as it is answered, send one
/// EVALSHA for about 8 checks; sending each batch as soon as its first check came would keep
/// thirds going round, about 5 checks each. A build running on the other core can hold this
/// process back mid-round and break the halves up for a while, so up to three rounds are run
/// and one must show halves (a build that sends thirds shows them in none).
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_steady_load_goes_to_redis_in_two_halves() {
    let server = RedisServer::start();
    let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
    let limiter = connected(redis_config(&server, 1 << 30, 1 << 30, 1 << 30), &clock).await;
    let (callers, each) = (16, 300);
    let (mut rounds, mut best) = (Vec::new(), 0.0_f64);
    while rounds.len() < 3 && best < 7.0 {
        let before = server.command_calls("evalsha");
        let tasks: Vec<_> = (0..callers)
            .map(|u| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    for _ in 0..each {
                        assert!(limiter.check(&format!("user-{u}"), "/e").await.allowed());
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let evalsha = server.command_calls("evalsha") - before;
        let per_call = (callers * each) as f64 / evalsha as f64;
        rounds.push(format!("{evalsha} EVALSHA, {per_call:.1} a call"));
        best = best.max(per_call);
    }
    assert!(
        best >= 7.0,
        "{} checks a round: {rounds:?}, not halves of 16",
        callers * each
    );
    assert_eq!(limiter.backend(), Backend::Redis);
}

/// docs/REDIS.md, "Batches": each batch is written to the socket at once (`TCP_NODELAY`). With
/// Nagle's algorithm on, a batch written while the one before is unacknowledged waits for that
/// ACK, which mostly rides on the reply: two batches on their way would be one on the wire.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_to_redis_writes_without_delay() {
    let server = RedisServer::start();
    let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
    let limiter = connected(redis_config(&server, 5, 100, 1000), &clock).await;
    assert!(limiter.check("u", "/e").await.allowed());
    let sockets = sockets::tcp_to(server.port());
    assert!(
        !sockets.is_empty(),
        "no connection to the test's Redis found"
    );
    for (fd, nodelay) in sockets {
        assert!(nodelay, "socket {fd} to Redis has Nagle's algorithm on");
    }
}

/// This process's TCP sockets, read from `/proc/self/fd` with `getpeername` and `getsockopt`.
#[cfg(target_os = "linux")]
mod sockets {
    /// Each socket connected to 127.0.0.1:`port`, and whether it has `TCP_NODELAY` set.
    pub fn tcp_to(port: u16) -> Vec<(i32, bool)> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
            let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            if peer_port(fd) == Some(port) {
                found.push((fd, nodelay(fd)));
            }
        }
        found
    }

    fn peer_port(fd: i32) -> Option<u16> {
        // SAFETY: a zeroed sockaddr_storage is a valid value, and getpeername writes at most
        // `len` bytes into it; an fd that is not a socket only makes it fail.
        let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let ok = unsafe { libc::getpeername(fd, (&raw mut addr).cast(), &mut len) } == 0;
        if !ok || i32::from(addr.ss_family) != libc::AF_INET {
            return None;
        }
        // SAFETY: an AF_INET address is a sockaddr_in, which fits in sockaddr_storage.
        let inet: libc::sockaddr_in = unsafe { std::ptr::read((&raw const addr).cast()) };
        Some(u16::from_be(inet.sin_port))
    }

    fn nodelay(fd: i32) -> bool {
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `value`.
        let ok = unsafe {
            libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&raw mut value).cast(),
                &mut len,
            )
        } == 0;
        ok && value != 0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_check_is_one_round_trip() {
    let server = RedisServer::start();
    let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
    let limiter = connected(redis_config(&server, 5, 100, 1000), &clock).await;
    let before = server.command_calls("evalsha");
    // 3 users × 6 checks: 5 admitted and 1 denied each, each one EVALSHA.
    for i in 0..18 {
        limiter.check(&format!("u{}", i % 3), "/e").await;
    }
    assert_eq!(server.command_calls("evalsha") - before, 18);
    assert_eq!(server.command_calls("eval"), 0);
    assert_eq!(
        server.command_calls("zadd"),
        45,
        "3 tiers × 15 admitted (3 users × limit 5)"
    );
}

/// docs/REDIS.md, "Batches": checks that wait at the same moment share an EVALSHA, each still
/// decided as alone. 400 checks at once, all in one microsecond (a stopped clock: every member
/// name collides), from 40 users: fewer EVALSHA than checks, exactly the endpoint's limit
/// admitted, every key holding exactly what was admitted, with its expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_at_the_same_moment_share_round_trips_and_stay_exact() {
    let server = RedisServer::start();
    let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
    let limiter = connected(redis_config(&server, 3, 50, 80), &clock).await;
    let before = server.command_calls("evalsha");
    let admitted = burst(std::slice::from_ref(&limiter), 400, 40).await;
    let evalsha = server.command_calls("evalsha") - before;
    assert_eq!(admitted, [50], "the endpoint's limit, exactly");
    assert!(
        (1..400).contains(&evalsha),
        "{evalsha} EVALSHA for 400 checks at once: not batched"
    );
    let zcard = |key: &str| server.cli(&["ZCARD", key]).trim().parse::<u64>().unwrap();
    assert_eq!(zcard("rate_limit:endpoint:/api/v1/items"), 50);
    assert_eq!(zcard("rate_limit:global"), 50);
    let users: u64 = (0..40)
        .map(|u| zcard(&format!("rate_limit:user:user-{u}")))
        .sum();
    assert_eq!(
        users, 50,
        "one entry per admitted request in its user's key"
    );
    for u in 0..40 {
        assert!(zcard(&format!("rate_limit:user:user-{u}")) <= 3);
    }
    for key in ["rate_limit:endpoint:/api/v1/items", "rate_limit:global"] {
        let ttl: i64 = server.cli(&["PTTL", key]).trim().parse().unwrap();
        assert!(ttl > 55_000 && ttl <= 60_001, "{key}: PTTL {ttl}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_one_user_costs_redis_nothing_after_the_first_denial() {
    let server = RedisServer::start();
    let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
    let limiter = connected(redis_config(&server, 5, 0, 0), &clock).await;
    let before = server.command_calls("evalsha");
    let mut admitted = 0;
    for _ in 0..5 {
        admitted += usize::from(limiter.check("flood", "/").await.allowed());
    }
    let first = limiter.check("flood", "/").await;
    assert_eq!(server.command_calls("evalsha") - before, 6);
    clock.advance(Duration::from_secs(30));
    for _ in 0..1_000 {
        let d = limiter.check("flood", "/").await;
        assert!(!d.allowed());
        assert_eq!(d.blocked_by(), Some(Tier::User));
        // The same answer Redis gave, 30 s later.
        assert_eq!(
            d.retry_after() + Duration::from_secs(30),
            first.retry_after()
        );
    }
    assert_eq!(admitted, 5);
    assert_eq!(
        server.command_calls("evalsha") - before,
        6,
        "0 Redis calls per denied request after the first"
    );
    // Other users still go to Redis; and when the block ends, so does the flooder.
    assert!(limiter.check("other", "/").await.allowed());
    clock.advance(Duration::from_secs(31));
    assert!(limiter.check("flood", "/").await.allowed());
    assert_eq!(server.command_calls("evalsha") - before, 8);
    // A reset forgets the cached block at once.
    for _ in 0..5 {
        limiter.check("flood", "/").await;
    }
    assert!(!limiter.check("flood", "/").await.allowed());
    limiter.reset_user("flood").await.expect("reset");
    assert!(limiter.check("flood", "/").await.allowed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_expires_about_one_window_after_its_last_admission() {
    let server = RedisServer::start();
    let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
    let limiter = connected(redis_config(&server, 5, 100, 1000), &clock).await;
    assert!(limiter.check("alice", "/api/v1/items/{id}").await.allowed());
    let keys = server.cli(&["KEYS", "rate_limit:*"]);
    let mut keys: Vec<&str> = keys.lines().collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "rate_limit:endpoint:/api/v1/items/%7Bid%7D",
            "rate_limit:global",
            "rate_limit:user:alice"
        ]
    );
    for key in keys {
        let pttl: i64 = server.cli(&["PTTL", key]).trim().parse().unwrap();
        // A window and a second at most; a few seconds of a loaded machine below that.
        assert!(pttl > 55_000 && pttl <= 60_001, "{key}: PTTL {pttl}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noscript_after_a_script_flush_is_reloaded_not_a_failure() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = connected(redis_config(&server, 2, 0, 0), &clock).await;
    assert!(limiter.check("u", "/").await.allowed());
    server.cli(&["SCRIPT", "FLUSH"]);
    assert!(limiter.check("u", "/").await.allowed());
    assert!(!limiter.check("u", "/").await.allowed());
    assert_eq!(limiter.backend(), Backend::Redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_time_source_reads_the_server_clock() {
    let server = RedisServer::start();
    let config = limits(1, 0, 0, MINUTE)
        .redis_url(server.url())
        .redis_time_source(TimeSource::Redis)
        .build()
        .unwrap();
    // The app clock says 1970; with TimeSource::Redis the entries carry the server's time.
    let clock = ManualClock::new();
    let limiter = connected(config, &clock).await;
    assert!(limiter.check("u", "/").await.allowed());
    let denied = limiter.check("u", "/").await;
    assert_eq!(denied.blocked_by(), Some(Tier::User));
    assert!(
        denied.retry_after() > Duration::from_secs(55)
            && denied.retry_after() <= MINUTE + Duration::from_micros(1)
    );
    let scores = server.cli(&["ZRANGE", "rate_limit:user:u", "0", "-1", "WITHSCORES"]);
    let score: f64 = scores.lines().nth(1).unwrap().parse().unwrap();
    let now = common::wall_clock().as_micros() as f64;
    assert!(
        (now - score).abs() < 10_000_000.0,
        "score {score} vs now {now}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_absent_at_start_falls_back_at_once_and_limits_hold() {
    // A port with nothing listening.
    let config = limits(3, 0, 0, MINUTE)
        .redis_url(format!("redis://127.0.0.1:{}", free_port()))
        .redis_command_timeout(TIMEOUT)
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let limiter = RateLimiter::connect(config.clone()).await;
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(limiter.backend(), Backend::Memory);
    let admitted = (0..10).map(|_| limiter.check("u", "/")).collect::<Vec<_>>();
    let mut n = 0;
    for f in admitted {
        n += usize::from(f.await.allowed());
    }
    assert_eq!(n, 3, "the limit holds on memory");

    // Lazily: no connect().await, the first check meets the failure and is still answered.
    let lazy = RateLimiter::new(config);
    let started = std::time::Instant::now();
    let first = lazy.check("u", "/").await;
    assert!(first.allowed());
    assert!(
        started.elapsed() <= TIMEOUT + Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(lazy.backend(), Backend::Memory);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_mid_run_no_request_fails_and_memory_takes_over() {
    let mut server = RedisServer::start();
    let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
    let limiter = connected(failing_config(&server, 5, 0, 0), &clock).await;
    for _ in 0..3 {
        assert!(limiter.check("u", "/").await.allowed());
    }
    server.kill();
    let started = std::time::Instant::now();
    let limiter2 = limiter.clone();
    let handles: Vec<_> = (0..50)
        .map(|i| {
            let l = limiter2.clone();
            tokio::spawn(async move { l.check(&format!("k{i}"), "/").await })
        })
        .collect();
    for h in handles {
        // Every request is answered (the task neither panics nor errors).
        assert!(
            h.await.unwrap().allowed(),
            "fresh keys are admitted on memory"
        );
    }
    // Real time on a loaded machine: the timeout plus scheduling slack (the exact bound is
    // redis_paused_costs_a_request_at_most_the_command_timeout's, on paused time).
    assert!(
        started.elapsed() < TIMEOUT + Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(limiter.backend(), Backend::Memory);
    let cause = limiter.fallback_cause().unwrap();
    assert_eq!(cause.reason(), "unreachable", "{cause:?}");
    // The memory store starts empty and enforces the limit from here on.
    let admitted = {
        let mut n = 0;
        for _ in 0..10 {
            n += usize::from(limiter.check("u", "/").await.allowed());
        }
        n
    };
    assert_eq!(admitted, 5);
    // Once for good: a Redis back on the same port is not used again.
    server.restart();
    assert!(!limiter.check("u", "/").await.allowed());
    assert_eq!(limiter.backend(), Backend::Memory);
    assert_eq!(server.command_calls("evalsha"), 0);
}

/// SIGSTOP: connections stay open and Redis never answers. With tokio's clock paused, the
/// runtime jumps to the next timer as soon as every task waits, so the test measures exactly
/// how long a request waited: the command timeout, not a moment more (tokio's timers tick in
/// whole milliseconds, so a deadline lands on the next millisecond: `TICK` below).
#[tokio::test(flavor = "current_thread")]
async fn redis_paused_costs_a_request_at_most_the_command_timeout() {
    const TICK: Duration = Duration::from_millis(1);
    let server = RedisServer::start();
    let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
    let limiter = connected(failing_config(&server, 2, 0, 0), &clock).await;
    assert!(limiter.check("u", "/").await.allowed());

    tokio::time::pause();
    server.pause();
    let started = tokio::time::Instant::now();
    let handles: Vec<_> = (0..20)
        .map(|i| {
            let l = limiter.clone();
            tokio::spawn(async move {
                let t = tokio::time::Instant::now();
                let d = l.check(&format!("p{i}"), "/").await;
                (d, t.elapsed())
            })
        })
        .collect();
    for h in handles {
        let (d, waited) = h.await.unwrap();
        assert!(d.allowed());
        assert!(
            waited >= TIMEOUT && waited <= TIMEOUT + TICK,
            "waited {waited:?}"
        );
    }
    assert!(started.elapsed() <= TIMEOUT + TICK);
    assert_eq!(limiter.backend(), Backend::Memory);
    // The connection stayed up and nothing answered: a timeout, not an unreachable Redis.
    let cause = limiter.fallback_cause().unwrap();
    assert_eq!(cause.reason(), "timeout", "{cause:?}");
    // From now on no request touches Redis: no time passes at all.
    let t = tokio::time::Instant::now();
    // Memory starts empty: "u" gets its limit of 2 again, then no more.
    assert!(limiter.check("u", "/").await.allowed());
    assert!(limiter.check("u", "/").await.allowed());
    assert!(
        !limiter.check("u", "/").await.allowed(),
        "limit 2 holds on memory"
    );
    assert_eq!(t.elapsed(), Duration::ZERO);
    server.resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_paused_under_load_in_real_time() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let server = RedisServer::start();
    let limiter = RateLimiter::connect(failing_config(&server, 0, 0, 1_000_000)).await;
    assert_eq!(limiter.backend(), Backend::Redis);
    let limiter = Arc::new(limiter);
    let done = Arc::new(AtomicUsize::new(0));
    let load = {
        let limiter = limiter.clone();
        let done = done.clone();
        tokio::spawn(async move {
            let mut worst = Duration::ZERO;
            let mut answered = 0;
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            let mut i = 0;
            // Until the pause has met a check, and 400 checks at least.
            while (i < 400 || limiter.backend() == Backend::Redis)
                && std::time::Instant::now() < deadline
            {
                let t = std::time::Instant::now();
                let d = limiter.check(&format!("u{}", i % 7), "/").await;
                worst = worst.max(t.elapsed());
                answered += usize::from(d.allowed());
                i += 1;
                done.store(i, Ordering::Relaxed);
                if i % 50 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            (i, answered, worst)
        })
    };
    // Pause while the load runs on Redis.
    while done.load(Ordering::Relaxed) < 50 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    server.pause();
    let (sent, answered, worst) = load.await.unwrap();
    server.resume();
    assert!(sent >= 400);
    assert_eq!(
        answered, sent,
        "every request answered and admitted (limit far away)"
    );
    assert_eq!(limiter.backend(), Backend::Memory);
    // Real time on a shared 2-core machine: the bound is the timeout plus scheduling slack.
    assert!(
        worst < TIMEOUT + Duration::from_secs(1),
        "worst wait {worst:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_user_deletes_the_key() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = connected(redis_config(&server, 1, 0, 0), &clock).await;
    assert!(limiter.check("alice", "/").await.allowed());
    assert!(!limiter.check("alice", "/").await.allowed());
    limiter.reset_user("alice").await.expect("reset");
    assert_eq!(server.cli(&["EXISTS", "rate_limit:user:alice"]).trim(), "0");
    assert!(limiter.check("alice", "/").await.allowed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_prefix_is_used_and_other_prefixes_are_untouched() {
    let server = RedisServer::start();
    server.cli(&["SET", "rate_limit:user:alice", "not ours"]);
    let config = limits(1, 0, 0, MINUTE)
        .key_prefix("app2")
        .redis_url(server.url())
        .build()
        .unwrap();
    let clock = ManualClock::new();
    let limiter = connected(config, &clock).await;
    assert!(limiter.check("alice", "/").await.allowed());
    assert_eq!(server.cli(&["ZCARD", "app2:user:alice"]).trim(), "1");
    assert_eq!(
        server.cli(&["GET", "rate_limit:user:alice"]).trim(),
        "not ours"
    );
}

/// Polls `f` every 10 ms for at most `limit` of real time (recovery is real I/O).
async fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    f()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opt_in_recovery_switches_back_to_redis_and_tells_the_listener() {
    let mut server = RedisServer::start();
    // A timeout that the Redis phases cannot meet by accident; the kills fail at once.
    let config = limits(3, 0, 0, MINUTE)
        .redis_url(server.url())
        .redis_command_timeout(Duration::from_secs(1))
        .redis_connect_timeout(STEADY)
        .redis_recovery(Duration::from_millis(50), Duration::from_millis(200))
        .build()
        .unwrap();
    let changes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = changes.clone();
    let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
    let limiter = RateLimiter::builder(config)
        .clock(clock.clone())
        .on_backend_change(move |b| seen.lock().unwrap().push(b))
        .build();
    limiter.wait_connected().await;
    assert_eq!(limiter.backend(), Backend::Redis);
    assert!(limiter.check("u", "/").await.allowed());

    server.kill();
    assert!(
        limiter.check("u", "/").await.allowed(),
        "answered from memory"
    );
    assert_eq!(limiter.backend(), Backend::Memory);
    assert_eq!(*changes.lock().unwrap(), [Backend::Memory]);

    // Redis comes back (empty: it keeps nothing on disk): the probe switches back. The
    // listener is told just after the swap, on the probe's task: wait for both.
    server.restart();
    let back = eventually(Duration::from_secs(10), || {
        limiter.backend() == Backend::Redis && changes.lock().unwrap().len() == 2
    })
    .await;
    assert!(back, "switched back to Redis");
    assert_eq!(*changes.lock().unwrap(), [Backend::Memory, Backend::Redis]);
    let before = server.command_calls("evalsha");
    for _ in 0..3 {
        assert!(limiter.check("u", "/").await.allowed());
    }
    assert!(
        !limiter.check("u", "/").await.allowed(),
        "the limit holds on Redis again"
    );
    assert_eq!(server.command_calls("evalsha") - before, 4);

    // And a second failure falls back again, to a fresh memory store.
    server.kill();
    assert!(limiter.check("v", "/").await.allowed());
    assert_eq!(limiter.backend(), Backend::Memory);
    assert_eq!(
        *changes.lock().unwrap(),
        [Backend::Memory, Backend::Redis, Backend::Memory]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_recovery_the_fallback_is_for_good_even_when_redis_returns() {
    let mut server = RedisServer::start();
    let changes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = changes.clone();
    let limiter = RateLimiter::builder(failing_config(&server, 3, 0, 0))
        .on_backend_change(move |b| seen.lock().unwrap().push(b))
        .build();
    limiter.wait_connected().await;
    server.kill();
    // Killed while idle: by the next check the client is reconnecting, and fred holds the
    // command until the timeout. Still `unreachable` (docs/REDIS.md), not `timeout`, with the
    // fix of an unreachable Redis only.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(limiter.check("u", "/").await.allowed());
    let cause = limiter.fallback_cause().unwrap();
    assert_eq!(cause.reason(), "unreachable", "{cause:?}");
    assert_eq!(cause.to_string().matches("fix:").count(), 1, "{cause}");
    server.restart();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(limiter.check("u", "/").await.allowed());
    assert_eq!(limiter.backend(), Backend::Memory);
    assert_eq!(*changes.lock().unwrap(), [Backend::Memory]);
    assert_eq!(server.command_calls("evalsha"), 0);
}

/// What a denied request costs Redis with costs and overrides on: one round trip, and not a
/// byte (nothing is recorded); a repeat of the same denial costs no round trip at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_request_with_costs_and_overrides_costs_one_round_trip_and_no_bytes() {
    use tiered_ratelimit::RouteLimits;
    let server = RedisServer::start();
    let login = RouteLimits {
        user_limit: Some(10),
        endpoint_limit: Some(1000),
    };
    let config = limits(50, 100, 10_000, MINUTE)
        .route("/login", login)
        .plan("premium", 500)
        .user_plan("alice", "premium")
        .redis_url(server.url())
        .redis_time_source(TimeSource::App)
        .build()
        .unwrap();
    let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
    let limiter = connected(config, &clock).await;
    assert_eq!(limiter.check_n("alice", "/login", 8).await.remaining(), 2);
    let keys = [
        "rate_limit:user:alice@/login",
        "rate_limit:endpoint:/login",
        "rate_limit:global",
    ];
    let memory = |key: &str| -> u64 {
        server
            .cli(&["MEMORY", "USAGE", key, "SAMPLES", "0"])
            .trim()
            .parse()
            .unwrap()
    };
    let before: Vec<u64> = keys.iter().map(|k| memory(k)).collect();
    let calls = server.command_calls("evalsha");
    let d = limiter.check_n("alice", "/login", 3).await;
    assert_eq!(d.blocked_by(), Some(Tier::User));
    assert_eq!(server.command_calls("evalsha") - calls, 1, "one round trip");
    let after: Vec<u64> = keys.iter().map(|k| memory(k)).collect();
    assert_eq!(before, after, "not a byte recorded");
    // The tier still has room for a cheaper request, so the denial is not cached: a repeat
    // asks Redis again (a cheaper request admitted meanwhile would move the real wait later).
    let d = limiter.check_n("alice", "/login", 3).await;
    assert!(!d.allowed());
    assert_eq!(
        server.command_calls("evalsha") - calls,
        2,
        "not from the cache"
    );
    // Once the tier is full, a repeat of the same denial is answered from the local cache.
    assert!(limiter.check_n("alice", "/login", 2).await.allowed());
    let d = limiter.check_n("alice", "/login", 3).await;
    assert_eq!(d.blocked_by(), Some(Tier::User));
    assert_eq!(server.command_calls("evalsha") - calls, 4);
    let again = limiter.check_n("alice", "/login", 3).await;
    assert_eq!(again.retry_after(), d.retry_after());
    assert_eq!(server.command_calls("evalsha") - calls, 4, "no round trip");
    println!(
        "denied with costs and overrides on: 1 EVALSHA, 0 bytes; keys after one recorded \
         request of cost 8: {before:?} bytes"
    );
}

/// docs/REDIS.md: a check that timed out may still run on a Redis that resumes, and then only
/// counts against the instances still on Redis: they deny earlier, never admit more. One
/// limiter's check times out on a paused Redis (answered from memory); once Redis runs again,
/// the script it had sent lands, and the other limiter, still on Redis, sees the limit taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_that_timed_out_may_land_on_redis_later_and_only_counts_against_others() {
    let server = RedisServer::start();
    let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
    let failing = connected(failing_config(&server, 2, 0, 0), &clock).await;
    let other = connected(redis_config(&server, 2, 0, 0), &clock).await;
    // The first entry through the limiter with the long timeout: a loaded machine cannot
    // make it time out.
    assert!(other.check("u", "/").await.allowed());

    server.pause();
    assert!(
        failing.check("u", "/").await.allowed(),
        "answered from memory"
    );
    assert_eq!(failing.backend(), Backend::Memory);
    server.resume();

    // The script sent before the timeout runs once Redis reads its socket again.
    let card = || {
        server
            .cli(&["ZCARD", "rate_limit:user:u"])
            .trim()
            .to_string()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while card() != "2" && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(card(), "2", "the timed-out check landed on Redis");
    let denied = other.check("u", "/").await;
    assert_eq!(denied.blocked_by(), Some(Tier::User), "{denied:?}");
    assert_eq!(other.backend(), Backend::Redis);
    assert_eq!(card(), "2", "a denied request leaves no entry");
}

/// A Redis over its `maxmemory` (policy `noeviction`) refuses every write of other clients; the
/// script must not be the exception. Redis checks a script's memory only at its first write, and
/// ours trims (a write that frees memory, allowed when full) before it records; so the script
/// declares itself a writing script (a `#!lua` first line), which Redis refuses whole when over
/// `maxmemory`. The check that meets the refusal is answered, from memory, and the limiter stays
/// there: a Redis that takes no writes cannot count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_over_maxmemory_is_an_error_and_the_limiter_falls_back_writing_nothing() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
    let limiter = connected(redis_config(&server, 5, 0, 0), &clock).await;
    assert!(limiter.check("alice", "/").await.allowed());
    assert_eq!(limiter.backend(), Backend::Redis);
    // Over the cap from here on: 1 byte.
    assert_eq!(
        server.cli(&["config", "set", "maxmemory", "1"]).trim(),
        "OK"
    );
    let refused = server.cli(&["set", "other-app-key", "v"]);
    assert!(refused.contains("OOM"), "{refused}");
    let keys_before = server.cli(&["dbsize"]);
    let first = limiter.check("mallory-0", "/").await;
    assert!(
        first.allowed(),
        "the check that met the refusal is answered"
    );
    assert_eq!(limiter.backend(), Backend::Memory);
    let cause = limiter.fallback_cause().unwrap();
    assert!(cause.to_string().contains("OOM"), "{cause}");
    for i in 1..50 {
        assert!(limiter.check(&format!("mallory-{i}"), "/").await.allowed());
    }
    assert_eq!(server.cli(&["dbsize"]), keys_before, "nothing was written");
    assert_eq!(
        server.cli(&["exists", "rate_limit:user:mallory-0"]).trim(),
        "0"
    );
    // Memory enforces the limit from here on.
    let admitted = (0..10).map(|_| limiter.check("bob", "/"));
    let mut n = 0;
    for check in admitted {
        n += usize::from(check.await.allowed());
    }
    assert_eq!(n, 5);
}
