//! Operators' blocks in Redis: one string key with an expiry (PX) per blocked key, beside the
//! tier's sorted set and in the same cluster slot, which the script reads in the check's one
//! round trip (see `script.lua`).
//!
//! The block key of a tier key `K` is `{K}#block`: its hash tag is `K` itself, which has no
//! braces (the config refuses them in the prefix), so on a cluster it lives in `K`'s slot. (A
//! store built by hand with a prefix that holds a hash tag gets `K#block`: the prefix's tag then
//! places both.) No tier key can take either name: encoded ids hold no braces, and `#` only as
//! the first character of a hashed id.
//!
//! A block of a user's per-route bucket (`<user>@<route>`) is also listed in the set
//! `{K}#buckets` of the user's own key `K`, so that an unblock ends it whatever routes the
//! configuration names by then. The set expires with the longest block it lists.

use std::time::Duration;

use fred::types::Value;

use super::super::StoreError;
use super::{fred_error, invalidation, timed_out, Connections, RedisStore};
use crate::tier::Tier;

/// `{key}#suffix` (or `key#suffix` when `key` already holds a hash tag): in `key`'s slot.
pub(super) fn companion(key: &str, suffix: &str) -> String {
    if key.contains('{') {
        format!("{key}#{suffix}")
    } else {
        format!("{{{key}}}#{suffix}")
    }
}

/// The user part a per-route bucket belongs to: `alice` for `alice@/login`, `@192.0.2.1` for
/// `@192.0.2.1@/login`; `None` for a part that is no bucket. (Encoded parts hold `@` only as an
/// address's first character, and encoded routes none: the last `@` splits.)
fn bucket_owner(id: &str) -> Option<&str> {
    id.rsplit_once('@')
        .map(|(owner, _)| owner)
        .filter(|o| !o.is_empty())
}

/// A duration as Redis's PX takes it: whole milliseconds rounded up, so that a block never
/// ends before the time asked.
fn px(duration: Duration) -> i64 {
    let ms = duration.as_nanos().div_ceil(1_000_000).max(1);
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// The block key beside `tier`'s tier key `key` (as [`RedisStore::key`] makes it); `None` for
/// the global tier (never blocked). The check builds it from the key it already has.
pub(super) fn block_key_of(tier: Tier, key: &str) -> Option<String> {
    (tier != Tier::Global).then(|| companion(key, "block"))
}

impl RedisStore {
    /// The block key of `tier`'s key part `id`; `None` for the global tier (never blocked).
    pub fn block_key(&self, tier: Tier, id: &str) -> Option<String> {
        block_key_of(tier, &self.key(tier, id))
    }

    /// `SET <block key> 1 PX <duration>` (and, for a user's per-route bucket, its place in the
    /// user's list of blocked buckets); then every instance forgets its cached denials (of
    /// every key: a route's block refuses requests whose first tier is a user's), so that its
    /// next check that asks Redis meets the block.
    pub(super) async fn set_block(
        &self,
        tier: Tier,
        id: &str,
        duration: Duration,
    ) -> Result<(), StoreError> {
        let Some(block) = self.block_key(tier, id) else {
            return Err(StoreError::new("the global tier cannot be blocked"));
        };
        let ms = px(duration);
        let owner = bucket_owner(id).filter(|_| tier == Tier::User);
        let buckets = owner.map(|o| companion(&self.key(Tier::User, o), "buckets"));
        self.within_timeout(async {
            let inner = &*self.inner;
            if let Some(buckets) = &buckets {
                list_bucket(inner, buckets, &block, ms).await?;
            }
            let px = ["1".to_owned(), "PX".to_owned(), ms.to_string()];
            let set: Result<Value, _> = inner.on_key("SET", &block, &px).await;
            set.map_err(|e| fred_error("SET of a block failed", e))?;
            self.inner.denials.forget_all();
            let every = invalidation::EVERY_KEY.to_owned();
            invalidation::publish(&inner.client, &self.inner.prefix, every)
                .await
                .map_err(|e| fred_error("PUBLISH failed", e))
        })
        .await
    }

    /// `DEL` of the block key and of every per-route bucket block listed for it.
    pub(super) async fn del_block(&self, tier: Tier, id: &str) -> Result<(), StoreError> {
        let Some(block) = self.block_key(tier, id) else {
            return Ok(());
        };
        let buckets = companion(&self.key(tier, id), "buckets");
        self.within_timeout(async {
            let inner = &*self.inner;
            let failed = |e| fred_error("DEL of a block failed", e);
            let listed: Vec<String> = if tier == Tier::User {
                inner
                    .on_key("SMEMBERS", &buckets, &[])
                    .await
                    .map_err(failed)?
            } else {
                Vec::new()
            };
            // One key at a time: on a cluster they live in different slots.
            for key in listed.iter().chain([&block, &buckets]) {
                let _: i64 = inner.on_key("DEL", key, &[]).await.map_err(failed)?;
            }
            Ok(())
        })
        .await
    }

    /// `call` once connected, bounded by the command timeout. On a timeout the commands may
    /// still run later: the error says so (a block or an unblock is safe to repeat).
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

/// Adds `block` to the set `buckets`, which then lives at least `ms` more.
async fn list_bucket(
    inner: &Connections,
    buckets: &str,
    block: &str,
    ms: i64,
) -> Result<(), StoreError> {
    let failed = |e| fred_error("listing a bucket's block failed", e);
    let _: i64 = (inner.on_key("SADD", buckets, &[block.to_owned()]).await).map_err(failed)?;
    let left: i64 = inner.on_key("PTTL", buckets, &[]).await.map_err(failed)?;
    if left < ms {
        let _: i64 = (inner.on_key("PEXPIRE", buckets, &[ms.to_string()]).await).map_err(failed)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_belong_to_their_user_or_address() {
        assert_eq!(bucket_owner("alice@/login"), Some("alice"));
        assert_eq!(bucket_owner("@192.0.2.1@/login"), Some("@192.0.2.1"));
        assert_eq!(bucket_owner("@2001:db8::"), None);
        assert_eq!(bucket_owner("alice"), None);
    }

    #[test]
    fn durations_round_up_to_whole_milliseconds() {
        assert_eq!(px(Duration::from_micros(1)), 1);
        assert_eq!(px(Duration::from_micros(1_001)), 2);
        assert_eq!(px(Duration::from_secs(3)), 3_000);
        assert_eq!(px(Duration::MAX), i64::MAX);
    }
}
