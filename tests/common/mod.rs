//! Shared test helpers: real `redis-server` processes on free ports, and the backends the store
//! contract runs against.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

mod cluster;
pub mod demo;
#[cfg(feature = "axum")]
pub mod http;
pub mod logs;
pub mod memory;
pub mod rng;
#[cfg(feature = "redis")]
pub mod script;
mod server;
mod wall;

// Each test binary uses some of these, as with the rest of this module (`dead_code` above).
#[allow(unused_imports)]
pub use cluster::RedisCluster;
#[allow(unused_imports)]
pub use server::{free_port, spawn_failed, temp_dir, RedisServer};
#[allow(unused_imports)]
pub use wall::wall_clock;

use tiered_ratelimit::{
    Backend, ManualClock, RateLimitConfig, RateLimitConfigBuilder, RateLimiter, TimeSource,
};

static PREFIX_SEQ: AtomicU64 = AtomicU64::new(0);

/// A backend the store contract runs against. It owns what it started.
pub enum TestBackend {
    /// The in-memory store.
    Memory,
    /// A Redis server of this test's own.
    Redis(RedisServer),
    /// The test binary's shared Redis Cluster, under a key prefix of this test's own.
    Cluster(&'static RedisCluster, String),
}

impl TestBackend {
    /// The in-memory backend.
    pub fn memory() -> Self {
        Self::Memory
    }

    /// A fresh Redis server for this test.
    pub fn redis() -> Self {
        Self::Redis(RedisServer::start())
    }

    /// The shared cluster, with a fresh key prefix.
    pub fn cluster() -> Self {
        let prefix = format!("t{}", PREFIX_SEQ.fetch_add(1, Ordering::Relaxed));
        Self::Cluster(RedisCluster::shared(), prefix)
    }

    /// A limiter on this backend, driven by `clock`, connected before it returns.
    pub async fn limiter(
        &self,
        config: RateLimitConfigBuilder,
        clock: &ManualClock,
    ) -> RateLimiter {
        let config = self.config(config);
        let limiter = RateLimiter::builder(config).clock(clock.clone()).build();
        limiter.wait_connected().await;
        let cause = limiter.fallback_cause();
        assert_eq!(
            limiter.backend(),
            self.expected_backend(),
            "backend up: {cause:?}"
        );
        limiter
    }

    /// The config with this backend's settings added.
    ///
    /// Redis takes `now` from the limiter's clock (`TimeSource::App`), set explicitly: every
    /// test driving Redis with a `ManualClock` depends on it, whatever the default.
    pub fn config(&self, config: RateLimitConfigBuilder) -> RateLimitConfig {
        self.config_with_prefix(config, "")
    }

    /// The same, with the keys under a prefix of the caller's own (`suffix` is appended to the
    /// cluster's per-test prefix; on a single server it is the whole prefix; memory ignores
    /// it): for tests that make many limiters on one backend that must not share state. An
    /// empty `suffix` leaves the prefix as [`config`](Self::config) sets it.
    pub fn config_with_prefix(
        &self,
        config: RateLimitConfigBuilder,
        suffix: &str,
    ) -> RateLimitConfig {
        match self {
            Self::Memory => config.build().expect("valid config"),
            Self::Redis(server) => {
                let config = if suffix.is_empty() {
                    config
                } else {
                    config.key_prefix(suffix)
                };
                config
                    .redis_url(server.url())
                    .redis_command_timeout(Duration::from_secs(2))
                    .redis_time_source(TimeSource::App)
                    .build()
                    .expect("valid config")
            }
            Self::Cluster(cluster, prefix) => config
                .key_prefix(format!("{prefix}{suffix}"))
                .redis_url(cluster.url())
                .redis_command_timeout(Duration::from_secs(2))
                .redis_connect_timeout(Duration::from_secs(10))
                .redis_time_source(TimeSource::App)
                .build()
                .expect("valid config"),
        }
    }

    /// The backend a healthy limiter on this reports.
    pub fn expected_backend(&self) -> Backend {
        match self {
            Self::Memory => Backend::Memory,
            Self::Redis(_) | Self::Cluster(..) => Backend::Redis,
        }
    }

    /// The Redis server, if any.
    pub fn server(&self) -> Option<&RedisServer> {
        match self {
            Self::Memory | Self::Cluster(..) => None,
            Self::Redis(s) => Some(s),
        }
    }
}

/// A config builder with these limits and window.
pub fn limits(user: u64, endpoint: u64, global: u64, window: Duration) -> RateLimitConfigBuilder {
    RateLimitConfig::builder()
        .window(window)
        .user_limit(user)
        .endpoint_limit(endpoint)
        .global_limit(global)
}

/// A limiter on `server` (a user limit of 5 in a minute) whose Redis commands give up after
/// 300 ms, connected: for tests that pause or kill that server under it.
pub async fn impatient_limiter(server: &RedisServer) -> RateLimiter {
    let config = limits(5, 0, 0, Duration::from_secs(60))
        .redis_url(server.url())
        .redis_command_timeout(Duration::from_millis(300))
        .build()
        .expect("valid config");
    let limiter = RateLimiter::new(config);
    limiter.wait_connected().await;
    limiter
}

/// A limiter of `config` on `clock`, connected to its Redis (asserted).
pub async fn connected(config: RateLimitConfig, clock: &ManualClock) -> RateLimiter {
    let limiter = RateLimiter::builder(config).clock(clock.clone()).build();
    limiter.wait_connected().await;
    assert_eq!(limiter.backend(), Backend::Redis);
    limiter
}

/// Runs each named contract test (an `async fn(TestBackend)` in the `contract` module) against
/// every backend: `memory::name`, `redis::name` and `cluster::name` (on the binary's shared
/// three-master cluster).
#[macro_export]
macro_rules! contract_tests {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::contract::$name($crate::common::TestBackend::memory()).await;
                }
            )*
        }
        #[cfg(feature = "redis")]
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::contract::$name($crate::common::TestBackend::redis()).await;
                }
            )*
        }
        #[cfg(feature = "redis")]
        mod cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::contract::$name($crate::common::TestBackend::cluster()).await;
                }
            )*
        }
    };
}
