//! The recovery's probe: does a Redis store answer checks, not merely a connection?
//!
//! A connection says nothing of a Redis over `maxmemory`, an ACL that forbids a command the
//! script runs, or writes paused. Swapped back on a connection alone, a limiter fell back again
//! at once, over and over, each time onto an empty memory store (an outside audit: 80 admitted
//! in one window of a limit of 5). So the probe runs an admitted check, which writes what every
//! admitted check writes (a member, an expiry), on a key no id can name
//! (`<prefix>:user:%probe`: encoded ids hold `%` only before two hex digits); its entry leaves
//! with the key's expiry a moment later. On a cluster every master has its own `maxmemory`,
//! ACLs and pauses, so it runs one such check on each master that holds slots, each key in a
//! slot of that master (a hash tag of three characters, `%probe{xyz}`: braces no encoded id
//! holds).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::prelude::{ClientLike, Error as FredError, Value};

use super::super::{Store, StoreOutcome, StoreRequest, TierCheck};
use super::{ask, RedisStore};
use crate::config::MAX_LIMIT;
use crate::shards::{crc16, SLOTS};
use crate::tier::Tier;

/// The probe's window: its entry and key are gone this long after it.
const PROBE_WINDOW: Duration = Duration::from_millis(100);

impl RedisStore {
    /// Whether the store answers checks: connected, and an admitted check runs on every
    /// master (see the module docs).
    pub(crate) async fn answers_a_check(&self) -> bool {
        if !self.wait_connected().await {
            return false;
        }
        let ids = if self.inner.clustered {
            match self.probe_ids().await {
                Some(ids) if !ids.is_empty() => ids,
                _ => return false,
            }
        } else {
            vec!["%probe".to_owned()]
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        for id in &ids {
            let tiers = [TierCheck::new(Tier::User, id, MAX_LIMIT)];
            let request = StoreRequest::new(now, PROBE_WINDOW, 1, &tiers);
            if !matches!(
                Store::check(self, &request).await,
                Ok(StoreOutcome::Admitted { .. })
            ) {
                return false;
            }
        }
        true
    }

    /// One probe id per master holding slots, its key in a slot of that master (`None`: the
    /// cluster could not tell, or a master's slot has no tag). From `CLUSTER SLOTS`, which
    /// routing needs anyway (an ACL that refuses `CLUSTER NODES` left a limiter on memory for
    /// good: a review).
    async fn probe_ids(&self) -> Option<Vec<String>> {
        let slots: Result<Value, FredError> = (self.inner.client)
            .custom(ask::custom("CLUSTER"), vec!["SLOTS"])
            .await;
        first_slots(slots.ok()?)
            .into_iter()
            .map(probe_id_for)
            .collect()
    }
}

/// The first slot of each master in a `CLUSTER SLOTS` reply (`[[start, end, [host, port,
/// id, ..], replicas..], ..]`), a master named by its node id (a review: by its address, the
/// masters of a cluster announcing a null endpoint on one port were taken for one).
fn first_slots(reply: Value) -> Vec<u16> {
    let mut firsts: Vec<(String, u16)> = Vec::new();
    for range in reply.into_array() {
        let range = range.into_array();
        let start = range.first().and_then(Value::as_i64);
        // A master by its node id (its endpoint may be null, or the same host for all).
        let master = (range.get(2).cloned().map(Value::into_array))
            .and_then(|m| m.get(2).and_then(Value::as_string));
        let (Some(start), Some(master)) = (start.and_then(|s| u16::try_from(s).ok()), master)
        else {
            continue;
        };
        match firsts.iter_mut().find(|(m, _)| *m == master) {
            Some((_, first)) => *first = (*first).min(start),
            None => firsts.push((master, start)),
        }
    }
    firsts.into_iter().map(|(_, first)| first).collect()
}

/// The characters of a probe key's hash tag.
const TAG_CHARS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_-";

/// The `n`-th three-character tag.
fn tag(n: usize) -> [u8; 3] {
    let c = |i: usize| TAG_CHARS[(n / TAG_CHARS.len().pow(i as u32)) % TAG_CHARS.len()];
    [c(0), c(1), c(2)]
}

/// A probe id whose key's hash tag falls in `slot` (three characters reach every slot: a unit
/// test checks it; decimal tags up to 65,535 missed 888 of them, slot 0 among them).
fn probe_id_for(slot: u16) -> Option<String> {
    (0..TAG_CHARS.len().pow(3)).find_map(|n| {
        let tag = tag(n);
        (crc16(&tag) % SLOTS == slot).then(|| {
            let tag = std::str::from_utf8(&tag).unwrap_or_default();
            format!("%probe{{{tag}}}")
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_has_a_probe_tag() {
        let mut reached = vec![false; usize::from(SLOTS)];
        for n in 0..TAG_CHARS.len().pow(3) {
            reached[usize::from(crc16(&tag(n)) % SLOTS)] = true;
        }
        assert!(
            reached.iter().all(|&r| r),
            "{} slots unreached",
            reached.iter().filter(|r| !**r).count()
        );
        for slot in [0, 23, 50, 5460, 5461, 16383] {
            let id = probe_id_for(slot).unwrap();
            assert_eq!(
                crate::shards::slot(&format!("rate_limit:user:{id}")),
                slot,
                "{id}"
            );
        }
    }

    #[test]
    fn the_first_slot_of_each_master_is_read_from_cluster_slots() {
        // A null endpoint, and one port for all: the node ids tell the masters apart.
        let master = |port: i64| {
            let id = format!("id{}", port % 100);
            Value::Array(vec![Value::Null, 7000.into(), id.as_str().into()])
        };
        let range = |start: i64, end: i64, port: i64| {
            Value::Array(vec![
                start.into(),
                end.into(),
                master(port),
                master(port + 100),
            ])
        };
        let reply = Value::Array(vec![
            range(5461, 10922, 7001),
            range(0, 0, 7000),
            range(10923, 16383, 7002),
            range(1, 5460, 7000),
        ]);
        assert_eq!(first_slots(reply), [5461, 0, 10923]);
    }
}
