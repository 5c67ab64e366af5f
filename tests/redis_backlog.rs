//! What the Redis store does with checks that wait for a batch (docs/REDIS.md, "Batches"):
//! a backlog of a whole batch goes at once, whatever is already on its way, so that a long
//! round trip does not cap a store at two batches per round trip; and a check whose caller
//! stopped waiting before its batch was made is never sent.
//!
//! The round trip is made long by a proxy of this file between the limiter and its own
//! `redis-server`: it passes every byte to Redis at once, and holds Redis's replies while its
//! gate is closed, counting the EVALSHAs that pass meanwhile.
#![cfg(feature = "redis")]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{limits, RedisServer};
use tiered_ratelimit::{Backend, RateLimiter};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const MINUTE: Duration = Duration::from_secs(60);

/// A TCP proxy to `target` whose replies wait while its gate is closed.
struct GatedProxy {
    port: u16,
    closed: Arc<AtomicBool>,
    evalsha: Arc<AtomicUsize>,
}

impl GatedProxy {
    async fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let closed = Arc::new(AtomicBool::new(false));
        let evalsha = Arc::new(AtomicUsize::new(0));
        let (gate, count) = (closed.clone(), evalsha.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(("127.0.0.1", target)).await.unwrap();
                let (mut client_rx, mut client_tx) = client.into_split();
                let (mut server_rx, mut server_tx) = server.into_split();
                let count = count.clone();
                tokio::spawn(async move {
                    // Commands pass at once; the EVALSHAs among them are counted (the name
                    // may be split between two reads: the last bytes are kept).
                    let mut buf = vec![0u8; 1 << 16];
                    let mut tail: Vec<u8> = Vec::new();
                    while let Ok(n) = client_rx.read(&mut buf).await {
                        if n == 0 || server_tx.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        tail.extend_from_slice(&buf[..n]);
                        let seen = tail.windows(7).filter(|w| w == b"EVALSHA").count();
                        count.fetch_add(seen, Ordering::SeqCst);
                        tail.drain(..tail.len().saturating_sub(6));
                    }
                });
                let gate = gate.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 1 << 16];
                    while let Ok(n) = server_rx.read(&mut buf).await {
                        while gate.load(Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        if n == 0 || client_tx.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Self {
            port,
            closed,
            evalsha,
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

/// 512 checks at once while Redis's replies are held back: the first two batches go as they
/// come, and the rest in whole batches of 64 without waiting for a reply, so that a round trip
/// of any length carries them. Before, every batch after the second waited a round trip, and
/// a slow link capped a store at 128 checks a round trip (an outside review measured 5,200
/// checks/s through 5 ms, against 17,900 before batching, and a fall back to memory under a
/// 100 ms timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_batch_waiting_is_sent_without_waiting_for_a_reply() {
    let server = RedisServer::start();
    let proxy = GatedProxy::start(server.port()).await;
    let config = limits(1, 0, 0, MINUTE)
        .redis_url(proxy.url())
        .redis_command_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let limiter = Arc::new(RateLimiter::new(config));
    limiter.wait_connected().await;
    assert_eq!(limiter.backend(), Backend::Redis);
    assert!(limiter.check("warm", "/").await.allowed());

    proxy.closed.store(true, Ordering::SeqCst);
    let before = proxy.evalsha.load(Ordering::SeqCst);
    let checks: Vec<_> = (0..512)
        .map(|i| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.check(&format!("user-{i}"), "/").await })
        })
        .collect();
    // Until every check is queued or sent.
    let mut sent = 0;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        sent = proxy.evalsha.load(Ordering::SeqCst) - before;
        if sent >= 8 {
            break;
        }
    }
    proxy.closed.store(false, Ordering::SeqCst);
    let mut admitted = 0;
    for check in checks {
        admitted += usize::from(check.await.unwrap().allowed());
    }
    assert_eq!(
        limiter.backend(),
        Backend::Redis,
        "{:?}",
        limiter.fallback_cause()
    );
    assert_eq!(admitted, 512);
    // Two batches as the checks came (at most 128 checks), then at least 384 waiting: six whole
    // batches of 64 or more at once.
    assert!(
        sent >= 8,
        "only {sent} EVALSHAs went while the first replies were held back"
    );
    // Each check still in exactly one EVALSHA: 513 entries in 513 keys.
    let keys: usize = server.cli(&["DBSIZE"]).trim().parse().unwrap();
    assert_eq!(keys, 513);
}

/// A check whose caller stopped waiting (its own timeout, a client gone) while it waited for a
/// batch is never sent: nothing of it reaches Redis. (One already on its way is decided by
/// Redis all the same; nothing can call it back.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_given_up_before_its_batch_is_made_is_not_sent() {
    let server = RedisServer::start();
    let config = limits(10, 0, 0, MINUTE)
        .redis_url(server.url())
        .redis_command_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let limiter = Arc::new(RateLimiter::new(config));
    limiter.wait_connected().await;
    server.pause();
    // Two checks: two batches on their way, stuck.
    let mut on_their_way = Vec::new();
    for user in ["first", "second"] {
        let limiter = limiter.clone();
        on_their_way.push(tokio::spawn(async move { limiter.check(user, "/").await }));
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    // The third waits for a batch; its caller gives up after 50 ms.
    let given_up = tokio::time::timeout(Duration::from_millis(50), limiter.check("gone", "/"));
    assert!(given_up.await.is_err());
    server.resume();
    for check in on_their_way {
        assert!(check.await.unwrap().allowed());
    }
    // One more check after it: its batch is made after the given-up check's turn.
    assert!(limiter.check("after", "/").await.allowed());
    assert_eq!(limiter.backend(), Backend::Redis);
    for (user, n) in [
        ("first", "1"),
        ("second", "1"),
        ("after", "1"),
        ("gone", "0"),
    ] {
        let key = format!("rate_limit:user:{user}");
        assert_eq!(server.cli(&["ZCARD", &key]).trim(), n, "{key}");
    }
}

/// A key of the wrong type (an operator's `SET`) met by one check of a batch: the checks
/// before it in the batch are answered by Redis and recorded in every tier; that check (and
/// any after it) falls back to memory with Redis's error. Before, the whole batch failed, and
/// the checks before the bad one stayed recorded in their user keys only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_in_a_batch_fails_its_check_not_the_ones_before_it() {
    let server = RedisServer::start();
    server.cli(&["SET", "rate_limit:user:bad", "x"]);
    let config = limits(10, 100, 1000, MINUTE)
        .redis_url(server.url())
        .redis_command_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let limiter = Arc::new(RateLimiter::new(config));
    limiter.wait_connected().await;
    server.pause();
    // Two batches on their way, stuck; then c1..c4, bad, d1 wait, in that order, for one
    // batch.
    let users = ["a", "b", "c1", "c2", "c3", "c4", "bad", "d1"];
    let mut checks = Vec::new();
    for user in users {
        let limiter = limiter.clone();
        checks.push(tokio::spawn(async move { limiter.check(user, "/e").await }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.resume();
    for check in checks {
        assert!(check.await.unwrap().allowed());
    }
    assert_eq!(limiter.backend(), Backend::Memory);
    let cause = format!("{:?}", limiter.fallback_cause());
    assert!(cause.contains("WRONGTYPE"), "{cause}");
    // Recorded by Redis in all three tiers: the six checks before the bad one; nothing of it
    // or of the one after it.
    for user in ["a", "b", "c1", "c2", "c3", "c4"] {
        let key = format!("rate_limit:user:{user}");
        assert_eq!(server.cli(&["ZCARD", &key]).trim(), "1", "{key}");
    }
    assert_eq!(server.cli(&["EXISTS", "rate_limit:user:d1"]).trim(), "0");
    for key in ["rate_limit:endpoint:/e", "rate_limit:global"] {
        assert_eq!(server.cli(&["ZCARD", key]).trim(), "6", "{key}");
        let ttl: i64 = server.cli(&["PTTL", key]).trim().parse().unwrap();
        assert!(ttl > 0, "{key} keeps an expiry: {ttl}");
    }
}

/// A flood of requests at once, at the default command timeout (100 ms), on a Redis that is up
/// and answering (docs/REDIS.md, "The fallback"). Behind a concurrency limit in front of the
/// layer (tower's own `ConcurrencyLimitLayer`, 16 at once: the defence the docs name), 20,000
/// requests are all answered on Redis. Without it, a flood of 40,000 times out in the instance's
/// own queue (the timeout counts it), and the limiter falls back, named as a timeout, every
/// request still answered. One test, so that the two floods never run at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_falls_back_on_a_healthy_redis_unless_a_concurrency_limit_holds_it() {
    use tower::ServiceExt;
    let server = RedisServer::start();
    for limit in [Some(16), None] {
        let config = limits(0, 0, 1 << 40, MINUTE)
            .redis_url(server.url())
            .build()
            .unwrap();
        let limiter = RateLimiter::new(config);
        limiter.wait_connected().await;
        assert_eq!(limiter.backend(), Backend::Redis);
        let service = tower::ServiceBuilder::new()
            .option_layer(limit.map(tower::limit::ConcurrencyLimitLayer::new))
            .layer(tiered_ratelimit::RateLimitLayer::from_limiter(
                limiter.clone(),
            ))
            .service(tower::service_fn(|_: http::Request<String>| async {
                Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
            }));
        // Without the limit, twice as many: they need about 400 ms of Redis's time here (some
        // 10 µs a check), so a machine several times faster still meets the timeout.
        let n = if limit.is_some() { 20_000 } else { 40_000 };
        let requests: Vec<_> = (0..n)
            .map(|_| {
                let service = service.clone();
                tokio::spawn(
                    async move { service.oneshot(http::Request::new(String::new())).await },
                )
            })
            .collect();
        for request in requests {
            let response = request.await.unwrap().unwrap();
            assert_eq!(response.status(), http::StatusCode::OK, "limit {limit:?}");
        }
        assert!(server.ping(), "Redis stayed up");
        match limit {
            Some(_) => assert_eq!(
                limiter.backend(),
                Backend::Redis,
                "{:?}",
                limiter.fallback_cause()
            ),
            None => {
                assert_eq!(limiter.backend(), Backend::Memory);
                let cause = limiter.fallback_cause().unwrap();
                assert_eq!(cause.reason(), "timeout", "{cause:?}");
            }
        }
    }
}
