//! The limiter's configuration: limits, window, key prefix and the Redis settings.
//!
//! A [`RateLimitConfig`] is only ever built through [`RateLimitConfig::builder`] or serde, and
//! both validate it: a bad value is a [`ConfigError`] naming the field, never a panic later.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::duration;
use crate::header_style::HeaderStyle;
use crate::tier::Tier;

/// The largest window accepted: 100 years.
///
/// Timestamps are kept as microseconds since the UNIX epoch and, on Redis, as sorted-set scores
/// (IEEE doubles, exact up to 2^53 µs, about the year 2255). A window up to this bound keeps
/// `now + window` exact for the next two centuries.
pub const MAX_WINDOW: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// The largest limit accepted: 2^50 (about 1.1 × 10^15 units a window).
///
/// The Redis script computes in Lua numbers (doubles, exact for integers below 2^53); with
/// limits up to 2^50 and running totals rebased at 2^52, every number it computes stays exact,
/// whatever the costs and however long a key lives (docs/REDIS.md, "Exactness").
pub const MAX_LIMIT: u64 = 1 << 50;

/// The default key prefix: keys are `rate_limit:user:<id>`, `rate_limit:endpoint:<route>` and
/// `rate_limit:global`.
pub const DEFAULT_KEY_PREFIX: &str = "rate_limit";

/// The default cap on keys the in-memory store tracks at once (users plus endpoints).
pub const DEFAULT_MAX_TRACKED_KEYS: usize = 1_000_000;

/// The longest key prefix accepted, in bytes.
pub const MAX_KEY_PREFIX_LEN: usize = 128;

/// The shortest Redis timeout accepted (command and connect): 1 ms. Shorter, a healthy Redis
/// would miss it and the limiter fall back on its first request.
pub const MIN_REDIS_TIMEOUT: Duration = Duration::from_millis(1);

/// The longest command timeout accepted: 60 s. A check waits on Redis at most this long;
/// longer would let requests hang on a dead Redis instead of falling back.
pub const MAX_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest connect timeout accepted: 5 minutes.
pub const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(5 * 60);

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
    App,
}

/// Redis settings, present when the limiter should share its state through Redis.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisConfig {
    /// The Redis URL: `redis://[[user]:password@]host[:port][/db]`, `rediss://...` (TLS,
    /// feature `tls`), `redis-cluster://host:port?node=host2:port2`, `rediss-cluster://...`,
    /// `redis-sentinel://host:port?sentinelServiceName=NAME`, `rediss-sentinel://...`,
    /// `redis+unix:///path/to/redis.sock` (or `unix://`; Unix only), and the same schemes with
    /// `valkey` in place of `redis`. Anything else is a [`ConfigError`].
    pub url: String,
    /// The longest a check may wait on Redis before the limiter falls back to memory (default
    /// 100 ms; from [`MIN_REDIS_TIMEOUT`] to [`MAX_COMMAND_TIMEOUT`], 1 ms to 60 s).
    #[serde(with = "duration::serde_duration", default = "default_command_timeout")]
    pub command_timeout: Duration,
    /// The longest the first connection may take (see
    /// [`RateLimiter::connect`](crate::RateLimiter::connect); default 1 s; from
    /// [`MIN_REDIS_TIMEOUT`] to [`MAX_CONNECT_TIMEOUT`], 1 ms to 5 min).
    #[serde(with = "duration::serde_duration", default = "default_connect_timeout")]
    pub connect_timeout: Duration,
    /// TLS URLs only: a PEM file of the CA certificate(s) to trust instead of the system's
    /// trust store (for a private CA). Read when the store connects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<PathBuf>,
    /// TLS URLs only, for mutual TLS: a PEM file of the client certificate (chain) shown to
    /// the server. Needs [`tls_key_file`](Self::tls_key_file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert_file: Option<PathBuf>,
    /// TLS URLs only, for mutual TLS: a PEM file of the client certificate's private key
    /// (PKCS#8, PKCS#1 or SEC1). Needs [`tls_cert_file`](Self::tls_cert_file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key_file: Option<PathBuf>,
    /// Where the Redis store takes `now` from.
    #[serde(default)]
    pub time_source: TimeSource,
    /// Treat the URL as a Redis Cluster even without a `redis-cluster://` scheme.
    #[serde(default)]
    pub cluster: bool,
    /// Opt-in: after a fallback, re-probe Redis and switch back when it answers. `None` (the
    /// default): the fallback is for good.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<Recovery>,
}

/// How a limiter that fell back to memory re-probes Redis (opt-in).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recovery {
    /// The wait before the first probe; doubled after each failed probe.
    #[serde(with = "duration::serde_duration", default = "default_initial_backoff")]
    pub initial_backoff: Duration,
    /// The longest wait between probes.
    #[serde(with = "duration::serde_duration", default = "default_max_backoff")]
    pub max_backoff: Duration,
}

fn default_initial_backoff() -> Duration {
    Duration::from_secs(1)
}

fn default_max_backoff() -> Duration {
    Duration::from_secs(30)
}

fn default_command_timeout() -> Duration {
    Duration::from_millis(100)
}

fn default_connect_timeout() -> Duration {
    Duration::from_secs(1)
}

/// The validated configuration of a [`RateLimiter`](crate::RateLimiter).
///
/// ```
/// use std::time::Duration;
/// use tiered_ratelimit::RateLimitConfig;
///
/// let config = RateLimitConfig::builder()
///     .window(Duration::from_secs(60))
///     .user_limit(50)
///     .endpoint_limit(100)
///     .global_limit(1000)
///     .build()?;
/// assert_eq!(config.user_limit(), 50);
///
/// // The same from a file (TOML, JSON, ... anything serde reads):
/// let from_json: RateLimitConfig = serde_json::from_str(
///     r#"{ "window": "60s", "user_limit": 50, "endpoint_limit": 100, "global_limit": 1000 }"#,
/// )?;
/// assert_eq!(from_json, config);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawConfig", into = "RawConfig")]
pub struct RateLimitConfig {
    window: Duration,
    user_limit: u64,
    endpoint_limit: u64,
    global_limit: u64,
    key_prefix: String,
    max_tracked_keys: usize,
    redis: Option<RedisConfig>,
    shadow: Vec<Tier>,
    headers: HeaderStyle,
    routes: BTreeMap<String, RouteLimits>,
    plans: BTreeMap<String, Plan>,
    users: BTreeMap<String, String>,
}

/// Limits of one route (by its template), replacing the defaults there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteLimits {
    /// Requests per user per window on this route, counted in a bucket of the route's own
    /// (`/login`: 5 a minute per user, whatever the user does elsewhere). 0 switches the user
    /// tier off here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_limit: Option<u64>,
    /// Requests per window on this route's endpoint key. 0 switches the tier off here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_limit: Option<u64>,
}

/// A plan: limits a user gets instead of the default ones (premium: ten times as many).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Requests per user per window for users on this plan (0: not limited).
    pub user_limit: u64,
}

impl RateLimitConfig {
    /// Starts a builder: a 60 s window, every tier off (limit 0), prefix `rate_limit`, memory.
    pub fn builder() -> RateLimitConfigBuilder {
        RateLimitConfigBuilder::default()
    }

    /// The sliding window's length.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Requests one user may make per window; 0 switches the tier off.
    pub fn user_limit(&self) -> u64 {
        self.user_limit
    }

    /// Requests one endpoint (route template) may take per window; 0 switches the tier off.
    pub fn endpoint_limit(&self) -> u64 {
        self.endpoint_limit
    }

    /// Requests the whole service may take per window; 0 switches the tier off.
    pub fn global_limit(&self) -> u64 {
        self.global_limit
    }

    /// The prefix of every key (`rate_limit` by default).
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// The cap on keys the in-memory store tracks at once. See
    /// [`MemoryStore`](crate::store::MemoryStore) for what happens at the cap.
    pub fn max_tracked_keys(&self) -> usize {
        self.max_tracked_keys
    }

    /// The Redis settings, if the limiter should use Redis.
    pub fn redis(&self) -> Option<&RedisConfig> {
        self.redis.as_ref()
    }

    /// Which rate-limit headers responses carry.
    pub fn headers(&self) -> HeaderStyle {
        self.headers
    }

    /// The overrides of one route (by template), if any.
    #[inline]
    pub fn route(&self, route: &str) -> Option<&RouteLimits> {
        if self.routes.is_empty() {
            return None;
        }
        self.routes.get(route)
    }

    /// A plan by name.
    pub fn plan(&self, name: &str) -> Option<&Plan> {
        self.plans.get(name)
    }

    /// The plan named for `user` in the config's `users` map, if any.
    #[inline]
    pub fn plan_of(&self, user: &str) -> Option<&Plan> {
        if self.users.is_empty() {
            return None;
        }
        self.plans.get(self.users.get(user)?)
    }

    /// Whether any plan is configured (so that user ids are looked up).
    pub fn has_plans(&self) -> bool {
        !self.plans.is_empty()
    }

    /// Whether `tier` runs in shadow mode: decided and recorded as usual, reported in headers,
    /// metrics and the [`Decision`](crate::Decision), but never blocking.
    pub fn is_shadow(&self, tier: Tier) -> bool {
        self.shadow.contains(&tier)
    }
}

/// Builds a [`RateLimitConfig`]; [`build`](Self::build) validates it.
#[derive(Clone, Debug)]
#[must_use]
pub struct RateLimitConfigBuilder {
    raw: RawConfig,
}

impl Default for RateLimitConfigBuilder {
    fn default() -> Self {
        Self {
            raw: RawConfig {
                window: Duration::from_secs(60),
                user_limit: 0,
                endpoint_limit: 0,
                global_limit: 0,
                key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
                max_tracked_keys: DEFAULT_MAX_TRACKED_KEYS,
                redis: None,
                shadow: Vec::new(),
                headers: HeaderStyle::Legacy,
                routes: BTreeMap::new(),
                plans: BTreeMap::new(),
                users: BTreeMap::new(),
            },
        }
    }
}

impl RateLimitConfigBuilder {
    /// The sliding window (default 60 s). Must be above zero and at most [`MAX_WINDOW`].
    pub fn window(mut self, window: Duration) -> Self {
        self.raw.window = window;
        self
    }

    /// Requests per user per window; 0 (the default) switches the tier off.
    pub fn user_limit(mut self, limit: u64) -> Self {
        self.raw.user_limit = limit;
        self
    }

    /// Requests per endpoint per window; 0 (the default) switches the tier off.
    pub fn endpoint_limit(mut self, limit: u64) -> Self {
        self.raw.endpoint_limit = limit;
        self
    }

    /// Requests in all per window; 0 (the default) switches the tier off.
    pub fn global_limit(mut self, limit: u64) -> Self {
        self.raw.global_limit = limit;
        self
    }

    /// The prefix of every key (default `rate_limit`): printable ASCII without spaces or braces,
    /// 1 to [`MAX_KEY_PREFIX_LEN`] bytes.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.raw.key_prefix = prefix.into();
        self
    }

    /// The cap on keys the in-memory store tracks at once (default 1,000,000).
    pub fn max_tracked_keys(mut self, max: usize) -> Self {
        self.raw.max_tracked_keys = max;
        self
    }

    /// Limits of their own for one route (its template, as axum matched it).
    pub fn route(mut self, route: impl Into<String>, limits: RouteLimits) -> Self {
        self.raw.routes.insert(route.into(), limits);
        self
    }

    /// A plan: the user limit of the users on it.
    pub fn plan(mut self, name: impl Into<String>, user_limit: u64) -> Self {
        self.raw.plans.insert(name.into(), Plan { user_limit });
        self
    }

    /// Puts `user` on the plan `plan` (see also the limiter's
    /// [`plan_resolver`](crate::RateLimiterBuilder::plan_resolver)).
    pub fn user_plan(mut self, user: impl Into<String>, plan: impl Into<String>) -> Self {
        self.raw.users.insert(user.into(), plan.into());
        self
    }

    /// Which rate-limit headers responses carry: legacy (the default), IETF, or both.
    pub fn headers(mut self, style: HeaderStyle) -> Self {
        self.raw.headers = style;
        self
    }

    /// Shadow mode for the whole limiter (`true`) or none of it (`false`, the default): every
    /// tier decides and records as usual, headers and metrics say what it decided, but no
    /// request is blocked. The way to roll out a new limit safely.
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.raw.shadow = if shadow {
            vec![Tier::User, Tier::Endpoint, Tier::Global]
        } else {
            Vec::new()
        };
        self
    }

    /// Shadow mode for one tier (see [`shadow`](Self::shadow)); the other tiers still block.
    pub fn shadow_tier(mut self, tier: Tier) -> Self {
        if !self.raw.shadow.contains(&tier) {
            self.raw.shadow.push(tier);
        }
        self
    }

    /// Share the limits through Redis at this URL (needs the `redis` feature).
    pub fn redis_url(mut self, url: impl Into<String>) -> Self {
        self.redis_mut().url = url.into();
        self
    }

    /// How long a check may wait on Redis before falling back to memory (default 100 ms; 1 ms
    /// to 60 s).
    pub fn redis_command_timeout(mut self, timeout: Duration) -> Self {
        self.redis_mut().command_timeout = timeout;
        self
    }

    /// How long the first connection to Redis may take (default 1 s; 1 ms to 5 minutes).
    pub fn redis_connect_timeout(mut self, timeout: Duration) -> Self {
        self.redis_mut().connect_timeout = timeout;
        self
    }

    /// Where the Redis store takes `now` from (default: Redis `TIME`; see [`TimeSource`]).
    pub fn redis_time_source(mut self, source: TimeSource) -> Self {
        self.redis_mut().time_source = source;
        self
    }

    /// TLS (`rediss://`): trust the CA certificate(s) in this PEM file instead of the system's
    /// trust store, for a Redis whose certificate a private CA signed.
    pub fn redis_tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.redis_mut().tls_ca_file = Some(path.into());
        self
    }

    /// Mutual TLS (`rediss://` to a server with `tls-auth-clients yes`): the client certificate
    /// (chain) and its private key, both PEM files.
    pub fn redis_tls_client_cert(
        mut self,
        cert_file: impl Into<PathBuf>,
        key_file: impl Into<PathBuf>,
    ) -> Self {
        let redis = self.redis_mut();
        redis.tls_cert_file = Some(cert_file.into());
        redis.tls_key_file = Some(key_file.into());
        self
    }

    fn redis_mut(&mut self) -> &mut RedisConfig {
        self.raw.redis.get_or_insert_with(|| RedisConfig {
            url: String::new(),
            command_timeout: default_command_timeout(),
            connect_timeout: default_connect_timeout(),
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            time_source: TimeSource::default(),
            cluster: false,
            recovery: None,
        })
    }

    /// Opt-in: after a fallback to memory, re-probe Redis (first after `initial_backoff`, then
    /// doubling up to `max_backoff`) and switch back when it answers.
    pub fn redis_recovery(mut self, initial_backoff: Duration, max_backoff: Duration) -> Self {
        self.redis_mut().recovery = Some(Recovery {
            initial_backoff,
            max_backoff,
        });
        self
    }

    /// Treat the Redis URL as a Redis Cluster (also implied by `redis-cluster://` URLs and by
    /// `?node=` parameters naming further nodes).
    pub fn redis_cluster(mut self, cluster: bool) -> Self {
        self.redis_mut().cluster = cluster;
        self
    }

    /// Validates the configuration.
    pub fn build(self) -> Result<RateLimitConfig, ConfigError> {
        RateLimitConfig::try_from(self.raw)
    }
}

/// What is wrong with a configuration. [`field`](Self::field) names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The window is zero (or under the limiter's 1 µs resolution).
    #[error("window: must be at least 1µs")]
    ZeroWindow,
    /// The window is longer than [`MAX_WINDOW`].
    #[error("window: {0:?} is longer than the maximum of 100 years (timestamps would overflow)")]
    WindowTooLarge(Duration),
    /// A limit is above [`MAX_LIMIT`].
    #[error("{field}: {value} is above the maximum of 2^50 (1125899906842624)")]
    LimitTooLarge {
        /// `user_limit`, `endpoint_limit` or `global_limit`.
        field: &'static str,
        /// The value given.
        value: u64,
    },
    /// The key prefix is empty, too long, or holds a character other than printable ASCII
    /// without spaces and braces.
    #[error("key_prefix: {0}")]
    InvalidKeyPrefix(&'static str),
    /// The cap on tracked keys is zero.
    #[error("max_tracked_keys: must be greater than zero")]
    ZeroMaxTrackedKeys,
    /// The Redis URL is empty or not one fred accepts.
    #[error("redis.url: {0}")]
    InvalidRedisUrl(String),
    /// A Redis timeout is zero.
    #[error("{0}: must be greater than zero")]
    ZeroTimeout(&'static str),
    /// A Redis timeout is outside its range: `redis.command_timeout` 1 ms to 60 s,
    /// `redis.connect_timeout` 1 ms to 5 minutes.
    #[error("{field}: {value:?} is outside the accepted range {min:?} to {max:?}")]
    TimeoutOutOfRange {
        /// `redis.command_timeout` or `redis.connect_timeout`.
        field: &'static str,
        /// The value given.
        value: Duration,
        /// The shortest accepted.
        min: Duration,
        /// The longest accepted.
        max: Duration,
    },
    /// A TLS URL (`rediss://`, `rediss-cluster://`, `valkeys://`, ...) in a build without the
    /// `tls` feature. Refused rather than connecting in plaintext.
    #[error(
        "redis.url: a TLS URL needs the `tls` feature, which this build lacks \
         (refusing to connect in plaintext)"
    )]
    TlsFeatureDisabled,
    /// A TLS file is set but the URL does not use TLS (it would be ignored, and the
    /// connection be plaintext): use `rediss://`.
    #[error("{0}: set, but redis.url is not a TLS URL (use rediss://, rediss-cluster://, ...)")]
    TlsFileWithoutTls(&'static str),
    /// Only one of the client certificate and its key is set.
    #[error("{0}: missing (mutual TLS needs both redis.tls_cert_file and redis.tls_key_file)")]
    IncompleteClientCert(&'static str),
    /// A user is put on a plan that is not defined.
    #[error("users.{user}: plan {plan:?} is not defined in plans")]
    UnknownPlan {
        /// The user id.
        user: String,
        /// The plan named.
        plan: String,
    },
    /// The recovery's longest backoff is shorter than its first.
    #[error("redis.recovery.max_backoff: must be at least redis.recovery.initial_backoff")]
    BackoffBelowInitial,
    /// A Redis URL was given but the crate was built without the `redis` feature.
    #[error("redis.url: this build of tiered-ratelimit has no `redis` feature")]
    RedisFeatureDisabled,
}

impl ConfigError {
    /// The name of the field at fault, as in the serde form (`window`, `user_limit`, `redis.url`, ...).
    pub fn field(&self) -> &'static str {
        match self {
            Self::ZeroWindow | Self::WindowTooLarge(_) => "window",
            Self::LimitTooLarge { field, .. } => field,
            Self::InvalidKeyPrefix(_) => "key_prefix",
            Self::ZeroMaxTrackedKeys => "max_tracked_keys",
            Self::InvalidRedisUrl(_) | Self::RedisFeatureDisabled => "redis.url",
            Self::ZeroTimeout(field)
            | Self::TimeoutOutOfRange { field, .. }
            | Self::TlsFileWithoutTls(field)
            | Self::IncompleteClientCert(field) => field,
            Self::TlsFeatureDisabled => "redis.url",
            Self::BackoffBelowInitial => "redis.recovery.max_backoff",
            Self::UnknownPlan { .. } => "users",
        }
    }
}

/// The serde form, validated into a [`RateLimitConfig`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(with = "duration::serde_duration")]
    window: Duration,
    #[serde(default)]
    user_limit: u64,
    #[serde(default)]
    endpoint_limit: u64,
    #[serde(default)]
    global_limit: u64,
    #[serde(default = "default_prefix")]
    key_prefix: String,
    #[serde(default = "default_max_tracked_keys")]
    max_tracked_keys: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    redis: Option<RedisConfig>,
    /// Tiers in shadow mode: `shadow = ["user"]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    shadow: Vec<Tier>,
    /// `headers = "legacy" | "ietf" | "both"`.
    #[serde(default)]
    headers: HeaderStyle,
    /// `[routes."/login"] user_limit = 5`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    routes: BTreeMap<String, RouteLimits>,
    /// `[plans.premium] user_limit = 500`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    plans: BTreeMap<String, Plan>,
    /// `[users] alice = "premium"`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    users: BTreeMap<String, String>,
}

fn default_prefix() -> String {
    DEFAULT_KEY_PREFIX.to_owned()
}

fn default_max_tracked_keys() -> usize {
    DEFAULT_MAX_TRACKED_KEYS
}

impl TryFrom<RawConfig> for RateLimitConfig {
    type Error = ConfigError;

    fn try_from(raw: RawConfig) -> Result<Self, ConfigError> {
        // The limiter works in whole microseconds: less than one is no window at all.
        if raw.window < Duration::from_micros(1) {
            return Err(ConfigError::ZeroWindow);
        }
        if raw.window > MAX_WINDOW {
            return Err(ConfigError::WindowTooLarge(raw.window));
        }
        for (field, value) in [
            ("user_limit", raw.user_limit),
            ("endpoint_limit", raw.endpoint_limit),
            ("global_limit", raw.global_limit),
        ] {
            if value > MAX_LIMIT {
                return Err(ConfigError::LimitTooLarge { field, value });
            }
        }
        for limits in raw.routes.values() {
            for (field, value) in [
                ("routes.user_limit", limits.user_limit),
                ("routes.endpoint_limit", limits.endpoint_limit),
            ] {
                if let Some(value) = value.filter(|&v| v > MAX_LIMIT) {
                    return Err(ConfigError::LimitTooLarge { field, value });
                }
            }
        }
        for plan in raw.plans.values() {
            if plan.user_limit > MAX_LIMIT {
                return Err(ConfigError::LimitTooLarge {
                    field: "plans.user_limit",
                    value: plan.user_limit,
                });
            }
        }
        if let Some((user, plan)) = raw.users.iter().find(|(_, p)| !raw.plans.contains_key(*p)) {
            return Err(ConfigError::UnknownPlan {
                user: user.clone(),
                plan: plan.clone(),
            });
        }
        validate_prefix(&raw.key_prefix)?;
        if raw.max_tracked_keys == 0 {
            return Err(ConfigError::ZeroMaxTrackedKeys);
        }
        if let Some(redis) = &raw.redis {
            validate_redis(redis)?;
        }
        Ok(Self {
            window: raw.window,
            user_limit: raw.user_limit,
            endpoint_limit: raw.endpoint_limit,
            global_limit: raw.global_limit,
            key_prefix: raw.key_prefix,
            max_tracked_keys: raw.max_tracked_keys,
            redis: raw.redis,
            shadow: raw.shadow,
            headers: raw.headers,
            routes: raw.routes,
            plans: raw.plans,
            users: raw.users,
        })
    }
}

impl From<RateLimitConfig> for RawConfig {
    fn from(c: RateLimitConfig) -> Self {
        Self {
            window: c.window,
            user_limit: c.user_limit,
            endpoint_limit: c.endpoint_limit,
            global_limit: c.global_limit,
            key_prefix: c.key_prefix,
            max_tracked_keys: c.max_tracked_keys,
            redis: c.redis,
            shadow: c.shadow,
            headers: c.headers,
            routes: c.routes,
            plans: c.plans,
            users: c.users,
        }
    }
}

fn validate_prefix(prefix: &str) -> Result<(), ConfigError> {
    if prefix.is_empty() {
        return Err(ConfigError::InvalidKeyPrefix("must not be empty"));
    }
    if prefix.len() > MAX_KEY_PREFIX_LEN {
        return Err(ConfigError::InvalidKeyPrefix("longer than 128 bytes"));
    }
    if !prefix
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'{' && b != b'}')
    {
        return Err(ConfigError::InvalidKeyPrefix(
            "only printable ASCII without spaces or braces (braces are Redis Cluster hash tags)",
        ));
    }
    Ok(())
}

fn validate_redis(redis: &RedisConfig) -> Result<(), ConfigError> {
    validate_timeout(
        "redis.command_timeout",
        redis.command_timeout,
        MAX_COMMAND_TIMEOUT,
    )?;
    validate_timeout(
        "redis.connect_timeout",
        redis.connect_timeout,
        MAX_CONNECT_TIMEOUT,
    )?;
    if let Some(recovery) = &redis.recovery {
        if recovery.initial_backoff.is_zero() {
            return Err(ConfigError::ZeroTimeout("redis.recovery.initial_backoff"));
        }
        if recovery.max_backoff < recovery.initial_backoff {
            return Err(ConfigError::BackoffBelowInitial);
        }
    }
    if redis.url.is_empty() {
        return Err(ConfigError::InvalidRedisUrl("must not be empty".to_owned()));
    }
    let scheme = crate::redis_url::scheme(&redis.url).map_err(ConfigError::InvalidRedisUrl)?;
    validate_tls_files(redis, scheme.tls)?;
    if scheme.tls && !cfg!(feature = "tls") {
        return Err(ConfigError::TlsFeatureDisabled);
    }
    #[cfg(feature = "redis")]
    {
        crate::redis_url::fred_config(&redis.url, redis.cluster)
            .map(|_| ())
            .map_err(ConfigError::InvalidRedisUrl)
    }
    #[cfg(not(feature = "redis"))]
    {
        Err(ConfigError::RedisFeatureDisabled)
    }
}

fn validate_timeout(
    field: &'static str,
    value: Duration,
    max: Duration,
) -> Result<(), ConfigError> {
    if value.is_zero() {
        return Err(ConfigError::ZeroTimeout(field));
    }
    if value < MIN_REDIS_TIMEOUT || value > max {
        return Err(ConfigError::TimeoutOutOfRange {
            field,
            value,
            min: MIN_REDIS_TIMEOUT,
            max,
        });
    }
    Ok(())
}

/// TLS files only with a TLS URL, and a client certificate only with its key.
fn validate_tls_files(redis: &RedisConfig, tls: bool) -> Result<(), ConfigError> {
    let files = [
        ("redis.tls_ca_file", &redis.tls_ca_file),
        ("redis.tls_cert_file", &redis.tls_cert_file),
        ("redis.tls_key_file", &redis.tls_key_file),
    ];
    if let Some((field, _)) = files.iter().find(|(_, f)| f.is_some()) {
        if !tls {
            return Err(ConfigError::TlsFileWithoutTls(field));
        }
    }
    match (&redis.tls_cert_file, &redis.tls_key_file) {
        (Some(_), None) => Err(ConfigError::IncompleteClientCert("redis.tls_key_file")),
        (None, Some(_)) => Err(ConfigError::IncompleteClientCert("redis.tls_cert_file")),
        _ => Ok(()),
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
