//! [`LogMap`]: one tier's logs by key, in shards, each a hash table behind its own lock.
//!
//! A check hashes its key once, locks the key's shard and finds the log in the shard's table
//! with that hash; it holds the shard's guard, and borrows the log from it, until it has
//! decided. A key not in the table is not inserted by the lookup: the check decides on an
//! empty log and inserts the key only if it records the request (a denied request leaves no
//! key). The sweep and the readers take one shard at a time.

use hashbrown::HashTable;
use parking_lot::{Mutex, MutexGuard};

use super::log::Log;
use super::padded::Padded;

/// A tracked key and its log, side by side in the table's slot (72 bytes).
type Entry = (Key, Log);

/// The longest key kept in the table's slot itself, beside its log (most user ids and routes):
/// a lookup then reads no other memory for the key, which matters when users are many and
/// every lookup misses the cache.
const INLINE: usize = 22;

/// A tracked key's bytes: in the slot when short, else on the heap.
enum Key {
    Inline(u8, [u8; INLINE]),
    Heap(Box<[u8]>),
}

impl Key {
    fn new(id: &str) -> Self {
        let bytes = id.as_bytes();
        match u8::try_from(bytes.len()) {
            Ok(len) if bytes.len() <= INLINE => {
                let mut inline = [0; INLINE];
                inline[..bytes.len()].copy_from_slice(bytes);
                Self::Inline(len, inline)
            }
            _ => Self::Heap(Box::from(bytes)),
        }
    }

    #[inline]
    fn bytes(&self) -> &[u8] {
        match self {
            Self::Inline(len, bytes) => &bytes[..usize::from(*len).min(INLINE)],
            Self::Heap(bytes) => bytes,
        }
    }

    /// Whether this is `id`'s key.
    #[inline]
    fn is(&self, id: &str) -> bool {
        self.bytes() == id.as_bytes()
    }
}

/// A key's hash: its bytes through `hasher` (whose hash folds their length in), inlined
/// into the check (`hash_one` is a call, and hashes the length once more first).
#[inline(always)]
fn hash_of(hasher: &ahash::RandomState, bytes: &[u8]) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut state = hasher.build_hasher();
    state.write(bytes);
    state.finish()
}

/// One shard, on cache lines of its own: checks of keys in neighbouring shards, on other
/// cores, do not contend for a line.
type Shard = Padded<Mutex<HashTable<Entry>>>;

/// One tier's logs by key (the user tier's, or the endpoint tier's).
pub(super) struct LogMap {
    hasher: ahash::RandomState,
    shards: Box<[Shard]>,
    /// A hash's shard is its bits below the top 7 (which the tables use within a shard),
    /// shifted right by this.
    shift: u32,
}

/// A key's shard, locked, with the key's hash (see [`LogMap::lock`]).
pub(super) struct Locked<'a> {
    table: MutexGuard<'a, HashTable<Entry>>,
    hasher: &'a ahash::RandomState,
    hash: u64,
}

impl LogMap {
    /// An empty map of `shards` shards (a power of two).
    pub(super) fn new(shards: usize) -> Self {
        debug_assert!(shards.is_power_of_two() && shards >= 2);
        Self {
            hasher: ahash::RandomState::new(),
            shards: (0..shards).map(|_| Shard::default()).collect(),
            shift: 64 - shards.trailing_zeros(),
        }
    }

    #[inline]
    fn shard_of(&self, hash: u64) -> &Mutex<HashTable<Entry>> {
        &self.shards[((hash << 7) >> self.shift) as usize].0
    }

    /// Locks `id`'s shard (the key need not be tracked).
    #[inline(always)]
    pub(super) fn lock(&self, id: &str) -> Locked<'_> {
        // As bytes, as a table that grows rehashes its keys.
        let hash = hash_of(&self.hasher, id.as_bytes());
        Locked {
            table: self.shard_of(hash).lock(),
            hasher: &self.hasher,
            hash,
        }
    }

    /// `f` of `id`'s log, if the key is tracked.
    pub(super) fn with<R>(&self, id: &str, f: impl FnOnce(&Log) -> R) -> Option<R> {
        let mut locked = self.lock(id);
        locked.find(id).map(|log| f(log))
    }

    /// Forgets `id`; whether it was tracked.
    pub(super) fn remove(&self, id: &str) -> bool {
        let mut locked = self.lock(id);
        let hash = locked.hash;
        match locked.table.find_entry(hash, |(key, _)| key.is(id)) {
            Ok(entry) => {
                entry.remove();
                true
            }
            Err(_) => false,
        }
    }

    /// Keeps the keys whose logs `keep` says so of, one shard at a time; how many went.
    pub(super) fn retain(&self, mut keep: impl FnMut(&mut Log) -> bool) -> usize {
        let mut removed = 0;
        for shard in &self.shards {
            let mut table = shard.0.lock();
            let before = table.len();
            table.retain(|(_, log)| keep(log));
            removed += before - table.len();
        }
        removed
    }

    /// How many keys are tracked.
    pub(super) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().len()).sum()
    }

    /// Gives memory back where a shard's table holds far fewer keys than it has room for
    /// (after a flood of keys went idle).
    pub(super) fn shrink(&self) {
        for shard in &self.shards {
            let mut table = shard.0.lock();
            if table.capacity() > 64 && table.capacity() > 4 * table.len() {
                table.shrink_to_fit(|(key, _)| hash_of(&self.hasher, key.bytes()));
            }
        }
    }
}

impl std::fmt::Debug for LogMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogMap")
            .field("shards", &self.shards.len())
            .field("keys", &self.len())
            .finish()
    }
}

impl Locked<'_> {
    /// The log of `id` (the key this shard was locked for), if it is tracked.
    #[inline]
    pub(super) fn find(&mut self, id: &str) -> Option<&mut Log> {
        self.table
            .find_mut(self.hash, |(key, _)| key.is(id))
            .map(|(_, log)| log)
    }

    /// Tracks `id` (not tracked yet: [`find`](Self::find) said so under this lock) with `log`.
    #[cold]
    pub(super) fn insert(&mut self, id: &str, log: Log) {
        let hasher = self.hasher;
        self.table
            .insert_unique(self.hash, (Key::new(id), log), |(key, _)| {
                hash_of(hasher, key.bytes())
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_where_they_were_inserted_and_gone_once_removed() {
        let map = LogMap::new(8);
        let mut next = crate::test_rng::seeded(11);
        let keys: Vec<String> = (0..2_000)
            .map(|i| format!("k{i}-{}", next() % 97))
            .collect();
        for (i, key) in keys.iter().enumerate() {
            let mut locked = map.lock(key);
            assert!(locked.find(key).is_none());
            let mut log = Log::default();
            log.record_at_least(i as u64, 1);
            locked.insert(key, log);
        }
        assert_eq!(map.len(), keys.len());
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(map.with(key, |log| log.oldest()), Some(Some(i as u64)));
        }
        for key in keys.iter().step_by(2) {
            assert!(map.remove(key));
            assert!(!map.remove(key));
        }
        assert_eq!(map.len(), keys.len() / 2);
        let gone = map.retain(|log| log.oldest().is_some_and(|t| t % 4 == 1));
        assert_eq!(gone + map.len(), keys.len() / 2);
        map.shrink();
        for (i, key) in keys.iter().enumerate() {
            let expected = (i % 4 == 1).then_some(Some(i as u64));
            assert_eq!(map.with(key, |log| log.oldest()), expected, "{key}");
        }
    }

    #[test]
    fn keys_spread_over_the_shards() {
        let map = LogMap::new(64);
        for i in 0..64_000 {
            let key = format!("user-{i}");
            let mut locked = map.lock(&key);
            locked.insert(&key, Log::default());
        }
        for shard in map.shards.iter() {
            let n = shard.0.lock().len();
            assert!((700..1300).contains(&n), "a shard holds {n} of 64,000 keys");
        }
    }
}
