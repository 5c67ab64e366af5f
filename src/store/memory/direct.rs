//! The limiter's direct way into the memory store: a unit request from the configuration's
//! hot path (no route override, no plan, no tier in shadow mode), decided by the
//! [algorithm](crate::algorithm) on its tiers' logs under their locks, with no
//! [`StoreRequest`](crate::store::StoreRequest) built for it.
//!
//! It takes only the common case: every key the request names is tracked already, no log it
//! reads keeps costs (none has seen a request of more than one unit while it held entries),
//! no key is blocked and no sweep is due. Anything else answers `None` before a thing is
//! recorded (a log may have been trimmed, as the general path trims it anyway), and
//! the limiter then takes the store's general path ([`decide`](super::decide)), which decides
//! afresh under the same locks, taken in the same order (user, endpoint, global): a new key
//! and the key cap, blocks and the sweep are handled there alone. Both paths hand the same
//! facts to the same algorithm and record in the same logs, so they give the same answer
//! (tests: this module's, and every model and contract test on memory, whose checks come
//! here whenever their keys are tracked).

use std::sync::atomic::Ordering;

use super::decide::NO_FACTS;
use super::log::Log;
use super::MemoryStore;
use crate::algorithm::{self, Verdict};
use crate::store::Answer;
use crate::tier::Tier;

/// A unit request as the limiter's hot path has it: plain data, no tier in shadow mode.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Direct<'a> {
    /// The user tier's key part (unused when its limit is 0).
    pub(crate) user: &'a str,
    /// The endpoint tier's key part (unused when its limit is 0).
    pub(crate) endpoint: &'a str,
    /// The user, endpoint and global limits (0: the tier does not apply; at least one is not).
    pub(crate) limits: [u64; 3],
    /// Now and the window, in µs.
    pub(crate) now: u64,
    pub(crate) window: u64,
}

const TIERS: [Tier; 3] = [Tier::User, Tier::Endpoint, Tier::Global];

impl MemoryStore {
    /// The answer to `req` if its keys are tracked, no key is blocked and no sweep is due
    /// (see the module docs); else `None`, with nothing recorded.
    #[inline]
    pub(crate) fn answer_direct(&self, req: &Direct<'_>) -> Option<Answer> {
        let inner = &*self.inner;
        let [user_limit, endpoint_limit, global_limit] = req.limits;
        if req.now >= inner.next_sweep.load(Ordering::Relaxed) || inner.blocks.any() {
            return None;
        }
        // Locked and looked up in the general path's order (`decide`): each key as soon as
        // its shard is locked; a key not tracked goes there.
        let mut user = (user_limit > 0).then(|| inner.users.lock(req.user));
        let user_log = match &mut user {
            Some(locked) => Some(locked.find(req.user)?),
            None => None,
        };
        let mut endpoint = (endpoint_limit > 0).then(|| inner.endpoints.lock(req.endpoint));
        let endpoint_log = match &mut endpoint {
            Some(locked) => Some(locked.find(req.endpoint)?),
            None => None,
        };
        let mut global = (global_limit > 0).then(|| inner.global.lock());
        let cutoff = req.now.saturating_sub(req.window);
        let mut logs: [Option<&mut Log>; 3] = [None, None, None];
        let mut facts = [NO_FACTS; 3];
        let mut tiers = [Tier::Global; 3];
        let mut n = 0;
        for (i, log) in [user_log, endpoint_log, global.as_deref_mut()]
            .into_iter()
            .enumerate()
        {
            if let Some(log) = log {
                facts[n] = log.facts_enforced(req.limits[i], cutoff);
                tiers[n] = TIERS[i];
                logs[n] = Some(log);
                n += 1;
            }
        }
        let verdict = algorithm::decide(&facts[..n], req.now, req.window, 1, |i, units| {
            logs[i].as_deref_mut().and_then(|log| log.expiry_of(units))
        });
        Some(match verdict {
            // Denied: the logs are left as they were.
            Verdict::Denied {
                index,
                retry_after_us,
            } => Answer::Denied {
                tier: tiers[index],
                retry_after_us,
            },
            // No tier is in shadow mode, so an admitted request is recorded in every tier.
            Verdict::Admitted {
                remaining,
                binding,
                resets_in_us,
                ..
            } => {
                for log in logs.iter_mut().flatten() {
                    log.record_at_least(req.now, 1);
                }
                Answer::Admitted {
                    remaining,
                    binding: tiers[binding],
                    resets_in_us,
                    shadow_denied: None,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::{StoreRequest, TierCheck};

    /// The same checks, seeded at random around the window's edges and the limits, on two
    /// stores: one asked directly wherever it answers, the other only through its general
    /// path. Every answer is the same, and the direct path answers once keys are tracked. One
    /// check in ten costs 2 units (the general path's on both), so that logs keep costs.
    #[test]
    fn the_direct_path_answers_as_the_general_path_does() {
        for seed in 0..40 {
            let mut next = crate::test_rng::seeded(seed);
            let (direct, general) = (MemoryStore::new(), MemoryStore::new());
            let window = 1 + next() % 50;
            let limits = [next() % 4, next() % 5, next() % 7];
            if limits == [0; 3] {
                continue;
            }
            let (mut now, mut answered_directly) = (1_000_000, 0);
            for step in 0..400 {
                now += next() % (window / 2 + 2);
                let user = format!("u{}", next() % 3);
                let endpoint = format!("/e{}", next() % 2);
                let req = Direct {
                    user: &user,
                    endpoint: &endpoint,
                    limits,
                    now,
                    window,
                };
                let checks: Vec<TierCheck<'_>> = TIERS
                    .into_iter()
                    .zip([user.as_str(), endpoint.as_str(), ""])
                    .zip(limits)
                    .filter(|&(_, limit)| limit > 0)
                    .map(|((tier, id), limit)| TierCheck::new(tier, id, limit))
                    .collect();
                let cost = if next().is_multiple_of(10) { 2 } else { 1 };
                let store_request = StoreRequest::new(
                    Duration::from_micros(now),
                    Duration::from_micros(window),
                    cost,
                    &checks,
                );
                let expected = general.answer(&store_request).unwrap();
                let got = match (cost == 1).then(|| direct.answer_direct(&req)).flatten() {
                    Some(answer) => {
                        answered_directly += 1;
                        answer
                    }
                    None => direct.answer(&store_request).unwrap(),
                };
                assert_eq!(got, expected, "seed {seed}, step {step}, at {now}");
            }
            assert!(
                answered_directly > 0,
                "seed {seed}: never answered directly"
            );
        }
    }

    /// A key not tracked yet, a block or a sweep due leaves the request to the general path,
    /// with nothing recorded.
    #[test]
    fn a_new_key_a_block_or_a_due_sweep_goes_to_the_general_path() {
        let store = MemoryStore::new();
        let req = |now| Direct {
            user: "alice",
            endpoint: "/items",
            limits: [5, 5, 5],
            now,
            window: 1_000_000,
        };
        assert_eq!(store.answer_direct(&req(10)), None, "no key is tracked");
        assert_eq!(store.inner.global.lock().requests(), 0);
        let checks = [
            TierCheck::new(Tier::User, "alice", 5),
            TierCheck::new(Tier::Endpoint, "/items", 5),
            TierCheck::new(Tier::Global, "", 5),
        ];
        let general = StoreRequest::new(
            Duration::from_micros(10),
            Duration::from_secs(1),
            1,
            &checks,
        );
        assert!(matches!(
            store.answer(&general),
            Ok(Answer::Admitted { remaining: 4, .. })
        ));
        assert!(matches!(
            store.answer_direct(&req(11)),
            Some(Answer::Admitted { remaining: 3, .. })
        ));
        store.inner.blocks.block(Tier::User, "bob", 1_000_000);
        assert_eq!(store.answer_direct(&req(12)), None, "a block is set");
        store.inner.blocks.unblock(Tier::User, "bob");
        let due = store.inner.next_sweep.load(Ordering::Relaxed);
        assert_eq!(store.answer_direct(&req(due)), None, "a sweep is due");
        assert_eq!(store.inner.global.lock().requests(), 2);
    }
}
