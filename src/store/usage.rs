//! [`TierUsage`]: what one tier's log holds now, read without recording ([`Store::usage`]).
//!
//! [`Store::usage`]: super::Store::usage

use std::time::Duration;

use serde::{Serialize, Serializer};

use super::TierCheck;
use crate::algorithm::until_gone;
use crate::tier::Tier;

/// One tier's usage at a moment: its limit, the units live in the window, what is left, and
/// when the next unit frees. Plain data; fields may be added.
///
/// Serializes as `{"tier": "user", "limit": 5, "used": 2, "remaining": 3,
/// "next_free_in_secs": 41.5, "shadow": false}` (the wait in seconds, to the microsecond).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct TierUsage {
    /// Which tier.
    pub tier: Tier,
    /// The tier's limit for this caller (its plan and route overrides applied).
    pub limit: u64,
    /// The units recorded in the current window (costs included).
    pub used: u64,
    /// The units still free: `limit - used`, never below 0.
    pub remaining: u64,
    /// How long until the oldest live entry leaves the window and its units free again;
    /// zero when nothing is used.
    #[serde(rename = "next_free_in_secs", serialize_with = "secs")]
    pub next_free_in: Duration,
    /// The tier is in shadow mode (full, it would not deny).
    pub shadow: bool,
}

impl TierUsage {
    /// The usage of `tier` (its limit and shadow flag) when `used` units are live and the
    /// oldest live entry (if any) was recorded at `oldest` (µs since the epoch), at `now` (µs)
    /// over `window` (µs): what a store returns from [`Store::usage`](super::Store::usage).
    pub fn new(
        tier: &TierCheck<'_>,
        used: u64,
        oldest: Option<u64>,
        now: u64,
        window: u64,
    ) -> Self {
        let next_free_in = match oldest {
            Some(at) if used > 0 => Duration::from_micros(until_gone(at.min(now), window, now)),
            _ => Duration::ZERO,
        };
        Self {
            tier: tier.tier,
            limit: tier.limit,
            used,
            remaining: tier.limit.saturating_sub(used),
            next_free_in,
            shadow: tier.shadow,
        }
    }
}

/// A duration as seconds (µs precision), for JSON.
pub(crate) fn secs<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_micros() as f64 / 1e6)
}
