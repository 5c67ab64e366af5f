//! Operating a limiter live (issue 13): waiting instead of failing (`acquire`), usage without
//! recording (`usage`), live reconfiguration (`reconfigure`), blocks (`block`), the admin
//! routes (`admin`), resets (`reset`). Each body is written once and runs on memory, on a Redis server of its
//! own and on the binary's shared Redis Cluster.

mod common;

#[path = "operate/acquire.rs"]
mod acquire;
#[cfg(feature = "admin")]
#[path = "operate/admin.rs"]
mod admin;
#[path = "operate/block.rs"]
mod block;
#[path = "operate/reconfigure.rs"]
mod reconfigure;
#[path = "operate/reset.rs"]
mod reset;
#[path = "operate/usage.rs"]
mod usage;

use std::time::Duration;

use tiered_ratelimit::{
    ManualClock, RateLimitConfig, RateLimitConfigBuilder, RateLimiter, TimeSource,
};

use crate::common::TestBackend;

/// The config for `b`, like `TestBackend::config` but with the longest command timeout (60 s): the
/// tests that pause tokio's time let it jump while a command is in flight, and a short timeout
/// could then fire without Redis being slow at all.
pub fn config(b: &TestBackend, config: RateLimitConfigBuilder) -> RateLimitConfig {
    config_prefixed(b, config, None)
}

/// The same, with the keys under `prefix` (on the cluster, instead of the test's own).
pub fn config_prefixed(
    b: &TestBackend,
    config: RateLimitConfigBuilder,
    prefix: Option<&str>,
) -> RateLimitConfig {
    let config = match (prefix, b) {
        (Some(prefix), _) => config.key_prefix(prefix),
        (None, TestBackend::Cluster(_, prefix)) => config.key_prefix(prefix.clone()),
        (None, _) => config,
    };
    let redis = |config: RateLimitConfigBuilder, url: String| {
        config
            .redis_url(url)
            .redis_command_timeout(Duration::from_secs(60))
            .redis_time_source(TimeSource::App)
            .build()
            .expect("valid config")
    };
    match b {
        TestBackend::Memory => config.build().expect("valid config"),
        TestBackend::Redis(server) => redis(config, server.url()),
        TestBackend::Cluster(cluster, _) => redis(config, cluster.url()),
    }
}

/// A limiter on `b` driven by `clock`, connected (in real time) before it returns.
pub async fn limiter(
    b: &TestBackend,
    builder: RateLimitConfigBuilder,
    clock: &ManualClock,
) -> RateLimiter {
    let limiter = RateLimiter::builder(config(b, builder))
        .clock(clock.clone())
        .build();
    limiter.wait_connected().await;
    assert_eq!(
        limiter.backend(),
        b.expected_backend(),
        "backend up: {:?}",
        limiter.fallback_cause()
    );
    limiter
}

/// The tick at which [`follow_tokio_time`] moves tokio's time and the manual clock.
pub const TICK: Duration = Duration::from_millis(5);

/// Pauses tokio's time and makes `clock` follow it, tick by tick: from now on the limiter's
/// `now` is `clock`'s start plus the (virtual) time tokio has let pass. Returns tokio's
/// instant at the start. The follower task ends with the test's runtime.
///
/// Paused, tokio moves time on whenever every task waits, even on a socket: a Redis reply
/// still on its way would let time run away (seconds of virtual time per round trip). So
/// before each tick the follower lets half a millisecond of real time pass in a blocking
/// task, during which tokio does not move time (`spawn_blocking` inhibits auto-advance) and
/// a reply in flight arrives. A round trip then costs a tick or so of virtual time; the
/// tests' bounds allow for that.
pub fn follow_tokio_time(clock: &ManualClock) -> tokio::time::Instant {
    tokio::time::pause();
    let start = tokio::time::Instant::now();
    let base = tiered_ratelimit::Clock::now(clock);
    let clock = clock.clone();
    tokio::spawn(async move {
        loop {
            let real = || std::thread::sleep(Duration::from_micros(500));
            tokio::task::spawn_blocking(real)
                .await
                .expect("pacing task");
            tokio::time::sleep(TICK).await;
            clock.set(base + start.elapsed());
        }
    });
    start
}

/// Runs each named body (an `async fn(TestBackend)` in module `$module`) on memory, Redis and
/// the cluster, on a current-thread runtime (tokio's time can be paused there), or with
/// `threaded` on two worker threads.
#[macro_export]
macro_rules! on_every_backend {
    ($module:ident: $($name:ident),* $(,)?) => {
        $crate::on_every_backend!(@with $module, (), $($name),*);
    };
    ($module:ident, threaded: $($name:ident),* $(,)?) => {
        $crate::on_every_backend!(@with $module, (flavor = "multi_thread", worker_threads = 2), $($name),*);
    };
    (@with $module:ident, $flavor:tt, $($name:ident),*) => {
        mod memory {
            $(
                #[tokio::test $flavor]
                async fn $name() {
                    $crate::$module::$name($crate::common::TestBackend::memory()).await;
                }
            )*
        }
        #[cfg(feature = "redis")]
        mod redis {
            $(
                #[tokio::test $flavor]
                async fn $name() {
                    $crate::$module::$name($crate::common::TestBackend::redis()).await;
                }
            )*
        }
        #[cfg(feature = "redis")]
        mod cluster {
            $(
                #[tokio::test $flavor]
                async fn $name() {
                    $crate::$module::$name($crate::common::TestBackend::cluster()).await;
                }
            )*
        }
    };
}
