//! [`HeaderStyle`]: which rate-limit headers responses carry (a setting of the config; the
//! layer renders them).

use serde::{Deserialize, Serialize};

/// Which rate-limit headers a response carries.
///
/// ```
/// use tiered_ratelimit::{HeaderStyle, RateLimitConfig};
///
/// let config = RateLimitConfig::builder().user_limit(50).headers(HeaderStyle::Both).build()?;
/// assert_eq!(config.headers(), HeaderStyle::Both);
/// # Ok::<(), tiered_ratelimit::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HeaderStyle {
    /// `X-RateLimit-Remaining` and `Retry-After` (`0` when allowed) on every limited response
    /// (the default).
    #[default]
    Legacy,
    /// The IETF draft's (draft-ietf-httpapi-ratelimit-headers-11) `RateLimit-Policy` (one
    /// named policy per tier that applied: `"user";q=50;w=60`) and `RateLimit` (the tier
    /// closest to its limit: `"user";r=12;t=30`), and `Retry-After` on a 429.
    Ietf,
    /// Both sets.
    Both,
}
