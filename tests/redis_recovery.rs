//! The opt-in recovery (`redis.recovery`) when Redis misbehaves in ways a connection does not
//! show, and around its swaps: each test on a `redis-server` of its own, some through a proxy
//! of the test's own that can freeze the connections open at one moment (as a half-dead link
//! or a stalled server would) while new ones get through.
#![cfg(feature = "redis")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{limits, RedisServer};
use tiered_ratelimit::{Backend, ManualClock, RateLimitConfig, RateLimiter, TimeSource};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const MINUTE: Duration = Duration::from_secs(60);

/// A TCP proxy to a Redis: [`freeze`](Self::freeze) stops every connection open at that
/// moment (in both directions, for good); connections opened later pass.
struct FreezeProxy {
    port: u16,
    open: Arc<Mutex<Vec<Arc<AtomicBool>>>>,
}

impl FreezeProxy {
    async fn to(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let open: Arc<Mutex<Vec<Arc<AtomicBool>>>> = Arc::default();
        let registry = open.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
                    continue;
                };
                let frozen = Arc::new(AtomicBool::new(false));
                registry.lock().unwrap().push(frozen.clone());
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pipe(cr, sw, frozen.clone()));
                tokio::spawn(pipe(sr, cw, frozen));
            }
        });
        Self { port, open }
    }

    fn freeze(&self) {
        for conn in self.open.lock().unwrap().drain(..) {
            conn.store(true, Ordering::SeqCst);
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

/// Copies `from` to `to` until either closes; once `frozen`, copies nothing more (and holds
/// both ends open).
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

fn config(url: String, timeout: Duration, recovery: (u64, u64)) -> RateLimitConfig {
    limits(5, 0, 0, MINUTE)
        .redis_url(url)
        .redis_time_source(TimeSource::App)
        .redis_command_timeout(timeout)
        .redis_connect_timeout(Duration::from_secs(2))
        .redis_recovery(
            Duration::from_millis(recovery.0),
            Duration::from_millis(recovery.1),
        )
        .build()
        .unwrap()
}

/// The backends a limiter switched to, in order.
type Changes = Arc<Mutex<Vec<Backend>>>;

async fn limiter(config: RateLimitConfig) -> (RateLimiter, Changes) {
    let changes: Changes = Arc::default();
    let seen = changes.clone();
    let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
    let limiter = RateLimiter::builder(config)
        .clock(clock)
        .on_backend_change(move |b| seen.lock().unwrap().push(b))
        .build();
    limiter.wait_connected().await;
    assert_eq!(limiter.backend(), Backend::Redis);
    (limiter, changes)
}

/// A Redis that connects but refuses checks (an ACL without `EVALSHA`, or without `ZADD`,
/// which only an admitted check runs; the same for one over `maxmemory`, or with writes paused)
/// is not swapped back in: the probe runs an admitted check. Once swapped back on a connection
/// alone, the limiter fell back again at once, over and over, each time onto an empty memory
/// store (an outside audit: 80 admitted in a window of a limit of 5; a review found a probe
/// that was denied, and so never wrote, passing under `-zadd`: 72 of 5). When Redis answers
/// checks again, the recovery comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recovery_swaps_back_only_to_a_redis_that_answers_a_check() {
    for refused in ["evalsha", "zadd"] {
        let server = RedisServer::start();
        let (l, changes) = limiter(config(server.url(), Duration::from_secs(2), (50, 100))).await;
        assert!(l.check("alice", "/").await.allowed());
        server.cli(&["ACL", "SETUSER", "default", &format!("-{refused}")]);
        let admitted = hammer(&l, "alice", Duration::from_millis(1_500)).await;
        assert_eq!(
            *changes.lock().unwrap(),
            [Backend::Memory],
            "-{refused}: no swap back"
        );
        assert_eq!(admitted, 5, "-{refused}: one memory store, one limit");
        server.cli(&["ACL", "SETUSER", "default", &format!("+{refused}")]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while l.backend() != Backend::Redis {
            assert!(Instant::now() < deadline, "-{refused}: never recovered");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(*changes.lock().unwrap(), [Backend::Memory, Backend::Redis]);
    }
}

/// Checks `user` every 5 ms for `time`: how many were admitted.
async fn hammer(l: &RateLimiter, user: &str, time: Duration) -> usize {
    let mut admitted = 0;
    let started = Instant::now();
    while started.elapsed() < time {
        admitted += usize::from(l.check(user, "/").await.allowed());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    admitted
}

/// On a cluster every master has its own `maxmemory`: the probe runs a check on each master
/// that holds slots, not only on its key's (a review: one master over `maxmemory`, the global
/// key's, and the limiter swapped back four times in 1.5 s, 20 admitted of 5). Once that
/// master takes writes again, the limiter comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_recovery_probes_every_master() {
    let cluster = common::RedisCluster::start();
    let config = limits(5, 0, 1_000, MINUTE)
        .key_prefix("probes")
        .redis_url(cluster.url())
        .redis_time_source(TimeSource::App)
        .redis_command_timeout(Duration::from_secs(2))
        .redis_connect_timeout(Duration::from_secs(10))
        .redis_recovery(Duration::from_millis(50), Duration::from_millis(100))
        .build()
        .unwrap();
    let (l, changes) = limiter(config).await;
    assert!(l.check("alice", "/").await.allowed());
    let full = cluster.owner_of("probes:global");
    assert_ne!(
        full,
        cluster.owner_of("probes:user:%probe"),
        "pick another prefix"
    );
    // That master's first slot is slot 0, which no decimal tag reached (a review: it went
    // unprobed), and no master may run `CLUSTER NODES` (a review: the probe needed it, and
    // never recovered).
    let id = cluster.nodes[full]
        .cli(&["CLUSTER", "MYID"])
        .trim()
        .to_owned();
    for node in &cluster.nodes {
        assert_eq!(
            node.cli(&["CLUSTER", "SETSLOT", "0", "NODE", &id]).trim(),
            "OK"
        );
        let acl = node.cli(&["ACL", "SETUSER", "default", "-cluster|nodes"]);
        assert_eq!(acl.trim(), "OK");
    }
    cluster.nodes[full].cli(&["CONFIG", "SET", "maxmemory", "1"]);
    let admitted = hammer(&l, "alice", Duration::from_millis(1_500)).await;
    assert_eq!(*changes.lock().unwrap(), [Backend::Memory], "no swap back");
    assert_eq!(admitted, 5, "one memory store, one limit");
    cluster.nodes[full].cli(&["CONFIG", "SET", "maxmemory", "0"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while l.backend() != Backend::Redis {
        assert!(Instant::now() < deadline, "never recovered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A check that met a failure after the recovery had already swapped a new Redis store in
/// asks it only with what is left of its own timeout, and is answered from memory when that
/// runs out: it waited a whole second timeout on the new store before, and when that failed
/// too was let through uncounted (an outside audit: 262 checks waited 3 s at a 1.5 s timeout,
/// every one let through). Here the first store's connections freeze, a check is stuck on them
/// while the recovery swaps a new store in, and the new store's connections freeze too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_caught_by_a_swap_back_waits_at_most_its_own_timeout() {
    let server = RedisServer::start();
    let proxy = FreezeProxy::to(server.port()).await;
    let timeout = Duration::from_millis(500);
    let (l, changes) = limiter(config(proxy.url(), timeout, (100, 100))).await;
    assert!(l.check("alice", "/").await.allowed());
    proxy.freeze();
    let first = tokio::spawn({
        let l = l.clone();
        async move { l.check("bob", "/").await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let caught = tokio::spawn({
        let l = l.clone();
        async move {
            let started = Instant::now();
            let d = l.check("carol", "/").await;
            (started.elapsed(), d)
        }
    });
    // The first check falls back at 500 ms; the probe swaps a new store in 100 ms later.
    let deadline = Instant::now() + Duration::from_secs(5);
    while changes.lock().unwrap().len() < 2 {
        assert!(Instant::now() < deadline, "never swapped back");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    proxy.freeze();
    assert!(first.await.unwrap().allowed());
    let (waited, d) = caught.await.unwrap();
    assert!(
        waited < timeout + Duration::from_millis(150),
        "waited {waited:?} at a {timeout:?} timeout"
    );
    // Counted (a request let through uncounted says 0 remaining).
    assert!(d.allowed() && d.remaining() == 4, "{d:?}");
}
