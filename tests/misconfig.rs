//! Misconfiguration is not an outage: a wrong password, no password, a missing permission or a
//! missing database still fall back (the default start), but are classified as configuration
//! errors, logged once at ERROR with the fix, and returned by the strict start
//! (`RateLimiter::try_connect`). Against `redis-server` processes this test starts.
#![cfg(feature = "redis")]

mod common;

use std::time::Duration;

use common::{free_port, limits, RedisServer};
use tiered_ratelimit::config::{MAX_COMMAND_TIMEOUT, MAX_CONNECT_TIMEOUT, MIN_REDIS_TIMEOUT};
use tiered_ratelimit::{Backend, ConfigError, ConnectError, RateLimitConfig, RateLimiter};

const MINUTE: Duration = Duration::from_secs(60);

fn config(url: String) -> RateLimitConfig {
    limits(5, 0, 0, MINUTE)
        .redis_url(url)
        .redis_connect_timeout(Duration::from_secs(5))
        .redis_command_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// The default start falls back and answers, with `want` as the cause; the strict start
/// returns `want`.
async fn assert_misconfigured(config: RateLimitConfig, want: fn(&ConnectError) -> bool) {
    let limiter = RateLimiter::connect(config.clone()).await;
    assert_eq!(limiter.backend(), Backend::Memory);
    for _ in 0..5 {
        assert!(limiter.check("alice", "/items").await.allowed());
    }
    assert!(
        !limiter.check("alice", "/items").await.allowed(),
        "the limits hold on memory"
    );
    let cause = limiter.fallback_cause().expect("a fallback has a cause");
    assert!(want(&cause), "{cause:?}");
    assert!(cause.is_config(), "{cause:?}");
    assert_eq!(cause.reason(), "config");
    let error = RateLimiter::try_connect(config).await.unwrap_err();
    assert!(want(&error), "{error:?}");
    assert!(error.message().is_some_and(|m| !m.is_empty()));
}

/// A password set under a running limiter: its next connection is refused (NOAUTH), and the
/// fallback says so, as a configuration error with the fix, not "unreachable" (an outside
/// audit got the fix for a dead host). The kill stands in for an idle timeout or a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_set_while_running_is_a_configuration_error() {
    let server = RedisServer::start();
    let limiter = password_set_under_a_running_limiter(&server).await;
    assert!(limiter.check("alice", "/items").await.allowed(), "answered");
    let cause = limiter.fallback_cause().expect("fell back");
    assert!(
        matches!(cause, ConnectError::NoPassword { .. }),
        "{cause:?}"
    );
    assert!(cause.is_config());
}

/// A limiter on `server` (a 500 ms command timeout) that has checked once, and then the
/// password `newpw` set and its connections killed: its reconnections meet NOAUTH.
async fn password_set_under_a_running_limiter(server: &RedisServer) -> RateLimiter {
    let config = limits(5, 0, 0, MINUTE)
        .redis_url(server.url())
        .redis_command_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let limiter = RateLimiter::try_connect(config).await.unwrap();
    assert!(limiter.check("alice", "/items").await.allowed());
    server.cli(&["CONFIG", "SET", "requirepass", "newpw"]);
    for kind in ["normal", "pubsub"] {
        let kill = ["CLIENT", "KILL", "TYPE", kind];
        server.cli(&[&["-a", "newpw", "--no-auth-warning"][..], &kill].concat());
    }
    limiter
}

/// A connection error met while a password was being changed, then put back, does not make a
/// later, unrelated timeout a configuration error (a review: a NOAUTH from before a
/// reconnection that worked was blamed for a pause, an ERROR telling the operator to set a
/// password). (It is still "unreachable": any connection error since the start is.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_error_from_before_a_reconnection_is_not_a_later_cause() {
    let server = RedisServer::start();
    let limiter = password_set_under_a_running_limiter(&server).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.cli(&[
        "-a",
        "newpw",
        "--no-auth-warning",
        "CONFIG",
        "SET",
        "requirepass",
        "",
    ]);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let answered = limiter.check("alice", "/items").await.allowed();
        if limiter.backend() == Backend::Redis && answered {
            break;
        }
        assert_eq!(
            limiter.backend(),
            Backend::Redis,
            "{:?}",
            limiter.fallback_cause()
        );
        assert!(std::time::Instant::now() < deadline, "never reconnected");
    }
    server.cli(&["CLIENT", "PAUSE", "2000", "ALL"]);
    assert!(limiter.check("alice", "/items").await.allowed(), "answered");
    let cause = limiter.fallback_cause().expect("fell back");
    assert!(!cause.is_config(), "{cause:?}");
}

/// A server that wants the password `secret` (set after start: the helper's PING is plain).
fn server_with_password() -> RedisServer {
    let server = RedisServer::start();
    server.cli(&["CONFIG", "SET", "requirepass", "secret"]);
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_a_configuration_error() {
    let server = server_with_password();
    let url = format!("redis://:wrong@127.0.0.1:{}", server.port());
    assert_misconfigured(
        config(url),
        |e| matches!(e, ConnectError::WrongPassword { message } if message.contains("WRONGPASS")),
    )
    .await;
    // The right one connects.
    let url = format!("redis://:secret@127.0.0.1:{}", server.port());
    let limiter = RateLimiter::try_connect(config(url)).await.unwrap();
    assert!(limiter.check("alice", "/items").await.allowed());
    assert_eq!(limiter.backend(), Backend::Redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_password_is_a_configuration_error() {
    let server = server_with_password();
    assert_misconfigured(
        config(server.url()),
        |e| matches!(e, ConnectError::NoPassword { message } if message.contains("NOAUTH")),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_permission_is_a_configuration_error() {
    let server = RedisServer::start();
    let ok = server.cli(&[
        "ACL", "SETUSER", "limited", "on", ">pw", "~*", "+ping", "-evalsha",
    ]);
    assert_eq!(ok.trim(), "OK");
    let url = format!("redis://limited:pw@127.0.0.1:{}", server.port());
    assert_misconfigured(
        config(url),
        |e| matches!(e, ConnectError::NoPermission { message } if message.contains("NOPERM")),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_missing_only_at_the_first_check_is_a_configuration_error_too() {
    // SCRIPT LOAD is allowed, EVALSHA is not: the connection comes up, the first check fails.
    let server = RedisServer::start();
    let ok = server.cli(&[
        "ACL", "SETUSER", "noeval", "on", ">pw", "~*", "+@all", "-evalsha",
    ]);
    assert_eq!(ok.trim(), "OK");
    let url = format!("redis://noeval:pw@127.0.0.1:{}", server.port());
    let limiter = RateLimiter::connect(config(url)).await;
    assert_eq!(limiter.backend(), Backend::Redis);
    assert!(limiter.check("alice", "/items").await.allowed());
    assert_eq!(limiter.backend(), Backend::Memory);
    let cause = limiter.fallback_cause().unwrap();
    assert!(
        matches!(cause, ConnectError::NoPermission { .. }),
        "{cause:?}"
    );
    assert_eq!(cause.reason(), "config");
}

/// A single server's URL (no `redis-cluster://`, no `cluster = true`) that reaches a Redis
/// Cluster node: refused at start as a configuration error (an outside audit: it started, then
/// fell back at the first check over several tiers with `CROSSSLOT`, logged as an outage).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_server_url_for_a_cluster_node_is_a_configuration_error() {
    let server = RedisServer::start_with(&["--cluster-enabled", "yes"]);
    assert_misconfigured(config(server.url()), |e| {
        matches!(e, ConnectError::InvalidSettings { message } if message.contains("cluster_enabled:1"))
    })
    .await;
    let error = RateLimiter::try_connect(config(server.url()))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("redis-cluster://"), "{error}");
}

/// A cluster of one node that holds every slot is taken with a single server's URL (every key
/// is there; a review: a one-tier config works). A check over several tiers then fails with
/// `CROSSSLOT`: a configuration error, logged as one, not an outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_node_cluster_holding_every_slot_is_taken_and_crossslot_is_a_configuration_error() {
    let server = RedisServer::start_with(&["--cluster-enabled", "yes"]);
    assert_eq!(
        server
            .cli(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"])
            .trim(),
        "OK"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !server
        .cli(&["CLUSTER", "INFO"])
        .contains("cluster_state:ok")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the cluster never came up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let one_tier = RateLimiter::try_connect(config(server.url()))
        .await
        .unwrap();
    for _ in 0..5 {
        assert!(one_tier.check("alice", "/items").await.allowed());
    }
    assert!(!one_tier.check("alice", "/items").await.allowed());
    assert_eq!(one_tier.backend(), Backend::Redis);
    let three_tiers = limits(5, 10, 20, MINUTE)
        .redis_url(server.url())
        .redis_command_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let limiter = RateLimiter::try_connect(three_tiers).await.unwrap();
    assert!(limiter.check("bob", "/items").await.allowed(), "answered");
    let cause = limiter.fallback_cause().expect("fell back");
    assert!(
        matches!(&cause, ConnectError::InvalidSettings { message } if message.contains("CROSSSLOT")),
        "{cause:?}"
    );
    assert!(cause.is_config(), "{cause:?}");
    // A master without slots beside it is no such cluster's master: refused (a review: taken,
    // and its first check fell back on a MOVED, as an outage).
    let empty = RedisServer::start_with(&["--cluster-enabled", "yes"]);
    let port = empty.port().to_string();
    assert_eq!(
        server.cli(&["CLUSTER", "MEET", "127.0.0.1", &port]).trim(),
        "OK"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !empty.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok") {
        assert!(std::time::Instant::now() < deadline, "never joined");
        std::thread::sleep(Duration::from_millis(50));
    }
    let error = RateLimiter::try_connect(config(empty.url()))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ConnectError::InvalidSettings { .. }),
        "{error:?}"
    );
    // The same when the master's hostname holds `myself` (a review: the line was found by
    // its text, not by its flags).
    server.cli(&["CONFIG", "SET", "cluster-announce-hostname", "myself-a"]);
    while !empty.cli(&["CLUSTER", "NODES"]).contains("myself-a") {
        assert!(
            std::time::Instant::now() < deadline,
            "the hostname never spread"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let error = RateLimiter::try_connect(config(empty.url())).await;
    assert!(error.is_err(), "a master without slots taken");
    // A user that may not run `CLUSTER NODES` cannot tell: the master is taken (a review: it
    // was refused, with a message of other masters that do not exist).
    server.cli(&["ACL", "SETUSER", "default", "-cluster|nodes"]);
    let limiter = RateLimiter::try_connect(config(server.url()))
        .await
        .unwrap();
    assert!(limiter.check("carol", "/items").await.allowed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_database_is_a_configuration_error() {
    let server = RedisServer::start_with(&["--databases", "16"]);
    let url = format!("redis://127.0.0.1:{}/99", server.port());
    assert_misconfigured(config(url), |e| {
        matches!(e, ConnectError::NoSuchDatabase { .. })
    })
    .await;
    // An existing one works.
    let url = format!("redis://127.0.0.1:{}/15", server.port());
    let limiter = RateLimiter::try_connect(config(url)).await.unwrap();
    assert!(limiter.check("alice", "/items").await.allowed());
    assert_eq!(
        server
            .cli(&["-n", "15", "ZCARD", "rate_limit:user:alice"])
            .trim(),
        "1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_is_an_outage_not_a_configuration_error() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let limiter = RateLimiter::connect(config(url.clone())).await;
    assert_eq!(limiter.backend(), Backend::Memory);
    assert!(limiter.check("alice", "/items").await.allowed());
    let cause = limiter.fallback_cause().unwrap();
    assert!(
        matches!(cause, ConnectError::Unreachable { .. }),
        "{cause:?}"
    );
    assert!(!cause.is_config());
    assert_eq!(cause.reason(), "unreachable");
    let error = RateLimiter::try_connect(config(url)).await.unwrap_err();
    assert!(
        matches!(error, ConnectError::Unreachable { .. }),
        "{error:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_at_start_is_a_timeout() {
    let server = RedisServer::start();
    server.pause();
    let config = limits(5, 0, 0, MINUTE)
        .redis_url(server.url())
        .redis_connect_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let error = RateLimiter::try_connect(config).await.unwrap_err();
    server.resume();
    assert_eq!(
        error,
        ConnectError::Timeout {
            after: Duration::from_millis(200)
        }
    );
    assert_eq!(error.reason(), "timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_redis_starts_strictly() {
    let server = RedisServer::start();
    let limiter = RateLimiter::try_connect(config(server.url()))
        .await
        .unwrap();
    assert_eq!(limiter.backend(), Backend::Redis);
    assert!(limiter.fallback_cause().is_none());
    assert!(limiter.check("alice", "/items").await.allowed());
    // Memory: nothing to connect to.
    let memory = RateLimiter::try_connect(limits(1, 0, 0, MINUTE).build().unwrap())
        .await
        .unwrap();
    assert_eq!(memory.backend(), Backend::Memory);
}

/// On this thread only (a current-thread runtime keeps the fallback on it).
#[tokio::test]
async fn a_configuration_fallback_logs_one_error_with_the_cause_and_the_fix() {
    let server = server_with_password();
    let (logs, _guard) = common::logs::capture("tiered_ratelimit=debug");
    let url = format!("redis://:wrong@127.0.0.1:{}", server.port());
    let limiter = RateLimiter::connect(config(url)).await;
    assert!(limiter.check("alice", "/items").await.allowed());
    assert!(limiter.check("bob", "/items").await.allowed());
    let text = logs.text();
    let errors: Vec<&str> = text.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(errors.len(), 1, "{text}");
    assert!(errors[0].contains("WRONGPASS"), "{text}");
    assert!(
        errors[0].contains("fix: set the right user and password"),
        "{text}"
    );
    assert!(errors[0].contains("reason=\"config\""), "{text}");
    assert!(!text.contains("WARN"), "{text}");
}

#[test]
fn redis_timeouts_outside_their_range_are_refused_naming_the_field_and_the_range() {
    let build = |command: Duration, connect: Duration| {
        RateLimitConfig::builder()
            .redis_url("redis://127.0.0.1:6379")
            .redis_command_timeout(command)
            .redis_connect_timeout(connect)
            .build()
    };
    let second = Duration::from_secs(1);
    let year = Duration::from_secs(365 * 24 * 3600);
    for (command, connect, field) in [
        (Duration::from_micros(1), second, "redis.command_timeout"),
        (year, second, "redis.command_timeout"),
        (
            MAX_COMMAND_TIMEOUT + Duration::from_millis(1),
            second,
            "redis.command_timeout",
        ),
        (second, Duration::from_micros(999), "redis.connect_timeout"),
        (
            second,
            MAX_CONNECT_TIMEOUT + Duration::from_millis(1),
            "redis.connect_timeout",
        ),
    ] {
        let e = build(command, connect).unwrap_err();
        assert_eq!(e.field(), field, "{e}");
        assert!(matches!(e, ConfigError::TimeoutOutOfRange { .. }), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("1ms") && text.contains(field), "{text}");
    }
    assert!(build(MIN_REDIS_TIMEOUT, MIN_REDIS_TIMEOUT).is_ok());
    assert!(build(MAX_COMMAND_TIMEOUT, MAX_CONNECT_TIMEOUT).is_ok());
    let e = RateLimitConfig::builder()
        .redis_url("redis://127.0.0.1:6379")
        .redis_command_timeout(year)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("60s"), "{e}");
}

#[test]
fn only_schemes_that_work_are_accepted() {
    let field_of = |url: &str| {
        RateLimitConfig::builder()
            .redis_url(url)
            .build()
            .map(|_| ())
            .map_err(|e| (e.field(), e.to_string()))
    };
    for url in [
        "redis://127.0.0.1:6379/2",
        "valkey://127.0.0.1:6379",
        "redis-cluster://127.0.0.1:7000?node=127.0.0.1:7001",
        "valkey-cluster://127.0.0.1:7000",
        "redis-sentinel://127.0.0.1:26379?sentinelServiceName=main",
        #[cfg(unix)]
        "redis+unix:///run/redis.sock",
        #[cfg(unix)]
        "valkey+unix:///run/redis.sock",
        #[cfg(unix)]
        "unix:///run/redis.sock",
    ] {
        assert_eq!(field_of(url), Ok(()), "{url}");
    }
    for url in [
        "http://127.0.0.1:6379",
        "127.0.0.1:6379",
        "rediss+unix:///s",
    ] {
        let (field, text) = field_of(url).unwrap_err();
        assert_eq!(field, "redis.url", "{url}");
        assert!(text.contains("redis://") || text.contains("Unix"), "{text}");
    }
}

#[cfg(feature = "tls")]
#[test]
fn tls_urls_are_accepted_with_the_tls_feature() {
    for url in [
        "rediss://127.0.0.1:6380",
        "rediss-cluster://127.0.0.1:7000",
        "rediss-sentinel://127.0.0.1:26379?sentinelServiceName=main",
        "valkeys://127.0.0.1:6380",
    ] {
        assert!(
            RateLimitConfig::builder().redis_url(url).build().is_ok(),
            "{url}"
        );
    }
}

#[cfg(not(feature = "tls"))]
#[test]
fn tls_urls_are_a_config_error_without_the_tls_feature() {
    for url in [
        "rediss://127.0.0.1:6380",
        "rediss-cluster://127.0.0.1:7000",
        "rediss-sentinel://127.0.0.1:26379?sentinelServiceName=main",
        "valkeys://127.0.0.1:6380",
    ] {
        let e = RateLimitConfig::builder()
            .redis_url(url)
            .build()
            .unwrap_err();
        assert_eq!(e, ConfigError::TlsFeatureDisabled, "{url}");
        assert_eq!(e.field(), "redis.url");
    }
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_sockets_work() {
    let server = RedisServer::start_unix();
    let socket = server.socket().to_str().unwrap().to_owned();
    for (user, url) in [
        ("alice", format!("redis+unix://{socket}")),
        ("bob", format!("unix://{socket}")),
    ] {
        let limiter = RateLimiter::try_connect(config(url)).await.unwrap();
        assert!(limiter.check(user, "/items").await.allowed());
        assert_eq!(limiter.backend(), Backend::Redis);
        assert_eq!(
            server
                .cli(&["ZCARD", &format!("rate_limit:user:{user}")])
                .trim(),
            "1"
        );
    }
}

/// A read-only replica (an URL that names the wrong server, or a master a failover demoted)
/// refuses the limiter's writes: a configuration error, found at start by `ROLE`, and the
/// strict start refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_is_a_configuration_error() {
    let master = RedisServer::start();
    let replica = RedisServer::start();
    let port = master.port().to_string();
    assert_eq!(replica.cli(&["REPLICAOF", "127.0.0.1", &port]).trim(), "OK");
    let url = format!("redis://127.0.0.1:{}", replica.port());
    assert_misconfigured(
        config(url),
        |e| matches!(e, ConnectError::ReadOnlyReplica { message } if message.contains("replica")),
    )
    .await;
    assert_eq!(replica.cli(&["DBSIZE"]).trim(), "0");
}

/// An ACL user that may not run `ROLE` is not refused at start for it; if the server is a
/// replica, the first check meets `READONLY` and falls back. In a check that reply is taken
/// for what it most often is, a failover that demoted the master: an error, not the settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_found_by_a_check_falls_back_as_an_error() {
    let master = RedisServer::start();
    let replica = RedisServer::start();
    let ok = replica.cli(&[
        "ACL", "SETUSER", "norole", "on", ">pw", "~*", "+@all", "-role",
    ]);
    assert_eq!(ok.trim(), "OK");
    let port = master.port().to_string();
    assert_eq!(replica.cli(&["REPLICAOF", "127.0.0.1", &port]).trim(), "OK");
    let url = format!("redis://norole:pw@127.0.0.1:{}", replica.port());
    let limiter = RateLimiter::try_connect(config(url)).await.unwrap();
    assert_eq!(limiter.backend(), Backend::Redis);
    assert!(limiter.check("alice", "/items").await.allowed());
    assert_eq!(limiter.backend(), Backend::Memory);
    let cause = limiter.fallback_cause().unwrap();
    assert!(
        matches!(&cause, ConnectError::Other { message } if message.contains("READONLY")
            && message.contains("failover")),
        "{cause:?}"
    );
    assert_eq!(cause.reason(), "error");
}
