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
//! slot of that master (a hash tag: `%probe{p<k>}`, braces no encoded id holds).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::prelude::{ClientLike, Error as FredError};

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
    /// cluster could not tell).
    async fn probe_ids(&self) -> Option<Vec<String>> {
        let nodes: Result<String, FredError> = (self.inner.client)
            .custom(ask::custom("CLUSTER"), vec!["NODES"])
            .await;
        let ranges = first_ranges(&nodes.ok()?);
        Some(ranges.into_iter().filter_map(probe_id_in).collect())
    }
}

/// The first slot range of each master in `nodes` (a `CLUSTER NODES` reply) that holds slots.
fn first_ranges(nodes: &str) -> Vec<(u16, u16)> {
    let mut ranges = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let master = fields
            .get(2)
            .is_some_and(|flags| flags.split(',').any(|f| f == "master"));
        // Fields 8 and on: `start-end`, `slot`, or a migration in brackets.
        let range = fields.iter().skip(8).find_map(|f| {
            let (start, end) = f.split_once('-').unwrap_or((f, f));
            Some((start.parse().ok()?, end.parse().ok()?))
        });
        if let (true, Some(range)) = (master, range) {
            ranges.push(range);
        }
    }
    ranges
}

/// A probe id whose key's hash tag falls in `start..=end`.
fn probe_id_in((start, end): (u16, u16)) -> Option<String> {
    (0..u32::from(SLOTS) * 4).find_map(|k| {
        let tag = format!("p{k}");
        let slot = crc16(tag.as_bytes()) % SLOTS;
        (start..=end)
            .contains(&slot)
            .then(|| format!("%probe{{{tag}}}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_key_is_found_in_every_masters_first_range() {
        let nodes = "\
a 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 [100->-b]
b 127.0.0.1:7001@17001 master - 0 0 2 connected 5461-10922
c 127.0.0.1:7002@17002 master - 0 0 3 connected 10923-16383
d 127.0.0.1:7003@17003 slave a 0 0 1 connected
e 127.0.0.1:7004@17004 master - 0 0 0 connected
f 127.0.0.1:7005@17005 master - 0 0 4 connected 42";
        let ranges = first_ranges(nodes);
        assert_eq!(ranges, [(0, 5460), (5461, 10922), (10923, 16383), (42, 42)]);
        for range in ranges {
            let id = probe_id_in(range).unwrap();
            let slot = crate::shards::slot(&format!("rate_limit:user:{id}"));
            assert!((range.0..=range.1).contains(&slot), "{id} in {range:?}");
        }
    }
}
