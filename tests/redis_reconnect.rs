//! Connections Redis closes or loses while the service is quiet: its idle `timeout`, a restart.
//! Neither is Redis failing a check, so neither is a fallback; and a store that did fall back
//! (or was dropped) stops reconnecting. A limiter made outside a runtime connects at its first
//! check. Against `redis-server` processes this test starts.
#![cfg(feature = "redis")]

mod common;

use std::time::Duration;

use common::{connected, limits, RedisServer};
use tiered_ratelimit::{Backend, ManualClock, RateLimitConfig, RateLimiter, TimeSource};

const MINUTE: Duration = Duration::from_secs(60);
/// The command timeout of the tests where Redis goes away.
const TIMEOUT: Duration = Duration::from_millis(100);
/// The connect timeout, and the command timeout where Redis stays up: longer than any
/// scheduling hiccup of a loaded machine.
const STEADY: Duration = Duration::from_secs(5);

/// A user limit of `user` on `server`, its commands given `timeout` and its connections
/// [`STEADY`].
fn config(server: &RedisServer, user: u64, timeout: Duration) -> RateLimitConfig {
    config_connecting(server, user, timeout, STEADY)
}

/// [`config`], its connections given `connect`.
fn config_connecting(
    server: &RedisServer,
    user: u64,
    timeout: Duration,
    connect: Duration,
) -> RateLimitConfig {
    limits(user, 0, 0, MINUTE)
        .redis_url(server.url())
        .redis_time_source(TimeSource::App) // driven by a ManualClock
        .redis_command_timeout(timeout)
        .redis_connect_timeout(connect)
        .build()
        .unwrap()
}

/// Redis's `timeout` (close a client idle that long; managed services and NAT gateways do the
/// same) is not Redis failing: a quiet service whose connection was closed while idle reconnects
/// at once, stays on Redis and keeps its counts, and its next check waits for nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_redis_closed_while_idle_is_reopened_and_the_counts_stay_on_redis() {
    let server = RedisServer::start_with(&["--timeout", "1"]);
    let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
    let limiter = connected(config(&server, 5, STEADY), &clock).await;
    for left in [4, 3] {
        let d = limiter.check("alice", "/").await;
        assert!(d.allowed());
        assert_eq!(d.remaining(), left);
    }
    let before = server.connections_received();
    // Idle past the server's timeout (Redis sweeps idle clients about once a second).
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let after = server.connections_received();
    // One of them is redis-cli's own, for the second INFO.
    assert!(
        after >= before + 2,
        "Redis closed the idle connection and the client opened another ({before} -> {after})"
    );
    let started = std::time::Instant::now();
    let d = limiter.check("alice", "/").await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        limiter.backend(),
        Backend::Redis,
        "{:?}",
        limiter.fallback_cause()
    );
    assert_eq!(
        d.remaining(),
        2,
        "the count of the Redis key, not of a fresh memory store"
    );
    assert_eq!(server.command_calls("evalsha"), 3);
}

/// A Redis restarted while the service is quiet (down longer than a few reconnections in a
/// row, which is what any restart takes) is not Redis failing a check: the client keeps
/// reconnecting in the background, and the first check after Redis is back runs on it, at
/// once, with no fallback. (With reconnections that gave up, that check waited out its timeout
/// on a client that would never connect again and moved the limiter to memory for good.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restarted_while_the_service_is_quiet_is_used_again_without_a_fallback() {
    let mut server = RedisServer::start();
    let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
    let limiter = connected(config(&server, 5, TIMEOUT), &clock).await;
    assert!(limiter.check("alice", "/").await.allowed());
    server.kill();
    // Down for half a second, with no check: far longer than three reconnections 20 ms apart.
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.restart();
    // Back: the client's next reconnection (at most 50 ms and its jitter away) finds it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = std::time::Instant::now();
    let d = limiter.check("alice", "/").await;
    let took = started.elapsed();
    assert_eq!(
        limiter.backend(),
        Backend::Redis,
        "{:?}",
        limiter.fallback_cause()
    );
    assert!(took < TIMEOUT, "{took:?}");
    // The restarted server is empty (and has no script: NOSCRIPT, loaded again, run again):
    // this check is its first entry, counted on Redis.
    assert_eq!(d.remaining(), 4);
    assert_eq!(server.cli(&["zcard", "rate_limit:user:alice"]).trim(), "1");
}

/// The other side of reconnecting in the background: once the store has fallen back (Redis
/// gone when a check needed it), or the limiter is dropped, its clients are closed even while
/// they are reconnecting, and nothing connects to that Redis again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_fallback_or_a_drop_the_clients_stop_reconnecting() {
    for drop_it in [false, true] {
        let mut server = RedisServer::start();
        let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
        let limiter = connected(config(&server, 5, TIMEOUT), &clock).await;
        assert!(limiter.check("alice", "/").await.allowed());
        server.kill();
        // Let the clients notice and start reconnecting.
        tokio::time::sleep(Duration::from_millis(200)).await;
        if drop_it {
            drop(limiter);
        } else {
            assert!(limiter.check("alice", "/").await.allowed());
            assert_eq!(limiter.backend(), Backend::Memory);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        server.restart();
        let before = server.connections_received(); // redis-cli's own
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            server.connections_received(),
            before + 1, // the second redis-cli
            "a closed store's client connected again (dropped: {drop_it})"
        );
    }
}

/// The same, when the client is in the middle of a reconnection at that moment: a server that
/// accepts connections and never answers (a hung Redis, a blackholed host) holds each attempt
/// for the connect timeout, and fred's `QUIT` does not reach a client inside one. Closing the
/// store ends it all the same (its routing tasks are aborted), for a fallback and for a drop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_closed_while_reconnecting_to_a_server_that_never_answers_stops() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    for drop_it in [false, true] {
        let mut server = RedisServer::start();
        let port = server.port();
        let config = config_connecting(&server, 5, TIMEOUT, Duration::from_millis(500));
        let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
        let limiter = connected(config, &clock).await;
        assert!(limiter.check("alice", "/").await.allowed());
        server.kill();
        // The port now accepts and never answers.
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                held.push(stream);
            }
        });
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(
            accepted.load(Ordering::SeqCst) >= 1,
            "the client was reconnecting"
        );
        if drop_it {
            drop(limiter);
        } else {
            assert!(limiter.check("alice", "/").await.allowed());
            assert_eq!(limiter.backend(), Backend::Memory);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let at_close = accepted.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(2000)).await;
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            at_close,
            "a closed store kept reconnecting (dropped: {drop_it})"
        );
    }
}

/// A store closed while its first connection is still being made (a check that timed out on a
/// slow Redis fell back meanwhile): what connects afterwards, the commands' client and the
/// invalidation listener's, is closed as soon as it has, not left open for the process's life.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_closed_while_it_was_connecting_closes_what_connects_after() {
    // Then the start succeeds, or fails after its client connected (the server is a replica,
    // which the start refuses).
    for replica in [false, true] {
        let server = RedisServer::start();
        if replica {
            assert_eq!(server.cli(&["REPLICAOF", "127.0.0.1", "1"]).trim(), "OK");
        }
        let others = || -> Vec<String> {
            let list = server.cli(&["CLIENT", "LIST"]);
            let others = list.lines().filter(|l| !l.contains("cmd=client|list"));
            others.map(str::to_owned).collect()
        };
        let config = config_connecting(&server, 5, TIMEOUT, Duration::from_secs(2));
        server.pause(); // the first connection is answered only after the check has given up
        let limiter = RateLimiter::new(config);
        assert!(limiter.check("alice", "/").await.allowed());
        assert_eq!(limiter.backend(), Backend::Memory);
        tokio::time::sleep(Duration::from_millis(300)).await;
        server.resume();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            others(),
            Vec::<String>::new(),
            "clients of a closed store (replica: {replica})"
        );
        drop(limiter);
    }
}

/// The local cache of denials lives on its invalidation channel, a subscription that a Redis
/// restart ends. Lost, it turns the cache off (every denial asks Redis); once the client has
/// reconnected, it subscribes again and the cache is back, empty: a flood of one user's
/// repeated denials costs Redis one round trip again, not one each for good. The log says
/// when it goes and when it is back. (One thread, so that the listener's logs are captured.)
#[tokio::test]
async fn after_a_quiet_restart_the_denial_cache_comes_back() {
    let (logs, _guard) = common::logs::capture("tiered_ratelimit=info");
    let mut server = RedisServer::start();
    let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
    let limiter = connected(config(&server, 1, STEADY), &clock).await;
    assert_eq!(denied_round_trips(&limiter, &server, "a").await, 1);
    server.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart();
    // The client reconnects within 50 ms; the listener subscribes again and proves it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        denied_round_trips(&limiter, &server, "b").await,
        1,
        "the cache is back"
    );
    let logged = logs.text();
    assert!(
        logged.contains("WARN") && logged.contains("invalidation channel was lost"),
        "{logged}"
    );
    assert!(
        logged.contains("INFO") && logged.contains("invalidation channel is back"),
        "{logged}"
    );
    assert_eq!(limiter.backend(), Backend::Redis);
}

/// Five denials of `user`, once it has no room left (a limit of 1): the round trips they cost
/// (with the denial cache, the first asks Redis and the rest are answered locally).
async fn denied_round_trips(limiter: &RateLimiter, server: &RedisServer, user: &str) -> u64 {
    assert!(limiter.check(user, "/").await.allowed());
    let before = server.command_calls("evalsha");
    for _ in 0..5 {
        assert!(!limiter.check(user, "/").await.allowed());
    }
    server.command_calls("evalsha") - before
}

/// docs/REDIS.md, "The fallback": "`RateLimiter::new` never waits: it starts connecting in the
/// background (or at the first check, when made outside a tokio runtime)".
#[test]
fn a_limiter_made_outside_a_runtime_connects_at_its_first_check() {
    let server = RedisServer::start();
    let limiter = RateLimiter::new(config(&server, 3, STEADY)); // no runtime here
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        assert!(limiter.check("outside", "/").await.allowed());
        assert_eq!(
            limiter.backend(),
            Backend::Redis,
            "{:?}",
            limiter.fallback_cause()
        );
    });
    assert_eq!(
        server.cli(&["ZCARD", "rate_limit:user:outside"]).trim(),
        "1"
    );
}
