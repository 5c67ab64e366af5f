//! The bounds a configuration must keep, and the duration rule files and command lines share.
//!
//! The configuration types themselves live at the crate root, their one path:
//! [`RateLimitConfig`] (built with [`RateLimitConfig::builder`] or read with serde; both
//! validate, and a bad value is a [`ConfigError`] naming the field), [`RedisConfig`],
//! [`RouteLimits`], [`Plan`], [`Recovery`], [`TimeSource`].
//! This module holds only what nothing else should: the bounds below, and [`parse_duration`].
//!
//! ```compile_fail
//! use tiered_ratelimit::config::RateLimitConfig; // no: `tiered_ratelimit::RateLimitConfig`
//! ```
//!
//! Both ways in start from one raw form and its one set of defaults, so an empty file and
//! `RateLimitConfig::builder().build()` are the same configuration. Durations (`window`, the
//! Redis timeouts, the recovery backoffs) follow one rule in a file and on a command line:
//! [`parse_duration`], a humantime string such as `"60s"`, `"1500ms"`, `"1m"`, or a bare whole
//! number of seconds.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::header_style::HeaderStyle;
use crate::tier::Tier;

// `pub(crate)`: the crate root re-exports the types from here, their one public path.
pub(crate) mod builder;
mod duration;
pub(crate) mod error;
pub(crate) mod hot;
pub(crate) mod redis;
pub(crate) mod template;
mod validate;
pub(crate) mod value;

pub use self::duration::{parse_duration, ParseDurationError};

pub(crate) use self::builder::RateLimitConfigBuilder;
pub(crate) use self::error::ConfigError;
pub(crate) use self::hot::{Hot, HotConfig};
pub(crate) use self::redis::{Recovery, RedisConfig, TimeSource};
pub(crate) use self::value::{Plan, RateLimitConfig, RouteLimits};

use self::duration::serde_duration;

/// The largest window accepted: 100 years of 365.25 days as a duration of `100y` reads them
/// (36,525 days, 3,155,760,000 s), so that the longest window one can write is accepted.
///
/// Timestamps are kept as microseconds since the UNIX epoch and, on Redis, as sorted-set scores
/// (IEEE doubles, exact up to 2^53 µs, about the year 2255). A window up to this bound keeps
/// `now + window` exact for the next century and more.
pub const MAX_WINDOW: Duration = Duration::from_secs(36_525 * 24 * 60 * 60);

/// The largest limit accepted: 2^50 (about 1.1 × 10^15 units a window).
///
/// The Redis script computes in Lua numbers (doubles, exact for integers below 2^53); with
/// limits up to 2^50 and running totals rebased at 2^52, every number it computes stays exact,
/// whatever the costs and however long a key lives ([the Redis guide](crate::guides::redis),
/// "Exactness").
pub const MAX_LIMIT: u64 = 1 << 50;

/// The most keys the global tier's budget may be split over on a Redis Cluster
/// ([`RedisConfig::global_shards`]): 64.
pub const MAX_SHARDS: u32 = 64;

/// The default key prefix: keys are `rate_limit:user:<id>`, `rate_limit:endpoint:<route>` and
/// `rate_limit:global`.
pub const DEFAULT_KEY_PREFIX: &str = "rate_limit";

/// The default cap on keys the in-memory store tracks at once (users plus endpoints).
pub const DEFAULT_MAX_TRACKED_KEYS: usize = 1_000_000;

/// The smallest cap on tracked keys accepted: 2, since one request may need a new user key
/// and a new endpoint key at once (a cap of 1 would admit no such request, ever).
pub const MIN_TRACKED_KEYS: usize = 2;

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
