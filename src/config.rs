//! The limiter's configuration: limits, window, key prefix and the Redis settings.
//!
//! A [`RateLimitConfig`] is only ever built through [`RateLimitConfig::builder`] or serde, and
//! both validate it: a bad value is a [`ConfigError`] naming the field, never a panic later.
//! Both start from one raw form and its one set of defaults, so an empty file and
//! `RateLimitConfig::builder().build()` are the same configuration.
//!
//! Durations (`window`, the Redis timeouts, the recovery backoffs) follow one rule in a file
//! and on a command line: [`parse_duration`], a humantime string such as `"60s"`, `"1500ms"`,
//! `"1m"`, or a bare whole number of seconds.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::header_style::HeaderStyle;
use crate::tier::Tier;

mod builder;
mod duration;
mod error;
mod redis;
mod validate;

pub use self::builder::RateLimitConfigBuilder;
pub use self::duration::{parse_duration, ParseDurationError};
pub use self::error::ConfigError;
pub use self::redis::{Recovery, RedisConfig, TimeSource};

use self::duration::serde_duration;

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
/// // The same from a file (TOML, JSON, ... anything serde reads). Durations are humantime
/// // strings ("60s", "1500ms", "1m") or a bare whole number of seconds (60).
/// let from_json: RateLimitConfig = serde_json::from_str(
///     r#"{ "window": "60s", "user_limit": 50, "endpoint_limit": 100, "global_limit": 1000 }"#,
/// )?;
/// assert_eq!(from_json, config);
///
/// // A missing field takes the builder's default: an empty file is `builder().build()`.
/// let empty: RateLimitConfig = serde_json::from_str("{}")?;
/// assert_eq!(empty, RateLimitConfig::builder().build()?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawConfig", into = "RawConfig")]
pub struct RateLimitConfig {
    /// Validated: [`validate::validate`] accepted it.
    raw: RawConfig,
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
    /// Starts a builder with the defaults of an empty file: a 60 s window, every tier off
    /// (limit 0), prefix `rate_limit`, memory.
    pub fn builder() -> RateLimitConfigBuilder {
        RateLimitConfigBuilder::default()
    }

    /// The sliding window's length.
    pub fn window(&self) -> Duration {
        self.raw.window
    }

    /// Requests one user may make per window; 0 switches the tier off.
    pub fn user_limit(&self) -> u64 {
        self.raw.user_limit
    }

    /// Requests one endpoint (route template) may take per window; 0 switches the tier off.
    pub fn endpoint_limit(&self) -> u64 {
        self.raw.endpoint_limit
    }

    /// Requests the whole service may take per window; 0 switches the tier off.
    pub fn global_limit(&self) -> u64 {
        self.raw.global_limit
    }

    /// The prefix of every key (`rate_limit` by default).
    pub fn key_prefix(&self) -> &str {
        &self.raw.key_prefix
    }

    /// The cap on keys the in-memory store tracks at once. See
    /// [`MemoryStore`](crate::store::MemoryStore) for what happens at the cap.
    pub fn max_tracked_keys(&self) -> usize {
        self.raw.max_tracked_keys
    }

    /// The Redis settings, if the limiter should use Redis.
    pub fn redis(&self) -> Option<&RedisConfig> {
        self.raw.redis.as_ref()
    }

    /// Which rate-limit headers responses carry.
    pub fn headers(&self) -> HeaderStyle {
        self.raw.headers
    }

    /// The overrides of one route (by template), if any.
    #[inline]
    pub fn route(&self, route: &str) -> Option<&RouteLimits> {
        if self.raw.routes.is_empty() {
            return None;
        }
        self.raw.routes.get(route)
    }

    /// A plan by name.
    pub fn plan(&self, name: &str) -> Option<&Plan> {
        self.raw.plans.get(name)
    }

    /// The plan named for `user` in the config's `users` map, if any.
    #[inline]
    pub fn plan_of(&self, user: &str) -> Option<&Plan> {
        if self.raw.users.is_empty() {
            return None;
        }
        self.raw.plans.get(self.raw.users.get(user)?)
    }

    /// Whether any plan is configured (so that user ids are looked up).
    pub fn has_plans(&self) -> bool {
        !self.raw.plans.is_empty()
    }

    /// Whether `tier` runs in shadow mode: decided and recorded as usual, reported in headers,
    /// metrics and the [`Decision`](crate::Decision), but never blocking.
    pub fn is_shadow(&self, tier: Tier) -> bool {
        self.raw.shadow.contains(&tier)
    }
}

/// The one raw form: what a file holds, what the builder fills in, what
/// [`RateLimitConfig`] wraps once validated. Its [`Default`] is every default, for both.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawConfig {
    #[serde(with = "serde_duration")]
    window: Duration,
    user_limit: u64,
    endpoint_limit: u64,
    global_limit: u64,
    key_prefix: String,
    max_tracked_keys: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    redis: Option<RedisConfig>,
    /// Tiers in shadow mode: `shadow = ["user"]`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    shadow: Vec<Tier>,
    /// `headers = "legacy" | "ietf" | "both"`.
    headers: HeaderStyle,
    /// `[routes."/login"] user_limit = 5`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    routes: BTreeMap<String, RouteLimits>,
    /// `[plans.premium] user_limit = 500`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    plans: BTreeMap<String, Plan>,
    /// `[users] alice = "premium"`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    users: BTreeMap<String, String>,
}

impl Default for RawConfig {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(60),
            user_limit: 0,
            endpoint_limit: 0,
            global_limit: 0,
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
            max_tracked_keys: DEFAULT_MAX_TRACKED_KEYS,
            redis: None,
            shadow: Vec::new(),
            headers: HeaderStyle::default(),
            routes: BTreeMap::new(),
            plans: BTreeMap::new(),
            users: BTreeMap::new(),
        }
    }
}

impl TryFrom<RawConfig> for RateLimitConfig {
    type Error = ConfigError;

    fn try_from(raw: RawConfig) -> Result<Self, ConfigError> {
        validate::validate(&raw)?;
        Ok(Self { raw })
    }
}

impl From<RateLimitConfig> for RawConfig {
    fn from(config: RateLimitConfig) -> Self {
        config.raw
    }
}
