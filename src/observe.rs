//! Metrics (through the [`metrics`] facade) and `tracing` for every check.
//!
//! Install any `metrics` recorder (Prometheus, StatsD, ...) before the first check, and these
//! appear. The decision counters are registered once, at the first check (so counting one is
//! an increment); with no recorder they cost next to nothing.
//!
//! | name | kind | labels | counts |
//! |---|---|---|---|
//! | `tiered_ratelimit_checks_total` | counter | `decision` = `allowed` \| `denied` \| `shadow_denied` \| `blocked`, `tier` = `user` \| `endpoint` \| `global` \| `none` | every decision; `tier` is the blocking tier, or the shadow tier that would have blocked (`none` when allowed); `blocked`: refused by an operator's block ([`RateLimiter::block`](crate::RateLimiter::block)) |
//! | `tiered_ratelimit_block_changes_total` | counter | `action` = `block` \| `unblock` | blocks set and lifted through this limiter |
//! | `tiered_ratelimit_store_errors_total` | counter | `backend` = `redis` \| `custom` | store calls that failed (Redis: each one also starts the fallback, if not done yet) |
//! | `tiered_ratelimit_fallbacks_total` | counter | `reason` = `config` \| `unreachable` \| `timeout` \| `error` | swaps from Redis to memory (at most one per limiter, unless recovery is on); `config`: the settings are at fault (password, permission, TLS, database: see [`ConnectError`](crate::ConnectError)) |
//! | `tiered_ratelimit_recoveries_total` | counter | | swaps back from memory to Redis (opt-in recovery) |
//! | `tiered_ratelimit_store_duration_seconds` | histogram | `backend` = `redis` \| `custom` | how long a store that waits took to answer (a memory check takes ~100 ns and is not timed) |
//!
//! `tracing`: the layer opens a `rate_limit` span (level DEBUG) around each check, with the
//! fields `tier` and `decision` recorded once decided; a fallback logs one event: ERROR naming
//! the cause and the fix when the configuration is at fault, WARN for an outage.

use crate::decision::Decision;
use crate::tier::Tier;

/// Counter of decisions: labels `decision`, `tier`.
pub const CHECKS_TOTAL: &str = "tiered_ratelimit_checks_total";
/// Counter of failed store calls: label `backend`.
pub const STORE_ERRORS_TOTAL: &str = "tiered_ratelimit_store_errors_total";
/// Counter of swaps from Redis to memory: label `reason` (`config`, `unreachable`, `timeout`,
/// `error`; see [`ConnectError::reason`](crate::ConnectError::reason)).
pub const FALLBACKS_TOTAL: &str = "tiered_ratelimit_fallbacks_total";
/// Counter of swaps back from memory to Redis.
pub const RECOVERIES_TOTAL: &str = "tiered_ratelimit_recoveries_total";
/// Counter of blocks set and lifted: label `action` (`block`, `unblock`).
pub const BLOCK_CHANGES_TOTAL: &str = "tiered_ratelimit_block_changes_total";
/// Histogram of the latency of stores that wait: label `backend`.
pub const STORE_DURATION_SECONDS: &str = "tiered_ratelimit_store_duration_seconds";

/// `(decision, tier)` label values of a decision.
pub(crate) fn labels(decision: &Decision) -> (&'static str, &'static str) {
    match (decision.blocked_by(), decision.shadow_blocked_by()) {
        (Some(tier), _) if decision.by_block() => ("blocked", tier.as_str()),
        (Some(tier), _) => ("denied", tier.as_str()),
        (None, Some(tier)) => ("shadow_denied", tier.as_str()),
        (None, None) => ("allowed", "none"),
    }
}

/// The decision counters, registered once (with the recorder installed at the first check:
/// install yours before serving, as metrics recorders usually are), so that counting a check is
/// an increment, not a registry lookup and a label allocation.
#[inline]
pub(crate) fn record(decision: &Decision) {
    use std::sync::OnceLock;
    static COUNTERS: OnceLock<[metrics::Counter; 9]> = OnceLock::new();
    let counters = COUNTERS.get_or_init(|| {
        let c = |d: &'static str, t: Tier| {
            metrics::counter!(CHECKS_TOTAL, "decision" => d, "tier" => t.as_str())
        };
        let tiers = [Tier::User, Tier::Endpoint, Tier::Global];
        [
            metrics::counter!(CHECKS_TOTAL, "decision" => "allowed", "tier" => "none"),
            c("denied", tiers[0]),
            c("denied", tiers[1]),
            c("denied", tiers[2]),
            c("shadow_denied", tiers[0]),
            c("shadow_denied", tiers[1]),
            c("shadow_denied", tiers[2]),
            c("blocked", tiers[0]),
            c("blocked", tiers[1]),
        ]
    });
    // The same order as `labels`: allowed, then denied by tier, then shadow-denied by tier,
    // then blocked (the global tier is never blocked).
    let index = match (decision.blocked_by(), decision.shadow_blocked_by()) {
        (Some(tier), _) if decision.by_block() => 7 + (tier as usize).min(1),
        (Some(tier), _) => 1 + tier as usize,
        (None, Some(tier)) => 4 + tier as usize,
        (None, None) => 0,
    };
    counters[index].increment(1);
}

pub(crate) fn block_changed(action: &'static str) {
    metrics::counter!(BLOCK_CHANGES_TOTAL, "action" => action).increment(1);
}

pub(crate) fn store_error(backend: &'static str) {
    metrics::counter!(STORE_ERRORS_TOTAL, "backend" => backend).increment(1);
}

#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) fn fallback(reason: &'static str) {
    metrics::counter!(FALLBACKS_TOTAL, "reason" => reason).increment(1);
}

pub(crate) fn store_duration(backend: &'static str, seconds: f64) {
    metrics::histogram!(STORE_DURATION_SECONDS, "backend" => backend).record(seconds);
}

#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) fn recovered() {
    metrics::counter!(RECOVERIES_TOTAL).increment(1);
}
