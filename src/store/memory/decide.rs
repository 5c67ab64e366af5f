//! One request decided under its tiers' locks: the memory store's check.
//!
//! The tiers' logs are locked user, endpoint, global (a request names them in that order),
//! trimmed, and their facts handed to the [algorithm](crate::algorithm); an admitted request
//! is then recorded where the verdict says, and a key it needed is inserted only then.

use std::sync::atomic::Ordering;

use parking_lot::MutexGuard;

use super::log::Log;
use super::map::Locked;
use super::{CapReached, TierLogs};
use crate::algorithm::{self, TierFacts, Verdict};
use crate::store::{Answer, StoreRequest, TierCheck};
use crate::tier::Tier;

/// The facts of a tier slot no log fills (the request names fewer than three tiers).
pub(super) const NO_FACTS: TierFacts = TierFacts {
    limit: 0,
    shadow: false,
    count: 0,
    oldest: None,
};

/// Which tiers a request names (it names them in this order: user, endpoint, global).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Shape {
    user: bool,
    endpoint: bool,
    global: bool,
}

impl Shape {
    /// The shape of `req`'s tiers; `None` unless they are named most specific first (user,
    /// endpoint, global), each at most once.
    #[inline]
    pub(super) fn of(req: &StoreRequest<'_>) -> Option<Self> {
        req.tier_bits().map(|bits| Self {
            user: bits & 1 != 0,
            endpoint: bits & 2 != 0,
            global: bits & 4 != 0,
        })
    }
}

/// A request's locks: its user key's shard, its endpoint key's shard and the global log, for
/// the tiers it names.
type Held<'a> = (
    Option<Locked<'a>>,
    Option<Locked<'a>>,
    Option<MutexGuard<'a, Log>>,
);

/// The log of a map tier's key under its shard's lock: the tracked one, or `fresh` (empty) for
/// a key not tracked yet, which `new` then says.
#[inline]
fn log_in<'a>(
    locked: &'a mut Locked<'_>,
    id: &str,
    fresh: &'a mut Log,
    new: &mut bool,
) -> &'a mut Log {
    match locked.find(id) {
        Some(log) => log,
        None => {
            *new = true;
            fresh
        }
    }
}

/// The decision on the logs of a request's tiers (`logs`, in the request's order, locked by
/// the caller): trims them, asks the algorithm, and records an admitted request where the
/// verdict says, unless `admit` (told where it would be recorded) refuses it: then nothing is
/// recorded and its error is returned. `admit` may also take a shadow tier out of where it is
/// recorded, naming it with the wait it reports (the key cap's). With the tiers the request
/// was recorded in.
#[inline]
fn decide_on(
    logs: &mut [Option<&mut Log>; 3],
    tiers: &[TierCheck<'_>],
    now: u64,
    window: u64,
    cost: u64,
    admit: impl FnOnce(&mut [bool; 3]) -> Result<Option<(Tier, u64)>, CapReached>,
) -> Result<(Answer, [bool; 3]), CapReached> {
    let cutoff = now.saturating_sub(window);
    let mut facts = [NO_FACTS; 3];
    for ((log, t), f) in logs.iter_mut().zip(tiers).zip(&mut facts) {
        if let Some(log) = log {
            *f = log.facts(t, cutoff);
        }
    }
    let verdict = algorithm::decide(&facts[..tiers.len()], now, window, cost, |i, units| {
        logs[i].as_deref_mut().and_then(|log| log.expiry_of(units))
    });
    let outcome = Answer::of_verdict(&verdict, tiers);
    // Denied: the logs are left as they were.
    let Verdict::Admitted { mut records, .. } = verdict else {
        return Ok((outcome, [false; 3]));
    };
    let untracked = admit(&mut records)?;
    for (log, _) in logs.iter_mut().zip(records).filter(|(_, r)| *r) {
        if let Some(log) = log {
            log.record_at_least(now, cost);
        }
    }
    Ok((outcome.with_untracked_shadow(untracked), records))
}

impl TierLogs {
    /// Decides one request of `shape` under its tiers' locks. `Err`: the request would be
    /// admitted but needs a new key while the key cap is reached; nothing was recorded.
    /// `may_sweep`: a key-cap sweep may still be asked for (else none is, and a tier in shadow
    /// mode goes untracked at once).
    ///
    /// The locks are taken user, endpoint, global: the user and endpoint maps are distinct, so
    /// a held guard never shares a shard with the one taken next, and the sweep (the only other
    /// place that waits on shard locks while working) runs only with no lock held, takes one
    /// shard at a time and waits on nothing else. So two checks never deadlock.
    #[inline]
    pub(super) fn decide(
        &self,
        req: &StoreRequest<'_>,
        shape: Shape,
        now: u64,
        window: u64,
        may_sweep: bool,
    ) -> Result<Answer, CapReached> {
        let tiers = req.tiers;
        // Where each map tier sits in the request (the global tier is last).
        let (u, e) = (0, usize::from(shape.user));
        // Each key is looked up as soon as its shard is locked, before the next lock is taken:
        // a user key's lookup misses the cache when users are many, and the endpoint's and
        // the global log's locks, which every check takes, are not held meanwhile.
        let mut user = shape.user.then(|| self.users.lock(tiers[u].id));
        let user_log = user.as_mut().map(|locked| locked.find(tiers[u].id));
        let mut endpoint = shape.endpoint.then(|| self.endpoints.lock(tiers[e].id));
        let endpoint_log = endpoint.as_mut().map(|locked| locked.find(tiers[e].id));
        let mut global = shape.global.then(|| self.global.lock());
        if matches!(user_log, Some(None)) || matches!(endpoint_log, Some(None)) {
            // A key not tracked yet: decided apart, under the same locks.
            let held = (user, endpoint, global);
            return self.decide_new(req, shape, held, now, window, may_sweep);
        }
        let mut logs: [Option<&mut Log>; 3] = [None, None, None];
        let mut n = 0;
        for log in [
            user_log.flatten(),
            endpoint_log.flatten(),
            global.as_deref_mut(),
        ] {
            if log.is_some() {
                logs[n] = log;
                n += 1;
            }
        }
        decide_on(&mut logs, tiers, now, window, req.cost, |_| Ok(None)).map(|(outcome, _)| outcome)
    }

    /// [`decide`](Self::decide) for a request with a key not tracked yet: that key is decided
    /// on an empty log, and inserted only if the request is recorded in it, within the cap.
    #[cold]
    #[inline(never)]
    fn decide_new(
        &self,
        req: &StoreRequest<'_>,
        shape: Shape,
        (mut user, mut endpoint, mut global): Held<'_>,
        now: u64,
        window: u64,
        may_sweep: bool,
    ) -> Result<Answer, CapReached> {
        let tiers = req.tiers;
        let (u, e) = (0, usize::from(shape.user));
        let (mut fresh_user, mut fresh_endpoint) = (Log::default(), Log::default());
        let (mut new_user, mut new_endpoint) = (false, false);
        let mut logs: [Option<&mut Log>; 3] = [None, None, None];
        let mut n = 0;
        if let Some(locked) = &mut user {
            logs[n] = Some(log_in(locked, tiers[u].id, &mut fresh_user, &mut new_user));
            n += 1;
        }
        if let Some(locked) = &mut endpoint {
            logs[n] = Some(log_in(
                locked,
                tiers[e].id,
                &mut fresh_endpoint,
                &mut new_endpoint,
            ));
            n += 1;
        }
        if let Some(log) = global.as_deref_mut() {
            logs[n] = Some(log);
        }
        let admit = |records: &mut [bool; 3]| {
            let (mut user, mut endpoint) = (new_user && records[u], new_endpoint && records[e]);
            if !user && !endpoint || self.try_reserve(usize::from(user) + usize::from(endpoint)) {
                return Ok(None);
            }
            // At the cap. A sweep due first, as for any tier: it may make room, and it sets
            // the wait the cap gives.
            let first = if user { Tier::User } else { Tier::Endpoint };
            if may_sweep && self.cap_sweep_due(now, window) {
                return Err(CapReached {
                    tier: first,
                    sweep: true,
                });
            }
            // A tier in shadow mode never denies: its new key is left untracked (the request
            // is not counted in it), and the answer reports the denial enforcing it would have
            // given, with the cap's wait. An enforced tier's new key still needs room: it
            // fails closed.
            let mut untracked = None;
            if user && tiers[u].shadow {
                (user, records[u], untracked) = (false, false, Some(Tier::User));
            }
            if endpoint && tiers[e].shadow {
                (endpoint, records[e]) = (false, false);
                untracked = untracked.or(Some(Tier::Endpoint));
            }
            match untracked {
                Some(tier)
                    if !user && !endpoint
                        || self.try_reserve(usize::from(user) + usize::from(endpoint)) =>
                {
                    self.warn_cap_reached(now, tier);
                    let retry_at = self.cap_retry_at.load(Ordering::Acquire);
                    Ok(Some((tier, retry_at.saturating_sub(now).max(1))))
                }
                _ => Err(CapReached {
                    tier: if user { Tier::User } else { Tier::Endpoint },
                    sweep: false,
                }),
            }
        };
        let (outcome, records) = decide_on(&mut logs, tiers, now, window, req.cost, admit)?;
        if let (true, true, Some(locked)) = (new_user, records[u], &mut user) {
            locked.insert(tiers[u].id, fresh_user);
        }
        if let (true, true, Some(locked)) = (new_endpoint, records[e], &mut endpoint) {
            locked.insert(tiers[e].id, fresh_endpoint);
        }
        Ok(outcome)
    }

    /// Counts `n` new keys in, unless that would pass the cap.
    fn try_reserve(&self, n: usize) -> bool {
        self.tracked
            .fetch_update(
                std::sync::atomic::Ordering::AcqRel,
                std::sync::atomic::Ordering::Acquire,
                |t| t.checked_add(n).filter(|&after| after <= self.max_keys),
            )
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_is_the_tiers_named_most_specific_first_each_once() {
        let t = |tier| TierCheck::new(tier, "x", 1);
        let (user, endpoint, global) = (t(Tier::User), t(Tier::Endpoint), t(Tier::Global));
        let of = |tiers: &[TierCheck<'_>]| {
            Shape::of(&StoreRequest::new(
                std::time::Duration::ZERO,
                std::time::Duration::ZERO,
                1,
                tiers,
            ))
        };
        let shape = |user, endpoint, global| {
            Some(Shape {
                user,
                endpoint,
                global,
            })
        };
        assert_eq!(of(&[]), shape(false, false, false));
        assert_eq!(of(&[user, endpoint, global]), shape(true, true, true));
        assert_eq!(of(&[user, global]), shape(true, false, true));
        assert_eq!(of(&[endpoint]), shape(false, true, false));
        assert_eq!(of(&[global, user]), None);
        assert_eq!(of(&[endpoint, user]), None);
        assert_eq!(of(&[user, user]), None);
        assert_eq!(of(&[user, endpoint, global, global]), None);
    }
}
