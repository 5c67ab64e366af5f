//! A cluster's rollback (`rollback.lua`): the entries a request reserved in the tiers before
//! the one that denied it are removed again, so that a denied request spends no quota.
//!
//! By the member's name while it still has the reservation's score; when a concurrent check
//! renamed it keeping its score and cost (a plain key taking the totals form, a rebase), by the
//! newest entry of that score and cost, which stands in for it (the script's header says why
//! the key then never counts fewer units than the admitted requests hold, and what it cannot
//! tell).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use fred::types::scripts::Script;

use super::super::StoreError;
use super::{blocks, RedisStore};

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

/// A name no other caller of any instance gets: a random number drawn once per process, and a
/// count (hex digits, a `-` and digits). A rollback's marker takes one (the member and its
/// time are not enough: once a rollback removed a plain member, the next request at the same
/// microsecond gets the same name), and so does the invalidation listener's probe.
pub(super) fn token() -> String {
    static PROCESS: LazyLock<u64> = LazyLock::new(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.finish()
    });
    static COUNT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{:016x}-{}",
        *PROCESS,
        COUNT.fetch_add(1, Ordering::Relaxed)
    )
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

    /// The script's `ARGV`: the member, the cost, the time, and how long its marker lives (ms):
    /// twice `command_timeout` (fred gives up sending a command again after that long), at
    /// least a second.
    pub(super) fn args(&self, command_timeout: Duration) -> Vec<String> {
        let life = command_timeout.saturating_mul(2).as_millis().max(1_000);
        vec![
            self.member.clone(),
            self.cost.to_string(),
            self.at.to_string(),
            life.to_string(),
        ]
    }

    /// A marker for one rollback of this reservation, in its key's slot, named as no other
    /// rollback of any instance: set by the rollback's first run, so that the same command run
    /// again (fred sends the same bytes) does nothing. A new name at each call: made when the
    /// rollback is sent, not with the reservation (most reservations are never rolled back).
    pub(super) fn marker(&self) -> String {
        blocks::companion(&self.key, &format!("rolled-back:{}", token()))
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
    fn arguments_and_a_marker_of_its_own() {
        let r = Reservation::of(
            "rl:user:a",
            Some("0000000000000003:2".into()),
            2,
            1_700_000_000_000_001,
        )
        .unwrap();
        assert_eq!(
            r.args(Duration::from_millis(1_500)),
            ["0000000000000003:2", "2", "1700000000000001", "3000"].map(String::from)
        );
        assert_eq!(r.args(Duration::from_millis(10))[3], "1000");
        // In the key's slot, and a name of its own: the same member at the same time again (a
        // request after the rollback, at the same microsecond) gets another marker.
        assert!(
            r.marker().starts_with("{rl:user:a}#rolled-back:"),
            "{}",
            r.marker()
        );
        let again = Reservation::of("rl:user:a", Some(r.member.clone()), 2, r.at).unwrap();
        assert_ne!(r.marker(), again.marker());
        assert_ne!(r.marker(), r.marker());
    }
}
