//! [`Tier`]: the crate's core word, used by every other module and using none of them.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One of the three tiers, checked in this order.
///
/// ```
/// use tiered_ratelimit::Tier;
///
/// assert!(Tier::User < Tier::Endpoint && Tier::Endpoint < Tier::Global);
/// assert_eq!(Tier::Endpoint.to_string(), "endpoint");
/// assert_eq!(serde_json::to_string(&Tier::Global).unwrap(), r#""global""#);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Per user (or per client IP when there is no user id): `rate_limit:user:<id>`.
    User,
    /// Per endpoint (route template): `rate_limit:endpoint:<route>`.
    Endpoint,
    /// One limit over everything: `rate_limit:global`.
    Global,
}

impl Tier {
    /// The tier's name as used in keys and serde: `user`, `endpoint`, `global`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Endpoint => "endpoint",
            Self::Global => "global",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
