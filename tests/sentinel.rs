//! Redis Sentinel (`redis-sentinel://host:port?sentinelServiceName=NAME`, docs/REDIS.md): the
//! store reaches the master the Sentinel group names, and after a failover the new one.
//! Against a master, a replica and a Sentinel this test starts.
#![cfg(feature = "redis")]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, limits, temp_dir, RedisServer};
use tiered_ratelimit::{Backend, ManualClock, RateLimitConfig, RateLimiter, TimeSource};

const MINUTE: Duration = Duration::from_secs(60);

/// A Sentinel on a free port watching the master `main`, killed on drop.
struct Sentinel {
    child: Child,
    port: u16,
}

impl Sentinel {
    fn watching(master: &RedisServer) -> Self {
        let dir = temp_dir("sentinel");
        let conf = dir.join("sentinel.conf");
        let port = free_port();
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor main 127.0.0.1 {} 1\n\
                 sentinel down-after-milliseconds main 1000\n\
                 sentinel failover-timeout main 5000\n",
                dir.display(),
                master.port()
            ),
        )
        .unwrap();
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server --sentinel");
        let sentinel = Self { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while sentinel.master_port().is_none() {
            assert!(
                Instant::now() < deadline,
                "the Sentinel never named a master"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        sentinel
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The port of the master the Sentinel names now.
    fn master_port(&self) -> Option<u16> {
        let out = self.cli(&["SENTINEL", "get-master-addr-by-name", "main"]);
        out.lines().nth(1)?.trim().parse().ok()
    }

    fn url(&self) -> String {
        format!(
            "redis-sentinel://127.0.0.1:{}?sentinelServiceName=main",
            self.port
        )
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(sentinel: &Sentinel, recovery: bool) -> RateLimitConfig {
    let mut config = limits(3, 0, 0, MINUTE)
        .redis_url(sentinel.url())
        .redis_time_source(TimeSource::App)
        .redis_command_timeout(Duration::from_secs(2))
        .redis_connect_timeout(Duration::from_secs(5));
    if recovery {
        config = config.redis_recovery(Duration::from_millis(200), Duration::from_millis(400));
    }
    config.build().unwrap()
}

fn zcard(server: &RedisServer, key: &str) -> String {
    server.cli(&["ZCARD", key]).trim().to_owned()
}

/// A Sentinel set-up named wrongly is refused at start with a message that says what to change
/// (docs/REDIS.md, `InvalidSettings`; an outside audit found each "Redis failed", fix "see the
/// message", and the last one a fallback logged as an outage): a Sentinel URL for a plain
/// Redis and a plain URL for the Sentinel are configuration errors; a service name the
/// Sentinel does not monitor is `Unreachable` (a Sentinel just restarted answers the same
/// until it is told of the master), its message naming `sentinelServiceName`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_set_up_named_wrongly_is_refused_saying_what_to_change() {
    let master = RedisServer::start();
    let sentinel = Sentinel::watching(&master);
    let cases = [
        (
            format!(
                "redis-sentinel://127.0.0.1:{}?sentinelServiceName=main",
                master.port()
            ),
            "config",
            "reached a server that is not one",
        ),
        (
            format!(
                "redis-sentinel://127.0.0.1:{}?sentinelServiceName=other",
                sentinel.port
            ),
            "unreachable",
            "monitors no master of that name",
        ),
        (
            format!("redis://127.0.0.1:{}", sentinel.port),
            "config",
            "runs no Lua scripts",
        ),
    ];
    for (url, reason, says) in cases {
        let config = limits(3, 0, 0, MINUTE)
            .redis_url(url.clone())
            .redis_connect_timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let started = Instant::now();
        let error = RateLimiter::try_connect(config).await.unwrap_err();
        assert_eq!(error.reason(), reason, "{url}: {error:?}");
        assert!(
            error.message().is_some_and(|m| m.contains(says)),
            "{url}: {error:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{url}: known at once, not by the connect timeout"
        );
    }
}

/// docs/REDIS.md: a `redis-sentinel://` URL reaches the master the Sentinel group names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_url_reaches_the_master_it_names() {
    let master = RedisServer::start();
    let sentinel = Sentinel::watching(&master);
    let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
    let limiter = RateLimiter::builder(config(&sentinel, false))
        .clock(clock.clone())
        .build();
    limiter.wait_connected().await;
    assert_eq!(
        limiter.backend(),
        Backend::Redis,
        "{:?}",
        limiter.fallback_cause()
    );
    for _ in 0..3 {
        assert!(limiter.check("alice", "/").await.allowed());
    }
    assert!(!limiter.check("alice", "/").await.allowed());
    assert_eq!(zcard(&master, "rate_limit:user:alice"), "3");
}

/// A failover the Sentinel runs (docs/REDIS.md, "Sentinel"): the old master is demoted and
/// closes its clients; the store reconnects through the Sentinel to the new master, where the
/// counts are. Every check meanwhile is answered within the command timeout; one that met the
/// old master (READONLY) would fall back, and the opt-in recovery would bring it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_sentinel_failover_checks_reach_the_new_master() {
    let master = RedisServer::start();
    let replica =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    let sentinel = Sentinel::watching(&master);
    // The replica has caught up before anything is counted.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !replica
        .cli(&["INFO", "replication"])
        .contains("master_link_status:up")
    {
        assert!(Instant::now() < deadline, "the replica never synced");
        std::thread::sleep(Duration::from_millis(50));
    }
    let clock = ManualClock::at(Duration::from_secs(1_700_000_000));
    let changes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = changes.clone();
    let limiter = RateLimiter::builder(config(&sentinel, true))
        .clock(clock.clone())
        .on_backend_change(move |b| seen.lock().unwrap().push(b))
        .build();
    limiter.wait_connected().await;
    assert_eq!(limiter.backend(), Backend::Redis);
    assert!(limiter.check("bob", "/").await.allowed());
    assert!(limiter.check("bob", "/").await.allowed());
    // Written to the master, and replicated.
    let deadline = Instant::now() + Duration::from_secs(5);
    while zcard(&replica, "rate_limit:user:bob") != "2" {
        assert!(Instant::now() < deadline, "never replicated");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(sentinel
        .cli(&["SENTINEL", "FAILOVER", "main"])
        .starts_with("OK"));
    let deadline = Instant::now() + Duration::from_secs(15);
    while sentinel.master_port() != Some(replica.port()) {
        assert!(Instant::now() < deadline, "the failover never happened");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Checks go on being answered, whatever the store does meanwhile; the recovery brings the
    // limiter back to Redis, on the new master.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let started = Instant::now();
        let _ = limiter.check("carol", "/").await;
        assert!(started.elapsed() < Duration::from_secs(3), "a check waited");
        let on_new_master = zcard(&replica, "rate_limit:user:carol") != "0";
        if limiter.backend() == Backend::Redis && on_new_master {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never back on the new master: {:?} {:?}",
            limiter.backend(),
            limiter.fallback_cause()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Either the store's connection moved over without an error (the demoted master closes
    // its clients, and the store reconnects through the Sentinel), or a check met the old
    // master (READONLY) and the limiter fell back and came back.
    let changes = changes.lock().unwrap().clone();
    assert!(
        changes.is_empty() || changes == [Backend::Memory, Backend::Redis],
        "{changes:?}"
    );
    // The counts of before the failover are there: bob has one request left of three.
    assert!(limiter.check("bob", "/").await.allowed());
    assert!(!limiter.check("bob", "/").await.allowed());
    assert_eq!(zcard(&replica, "rate_limit:user:bob"), "3");
}
