//! The global tier split over shards (Redis Cluster, [`RedisConfig::global_shards`]): which
//! keys, which caps, and which shard a request tries next. Pure: no I/O, no clock, no Redis
//! client. The Redis store drives it, and so does the simulator (`cargo run --example
//! shard_sim`), so what the simulator measures is this code.
//!
//! - [`ShardLayout`]: the budget `L` split into `n` fixed caps that sum to `L`, one per key;
//!   each key's hash tag is chosen so that its CRC16 slot sits in the middle of the `i`-th of
//!   `n` equal slot ranges, which spreads the keys over the masters of a cluster whose slots
//!   are split evenly (what `redis-cli --cluster create` does).
//! - [`Rotation`]: where each request starts (round robin from a random point), so that every
//!   shard gets an equal share of the tries.
//! - [`Attempt`]: one request's walk over the shards: from its start, skipping the shards its
//!   instance knows are full, moving on when a shard denies, until one admits or every shard
//!   denied; then the wait is the earliest moment by which the request fits in one of them
//!   (never shorter than the truth). A cost that no shard fits whole but their rooms together
//!   do is split over them ([`Attempt::split`]).
//! - [`full_until`]: when a shard that denied can change again (its oldest entry leaving),
//!   from the facts its script returned; the instance remembers it and skips the shard until
//!   then.
//!
//! Never over the limit: each key admits at most its cap in any window (its script is exact),
//! and the caps sum to the limit. See [the scale guide](crate::guides::scale).
//!
//! [`RedisConfig::global_shards`]: crate::RedisConfig::global_shards

use std::sync::atomic::{AtomicUsize, Ordering};

/// Redis Cluster's number of hash slots.
pub const SLOTS: u16 = 16_384;

/// The CRC16 (XMODEM) of `bytes`, as Redis Cluster computes key slots.
pub fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The cluster slot of `key`: the CRC16 of its hash tag (the text between the first `{` and
/// the next `}`, if not empty), else of the whole key.
pub fn slot(key: &str) -> u16 {
    let tagged = key.find('{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.find('}')
            .filter(|&close| close > 0)
            .map(|close| &rest[..close])
    });
    crc16(tagged.unwrap_or(key).as_bytes()) % SLOTS
}

/// The layout of a global budget split over `n` keys: their hash tags and caps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardLayout {
    tags: Vec<String>,
}

impl ShardLayout {
    /// `shards` keys (at least 1). Every instance computes the same tags for the same count.
    pub fn new(shards: usize) -> Self {
        let n = shards.max(1);
        let tags = (0..n).map(|i| tag(i, n)).collect();
        Self { tags }
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.tags.len()
    }

    /// Never: a layout has at least one key.
    pub fn is_empty(&self) -> bool {
        self.tags.is_empty()
    }

    /// Shard `i`'s hash tag (its key is `<prefix>:global:{<tag>}`).
    pub fn tag(&self, i: usize) -> &str {
        &self.tags[i]
    }

    /// How many shards a `limit` is split over: no more than the limit, so that every cap is
    /// at least 1.
    pub fn used(&self, limit: u64) -> usize {
        usize::try_from(limit)
            .unwrap_or(usize::MAX)
            .clamp(1, self.len())
    }

    /// Shard `i`'s cap of `limit`: `limit / used`, the remainder one unit each to the first
    /// shards, so that the caps of the [`used`](Self::used) shards sum to `limit`.
    pub fn cap(&self, limit: u64, i: usize) -> u64 {
        let n = self.used(limit) as u64;
        let i = i as u64;
        limit / n + u64::from(i < limit % n)
    }
}

/// Shard `i` of `n`'s tag: the first of `g<i>.<k>` (k = 0, 1, ...) whose slot lies within
/// 1/16 of a range of the middle of the `i`-th of `n` equal slot ranges (the closest of the
/// first 4,096 if none does; none ever needs that many).
fn tag(i: usize, n: usize) -> String {
    let slots = usize::from(SLOTS);
    let target = (2 * i + 1) * slots / (2 * n);
    let tolerance = (slots / n / 16).max(1);
    let mut best = (usize::MAX, String::new());
    for k in 0..65_536 {
        let candidate = format!("g{i}.{k}");
        let distance = usize::from(crc16(candidate.as_bytes()) % SLOTS).abs_diff(target);
        if distance < best.0 {
            best = (distance, candidate);
        }
        if best.0 <= tolerance {
            break;
        }
    }
    best.1
}

/// Where an instance's requests start: round robin from a point of its own, so that the
/// instances together try every shard equally often.
#[derive(Debug)]
pub struct Rotation {
    next: AtomicUsize,
}

impl Rotation {
    /// Starting from `seed` (random per instance in the store; fixed in the simulator).
    pub fn new(seed: u64) -> Self {
        Self {
            next: AtomicUsize::new(seed as usize),
        }
    }

    /// The next request's first shard, of `n`.
    pub fn start(&self, n: usize) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed) % n.max(1)
    }
}

/// What an instance remembers of a shard it saw full, for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownFull {
    /// Until when (µs) the shard stays full for requests of every cost (its oldest entry
    /// leaving is the earliest it can change): it is skipped until then.
    pub until: u64,
    /// By when (µs) this request's cost fits there at the latest, with no other request in
    /// between: a bound no earlier than `until`, which a denial's wait may take (for a cost of
    /// 1, `until` itself; for a larger one, what the shard said for a cost at least as large,
    /// else a window from now).
    pub fits_by: u64,
}

/// One request's walk over the shards (see the module docs).
#[derive(Clone, Debug)]
pub struct Attempt {
    /// The shards still to try, in order (their indices).
    order: Vec<usize>,
    next: usize,
    /// The shards seen full (tried, or known): when each may free (µs; tried again then), by
    /// when this request fits there at the latest (µs), and which.
    seen: Vec<(u64, u64, usize)>,
    /// Tries left for shards that freed while the walk went on.
    retries: usize,
    /// The shard last handed out.
    last: usize,
    /// The room (units) each shard tried had when it denied, the latest per shard.
    rooms: Vec<(usize, u64)>,
}

impl Attempt {
    /// A walk over `n` shards from `start` at `now` (µs), trying at most `max_tries` of them
    /// in order; `known(i)` is what the instance knows of shard `i` if it saw it full.
    /// `Err(fits_by)`: every shard is known full, deny at once; the request fits by then at the
    /// latest (the earliest of the shards' [`KnownFull::fits_by`]).
    pub fn new(
        n: usize,
        start: usize,
        max_tries: usize,
        now: u64,
        known: impl Fn(usize) -> Option<KnownFull>,
    ) -> Result<Self, u64> {
        let mut seen = Vec::new();
        let mut order = Vec::with_capacity(n);
        for k in 0..n {
            let i = (start + k) % n;
            match known(i).filter(|k| k.until > now) {
                Some(k) => seen.push((k.until, k.fits_by.max(k.until), i)),
                None if order.len() < max_tries => order.push(i),
                None => {}
            }
        }
        if order.is_empty() {
            return Err(seen.iter().map(|&(_, fits, _)| fits).min().unwrap_or(now));
        }
        Ok(Self {
            retries: order.len(),
            order,
            next: 0,
            seen,
            last: usize::MAX,
            rooms: Vec::new(),
        })
    }

    /// The next shard to try at `now` (µs), if any is left: the shards in order, then (a
    /// walk takes a round trip per shard) the shard seen full that frees first, again, if it
    /// has freed by `now`, and so on, at most as many extra tries as the walk had shards.
    pub fn next_shard(&mut self, now: u64) -> Option<usize> {
        let i = match self.order.get(self.next) {
            Some(&i) => {
                self.next += 1;
                i
            }
            None => {
                let k = (0..self.seen.len()).min_by_key(|&k| self.seen[k].0)?;
                if self.seen[k].0 > now || self.retries == 0 {
                    return None;
                }
                self.retries -= 1;
                // Tried again: what it says next replaces what it said.
                self.seen.swap_remove(k).2
            }
        };
        self.last = i;
        Some(i)
    }

    /// The shard just tried denied: it had `room` units (less than the cost), and a request
    /// of this cost fits there at `fits_at` (µs).
    pub fn denied(&mut self, fits_at: u64, room: u64) {
        self.seen.push((fits_at, fits_at, self.last));
        let last = self.last;
        self.rooms.retain(|&(i, _)| i != last);
        self.rooms.push((last, room));
    }

    /// When every shard denied a request of `cost` whole but their rooms together fit it: the
    /// parts to reserve (shard, units), the largest rooms first, each to be recorded in its
    /// shard by that shard's script (and all removed again if one part is denied). `None`
    /// when the rooms seen do not add up to `cost` (or one shard alone had room: then it
    /// should have admitted, and the rooms are stale).
    pub fn split(&self, cost: u64) -> Option<Vec<(usize, u64)>> {
        let mut rooms: Vec<(usize, u64)> =
            self.rooms.iter().copied().filter(|&(_, r)| r > 0).collect();
        rooms.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut left = cost;
        let mut parts = Vec::new();
        for (i, room) in rooms {
            if left == 0 {
                break;
            }
            let take = room.min(left);
            parts.push((i, take));
            left -= take;
        }
        (left == 0 && parts.len() > 1).then_some(parts)
    }

    /// The earliest moment (µs) by which this request fits in a shard seen full (tried or
    /// known), if any was: a wait that is never shorter than the truth (a split over several
    /// shards may fit it sooner).
    pub fn earliest(&self) -> Option<u64> {
        self.seen.iter().map(|&(_, fits, _)| fits).min()
    }
}

/// Until when (µs) a shard that denied stays full for requests of every cost: while it held
/// its whole `cap` (`count >= cap`), only its oldest entry (at `oldest`) leaving can change it.
/// `None` when it had room left (just not enough for this request's cost).
pub fn full_until(count: u64, cap: u64, oldest: Option<u64>, window: u64) -> Option<u64> {
    let oldest = oldest.filter(|_| count >= cap)?;
    Some(oldest.saturating_add(window).saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_and_slots_are_redis_cluster_s() {
        // The test vectors of the Redis Cluster specification.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("user1000"));
        assert_eq!(slot("foo{}{bar}"), crc16(b"foo{}{bar}") % SLOTS);
    }

    #[test]
    fn caps_sum_to_the_limit_and_tags_spread_over_the_slot_ranges() {
        for n in 1..=64 {
            let layout = ShardLayout::new(n);
            for limit in [1, 2, 3, 7, 63, 64, 65, 1_000, 10_007] {
                let used = layout.used(limit);
                let caps: Vec<u64> = (0..used).map(|i| layout.cap(limit, i)).collect();
                assert_eq!(caps.iter().sum::<u64>(), limit, "n {n} limit {limit}");
                assert!(caps.iter().all(|&c| c >= 1));
            }
            let range = usize::from(SLOTS) / n;
            for i in 0..n {
                let s = usize::from(slot(&format!("rate_limit:global:{{{}}}", layout.tag(i))));
                let middle = (2 * i + 1) * usize::from(SLOTS) / (2 * n);
                assert!(s.abs_diff(middle) <= (range / 16).max(1), "n {n} shard {i}");
            }
        }
    }

    #[test]
    fn an_attempt_skips_known_full_shards_and_denies_when_all_are() {
        let full = |i: usize| {
            (i == 1 || i == 2).then_some(KnownFull {
                until: 500,
                fits_by: 500,
            })
        };
        let mut a = Attempt::new(4, 1, 4, 100, full).unwrap();
        assert_eq!(a.earliest(), Some(500));
        assert_eq!(a.next_shard(100), Some(3));
        a.denied(300, 0);
        assert_eq!(a.next_shard(101), Some(0));
        a.denied(400, 0);
        assert_eq!(a.next_shard(102), None, "nothing has freed yet");
        assert_eq!(a.earliest(), Some(300));
        // Shard 3 frees while the walk goes on: tried again, once per shard of the walk.
        assert_eq!(a.next_shard(300), Some(3));
        a.denied(350, 0);
        assert_eq!(a.next_shard(349), None);
        assert_eq!(a.next_shard(350), Some(3));
        a.denied(360, 0);
        assert_eq!(a.next_shard(360), None, "two extra tries for a walk of two");
        // Known full until a moment already past: tried again.
        assert_eq!(
            Attempt::new(4, 1, 4, 500, full).unwrap().order,
            [1, 2, 3, 0]
        );
        let known = |until: u64, fits_by: u64| Some(KnownFull { until, fits_by });
        let all = Attempt::new(3, 0, 3, 100, |i| known(200 + i as u64, 200 + i as u64));
        assert_eq!(all.unwrap_err(), 200);
        // The wait is by when the request fits, not when a shard may first change (a cost
        // above 1 may need more than its oldest entry gone).
        let all = Attempt::new(3, 0, 3, 100, |i| known(200 + i as u64, 900 - i as u64));
        assert_eq!(all.unwrap_err(), 898);
        let mut a = Attempt::new(2, 0, 2, 100, |i| {
            (i == 0).then_some(KnownFull {
                until: 200,
                fits_by: 700,
            })
        })
        .unwrap();
        assert_eq!(a.next_shard(100), Some(1));
        a.denied(800, 0);
        assert_eq!(a.earliest(), Some(700));
        assert_eq!(
            a.next_shard(200),
            Some(0),
            "tried again once it may have changed"
        );
        assert_eq!(Attempt::new(4, 2, 1, 0, |_| None).unwrap().order, [2]);
    }

    #[test]
    fn a_cost_no_shard_fits_whole_is_split_over_the_largest_rooms() {
        let mut a = Attempt::new(4, 0, 4, 0, |_| None::<KnownFull>).unwrap();
        for room in [1, 3, 0, 2] {
            a.next_shard(0);
            a.denied(10, room);
        }
        assert_eq!(a.split(4), Some(vec![(1, 3), (3, 1)]));
        assert_eq!(a.split(6), Some(vec![(1, 3), (3, 2), (0, 1)]));
        assert_eq!(a.split(7), None, "6 units free in all");
        assert_eq!(a.split(3), None, "one shard had room: stale, no split");
        // A shard tried again (shard 0, the first of those freeing at 10) counts with its
        // latest room.
        assert_eq!(a.next_shard(10), Some(0));
        a.denied(20, 0);
        assert_eq!(a.split(6), None, "shard 0's room is gone");
        assert_eq!(a.split(5), Some(vec![(1, 3), (3, 2)]));
    }

    #[test]
    fn a_shard_is_full_until_its_oldest_leaves_only_if_it_held_its_cap() {
        assert_eq!(full_until(5, 5, Some(10), 100), Some(111));
        assert_eq!(full_until(4, 5, Some(10), 100), None);
        assert_eq!(full_until(5, 5, None, 100), None);
        let r = Rotation::new(7);
        assert_eq!((r.start(4), r.start(4), r.start(4)), (3, 0, 1));
    }
}
