//! The validated configuration value, [`RateLimitConfig`], and the override values it holds
//! ([`RouteLimits`], [`Plan`]). Re-exported at the crate root, their one path.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{validate, ConfigError, RateLimitConfigBuilder, RawConfig, RedisConfig};
use crate::header_style::HeaderStyle;
use crate::tier::Tier;

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
    /// Whether each tier is in shadow mode, by tier: worked out once from `raw` (every check
    /// asks, for each of its tiers).
    shadow: [bool; 3],
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

    /// Every route with overrides, and its limits.
    pub(crate) fn routes(&self) -> impl Iterator<Item = (&str, &RouteLimits)> {
        self.raw
            .routes
            .iter()
            .map(|(route, limits)| (route.as_str(), limits))
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

    /// Whether `tier` runs in shadow mode: it never blocks; when full it lets the request
    /// through without recording it there, and headers, metrics and the
    /// [`Decision`](crate::Decision) report what enforcing it would have done (see
    /// [`RateLimitConfigBuilder::shadow`]).
    #[inline]
    pub fn is_shadow(&self, tier: Tier) -> bool {
        self.shadow[tier as usize]
    }
}

impl TryFrom<RawConfig> for RateLimitConfig {
    type Error = ConfigError;

    fn try_from(raw: RawConfig) -> Result<Self, ConfigError> {
        validate::validate(&raw)?;
        let shadow = [Tier::User, Tier::Endpoint, Tier::Global].map(|t| raw.shadow.contains(&t));
        Ok(Self { raw, shadow })
    }
}

impl From<RateLimitConfig> for RawConfig {
    fn from(config: RateLimitConfig) -> Self {
        config.raw
    }
}
