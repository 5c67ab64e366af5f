//! Usage without recording (`usage.lua`): one read-only script over every tier, or on a
//! cluster one per tier, each on the node owning its key.

use std::sync::LazyLock;

use fred::types::scripts::Script;
use fred::types::Value;

use super::super::{StoreError, StoreRequest, TierUsage};
use super::ask::Redirected;
use super::{fred_error, script, timed_out, RedisStore};
use crate::clock::saturating_micros;

/// The read-only script, run with EVALSHA (and loaded on NOSCRIPT).
static USAGE: LazyLock<Script> = LazyLock::new(|| Script::from_lua(include_str!("usage.lua")));

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
        let groups: Vec<&[_]> = if self.inner.clustered {
            req.tiers.chunks(1).collect()
        } else {
            vec![req.tiers]
        };
        let mut usage = Vec::with_capacity(req.tiers.len());
        // On a cluster each node may read its own clock: every tier's oldest entry is moved
        // onto the first reply's `now`, so the answer speaks of one moment.
        let mut first_now = None;
        for tiers in groups {
            let keys: Vec<String> = tiers.iter().map(|t| self.key(t.tier, t.id)).collect();
            let inner = &*self.inner;
            let send = || USAGE.evalsha_with_reload(&inner.client, keys.clone(), args.clone());
            let first = send().await;
            let command = Redirected::Script {
                sha: USAGE.sha1(),
                args: &args,
            };
            let reply: Vec<Value> = (inner.follow(&keys[0], command, first, send).await)
                .map_err(|e| fred_error("rate limit usage script failed", e))?;
            let (reply_now, found) = parse(&reply, tiers.len())?;
            let base = *first_now.get_or_insert(reply_now);
            for (t, (used, oldest)) in tiers.iter().zip(found) {
                let oldest = oldest.map(|o| (o + base).saturating_sub(reply_now));
                usage.push(TierUsage::new(t, used, oldest, base, window));
            }
        }
        Ok(usage)
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
