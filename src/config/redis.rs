//! The Redis settings of a configuration: where Redis is, how long to wait on it, TLS, and
//! what to do after a fallback.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::serde_duration;
#[cfg(doc)]
use super::MAX_SHARDS;
#[cfg(doc)]
use super::{ConfigError, MAX_COMMAND_TIMEOUT, MAX_CONNECT_TIMEOUT, MIN_REDIS_TIMEOUT};

/// Where the Redis store takes `now` from.
///
/// Many app instances share one Redis, and their clocks never agree to the microsecond; one
/// running a day ahead would record entries that block everyone else for a day. So the default
/// is Redis `TIME`: every instance measures the window on one clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeSource {
    /// The script reads Redis `TIME` (the default): one clock for every instance. The limiter's
    /// clock is ignored by the Redis store (and by nothing else: the in-memory fallback still
    /// uses it). On a Redis Cluster each key is timed by the master that holds it.
    #[default]
    Redis,
    /// The limiter's [`Clock`](crate::Clock) passes `now` into the script. A
    /// [`ManualClock`](crate::ManualClock) then drives Redis exactly as it drives memory: pick
    /// it for tests, and for a single writer. With several instances, their clock errors
    /// matter, but are bounded: an entry scored in a checker's future is moved back to its
    /// `now` before anything is counted, so no request is ever told to wait longer than the
    /// window (and 1 µs), and an instance whose clock is off by `e` shifts the entries it
    /// touches by at most `e` (it may then admit, or make others wait, up to `e` early or late).
    /// So with several instances the limits are exact only with [`Redis`](Self::Redis): an
    /// instance a day behind frees every entry it meets for the others, which can then admit a
    /// fresh limit on each of its checks; and even on one clock, a check that waited in its
    /// connection's queue arrives with a `now` older than entries others recorded meanwhile,
    /// and moves them back, so a window can hold more than its limit, whatever the costs (the
    /// guide's "Time": [`crate::guides::redis`]).
    App,
}

/// Redis settings, present when the limiter should share its state through Redis.
///
/// Every field but `url` has a default ([`RedisConfig::default`]), the same in a file and in
/// the [builder](super::RateLimitConfigBuilder); a missing `url` is refused when the config is
/// validated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    /// The Redis URL: `redis://[[user]:password@]host[:port][/db]`, `rediss://...` (TLS,
    /// feature `tls`), `redis-cluster://host:port?node=host2:port2`, `rediss-cluster://...`,
    /// `redis-sentinel://host:port?sentinelServiceName=NAME`, `rediss-sentinel://...`,
    /// `redis+unix:///path/to/redis.sock` (or `unix://`; Unix only), and the same schemes with
    /// `valkey` in place of `redis`. Required: empty (the default) or anything else is a
    /// [`ConfigError`].
    pub url: String,
    /// The longest a check may wait on Redis before the limiter falls back to memory (default
    /// 100 ms; from [`MIN_REDIS_TIMEOUT`] to [`MAX_COMMAND_TIMEOUT`], 1 ms to 60 s).
    #[serde(with = "serde_duration")]
    pub command_timeout: Duration,
    /// The longest the first connection may take (see
    /// [`RateLimiter::connect`](crate::RateLimiter::connect); default 1 s; from
    /// [`MIN_REDIS_TIMEOUT`] to [`MAX_CONNECT_TIMEOUT`], 1 ms to 5 min).
    #[serde(with = "serde_duration")]
    pub connect_timeout: Duration,
    /// TLS URLs only: a PEM file of the CA certificate(s) to trust instead of the system's
    /// trust store (for a private CA). Read when the store connects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<PathBuf>,
    /// TLS URLs only, for mutual TLS: a PEM file of the client certificate (chain) shown to
    /// the server. Needs [`tls_key_file`](Self::tls_key_file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_cert_file: Option<PathBuf>,
    /// TLS URLs only, for mutual TLS: a PEM file of the client certificate's private key
    /// (PKCS#8, PKCS#1 or SEC1). Needs [`tls_cert_file`](Self::tls_cert_file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_key_file: Option<PathBuf>,
    /// Where the Redis store takes `now` from.
    pub time_source: TimeSource,
    /// Treat the URL as a Redis Cluster even without a `redis-cluster://` scheme.
    pub cluster: bool,
    /// Opt-in: after a fallback, re-probe Redis and switch back when it answers. `None` (the
    /// default): the fallback is for good.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery: Option<Recovery>,
    /// Redis Cluster only: the global tier's budget is split over this many keys, which the
    /// cluster spreads over its masters, so the global tier is no longer bound to one master's
    /// core (default 1: today's single key, exact). From 1 to [`MAX_SHARDS`]. Every instance
    /// must use the same value. Ignored on a single Redis node and by the memory store. See
    /// [the scale guide](crate::guides::scale).
    #[serde(skip_serializing_if = "is_one")]
    pub global_shards: u32,
}

impl RedisConfig {
    /// The first setting (its path in a config file, `redis.command_timeout`, ...) that differs
    /// between `self` and `other`; `None` when none does.
    pub(crate) fn first_difference(&self, other: &Self) -> Option<&'static str> {
        // Every field named, so that a new one cannot be forgotten here.
        let Self {
            url,
            command_timeout,
            connect_timeout,
            tls_ca_file,
            tls_cert_file,
            tls_key_file,
            time_source,
            cluster,
            recovery,
            global_shards,
        } = self;
        [
            ("redis.url", *url == other.url),
            (
                "redis.command_timeout",
                *command_timeout == other.command_timeout,
            ),
            (
                "redis.connect_timeout",
                *connect_timeout == other.connect_timeout,
            ),
            ("redis.tls_ca_file", *tls_ca_file == other.tls_ca_file),
            ("redis.tls_cert_file", *tls_cert_file == other.tls_cert_file),
            ("redis.tls_key_file", *tls_key_file == other.tls_key_file),
            ("redis.time_source", *time_source == other.time_source),
            ("redis.cluster", *cluster == other.cluster),
            ("redis.recovery", *recovery == other.recovery),
            ("redis.global_shards", *global_shards == other.global_shards),
        ]
        .into_iter()
        .find(|&(_, same)| !same)
        .map(|(field, _)| field)
    }
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// How a limiter that fell back to memory re-probes Redis (opt-in).
///
/// The defaults ([`Recovery::default`]): first probe after 1 s, at most 30 s apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Recovery {
    /// The wait before the first probe; doubled after each failed probe.
    #[serde(with = "serde_duration")]
    pub initial_backoff: Duration,
    /// The longest wait between probes.
    #[serde(with = "serde_duration")]
    pub max_backoff: Duration,
}

impl Default for RedisConfig {
    /// No URL yet (one must be set), a 100 ms command timeout, a 1 s connect timeout, no TLS
    /// files, Redis `TIME`, not a cluster unless the URL says so, no recovery, one global key.
    fn default() -> Self {
        Self {
            url: String::new(),
            command_timeout: Duration::from_millis(100),
            connect_timeout: Duration::from_secs(1),
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            time_source: TimeSource::default(),
            cluster: false,
            recovery: None,
            global_shards: 1,
        }
    }
}

impl Default for Recovery {
    /// The first probe after 1 s, then doubling up to 30 s.
    fn default() -> Self {
        Self {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
        }
    }
}

impl fmt::Display for TimeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::App => "app",
            Self::Redis => "redis",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each setting that differs is named by its own path, the first in the struct's order.
    #[test]
    fn the_first_setting_that_differs_is_named() {
        let base = RedisConfig {
            url: "redis://127.0.0.1:1".to_owned(),
            ..RedisConfig::default()
        };
        assert_eq!(base.first_difference(&base.clone()), None);
        type Change = fn(&mut RedisConfig);
        let changed: [(&str, Change); 10] = [
            ("redis.url", |c| c.url.push('0')),
            ("redis.command_timeout", |c| c.command_timeout *= 2),
            ("redis.connect_timeout", |c| c.connect_timeout *= 2),
            ("redis.tls_ca_file", |c| c.tls_ca_file = Some("ca".into())),
            ("redis.tls_cert_file", |c| {
                c.tls_cert_file = Some("c".into())
            }),
            ("redis.tls_key_file", |c| c.tls_key_file = Some("k".into())),
            ("redis.time_source", |c| c.time_source = TimeSource::App),
            ("redis.cluster", |c| c.cluster = true),
            ("redis.recovery", |c| c.recovery = Some(Recovery::default())),
            ("redis.global_shards", |c| c.global_shards = 2),
        ];
        for (field, change) in changed {
            let mut other = base.clone();
            change(&mut other);
            assert_eq!(base.first_difference(&other), Some(field));
            assert_eq!(other.first_difference(&base), Some(field));
        }
        let mut both = base.clone();
        both.global_shards = 3;
        both.command_timeout *= 3;
        assert_eq!(base.first_difference(&both), Some("redis.command_timeout"));
    }
}
