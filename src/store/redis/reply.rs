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
    /// removes it by this member (or, if it was renamed, by a stand-in: see `rollback`).
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
mod tests;
