//! Operators' blocks in Redis: one string key with an expiry (PX) per blocked key, beside the
//! tier's sorted set and in the same cluster slot, which the script reads in the check's one
//! round trip (see `script.lua`).
//!
//! The block key of a tier key `K` is `{K}#block`: its hash tag is `K` itself, which has no
//! braces (the config refuses them in the prefix), so on a cluster it lives in `K`'s slot. (A
//! store built by hand with a prefix that holds a hash tag gets `K#block`: the prefix's tag then
//! places both.) No tier key can take either name: encoded ids hold no braces, and `#` only as
//! the first character of a hashed id.

use std::time::Duration;

use fred::prelude::KeysInterface;
use fred::types::Expiration;

use super::super::StoreError;
use super::{fred_error, invalidation, timed_out, RedisStore};
use crate::tier::Tier;

impl RedisStore {
    /// The block key of `tier`'s key part `id`; `None` for the global tier (never blocked).
    pub fn block_key(&self, tier: Tier, id: &str) -> Option<String> {
        if tier == Tier::Global {
            return None;
        }
        let key = self.key(tier, id);
        Some(if key.contains('{') {
            format!("{key}#block")
        } else {
            format!("{{{key}}}#block")
        })
    }

    /// `SET <block key> 1 PX <duration>`, then every instance forgets its cached denials (of
    /// every key: a route's block refuses requests whose first tier is a user's), so that its
    /// next check asks Redis and meets the block.
    pub(super) async fn set_block(
        &self,
        tier: Tier,
        id: &str,
        duration: Duration,
    ) -> Result<(), StoreError> {
        let Some(block) = self.block_key(tier, id) else {
            return Err(StoreError::new("the global tier cannot be blocked"));
        };
        let ms = i64::try_from(duration.as_millis().max(1)).unwrap_or(i64::MAX);
        self.within_timeout(async {
            let client = &self.inner.client;
            let set: Result<(), _> = client
                .set(block.as_str(), "1", Some(Expiration::PX(ms)), None, false)
                .await;
            set.map_err(|e| fred_error("SET of a block failed", e))?;
            self.inner.denials.forget_all();
            let every = invalidation::EVERY_KEY.to_owned();
            invalidation::publish(client, &self.inner.prefix, every)
                .await
                .map_err(|e| fred_error("PUBLISH failed", e))
        })
        .await
    }

    /// `DEL <block key>`.
    pub(super) async fn del_block(&self, tier: Tier, id: &str) -> Result<(), StoreError> {
        let Some(block) = self.block_key(tier, id) else {
            return Ok(());
        };
        self.within_timeout(async {
            let deleted: Result<i64, _> = self.inner.client.del(block.as_str()).await;
            deleted
                .map(|_| ())
                .map_err(|e| fred_error("DEL of a block failed", e))
        })
        .await
    }

    /// `call` once connected, bounded by the command timeout.
    async fn within_timeout(
        &self,
        call: impl std::future::Future<Output = Result<(), StoreError>>,
    ) -> Result<(), StoreError> {
        let timeout = self.inner.command_timeout;
        let connected_then_call = async {
            if !self.connected().await {
                return Err(StoreError::new("Redis is unreachable"));
            }
            call.await
        };
        tokio::time::timeout(timeout, connected_then_call)
            .await
            .unwrap_or_else(|_| Err(timed_out(timeout)))
    }
}
