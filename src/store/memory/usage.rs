//! Usage without recording: each tier's live units and oldest entry, read under one lock at
//! a time, trimming nothing and inserting no key.

use super::{MemoryStore, StoreRequest};
use crate::clock::saturating_micros;
use crate::store::TierUsage;

impl MemoryStore {
    /// What each tier of `req` holds at `req.now`, in its order. A key never seen reads as
    /// empty and stays untracked; expired entries are skipped, not removed.
    pub(crate) fn usage_sync(&self, req: &StoreRequest<'_>) -> Vec<TierUsage> {
        let now = saturating_micros(req.now);
        let window = saturating_micros(req.window);
        let cutoff = now.saturating_sub(window);
        req.tiers
            .iter()
            .map(|t| {
                let (used, oldest) = self
                    .with_log(t.tier, t.id, |log| log.live(cutoff))
                    .unwrap_or((0, None));
                TierUsage::new(t, used, oldest, now, window)
            })
            .collect()
    }
}
