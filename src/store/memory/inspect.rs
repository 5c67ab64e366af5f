//! Looking into a [`MemoryStore`] without deciding anything: what tests and operators read.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::log::Log;
use super::MemoryStore;
use crate::tier::Tier;

impl MemoryStore {
    /// How many user and endpoint keys are tracked now.
    pub fn tracked_keys(&self) -> usize {
        self.inner.tracked.load(Ordering::Acquire)
    }

    /// How many requests one key's log holds now (expired ones included until the next check
    /// of that key trims them): a request is one, whatever its cost. The global tier's id is
    /// ignored.
    pub fn entries(&self, tier: Tier, id: &str) -> usize {
        self.with_log(tier, id, Log::requests).unwrap_or(0)
    }

    /// The oldest entry of one key's log, as a time since the epoch.
    pub fn oldest(&self, tier: Tier, id: &str) -> Option<Duration> {
        self.with_log(tier, id, Log::oldest)
            .flatten()
            .map(Duration::from_micros)
    }

    /// Forgets every key.
    pub fn clear(&self) {
        for map in [&self.inner.users, &self.inner.endpoints] {
            let removed = map.retain(|_| false);
            self.inner.tracked.fetch_sub(removed, Ordering::AcqRel);
        }
        self.inner.global.lock().clear();
    }

    pub(super) fn with_log<R>(&self, tier: Tier, id: &str, f: impl FnOnce(&Log) -> R) -> Option<R> {
        match tier {
            Tier::Global => Some(f(&self.inner.global.lock())),
            Tier::User => self.inner.users.with(id, f),
            Tier::Endpoint => self.inner.endpoints.with(id, f),
        }
    }

    /// How many blocks the store keeps now (an ended block is dropped by the first check or
    /// sweep that meets it).
    pub fn blocked_keys(&self) -> usize {
        self.inner.blocks.len()
    }
}
