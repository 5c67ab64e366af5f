//! Usage without recording (`usage.lua`): one read-only script over every tier, or on a
//! cluster one per key, each on the node owning it (the global tier's shard keys summed).

use std::sync::LazyLock;

use fred::types::scripts::Script;
use fred::types::Value;

use super::super::{StoreError, StoreRequest, TierCheck, TierUsage};
use super::ask::Redirected;
use super::{fred_error, script, timed_out, RedisStore};
use crate::clock::saturating_micros;
use crate::tier::Tier;

/// The read-only script, run with EVALSHA (and loaded on NOSCRIPT).
static USAGE: LazyLock<Script> = LazyLock::new(|| Script::from_lua(USAGE_SOURCE));

const USAGE_SOURCE: &str = include_str!("usage.lua");

impl RedisStore {
    /// What each tier of `req` holds, within the command timeout.
    pub(super) async fn usage_timed(
        &self,
        req: &StoreRequest<'_>,
    ) -> Result<Vec<TierUsage>, StoreError> {
        let timeout = self.inner.command_timeout;
        tokio::time::timeout(timeout, self.usage_inner(req))
            .await
            .unwrap_or_else(|_| Err(timed_out(timeout)))
    }

    async fn usage_inner(&self, req: &StoreRequest<'_>) -> Result<Vec<TierUsage>, StoreError> {
        if req.tiers.is_empty() {
            return Ok(Vec::new());
        }
        if !self.connected().await {
            return Err(StoreError::new("Redis is unreachable"));
        }
        let now = script::now_arg(self.inner.time_source, req);
        let args = vec![now, saturating_micros(req.window).to_string()];
        let window = saturating_micros(req.window);
        // Each tier's keys: its one key, or on a cluster with global shards the shard keys the
        // global tier's checks use under this limit (its units are theirs, summed).
        let keys_of = |t: &TierCheck<'_>| match (&self.inner.global, t.tier) {
            (Some(shards), Tier::Global) => shards.used_keys(t.limit).to_vec(),
            _ => vec![self.key(t.tier, t.id)],
        };
        // One call over every key on a single node; on a cluster one per key, on its node.
        let calls: Vec<Vec<(usize, String)>> = if self.inner.clustered {
            (req.tiers.iter().enumerate())
                .flat_map(|(i, t)| keys_of(t).into_iter().map(move |k| vec![(i, k)]))
                .collect()
        } else {
            vec![(req.tiers.iter().enumerate())
                .flat_map(|(i, t)| keys_of(t).into_iter().map(move |k| (i, k)))
                .collect()]
        };
        let mut found: Vec<(u64, Option<u64>)> = vec![(0, None); req.tiers.len()];
        // On a cluster each node may read its own clock: every key's oldest entry is moved
        // onto the first reply's `now`, so the answer speaks of one moment.
        let mut first_now = None;
        let inner = &*self.inner;
        for call in calls {
            let keys: Vec<String> = call.iter().map(|(_, k)| k.clone()).collect();
            let send = || USAGE.evalsha_with_reload(&inner.client, keys.clone(), args.clone());
            let first = send().await;
            let command = Redirected::Script {
                sha: USAGE.sha1(),
                lua: USAGE_SOURCE,
                args: &args,
            };
            let reply: Vec<Value> = (inner.follow(&keys[0], command, first, send).await)
                .map_err(|e| fred_error("rate limit usage script failed", e))?;
            let (reply_now, per_key) = parse(&reply, keys.len())?;
            let base = *first_now.get_or_insert(reply_now);
            for ((i, _), (used, oldest)) in call.iter().zip(per_key) {
                let oldest = oldest.map(|o| (o + base).saturating_sub(reply_now));
                let (sum, first) = &mut found[*i];
                *sum = sum.saturating_add(used);
                *first = match (*first, oldest) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
        }
        let base = first_now.unwrap_or_default();
        Ok((req.tiers.iter().zip(found))
            .map(|(t, (used, oldest))| TierUsage::new(t, used, oldest, base, window))
            .collect())
    }
}

/// One key's units live and oldest live entry (µs), as the script found them.
type Found = (u64, Option<u64>);

/// Reads `{now, used_1, oldest_1, ...}` (see `usage.lua`) for `tiers` tiers.
fn parse(reply: &[Value], tiers: usize) -> Result<(u64, Vec<Found>), StoreError> {
    let bad = || StoreError::new(format!("unexpected reply from the usage script: {reply:?}"));
    let int = |v: &Value| v.as_i64().ok_or_else(bad);
    if reply.len() != 1 + 2 * tiers {
        return Err(bad());
    }
    let now = u64::try_from(int(&reply[0])?).map_err(|_| bad())?;
    let found = reply[1..]
        .chunks(2)
        .map(|f| {
            let used = u64::try_from(int(&f[0])?).map_err(|_| bad())?;
            Ok((used, u64::try_from(int(&f[1])?).ok()))
        })
        .collect::<Result<_, StoreError>>()?;
    Ok((now, found))
}
