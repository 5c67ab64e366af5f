//! The Redis store: one EVALSHA per check, every tier decided atomically inside Redis.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use fred::prelude::{
    Builder, Client, ClientLike, Config, ConnectionConfig, Error as FredError, ErrorKind,
    EventInterface, KeysInterface, PerformanceConfig, PubsubInterface, SortedSetsInterface,
};
use fred::types::scripts::Script;
use fred::types::{ClusterHash, CustomCommand, Value};
use tokio::sync::watch;

use self::denial_cache::DenialCache;
use super::{Backend, Store, StoreError, StoreOutcome, StoreRequest, TierCheck};
use crate::clock::saturating_micros;
use crate::config::{RedisConfig, TimeSource};
use crate::connect_error::ConnectError;
use crate::decision::Tier;

mod denial_cache;
#[cfg(feature = "tls")]
mod tls;

/// The script, run with EVALSHA (and reloaded on NOSCRIPT).
pub(crate) const SCRIPT: &str = include_str!("script.lua");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Conn {
    /// Not started yet, or connecting.
    Connecting,
    /// Connected, script loaded.
    Ready,
    /// The first connection failed; this store will never answer.
    Failed,
}

/// Sliding logs in Redis sorted sets, shared by every app instance on the same Redis.
///
/// Each check is one EVALSHA of `src/store/redis/script.lua`, which trims, counts and, only if every tier has
/// room, records the request in every tier, atomically: two instances can never both take the
/// last slot. Each admitted request is one member, `<running total>:<cost>`: the key's running
/// total of costs makes every member unique, so requests in the same microsecond from many
/// instances never collapse into one entry. Every key gets a PEXPIRE of one window (plus a
/// millisecond) at each admission, so idle keys expire on their own.
///
/// Once Redis has said that a request's first tier (usually the user) has no room at all,
/// repeats of that request (same key, same cost) are denied locally, with no round trip, until
/// the tier's oldest entry leaves the window: a flood from one user costs Redis nothing after
/// its first denial, and the `Retry-After` is the one Redis would give. The cache can only
/// deny, never admit, holds at most 65,536 keys, and forgets a key on every instance when any
/// instance resets it (Redis pub/sub; without the subscription there is no cache).
///
/// The store connects in the background as soon as it is made inside a tokio runtime (else at
/// its first check). Every call is bounded by the command timeout; any error or timeout is
/// returned as a [`StoreError`], and the [`FallbackStore`](super::FallbackStore) turns that into
/// the swap to memory.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    script: Script,
    prefix: String,
    command_timeout: Duration,
    connect_timeout: Duration,
    time_source: TimeSource,
    clustered: bool,
    conn: watch::Sender<Conn>,
    started: AtomicBool,
    /// Denials Redis gave for tiers without room, answered locally (see `denial_cache`).
    denials: Arc<DenialCache>,
    /// The runtime the store started on, to close its connections when it is dropped, and
    /// the task listening for invalidations.
    runtime: std::sync::OnceLock<tokio::runtime::Handle>,
    listener: std::sync::Mutex<Option<(Client, tokio::task::JoinHandle<()>)>>,
    /// The connections were closed (or are being closed): once is enough.
    closed: AtomicBool,
    /// Why the first connection failed (set before `conn` turns `Failed`).
    start_error: OnceLock<ConnectError>,
    /// Whether the URL asks for TLS.
    tls: bool,
    /// Cluster only: one plain connection per master, for ASK redirections (see `eval_one`).
    /// The lock also keeps each ASKING and the command it is for together on the wire.
    ask_clients: tokio::sync::Mutex<Vec<(String, Client)>>,
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
        let (client, failed, clustered) = match build_client(config) {
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
        let store = Self {
            inner: Arc::new(Inner {
                client,
                script: Script::from_lua(SCRIPT),
                prefix: prefix.to_owned(),
                command_timeout: config.command_timeout,
                connect_timeout: config.connect_timeout,
                time_source: config.time_source,
                clustered,
                denials: Arc::new(DenialCache::default()),
                runtime: std::sync::OnceLock::new(),
                listener: std::sync::Mutex::new(None),
                closed: AtomicBool::new(false),
                ask_clients: tokio::sync::Mutex::new(Vec::new()),
                config: config.clone(),
                conn: watch::Sender::new(if failed {
                    Conn::Failed
                } else {
                    Conn::Connecting
                }),
                started: AtomicBool::new(failed),
                start_error,
                tls: uses_tls(config),
            }),
        };
        store.start();
        store
    }

    /// The fred client (to read its metrics, say).
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The Redis key of one tier's key part (already encoded): `prefix:user:<id>`,
    /// `prefix:endpoint:<route>`, `prefix:global`.
    pub fn key(&self, tier: Tier, id: &str) -> String {
        match tier {
            Tier::Global => format!("{}:global", self.inner.prefix),
            _ => format!("{}:{}:{}", self.inner.prefix, tier.as_str(), id),
        }
    }

    /// Starts the background connection, once, if a tokio runtime is at hand.
    fn start(&self) {
        if self.inner.started.load(Ordering::Acquire) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.inner.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let _ = self.inner.runtime.set(runtime.clone());
        let inner = self.inner.clone();
        runtime.spawn(async move {
            let connected = tokio::time::timeout(inner.connect_timeout, async {
                inner.client.init().await?;
                inner.script.load(&inner.client).await?;
                inner.listen_for_invalidations().await;
                Ok::<(), FredError>(())
            })
            .await;
            // Logged once, by whoever acts on it (the fallback, or `try_connect`'s caller).
            let error = match connected {
                Ok(Ok(())) => None,
                Ok(Err(error)) => Some(ConnectError::from_fred(
                    &error,
                    inner.tls,
                    inner.connect_timeout,
                )),
                Err(_) => Some(ConnectError::Timeout {
                    after: inner.connect_timeout,
                }),
            };
            let state = match error {
                None => Conn::Ready,
                Some(error) => {
                    tracing::debug!(%error, "cannot connect to Redis");
                    let _ = inner.start_error.set(error);
                    inner.shutdown();
                    Conn::Failed
                }
            };
            inner.conn.send_replace(state);
        });
    }

    /// Waits until the first connection is up (`true`) or has failed (`false`), with no bound:
    /// callers bound it.
    pub(crate) async fn connected(&self) -> bool {
        self.start();
        let mut rx = self.inner.conn.subscribe();
        let ready = match rx.wait_for(|c| *c != Conn::Connecting).await {
            Ok(state) => *state == Conn::Ready,
            Err(_) => false,
        };
        ready
    }

    /// Waits at most the connect timeout for the first connection; `true` if it is up.
    pub async fn wait_connected(&self) -> bool {
        tokio::time::timeout(self.inner.connect_timeout, self.connected())
            .await
            .unwrap_or(false)
    }

    /// Why the first connection failed, once it has.
    pub(crate) fn start_error(&self) -> Option<ConnectError> {
        self.inner.start_error.get().cloned()
    }

    /// Whether the URL asks for TLS.
    pub(crate) fn uses_tls(&self) -> bool {
        self.inner.tls
    }

    /// Closes the connection in the background (after a fallback, say).
    pub(crate) fn shutdown(&self) {
        self.inner.shutdown();
    }

    async fn check_inner(&self, req: &StoreRequest<'_>) -> Result<StoreOutcome, StoreError> {
        let Some(first) = req.tiers.first() else {
            return Ok(StoreOutcome::nothing_to_count());
        };
        if !self.connected().await {
            return Err(StoreError::new("Redis is unreachable"));
        }
        // Only the request's first tier is cached: its denial is then certain *and* it is the
        // tier Redis would name (no earlier tier can be full: there is none).
        let first_key = self.key(first.tier, first.id);
        let now_us = saturating_micros(req.now);
        let denials = &self.inner.denials;
        if let Some(retry_after) = denials.get(&first_key, req.cost, now_us) {
            return Ok(StoreOutcome::Denied {
                tier: first.tier,
                retry_after,
            });
        }
        let reply = self.check_remote(req).await?;
        if let Reply::Denied {
            tier,
            retry_after,
            still,
        } = reply
        {
            if tier == first.tier {
                denials.remember(first_key, req.cost, now_us, retry_after, still);
            }
        }
        Ok(reply.outcome())
    }

    async fn check_remote(&self, req: &StoreRequest<'_>) -> Result<Reply, StoreError> {
        let inner = &*self.inner;
        let now = match inner.time_source {
            TimeSource::App => saturating_micros(req.now).to_string(),
            TimeSource::Redis => String::new(),
        };
        if inner.clustered && req.tiers.len() > 1 {
            return self.check_per_tier(req, now).await;
        }
        let keys: Vec<String> = req.tiers.iter().map(|t| self.key(t.tier, t.id)).collect();
        let limits = req.tiers.iter().map(limit_arg);
        let reply = self.eval(keys, script_args(req, now, limits)).await?;
        parse_reply(&reply, req.tiers).map(|(reply, _)| reply)
    }

    /// Redis Cluster: the tiers' keys live in different slots (and usually on different
    /// nodes), so one script cannot see them all. The script runs per tier, in tier order, on
    /// the node owning that key; when a later tier denies, the entries this request recorded in
    /// the earlier tiers are removed again (by their unique member), so a denied request spends
    /// no quota. Never over-admits; a concurrent request may be denied by a reservation that is
    /// then rolled back.
    async fn check_per_tier(
        &self,
        req: &StoreRequest<'_>,
        now: String,
    ) -> Result<Reply, StoreError> {
        // (key, member) of every tier this request was recorded in so far.
        let mut recorded: Vec<(String, String)> = Vec::with_capacity(req.tiers.len());
        let mut remaining = u64::MAX;
        let (mut binding, mut reset) = (req.tiers[0].tier, Duration::ZERO);
        let mut shadow_denied = None;
        for (i, tier) in req.tiers.iter().enumerate() {
            let key = self.key(tier.tier, tier.id);
            let args = script_args(req, now.clone(), [limit_arg(tier)]);
            let reply = self.eval_one(&key, args).await?;
            let (reply, member) = parse_reply(&reply, &req.tiers[i..=i])?;
            match reply {
                Reply::Admitted(StoreOutcome::Admitted {
                    remaining: left,
                    reset: tier_reset,
                    shadow_denied: shadow,
                    ..
                }) => {
                    if left < remaining {
                        (remaining, binding, reset) = (left, tier.tier, tier_reset);
                    }
                    match (shadow, member) {
                        // A full shadow tier: nothing recorded there.
                        (Some(s), _) => shadow_denied = shadow_denied.or(Some(s)),
                        (None, Some(member)) => recorded.push((key, member)),
                        (None, None) => {
                            return Err(StoreError::new("the script recorded no member"));
                        }
                    }
                }
                denied => {
                    self.roll_back(&recorded).await?;
                    return Ok(denied);
                }
            }
        }
        Ok(Reply::Admitted(StoreOutcome::Admitted {
            remaining,
            binding,
            reset,
            shadow_denied,
        }))
    }

    /// Removes this request's entries (one member per key) again, all at once.
    ///
    /// A member removed from the middle of a key's log (a later request was recorded after
    /// it) leaves its cost in the running totals of the later members, so the key counts that
    /// cost until they expire: stricter for a while, never looser.
    async fn roll_back(&self, recorded: &[(String, String)]) -> Result<(), StoreError> {
        let removals = recorded.iter().map(|(key, member)| {
            self.inner
                .client
                .zrem::<i64, _, _>(key.as_str(), member.as_str())
        });
        for (key, _) in recorded {
            self.inner.denials.forget(key); // a unit may be free again
        }
        // Sent together: fred pipelines them, one round trip per node.
        let results = futures_util::future::join_all(removals).await;
        for ((key, member), result) in recorded.iter().zip(results) {
            match result {
                Ok(_) => {}
                // The key's slot is migrating (see `eval_one`).
                Err(e) if *e.kind() == ErrorKind::Routing => {
                    match self.asking(key, "ZREM", std::slice::from_ref(member)).await {
                        Some(reply) => {
                            reply?;
                        }
                        None => return Err(fred_error("rolling back a reservation failed", e)),
                    }
                }
                Err(e) => return Err(fred_error("rolling back a reservation failed", e)),
            }
        }
        Ok(())
    }

    /// The script on one key of a cluster.
    ///
    /// fred 10.1 does not follow ASK redirections: it sends ASKING to the target but then the
    /// command itself to the slot's old owner again (`router::commands::process_ask` leaves
    /// `cluster_node` unset), until its redirection budget runs out. ASK only happens while a slot is being
    /// migrated and the key has already moved, so this store follows it itself: it finds the
    /// master importing the slot (its own `CLUSTER NODES` line says `[slot-<-source]`) and runs
    /// ASKING and the script there, back to back, on a plain connection of its own.
    async fn eval_one(&self, key: &str, args: Vec<String>) -> Result<Vec<Value>, StoreError> {
        let inner = &*self.inner;
        let result: Result<Vec<Value>, FredError> = inner
            .script
            .evalsha_with_reload(&inner.client, vec![key.to_owned()], args.clone())
            .await;
        match result {
            Err(e) if *e.kind() == ErrorKind::Routing => {
                match self.asking(key, "EVALSHA", &args).await {
                    Some(reply) => reply,
                    None => Err(fred_error("rate limit script failed", e)),
                }
            }
            other => other.map_err(|e| fred_error("rate limit script failed", e)),
        }
    }

    /// Runs `EVALSHA` (with `args`) or `ZREM` (of the members in `args`) on `key` at the master
    /// importing its slot, after ASKING. `None` when no master is importing the slot.
    async fn asking(
        &self,
        key: &str,
        command: &'static str,
        args: &[String],
    ) -> Option<Result<Vec<Value>, StoreError>> {
        let inner = &*self.inner;
        let slot = fred::util::redis_keyslot(key.as_bytes());
        let mut clients = inner.ask_clients.lock().await;
        for server in inner.client.active_connections() {
            let addr = format!("{}:{}", server.host, server.port);
            let client = match clients.iter().find(|(a, _)| *a == addr) {
                Some((_, c)) => c.clone(),
                None => {
                    let config = RedisConfig {
                        url: crate::redis_url::single_node(&inner.config.url, &addr),
                        cluster: false,
                        ..inner.config.clone()
                    };
                    let client = build_client(&config).ok()?;
                    client.init().await.ok()?;
                    clients.push((addr, client.clone()));
                    client
                }
            };
            let nodes: String = client.custom(custom("CLUSTER"), vec!["NODES"]).await.ok()?;
            let importing = format!("[{slot}-<-");
            let mine = nodes.lines().find(|l| l.contains("myself"))?;
            if !mine.contains(&importing) {
                continue;
            }
            let asking: Result<(), FredError> =
                client.custom(custom("ASKING"), Vec::<String>::new()).await;
            if let Err(e) = asking {
                return Some(Err(fred_error("ASKING failed", e)));
            }
            let mut full: Vec<String> = Vec::with_capacity(args.len() + 3);
            if command == "EVALSHA" {
                full.extend([inner.script.sha1().to_string(), "1".to_owned()]);
                full.push(key.to_owned());
            } else {
                full.push(key.to_owned());
            }
            full.extend(args.iter().cloned());
            let reply = if command == "EVALSHA" {
                client
                    .custom::<Vec<Value>, _>(custom("EVALSHA"), full)
                    .await
            } else {
                client
                    .custom::<i64, _>(custom("ZREM"), full)
                    .await
                    .map(|n| vec![Value::Integer(n)])
            };
            return Some(reply.map_err(|e| fred_error("redirected command failed", e)));
        }
        None
    }

    async fn eval(&self, keys: Vec<String>, args: Vec<String>) -> Result<Vec<Value>, StoreError> {
        self.inner
            .script
            .evalsha_with_reload(&self.inner.client, keys, args)
            .await
            .map_err(|e| fred_error("rate limit script failed", e))
    }
}

/// A tier's limit as the script takes it: negative for a shadow tier.
fn limit_arg(tier: &TierCheck<'_>) -> String {
    if tier.shadow {
        format!("-{}", tier.limit)
    } else {
        tier.limit.to_string()
    }
}

fn script_args(
    req: &StoreRequest<'_>,
    now: String,
    limits: impl IntoIterator<Item = String>,
) -> Vec<String> {
    let mut args = Vec::with_capacity(4 + req.tiers.len());
    args.push(now);
    args.push(saturating_micros(req.window).to_string());
    args.push(req.cost.to_string());
    args.push(String::new()); // ARGV[4]: unused since members carry their running totals
    args.extend(limits);
    args
}

/// The invalidation channel of a key prefix: every store on it forgets the keys published.
fn invalidation_channel(prefix: &str) -> String {
    format!("{prefix}:invalidate")
}

impl Inner {
    /// Subscribes a connection of its own to the invalidation channel, and turns the denial
    /// cache on once it is subscribed. Any failure, error or lag on that connection turns the
    /// cache off (and empties it) for good: nothing is then answered that a reset elsewhere
    /// could have changed.
    async fn listen_for_invalidations(&self) {
        let subscriber = self.client.clone_new();
        let channel = invalidation_channel(&self.prefix);
        let mut messages = subscriber.message_rx();
        let mut errors = subscriber.error_rx();
        // Subscribed, and a probe published on the channel came back through it.
        let subscribed = async {
            subscriber.init().await?;
            subscriber.subscribe(channel.as_str()).await?;
            let receivers: i64 = self.client.publish(channel.as_str(), "").await?;
            if receivers < 1 {
                return Err(FredError::new(
                    ErrorKind::Unknown,
                    "SUBSCRIBE had no effect",
                ));
            }
            loop {
                let message = messages.recv().await.map_err(|e| {
                    FredError::new(ErrorKind::Unknown, format!("invalidation channel: {e}"))
                })?;
                if message.value.as_str().is_some_and(|v| v.is_empty()) {
                    return Ok::<(), FredError>(());
                }
            }
        };
        let subscribed = tokio::time::timeout(self.connect_timeout, subscribed)
            .await
            .unwrap_or_else(|_| Err(FredError::new(ErrorKind::Timeout, "no probe came back")));
        if let Err(error) = subscribed {
            tracing::warn!(%error, "no Redis invalidation channel: repeated denials ask Redis");
            let _ = tokio::time::timeout(Duration::from_secs(1), subscriber.quit()).await;
            return;
        }
        let denials = self.denials.clone();
        denials.enable();
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    message = messages.recv() => match message {
                        Ok(message) => match message.value.as_str() {
                            Some(key) => denials.forget(&key),
                            None => denials.disable(),
                        },
                        Err(_) => break, // lagged or closed: messages may be lost
                    },
                    _ = errors.recv() => break,
                }
            }
            denials.disable();
        });
        *self.listener.lock().unwrap_or_else(|e| e.into_inner()) = Some((subscriber, task));
    }

    /// Closes the connections (after a fallback, or when the store is dropped), in the
    /// background, on the runtime the store started on.
    fn shutdown(&self) {
        self.denials.disable();
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let listener = self
            .listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let runtime = tokio::runtime::Handle::try_current()
            .ok()
            .or_else(|| self.runtime.get().cloned());
        let Some(runtime) = runtime else {
            return;
        };
        let mut clients = vec![self.client.clone()];
        if let Some((subscriber, task)) = listener {
            task.abort();
            clients.push(subscriber);
        }
        if let Ok(ask) = self.ask_clients.try_lock() {
            clients.extend(ask.iter().map(|(_, c)| c.clone()));
        }
        runtime.spawn(async move {
            // A client that never connected (or already lost its connection) has nothing to
            // close, and fred would log a warning of its own for it.
            for client in clients.into_iter().filter(|c| c.is_connected()) {
                let _ = tokio::time::timeout(Duration::from_secs(1), client.quit()).await;
            }
        });
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// What the script answered.
#[derive(Clone, Copy, Debug)]
enum Reply {
    /// Admitted (always [`StoreOutcome::Admitted`]).
    Admitted(StoreOutcome),
    /// Denied by `tier`; `still` is how long the tier cannot change (zero: it has room left,
    /// just not enough for this request).
    Denied {
        tier: Tier,
        retry_after: Duration,
        still: Duration,
    },
}

impl Reply {
    fn outcome(self) -> StoreOutcome {
        match self {
            Self::Admitted(outcome) => outcome,
            Self::Denied {
                tier, retry_after, ..
            } => StoreOutcome::Denied { tier, retry_after },
        }
    }
}

/// The script's reply, and (when admitted) the member it recorded.
fn parse_reply(
    reply: &[Value],
    tiers: &[TierCheck<'_>],
) -> Result<(Reply, Option<String>), StoreError> {
    let bad = || {
        StoreError::new(format!(
            "unexpected reply from the rate limit script: {reply:?}"
        ))
    };
    // The script numbers tiers from 1.
    let tier_at = |index: i64| {
        let i = usize::try_from(index).ok()?.checked_sub(1)?;
        tiers.get(i).map(|t| t.tier)
    };
    let micros = |us: i64| Duration::from_micros(u64::try_from(us.max(1)).unwrap_or(1));
    let ints: Vec<i64> = reply.iter().map_while(Value::as_i64).collect();
    match (ints.as_slice(), reply.get(6)) {
        ([1, remaining, shadow, shadow_retry_us, binding, reset_us], member) => Ok((
            Reply::Admitted(StoreOutcome::Admitted {
                remaining: u64::try_from(*remaining).map_err(|_| bad())?,
                binding: tier_at(*binding).ok_or_else(bad)?,
                reset: micros(*reset_us),
                shadow_denied: match shadow {
                    0 => None,
                    i => Some((tier_at(*i).ok_or_else(bad)?, micros(*shadow_retry_us))),
                },
            }),
            member.and_then(|m| m.as_string()).filter(|m| !m.is_empty()),
        )),
        ([0, index, retry_us, still_us], None) => Ok((
            Reply::Denied {
                tier: tier_at(*index).ok_or_else(bad)?,
                retry_after: micros(*retry_us),
                still: Duration::from_micros(u64::try_from(*still_us).unwrap_or(0)),
            },
            None,
        )),
        _ => Err(bad()),
    }
}

fn custom(command: &'static str) -> CustomCommand {
    CustomCommand::new_static(command, ClusterHash::Random, false)
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

/// fred's config for the URL, without TLS (see [`build_client`]): clustered for
/// `redis-cluster://` URLs or `cluster = true`.
pub(crate) fn client_config(config: &RedisConfig) -> Result<Config, FredError> {
    let url = crate::redis_url::for_fred(&config.url);
    if config.cluster {
        Config::from_url_clustered(&url)
    } else {
        Config::from_url(&url)
    }
}

/// Whether `config`'s URL asks for TLS.
fn uses_tls(config: &RedisConfig) -> bool {
    crate::redis_url::scheme(&config.url).is_ok_and(|s| s.tls)
}

/// The fred client for `config`, with TLS set up for a TLS URL (reading its files).
fn build_client(config: &RedisConfig) -> Result<Client, ConnectError> {
    let invalid = |e: FredError| ConnectError::InvalidSettings {
        message: e.details().to_owned(),
    };
    #[cfg_attr(not(feature = "tls"), allow(unused_mut))]
    let mut redis = client_config(config).map_err(invalid)?;
    if uses_tls(config) {
        #[cfg(feature = "tls")]
        {
            redis.tls = Some(self::tls::tls_config(config)?);
        }
        #[cfg(not(feature = "tls"))]
        return Err(ConnectError::InvalidSettings {
            message: crate::config::ConfigError::TlsFeatureDisabled.to_string(),
        });
    }
    // One attempt: a dead server fails fast instead of being retried. On a cluster, fred 10.1
    // spends attempts on ASK redirections, which it does not follow (see `eval_one`), and its
    // connection task *ends* if the attempts run out before the redirection budget (5): so
    // the attempts must outlast the redirections, leaving the caller a "Too many
    // redirections" error and a live client. Every call is still bounded by the command
    // timeout.
    let attempts = if redis.server.is_clustered() {
        ConnectionConfig::default().max_redirections + 2
    } else {
        1
    };
    let mut builder = Builder::from_config(redis);
    builder
        .set_performance_config(PerformanceConfig {
            default_command_timeout: config.command_timeout,
            ..PerformanceConfig::default()
        })
        .set_connection_config(ConnectionConfig {
            connection_timeout: config.connect_timeout,
            internal_command_timeout: config.connect_timeout,
            max_command_attempts: attempts,
            ..ConnectionConfig::default()
        });
    builder.build().map_err(invalid)
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
        let key = self.key(tier, id);
        let timeout = self.inner.command_timeout;
        self.inner.denials.forget(&key);
        let delete = async move {
            if !self.connected().await {
                return Err(StoreError::new("Redis is unreachable"));
            }
            let client = &self.inner.client;
            let deleted: Result<i64, _> = client.del(key.as_str()).await;
            deleted.map_err(|e| fred_error("DEL failed", e))?;
            // Every instance forgets its cached denials of the key.
            let channel = invalidation_channel(&self.inner.prefix);
            let published: Result<i64, _> = client.publish(channel, key).await;
            published
                .map(|_| ())
                .map_err(|e| fred_error("PUBLISH failed", e))
        };
        async move {
            tokio::time::timeout(timeout, delete)
                .await
                .unwrap_or_else(|_| Err(timed_out(timeout)))
        }
    }

    fn backend(&self) -> Backend {
        Backend::Redis
    }
}
