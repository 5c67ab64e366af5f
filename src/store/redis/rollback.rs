//! A cluster's rollback (`rollback.lua`): the entries a request reserved in the tiers before
//! the one that denied it are removed again, so that a denied request spends no quota.
//!
//! By the member's name while it still has the reservation's score; when a concurrent check
//! renamed it keeping its score and cost (a plain key taking the totals form, a rebase), by the
//! newest entry of that score and cost, which stands in for it (the script's header says why
//! the key then never counts fewer units than the admitted requests hold, and what it cannot
//! tell).

use std::sync::LazyLock;

use fred::types::scripts::Script;

use super::super::StoreError;
use super::RedisStore;

/// The script's source, sent whole on a redirection (see `ask`).
pub(super) const SOURCE: &str = include_str!("rollback.lua");

/// The script, run with EVALSHA (and loaded on NOSCRIPT).
pub(super) static ROLLBACK: LazyLock<Script> = LazyLock::new(|| Script::from_lua(SOURCE));

/// One entry a request recorded in one key, to remove again if a later tier denies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Reservation {
    /// The tier's (or global shard's) key.
    pub(super) key: String,
    /// The member the script recorded.
    pub(super) member: String,
    /// The units it holds.
    pub(super) cost: u64,
    /// The score the script recorded it at (µs: its `now`).
    pub(super) at: u64,
}

impl Reservation {
    /// What a check on `key` recorded (`member`, from its reply; `None`: nothing, as a full
    /// shadow tier records nothing), of `cost` units at `at`.
    pub(super) fn of(key: &str, member: Option<String>, cost: u64, at: u64) -> Option<Self> {
        member.map(|member| Self {
            key: key.to_owned(),
            member,
            cost,
            at,
        })
    }

    /// The script's `ARGV`: the member, the cost and the time.
    pub(super) fn args(&self) -> Vec<String> {
        vec![
            self.member.clone(),
            self.cost.to_string(),
            self.at.to_string(),
        ]
    }
}

impl RedisStore {
    /// Removes this request's entries (one per key) again, all at once.
    ///
    /// A member removed from the middle of a totals key's log (a later request was recorded
    /// after it) leaves its cost in the running totals of the later members, so the key counts
    /// that cost until the entries before it expire: stricter for a while, never looser.
    pub(super) async fn roll_back(&self, recorded: &[Reservation]) -> Result<(), StoreError> {
        for r in recorded {
            self.inner.denials.forget(&r.key); // a unit may be free again
        }
        // Sent together: fred pipelines them, one round trip per node.
        let removals = recorded.iter().map(|r| self.inner.roll_back_one(r));
        futures_util::future::join_all(removals)
            .await
            .into_iter()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_the_member_the_cost_and_the_time() {
        let r = Reservation {
            key: "rl:user:a".into(),
            member: "0000000000000003:2".into(),
            cost: 2,
            at: 1_700_000_000_000_001,
        };
        assert_eq!(
            r.args(),
            ["0000000000000003:2", "2", "1700000000000001"].map(String::from)
        );
    }
}
