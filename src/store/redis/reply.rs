//! The script's reply (`script.lua`), read into a [`Reply`] and concluded through the one
//! algorithm: the rest of the store never reads the reply by position.

use std::time::Duration;

use fred::types::Value;

use super::super::{Answer, StoreError, StoreOutcome, StoreRequest, TierCheck};
use crate::algorithm::{self, TierFacts, Verdict};
use crate::clock::saturating_micros;

/// The reply of one check, as a list (`reply`: its part of the script's reply); an error for a
/// check of a batch that met an error or came after one (`script.lua`: `{3, error}`).
pub(super) fn check_reply(reply: Value) -> Result<Vec<Value>, StoreError> {
    match reply {
        // `{3, error}`: this check of a batch met an error, or came after one that did.
        // Its error is Redis's, as a check alone gets it from fred: the store sorts both the
        // same way (a `NOPERM` is a permission the operator must grant, say).
        Value::Array(one) if one.first().and_then(Value::as_i64) == Some(3) => {
            let error = one
                .get(1)
                .and_then(Value::as_str)
                .map(|e| e.into_owned())
                .unwrap_or_default();
            let error = fred::error::Error::new(fred::error::ErrorKind::Unknown, error);
            Err(super::fred_error("rate limit script failed", error))
        }
        Value::Array(one) => Ok(one),
        other => Err(unexpected(&other)),
    }
}

/// The error for a reply (or part of one) the script does not send.
fn unexpected(reply: &impl std::fmt::Debug) -> StoreError {
    StoreError::new(format!(
        "unexpected reply from the rate limit script: {reply:?}"
    ))
}

/// Whether `name` is a time as the limiter writes a plain member's name: decimal digits, no
/// sign, no leading zero.
fn is_time_digits(name: &str) -> bool {
    !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_digit())
        && (name == "0" || !name.starts_with('0'))
}

/// What the script found in one tier's key (after trimming, before recording).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Found {
    /// The units live in the window.
    pub(super) count: u64,
    /// The oldest entry's score (µs; the script sends a plain key's as its member's name, the
    /// same digits as a string).
    pub(super) oldest: Option<u64>,
    /// The score of the entry whose leaving makes room for the request (only for a tier that
    /// could not take it, when the cost fits its limit at all).
    pub(super) expiry: Option<u64>,
}

/// What the script answered: the facts, in one place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Reply {
    /// Recorded in every tier with room (else nowhere: the last tier in `found` denied).
    pub(super) admitted: bool,
    /// The time the script used (µs): the app's, or Redis `TIME`.
    pub(super) now: u64,
    /// What was recorded in the first tier that recorded the request: a cluster's rollback
    /// removes it by this member.
    pub(super) member: Option<String>,
    /// Per tier checked, in order (none when blocked).
    pub(super) found: Vec<Found>,
    /// Refused by a block: the first blocked tier (its index in the request's tiers) and the
    /// longest time left of the request's blocks (ms). Nothing was recorded.
    pub(super) blocked: Option<(usize, u64)>,
}

impl Reply {
    /// Reads the script's reply (see `script.lua`):
    /// `{admitted, now, member, count_1, oldest_1, expiry_1, ...}`, -1 for none (admitted 1 or
    /// 0); `{4, now, member, count_1, oldest_1, ...}` for a request recorded where no tier was
    /// full (no expiries); or `{2, now, '', tier, ms}` for a request refused by a block.
    pub(super) fn parse(reply: &[Value]) -> Result<Self, StoreError> {
        let bad = || unexpected(&reply);
        let int = |v: &Value| v.as_i64().ok_or_else(bad);
        let (Some(admitted), Some(now), Some(member)) = (reply.first(), reply.get(1), reply.get(2))
        else {
            return Err(bad());
        };
        let facts = &reply[3..];
        if admitted.as_i64() == Some(2) {
            let (Some(tier), Some(ms), 2) = (facts.first(), facts.get(1), facts.len()) else {
                return Err(bad());
            };
            let index = usize::try_from(int(tier)?)
                .ok()
                .and_then(|j| j.checked_sub(1));
            let (Some(index), Ok(ms)) = (index, u64::try_from(int(ms)?)) else {
                return Err(bad());
            };
            return Ok(Self {
                admitted: false,
                now: u64::try_from(int(now)?).map_err(|_| bad())?,
                member: None,
                found: Vec::new(),
                blocked: Some((index, ms)),
            });
        }
        // Recorded with no tier full: pairs (count, oldest); else triples (and the expiry).
        let (admitted, width) = match int(admitted)? {
            4 => (true, 2),
            1 => (true, 3),
            0 => (false, 3),
            _ => return Err(bad()),
        };
        if facts.is_empty() || !facts.len().is_multiple_of(width) {
            return Err(bad());
        }
        let time = |v: i64| u64::try_from(v).ok();
        // A plain key's oldest member name, sent as it is: a name of other characters is a
        // member the limiter did not write (the script reads the others itself).
        // (A name the limiter wrote is decimal digits without a sign or a leading zero; a
        // number parser would also take `+1`, `01` or `-1`.)
        let oldest = |v: &Value, tier: usize| {
            let ours = match v {
                Value::String(s) => is_time_digits(s),
                Value::Integer(_) => true,
                _ => false,
            };
            v.as_i64().filter(|_| ours).ok_or_else(|| {
                StoreError::new(format!(
                    "tiered-ratelimit cannot read a member of the key of tier {tier}: {v:?} \
                     (a key under its prefix written by something else?)"
                ))
            })
        };
        let found = facts
            .chunks(width)
            .enumerate()
            .map(|(i, f)| {
                Ok(Found {
                    count: u64::try_from(int(&f[0])?).map_err(|_| bad())?,
                    oldest: time(oldest(&f[1], i + 1)?),
                    expiry: match f.get(2) {
                        Some(e) => time(int(e)?),
                        None => None,
                    },
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(Self {
            admitted,
            now: u64::try_from(int(now)?).map_err(|_| bad())?,
            member: member.as_string().filter(|m| !m.is_empty()),
            found,
            blocked: None,
        })
    }
}

/// The outcome of a reply that met a block (`tiers`: the request's tiers the reply speaks of);
/// `None` for any other reply.
pub(super) fn blocked(
    reply: &Reply,
    tiers: &[TierCheck<'_>],
) -> Result<Option<StoreOutcome>, StoreError> {
    let Some((index, ms)) = reply.blocked else {
        return Ok(None);
    };
    let tier = tiers
        .get(index)
        .ok_or_else(|| StoreError::new("the rate limit script named a block of no tier"))?;
    Ok(Some(StoreOutcome::blocked(
        tier.tier,
        Duration::from_millis(ms),
    )))
}

/// The decision on `found` (the facts of `tiers`, in order, all at `now` µs), through the one
/// algorithm; and, for a denial, how long the denying tier cannot change at all (zero when it
/// has room left, just not enough for this request, or when the cost can never fit: then
/// nothing may be cached). `admitted` is what the script did: the algorithm must agree.
pub(super) fn conclude(
    tiers: &[TierCheck<'_>],
    found: &[Found],
    admitted: bool,
    now: u64,
    req: &StoreRequest<'_>,
) -> Result<(StoreOutcome, Duration), StoreError> {
    let window = saturating_micros(req.window);
    let facts: Vec<TierFacts> = tiers
        .iter()
        .zip(found)
        .map(|(t, f)| TierFacts {
            limit: t.limit,
            shadow: t.shadow,
            count: f.count,
            oldest: f.oldest,
        })
        .collect();
    let verdict = algorithm::decide(&facts, now, window, req.cost, |i, _| found[i].expiry);
    let disagree = || StoreError::new("the rate limit script and the algorithm disagree");
    match verdict {
        Verdict::Denied { index, .. } if !admitted && index + 1 == found.len() => {
            let (t, f) = (&facts[index], &found[index]);
            let still = match f.oldest {
                Some(oldest) if t.count >= t.limit && req.cost <= t.limit => {
                    Duration::from_micros(algorithm::until_gone(oldest, window, now))
                }
                _ => Duration::ZERO,
            };
            Ok((Answer::of_verdict(&verdict, tiers).outcome(), still))
        }
        Verdict::Admitted { .. } if admitted && found.len() == tiers.len() => Ok((
            Answer::of_verdict(&verdict, tiers).outcome(),
            Duration::ZERO,
        )),
        _ => Err(disagree()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier::Tier;

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
    fn an_admission_is_concluded_by_the_algorithm() {
        let tiers = [tier(Tier::User, 5, true), tier(Tier::Global, 9, false)];
        let window = Duration::from_secs(60);
        let req = StoreRequest {
            now: Duration::ZERO,
            window,
            cost: 1,
            tiers: &tiers,
        };
        // User (shadow) full: 5 of 5, oldest at 100, making room at 100; global 4 of 9.
        let mut reply = ints(&[1, 1_000]);
        reply.push(Value::from("0000000000000005:1"));
        reply.extend(ints(&[5, 100, 100, 4, 200, -1]));
        let parsed = Reply::parse(&reply).unwrap();
        // A plain key's oldest entry comes as its member's name: the same facts.
        let mut named = reply.clone();
        named[7] = Value::from("200");
        assert_eq!(Reply::parse(&named).unwrap(), parsed);
        assert_eq!(parsed.member.as_deref(), Some("0000000000000005:1"));
        let (outcome, still) =
            conclude(&tiers, &parsed.found, parsed.admitted, parsed.now, &req).unwrap();
        let wait = Duration::from_micros(60_000_000 + 1 + 100 - 1_000);
        assert_eq!(
            outcome,
            StoreOutcome::Admitted {
                remaining: 0,
                binding: Tier::User,
                resets_in: wait,
                shadow_denied: Some((Tier::User, wait)),
            }
        );
        assert_eq!(still, Duration::ZERO);
    }

    #[test]
    fn a_denial_carries_how_long_the_tier_stays_full() {
        let tiers = [tier(Tier::User, 5, false), tier(Tier::Global, 9, false)];
        let req = StoreRequest {
            now: Duration::ZERO,
            window: Duration::from_micros(1_000),
            cost: 1,
            tiers: &tiers,
        };
        let mut reply = ints(&[0, 500]);
        reply.push(Value::from(""));
        reply.extend(ints(&[5, 40, 60]));
        let parsed = Reply::parse(&reply).unwrap();
        let (outcome, still) =
            conclude(&tiers, &parsed.found, parsed.admitted, parsed.now, &req).unwrap();
        assert_eq!(
            outcome,
            StoreOutcome::Denied {
                tier: Tier::User,
                retry_after: Duration::from_micros(60 + 1_000 + 1 - 500),
            }
        );
        assert_eq!(still, Duration::from_micros(40 + 1_000 + 1 - 500));
        // The script and the algorithm must agree: a denial the facts do not support is an error.
        let mut wrong = ints(&[0, 500]);
        wrong.push(Value::from(""));
        wrong.extend(ints(&[4, 40, -1]));
        let parsed = Reply::parse(&wrong).unwrap();
        assert!(conclude(&tiers, &parsed.found, parsed.admitted, parsed.now, &req).is_err());
    }

    #[test]
    fn a_recording_with_no_tier_full_is_read_in_pairs() {
        // {4, now, member, count, oldest, ...}: the facts of a triple, with no expiry.
        let mut pairs = ints(&[4, 1_000]);
        pairs.push(Value::from("1000"));
        pairs.extend(ints(&[3]));
        pairs.push(Value::from("900"));
        pairs.extend(ints(&[7, -1]));
        let mut triples = ints(&[1, 1_000]);
        triples.push(Value::from("1000"));
        triples.extend(ints(&[3]));
        triples.push(Value::from("900"));
        triples.extend(ints(&[-1, 7, -1, -1]));
        let parsed = Reply::parse(&pairs).unwrap();
        assert_eq!(parsed, Reply::parse(&triples).unwrap());
        assert!(parsed.admitted);
        assert_eq!(parsed.found.len(), 2);
        assert_eq!(parsed.found[0].oldest, Some(900));
        // Pairs only for a recording, and whole: a denial or a pair cut short is an error.
        for bad in [
            &[4, 1_000, 0, 3, 900, 7][..],
            &[4, 1_000, 0][..],
            &[0, 1_000, 0, 3, 900][..],
            &[5, 1_000, 0, 3, 900][..],
        ] {
            assert!(Reply::parse(&ints(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_block_is_read_as_its_tier_and_time_left() {
        let mut reply = ints(&[2, 500]);
        reply.push(Value::from(""));
        reply.extend(ints(&[2, 30_000]));
        let parsed = Reply::parse(&reply).unwrap();
        assert_eq!(parsed.blocked, Some((1, 30_000)));
        assert!(!parsed.admitted && parsed.found.is_empty());
        for bad in [
            &[2, 500, 0, 0, 5][..],
            &[2, 500, 0, 1][..],
            &[2, 500, 0, 1, -3][..],
        ] {
            assert!(Reply::parse(&ints(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_oldest_name_of_other_characters_is_an_error_naming_its_tier() {
        let mut reply = ints(&[1, 500]);
        reply.push(Value::from("500"));
        reply.extend(ints(&[0, -1, -1, 3]));
        reply.push(Value::from("000000000000000a"));
        reply.extend(ints(&[-1]));
        let error = Reply::parse(&reply).unwrap_err().to_string();
        assert!(
            error.contains("cannot read a member of the key of tier 2"),
            "{error}"
        );
        for name in [
            "+000000000000400",
            "0000000000000400",
            "-000000000000400",
            "",
        ] {
            reply[7] = Value::from(name);
            assert!(Reply::parse(&reply).is_err(), "{name:?}");
        }
        reply[7] = Value::from("400");
        assert_eq!(Reply::parse(&reply).unwrap().found[1].oldest, Some(400));
        reply[7] = Value::from(400);
        assert_eq!(Reply::parse(&reply).unwrap().found[1].oldest, Some(400));
    }

    #[test]
    fn a_failed_check_of_a_batch_is_sorted_as_the_same_error_alone() {
        let failed = |message: &str| {
            check_reply(Value::Array(vec![Value::from(3), Value::from(message)])).unwrap_err()
        };
        let error = failed("NOPERM User limiter has no permissions to run 'zremrangebyscore'");
        assert!(matches!(
            crate::ConnectError::from_error(&error, false, Duration::from_secs(1)),
            crate::ConnectError::NoPermission { .. }
        ));
        let error = failed("WRONGTYPE Operation against a key holding the wrong kind of value");
        assert!(error.to_string().contains("WRONGTYPE"), "{error}");
        assert!(matches!(
            crate::ConnectError::from_error(&error, false, Duration::from_secs(1)),
            crate::ConnectError::Other { .. }
        ));
    }

    #[test]
    fn anything_else_is_an_error() {
        for reply in [
            ints(&[]),
            ints(&[1, 5]),
            ints(&[1, 5, 0, 1]),
            ints(&[2, 5, 0, 1, 2, 3]),
            ints(&[1, -5, 0, 1, 2, 3]),
        ] {
            assert!(Reply::parse(&reply).is_err(), "{reply:?}");
        }
    }
}
