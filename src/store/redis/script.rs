//! The Lua script (`script.lua`): its arguments, and its reply parsed, in one place, into a
//! [`Reply`].
//!
//! The script trims, counts and, only if every enforced tier has room, records the request in
//! every tier with room, atomically. The rest of the store never reads the reply by position:
//! it gets a [`Reply`].

use std::time::Duration;

use fred::types::Value;

use super::super::{StoreError, StoreOutcome, StoreRequest, TierCheck};
use crate::clock::saturating_micros;
use crate::config::TimeSource;
use crate::tier::Tier;

/// The script, run with EVALSHA (and reloaded on NOSCRIPT).
pub(super) const SOURCE: &str = include_str!("script.lua");

/// `ARGV[1]`: the limiter's `now` in microseconds, or empty for the script to read Redis `TIME`.
pub(super) fn now_arg(time_source: TimeSource, req: &StoreRequest<'_>) -> String {
    match time_source {
        TimeSource::App => saturating_micros(req.now).to_string(),
        TimeSource::Redis => String::new(),
    }
}

/// The script's `ARGV` for `tiers` (the tiers whose keys are its `KEYS`, in the same order):
/// now, the window, the cost, then one limit per tier.
pub(super) fn args(req: &StoreRequest<'_>, now: &str, tiers: &[TierCheck<'_>]) -> Vec<String> {
    let mut args = Vec::with_capacity(3 + tiers.len());
    args.push(now.to_owned());
    args.push(saturating_micros(req.window).to_string());
    args.push(req.cost.to_string());
    args.extend(tiers.iter().map(limit_arg));
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

/// What the script answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Reply {
    /// Recorded in every tier with room.
    Admitted(Admitted),
    /// Recorded nowhere.
    Denied(Denied),
}

/// An admission, as the script reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Admitted {
    /// The smallest capacity left over the tiers, after this request.
    pub(super) remaining: u64,
    /// The tier with that smallest capacity.
    pub(super) binding: Tier,
    /// When that tier next gains capacity.
    pub(super) reset: Duration,
    /// The first full shadow tier (it did not record the request), and when it would have room.
    pub(super) shadow_denied: Option<(Tier, Duration)>,
    /// What was recorded in the first tier that recorded the request (`None`: no tier did):
    /// a cluster's rollback removes it by this member.
    pub(super) member: Option<String>,
}

/// A denial, as the script reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Denied {
    /// The first enforced tier without room.
    pub(super) tier: Tier,
    /// How long until that tier has room for this request.
    pub(super) retry_after: Duration,
    /// How long the tier cannot change at all (zero: it has room left, just not enough for
    /// this request).
    pub(super) still: Duration,
}

impl Reply {
    /// Reads the script's reply; `tiers` are the tiers it ran on (its `KEYS`), in order.
    ///
    /// Admitted: `{1, remaining, shadow_tier, shadow_retry_us, binding_tier, reset_us, member}`;
    /// denied: `{0, tier, retry_after_us, still_us}`. Tiers are numbered from 1 (0: none).
    pub(super) fn parse(reply: &[Value], tiers: &[TierCheck<'_>]) -> Result<Self, StoreError> {
        let bad = || {
            StoreError::new(format!(
                "unexpected reply from the rate limit script: {reply:?}"
            ))
        };
        let tier_at = |index: i64| {
            let i = usize::try_from(index).ok()?.checked_sub(1)?;
            tiers.get(i).map(|t| t.tier)
        };
        let micros = |us: i64| Duration::from_micros(u64::try_from(us.max(1)).unwrap_or(1));
        let ints: Vec<i64> = reply.iter().map_while(Value::as_i64).collect();
        match (ints.as_slice(), reply.get(6)) {
            ([1, remaining, shadow, shadow_retry_us, binding, reset_us], member) => {
                Ok(Self::Admitted(Admitted {
                    remaining: u64::try_from(*remaining).map_err(|_| bad())?,
                    binding: tier_at(*binding).ok_or_else(bad)?,
                    reset: micros(*reset_us),
                    shadow_denied: match shadow {
                        0 => None,
                        i => Some((tier_at(*i).ok_or_else(bad)?, micros(*shadow_retry_us))),
                    },
                    member: member.and_then(|m| m.as_string()).filter(|m| !m.is_empty()),
                }))
            }
            ([0, index, retry_us, still_us], None) => Ok(Self::Denied(Denied {
                tier: tier_at(*index).ok_or_else(bad)?,
                retry_after: micros(*retry_us),
                still: Duration::from_micros(u64::try_from(*still_us).unwrap_or(0)),
            })),
            _ => Err(bad()),
        }
    }

    /// The store's answer.
    pub(super) fn outcome(&self) -> StoreOutcome {
        match self {
            Self::Admitted(a) => StoreOutcome::Admitted {
                remaining: a.remaining,
                binding: a.binding,
                reset: a.reset,
                shadow_denied: a.shadow_denied,
            },
            Self::Denied(d) => StoreOutcome::Denied {
                tier: d.tier,
                retry_after: d.retry_after,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tier(tier: Tier, limit: u64, shadow: bool) -> TierCheck<'static> {
        TierCheck {
            tier,
            id: "",
            limit,
            shadow,
        }
    }

    fn ints(values: &[i64]) -> Vec<Value> {
        values.iter().map(|&v| Value::Integer(v)).collect()
    }

    #[test]
    fn arguments_are_now_window_cost_then_one_limit_per_tier() {
        let tiers = [tier(Tier::User, 5, false), tier(Tier::Global, 9, true)];
        let req = StoreRequest {
            now: Duration::from_secs(2),
            window: Duration::from_millis(1500),
            cost: 3,
            tiers: &tiers,
        };
        assert_eq!(now_arg(TimeSource::App, &req), "2000000");
        assert_eq!(now_arg(TimeSource::Redis, &req), "");
        assert_eq!(
            args(&req, "7", &tiers),
            ["7", "1500000", "3", "5", "-9"].map(String::from)
        );
        assert_eq!(args(&req, "", &tiers[1..]).len(), 4);
    }

    #[test]
    fn an_admission_names_tiers_from_one() {
        let tiers = [tier(Tier::User, 5, true), tier(Tier::Global, 9, false)];
        let mut reply = ints(&[1, 4, 1, 30, 2, 20]);
        reply.push(Value::from("0000000000000001:1"));
        let parsed = Reply::parse(&reply, &tiers).unwrap();
        assert_eq!(
            parsed,
            Reply::Admitted(Admitted {
                remaining: 4,
                binding: Tier::Global,
                reset: Duration::from_micros(20),
                shadow_denied: Some((Tier::User, Duration::from_micros(30))),
                member: Some("0000000000000001:1".to_owned()),
            })
        );
        let mut nothing_recorded = ints(&[1, 0, 0, 0, 1, 0]);
        nothing_recorded.push(Value::from(""));
        match Reply::parse(&nothing_recorded, &tiers).unwrap() {
            Reply::Admitted(a) => {
                assert_eq!(a.member, None);
                assert_eq!(a.reset, Duration::from_micros(1), "at least 1 µs");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_denial_carries_how_long_the_tier_stays_full() {
        let tiers = [tier(Tier::User, 5, false)];
        let parsed = Reply::parse(&ints(&[0, 1, 50, 40]), &tiers).unwrap();
        assert_eq!(
            parsed.outcome(),
            StoreOutcome::Denied {
                tier: Tier::User,
                retry_after: Duration::from_micros(50),
            }
        );
        assert!(matches!(parsed, Reply::Denied(d) if d.still == Duration::from_micros(40)));
    }

    #[test]
    fn anything_else_is_an_error() {
        let tiers = [tier(Tier::User, 5, false)];
        for reply in [
            ints(&[]),
            ints(&[0, 2, 1, 0]),
            ints(&[1, -1, 0, 0, 1, 1]),
            ints(&[2]),
        ] {
            assert!(Reply::parse(&reply, &tiers).is_err(), "{reply:?}");
        }
    }
}
