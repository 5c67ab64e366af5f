//! The Lua script (`script.lua`) and its arguments, in one place; its reply is read in
//! `reply.rs`.
//!
//! The script trims, counts and, only if every enforced tier has room, records the request in
//! every tier with room, atomically.

use super::super::{StoreRequest, TierCheck};
use crate::clock::saturating_micros;
use crate::config::TimeSource;

/// The script, run with EVALSHA (and reloaded on NOSCRIPT).
pub(super) const SOURCE: &str = include_str!("script.lua");

/// `ARGV[1]`: the limiter's `now` in microseconds, or empty for the script to read Redis `TIME`.
pub(super) fn now_arg(time_source: TimeSource, req: &StoreRequest<'_>) -> String {
    match time_source {
        TimeSource::App => saturating_micros(req.now).to_string(),
        TimeSource::Redis => String::new(),
    }
}

/// One check's part of the script's `ARGV` for `tiers` (the tiers whose keys are its `KEYS`, in
/// the same order, followed by `blocks` block keys): now, the window, the cost, the number of
/// tiers and of block keys, then one limit per tier.
pub(super) fn args(
    req: &StoreRequest<'_>,
    now: &str,
    tiers: &[TierCheck<'_>],
    blocks: usize,
) -> Vec<String> {
    // The script reads both numbers as one digit each (a request has at most three tiers).
    debug_assert!(tiers.len() < 10 && blocks < 10);
    let mut args = Vec::with_capacity(5 + tiers.len());
    args.push(now.to_owned());
    args.push(saturating_micros(req.window).to_string());
    args.push(req.cost.to_string());
    args.push(tiers.len().to_string());
    args.push(blocks.to_string());
    args.extend(tiers.iter().map(limit_arg));
    args
}

/// `check` (one check's arguments, see [`args`]) with `blocks` block keys instead.
pub(super) fn with_blocks(check: &[String], blocks: usize) -> Vec<String> {
    let mut args = check.to_vec();
    if let Some(b) = args.get_mut(4) {
        *b = blocks.to_string();
    }
    args
}

/// A tier's limit as the script takes it: negative for a shadow tier.
fn limit_arg(tier: &TierCheck<'_>) -> String {
    if tier.shadow {
        format!("-{}", tier.limit)
    } else {
        tier.limit.to_string()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::tier::Tier;

    #[test]
    fn arguments_are_now_window_cost_tiers_blocks_then_one_limit_per_tier() {
        let mut global = TierCheck::new(Tier::Global, "", 9);
        global.shadow = true;
        let tiers = [TierCheck::new(Tier::User, "", 5), global];
        let req = StoreRequest {
            now: Duration::from_secs(2),
            window: Duration::from_millis(1500),
            cost: 3,
            tiers: &tiers,
        };
        assert_eq!(now_arg(TimeSource::App, &req), "2000000");
        assert_eq!(now_arg(TimeSource::Redis, &req), "");
        assert_eq!(
            args(&req, "7", &tiers, 1),
            ["7", "1500000", "3", "2", "1", "5", "-9"].map(String::from)
        );
        assert_eq!(args(&req, "", &tiers[1..], 0).len(), 6);
    }
}
