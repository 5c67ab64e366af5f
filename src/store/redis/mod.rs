//! The Redis store: one EVALSHA per check (shared with the checks waiting at the same moment),
//! every tier decided atomically inside Redis.
//!
//! - `mod.rs`: [`RedisStore`], its [`Store`] implementation and the local denial cache's use;
//! - `connection.rs`: the fred client, the first connection, its state, shutdown;
//! - `batch.rs`: the task that sends the checks waiting at one moment as one EVALSHA;
//! - `script.rs` + `script.lua`: the script and its arguments;
//! - `reply.rs`: the script's reply read (one `reply::Reply`) and concluded through the algorithm;
//! - `cluster.rs`: Redis Cluster, one script per tier with reserve-and-rollback;
//! - `ask.rs`: the workaround for fred not following ASK redirections;
//! - `blocks.rs`: operators' blocks, keys beside the tiers' that the script reads;
//! - `invalidation.rs`: the pub/sub channel on which resets reach every instance;
//! - `denial_cache.rs`: denials answered locally; `tls.rs`: TLS (feature `tls`).

use std::fmt;
use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use fred::prelude::{Client, ClientLike, Error as FredError, EventInterface};
use fred::types::scripts::Script;
use tokio::sync::watch;

use self::ask::AskClients;
use self::batch::Batcher;
use self::connection::Conn;
use self::denial_cache::DenialCache;
use self::reply::{blocked, check_reply, conclude, Reply};
use super::{Backend, Store, StoreError, StoreOutcome, StoreRequest};
use crate::clock::saturating_micros;
use crate::config::{RedisConfig, TimeSource};
use crate::connect_error::ConnectError;
use crate::tier::Tier;

mod ask;
mod batch;
mod blocks;
mod cluster;
mod connection;

mod denial_cache;
mod invalidation;
mod probe;
mod reply;
mod role;
mod rollback;
mod script;
mod sharded;
#[cfg(feature = "tls")]
mod tls;
mod usage;

/// Sliding logs in Redis sorted sets, shared by every app instance on the same Redis.
///
/// Each check is one EVALSHA of `src/store/redis/script.lua`, which trims, counts and, only if
/// every tier has room, records the request in every tier, atomically: two instances can never
/// both take the last slot. Checks that wait at the same moment share one EVALSHA, which decides
/// them one after the other, each as alone (see `batch.rs`). Each admitted request is one
/// member, unique in its key (its time, or a running total of costs: docs/REDIS.md), so requests
/// in the same microsecond from many instances never collapse into one entry. Every key gets a
/// PEXPIRE of one window (plus a millisecond) at each admission, so idle keys expire on their
/// own.
///
/// Once Redis has said that a request's first tier (usually the user) has no room at all,
/// repeats of that request (same key, same cost) are denied locally, with no round trip, until
/// the tier's oldest entry leaves the window: a flood from one user costs Redis nothing after
/// its first denial, and the `Retry-After` is the one Redis would give. The cache can only
/// deny, never admit, holds at most 65,536 keys, and forgets a key on every instance when any
/// instance resets it (Redis pub/sub; without the subscription there is no cache).
///
/// On Redis Cluster the tiers' keys live on different nodes: the script runs once per tier,
/// and a denial by a later tier removes the entries the earlier tiers recorded.
///
/// The store connects in the background as soon as it is made inside a tokio runtime (else at
/// its first check). Every call is bounded by the command timeout; any error or timeout is
/// returned as a [`StoreError`], and the [`FallbackStore`](super::FallbackStore) turns that into
/// the swap to memory.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Connections>,
}

/// fred's broadcast of connection errors, one receiver of it.
type ConnectionErrors =
    tokio::sync::broadcast::Receiver<(FredError, Option<fred::types::config::Server>)>;

/// What every clone of a [`RedisStore`] shares: the Redis clients (commands, the invalidation
/// listener, the ASK followers), their connection state and settings, and the denial cache.
struct Connections {
    client: Client,
    script: Script,
    /// Single node: the checks, sent to Redis in batches (see `batch`).
    batcher: Batcher,
    prefix: String,
    command_timeout: Duration,
    connect_timeout: Duration,
    time_source: TimeSource,
    clustered: bool,
    conn: watch::Sender<Conn>,
    started: AtomicBool,
    /// Denials Redis gave for tiers without room, answered locally (see `denial_cache`).
    denials: Arc<DenialCache>,
    /// On Redis's clock, the denial cache's time is this instant's age (see
    /// [`RedisStore::cache_now`]).
    cache_origin: Instant,
    /// The runtime the store started on, to close its connections when it is dropped, and
    /// the task listening for invalidations.
    runtime: OnceLock<tokio::runtime::Handle>,
    listener: std::sync::Mutex<Option<(Client, tokio::task::JoinHandle<()>)>>,
    /// The routing tasks of the clients that connected (the commands' and the listener's):
    /// closing the store aborts them, which ends a reconnection under way, even one in the
    /// middle of connecting (fred's `quit` alone does not reach that).
    routers: std::sync::Mutex<Vec<fred::types::ConnectHandle>>,
    /// The connections were closed (or are being closed).
    closed: AtomicBool,
    /// Why the first connection failed (set before `conn` turns `Failed`).
    start_error: OnceLock<ConnectError>,
    /// Whether the URL asks for TLS.
    tls: bool,
    /// fred's connection errors (a connection closed under it, a reconnection refused), and
    /// the last one read: only [`cause_of`](RedisStore::cause_of) asks.
    connection_errors: std::sync::Mutex<(ConnectionErrors, Option<FredError>)>,
    /// Cluster with `global_shards > 1` only: the global tier's shard keys (see `sharded`).
    global: Option<sharded::GlobalShards>,
    /// Cluster only: the connections that follow ASK redirections (see `ask`).
    ask_clients: AskClients,
    config: RedisConfig,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.inner.prefix)
            .field("connection", &*self.inner.conn.borrow())
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store on the Redis named by `config`, its keys under `prefix`. Starts connecting if
    /// called inside a tokio runtime; never blocks.
    pub fn new(prefix: &str, config: &RedisConfig) -> Self {
        let start_error = OnceLock::new();
        let (client, failed, clustered) = match connection::build_client(config, true) {
            Ok(client) => {
                let clustered = client.is_clustered();
                (client, false, clustered)
            }
            Err(error) => {
                tracing::debug!(%error, "cannot set up the Redis client");
                let _ = start_error.set(error);
                (Client::default(), true, false)
            }
        };
        let connection_errors = client.error_rx();
        let script = Script::from_lua(script::SOURCE);
        let store = Self {
            inner: Arc::new(Connections {
                batcher: Batcher::new(client.clone(), script.clone()),
                client,
                script,
                prefix: prefix.to_owned(),
                command_timeout: config.command_timeout,
                connect_timeout: config.connect_timeout,
                time_source: config.time_source,
                clustered,
                denials: Arc::new(DenialCache::default()),
                cache_origin: Instant::now(),
                runtime: OnceLock::new(),
                listener: std::sync::Mutex::new(None),
                routers: std::sync::Mutex::new(Vec::new()),
                closed: AtomicBool::new(false),
                ask_clients: AskClients::default(),
                global: clustered
                    .then(|| sharded::GlobalShards::new(prefix, config.global_shards))
                    .flatten(),
                config: config.clone(),
                conn: watch::Sender::new(if failed {
                    Conn::Failed
                } else {
                    Conn::Connecting
                }),
                started: AtomicBool::new(failed),
                start_error,
                tls: connection::uses_tls(config),
                connection_errors: std::sync::Mutex::new((connection_errors, None)),
            }),
        };
        store.start();
        store
    }

    /// The Redis key of one tier's key part (already encoded): `prefix:user:<id>`,
    /// `prefix:endpoint:<route>`, `prefix:global`.
    pub fn key(&self, tier: Tier, id: &str) -> String {
        match tier {
            Tier::Global => format!("{}:global", self.inner.prefix),
            _ => format!("{}:{}:{}", self.inner.prefix, tier.as_str(), id),
        }
    }

    /// The denial cache's time (µs) for `req`: the time its waits and `still`s are counted
    /// on. On the app's clock ([`TimeSource::App`]) that is the request's `now`, which the
    /// script is given. On Redis's, the limiter's clock says nothing of Redis's (a manual
    /// clock stands still, a system clock may be stepped by hours): the cache is timed by the
    /// store's own monotonic clock, which runs as Redis's does, and a remembered denial is
    /// placed between the moment its request was sent and the moment Redis answered (see
    /// [`DenialCache::remember_since`]), since the script read `TIME` in between.
    fn cache_now(&self, req: &StoreRequest<'_>) -> u64 {
        match self.inner.time_source {
            TimeSource::App => saturating_micros(req.now),
            TimeSource::Redis => saturating_micros(self.inner.cache_origin.elapsed()),
        }
    }

    /// Decides `req`: from the denial cache if it can, else by the script.
    async fn check_inner(&self, req: &StoreRequest<'_>) -> Result<StoreOutcome, StoreError> {
        let Some(first) = req.tiers.first() else {
            return Ok(StoreOutcome::nothing_to_count());
        };
        // (The script reads a check's tiers as one digit, and the keys by tier.)
        if req.tier_bits().is_none() {
            return Err(super::misordered());
        }
        if !self.connected().await {
            return Err(StoreError::new("Redis is unreachable"));
        }
        // Only the request's first tier is cached: its denial is then certain *and* it is the
        // tier Redis would name (no earlier tier can be full: there is none).
        let first_key = self.key(first.tier, first.id);
        let sent = self.cache_now(req);
        let denials = &self.inner.denials;
        let terms = denial_cache::Terms {
            cost: req.cost,
            limit: first.limit,
            shadow: first.shadow,
            window: saturating_micros(req.window),
            others: denials.others(&req.tiers[1..]),
        };
        if let Some(retry_after) = denials.get(&first_key, terms, sent) {
            return Ok(StoreOutcome::Denied {
                tier: first.tier,
                retry_after,
            });
        }
        let epoch = denials.epoch();
        let (outcome, still) = self.check_remote(req).await?;
        match outcome {
            StoreOutcome::Denied { tier, retry_after } if tier == first.tier => {
                let span = (sent, self.cache_now(req));
                denials.remember_since(epoch, first_key, terms, span, retry_after, still);
            }
            // Admitted under other terms (a new window may have trimmed for good): nothing
            // remembered of the request's keys still holds.
            StoreOutcome::Admitted { .. } => {
                denials.forget_admitted(&first_key);
                for t in &req.tiers[1..] {
                    denials.forget_admitted(&self.key(t.tier, t.id));
                }
            }
            _ => {}
        }
        Ok(outcome)
    }

    /// Asks Redis: one script over every tier, batched with the checks waiting at the same
    /// moment (see `batch`), or on a cluster one script per tier (see `cluster`), never
    /// batched: two checks' keys there live in different slots, even with one tier each. The
    /// outcome, and for a denial how long the denying tier cannot change (see
    /// `reply::conclude`).
    async fn check_remote(
        &self,
        req: &StoreRequest<'_>,
    ) -> Result<(StoreOutcome, Duration), StoreError> {
        let inner = &*self.inner;
        let now = script::now_arg(inner.time_source, req);
        if inner.clustered {
            return self.check_per_tier(req, &now).await;
        }
        let mut keys: Vec<String> = req.tiers.iter().map(|t| self.key(t.tier, t.id)).collect();
        // The tiers' block keys, after the tiers' keys (see `script.lua`), from those keys.
        let blocks: Vec<String> = (req.tiers.iter().zip(&keys))
            .filter_map(|(t, key)| blocks::block_key_of(t.tier, key))
            .collect();
        keys.extend(blocks);
        let args = script::args(req, &now, req.tiers, keys.len() - req.tiers.len());
        let reply = inner
            .batcher
            .check(keys, args)
            .await
            .map_err(|e| fred_error("rate limit script failed", e))?;
        let reply = Reply::parse(&check_reply(reply)?)?;
        if let Some(outcome) = blocked(&reply, req.tiers)? {
            return Ok((outcome, Duration::ZERO));
        }
        conclude(req.tiers, &reply.found, reply.admitted, reply.now, req)
    }
}

fn timed_out(timeout: Duration) -> StoreError {
    StoreError::with_source(
        format!("Redis did not answer within {timeout:?}"),
        ConnectError::Timeout { after: timeout },
    )
}

fn fred_error(message: &str, error: FredError) -> StoreError {
    StoreError::with_source(format!("{message}: {error}"), error)
}

impl Store for RedisStore {
    fn check(
        &self,
        request: &StoreRequest<'_>,
    ) -> impl Future<Output = Result<StoreOutcome, StoreError>> + Send {
        let timeout = self.inner.command_timeout;
        async move {
            tokio::time::timeout(timeout, self.check_inner(request))
                .await
                .unwrap_or_else(|_| Err(timed_out(timeout)))
        }
    }

    fn reset(&self, tier: Tier, id: &str) -> impl Future<Output = Result<(), StoreError>> + Send {
        // A sharded global tier is all its shard keys (one at a time: they live on several
        // masters).
        let keys = match (&self.inner.global, tier) {
            (Some(shards), Tier::Global) => shards.keys().to_vec(),
            _ => vec![self.key(tier, id)],
        };
        let timeout = self.inner.command_timeout;
        for key in &keys {
            self.inner.denials.forget(key);
        }
        let delete = async move {
            if !self.connected().await {
                return Err(StoreError::new("Redis is unreachable"));
            }
            let client = &self.inner.client;
            for key in keys {
                let deleted: Result<i64, _> = self.inner.on_key("DEL", &key, &[]).await;
                deleted.map_err(|e| fred_error("DEL failed", e))?;
                // Every instance forgets its cached denials of the key.
                invalidation::publish(client, &self.inner.prefix, key)
                    .await
                    .map_err(|e| fred_error("PUBLISH failed", e))?;
            }
            Ok(())
        };
        async move {
            tokio::time::timeout(timeout, delete)
                .await
                .unwrap_or_else(|_| Err(timed_out(timeout)))
        }
    }

    /// One read-only script (`usage.lua`); on a cluster, one per tier.
    fn usage(
        &self,
        request: &StoreRequest<'_>,
    ) -> impl Future<Output = Result<Vec<super::TierUsage>, StoreError>> + Send {
        self.usage_timed(request)
    }

    /// `SET` of the block key with `PX` (Redis counts the duration on its own clock), then the
    /// invalidation, so that no instance answers the key from its denial cache any more.
    fn block(
        &self,
        tier: Tier,
        id: &str,
        _now: Duration,
        duration: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.set_block(tier, id, duration)
    }

    fn unblock(&self, tier: Tier, id: &str) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.del_block(tier, id)
    }

    fn backend(&self) -> Backend {
        Backend::Redis
    }
}
