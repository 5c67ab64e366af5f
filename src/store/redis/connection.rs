//! The store's connection: the fred client built from the configuration, the first connection
//! in the background, its state, and closing every connection when the store is done.

use std::sync::atomic::Ordering;
use std::time::Duration;

use fred::prelude::{
    Builder, Client, ClientLike, ConnectionConfig, Error as FredError, PerformanceConfig,
    ReconnectPolicy,
};
use fred::types::config::TcpConfig;

use super::super::StoreError;
use super::role::{cluster_node, replica_of};
use super::{ask, Connections, RedisStore};
use crate::config::RedisConfig;
use crate::connect_error::ConnectError;

/// Reconnections in a row before the store's client stops trying, each after a random wait of
/// up to [`RECONNECT_JITTER_MS`] (so that instances do not all reconnect at once): about a
/// minute of them when each attempt fails at once, longer when connecting itself takes time
/// (a connection that comes back resets the count). Closing the store ends them sooner.
const RECONNECT_ATTEMPTS: u32 = 2_400;
/// The longest wait before a reconnection (ms): once Redis is back, the client is connected
/// again within this, plus the time connecting takes.
const RECONNECT_JITTER_MS: u32 = 50;

/// Where the first connection stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Conn {
    /// Not started yet, or connecting.
    Connecting,
    /// Connected, script loaded.
    Ready,
    /// The first connection failed; this store will never answer.
    Failed,
}

/// Whether `config`'s URL asks for TLS.
pub(super) fn uses_tls(config: &RedisConfig) -> bool {
    crate::redis_url::scheme(&config.url).is_ok_and(|s| s.tls)
}

/// The fred client for `config`, with TLS set up for a TLS URL (reading its files). On a single
/// node and with `reconnect` (the store's own client), one that reconnects in the background
/// for about a minute; without (a cluster's ASK follower, opened again when it is next needed
/// and found lost), one that never reconnects by itself, so that a follower replaced is gone.
pub(super) fn build_client(config: &RedisConfig, reconnect: bool) -> Result<Client, ConnectError> {
    let invalid = |message| ConnectError::InvalidSettings { message };
    #[cfg_attr(not(feature = "tls"), allow(unused_mut))]
    let mut redis = crate::redis_url::fred_config(&config.url, config.cluster).map_err(invalid)?;
    if uses_tls(config) {
        #[cfg(feature = "tls")]
        {
            redis.tls = Some(super::tls::tls_config(config)?);
        }
        #[cfg(not(feature = "tls"))]
        return Err(ConnectError::InvalidSettings {
            message: crate::config::ConfigError::TlsFeatureDisabled.to_string(),
        });
    }
    // One attempt: a dead server fails fast instead of being retried. On a cluster, a margin
    // kept from when fred followed ASKs itself; and fred follows no redirection there: `ask`
    // does (fred's ASKING corrupts a shared connection's replies). Every call is still bounded
    // by the command timeout.
    let (attempts, redirections) = if redis.server.is_clustered() {
        (ask::cluster_command_attempts(), ask::CLUSTER_REDIRECTIONS)
    } else {
        (1, ConnectionConfig::default().max_redirections)
    };
    let clustered = redis.server.is_clustered();
    let mut builder = Builder::from_config(redis);
    if reconnect && !clustered {
        // A connection Redis closes (its `timeout` on an idle client, a proxy's or a NAT's idle
        // limit, a restart) is opened again in the background: without it, a quiet service's
        // next check would wait out its timeout on a dead socket and fall back for good, even
        // with Redis back (a restart takes far longer than a few attempts in a row). A check
        // sent while Redis is gone still waits at most its command timeout; then the store
        // falls back and closes this client (`close_clients`), which ends the reconnections.
        let mut policy = ReconnectPolicy::new_constant(RECONNECT_ATTEMPTS, 0);
        policy.set_jitter(RECONNECT_JITTER_MS);
        builder.set_policy(policy);
    }
    builder
        .set_performance_config(PerformanceConfig {
            default_command_timeout: config.command_timeout,
            ..PerformanceConfig::default()
        })
        .set_connection_config(ConnectionConfig {
            connection_timeout: config.connect_timeout,
            internal_command_timeout: config.connect_timeout,
            max_command_attempts: attempts,
            max_redirections: redirections,
            // Every command (a batch) is written at once: with Nagle's algorithm on, a batch
            // written while the one before is unacknowledged waits for that ACK, which mostly
            // rides on the reply, so two batches on their way would be one on the wire.
            tcp: TcpConfig {
                nodelay: Some(true),
                ..TcpConfig::default()
            },
            ..ConnectionConfig::default()
        });
    builder
        .build()
        .map_err(|e: FredError| invalid(e.details().to_owned()))
}

impl RedisStore {
    /// Starts the background connection, once, if a tokio runtime is at hand.
    pub(super) fn start(&self) {
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
        // Set before the task runs, so that no waiter (each bounds its wait by the connect
        // timeout from when it starts, after this) gives up before the connect does.
        let deadline = tokio::time::Instant::now() + self.inner.connect_timeout;
        runtime.spawn(async move {
            let state = match inner.connect(deadline).await {
                // Closed while connecting (a check that timed out meanwhile fell back, or the
                // limiter was dropped): what connected since is closed now.
                Ok(()) if inner.closed.load(Ordering::Acquire) => {
                    inner.close_clients();
                    Conn::Ready
                }
                Ok(()) => Conn::Ready,
                Err(error) => {
                    // Logged once, by whoever acts on it (the fallback, or `try_connect`'s caller).
                    tracing::debug!(%error, "cannot connect to Redis");
                    let _ = inner.start_error.set(error);
                    if inner.closed.load(Ordering::Acquire) {
                        // Closed while connecting: what connected since (before this failed)
                        // is closed now; `shutdown` would do nothing a second time.
                        inner.close_clients();
                    } else {
                        inner.shutdown();
                    }
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

    /// Why `error` (a failed check's) failed: the start's error if the first connection never
    /// came up, else the error sorted (see [`ConnectError`]). A timeout (or an error of no
    /// known kind) after a connection was lost is `Unreachable`: fred holds the commands meant
    /// for a Redis that was killed or is restarting until they time out, and only its
    /// broadcast of the connection's error tells that apart from a Redis up but not answering
    /// (paused, overloaded: `Timeout`).
    pub(crate) fn cause_of(&self, error: &StoreError, timeout: Duration) -> ConnectError {
        if let Some(start) = self.start_error() {
            return start;
        }
        let cause = ConnectError::from_error(error, self.inner.tls, timeout);
        // After a lost connection, a command fails by the timeout, or (a cluster's master gone
        // under load) with fred's own "channel closed": both mean the connection, not Redis.
        let after_loss = matches!(
            cause,
            ConnectError::Timeout { .. } | ConnectError::Other { .. }
        );
        if !after_loss {
            return cause;
        }
        // After a connection error, "unreachable": fred holds the commands meant for a Redis
        // that was killed or is restarting until they time out. A configuration error (a
        // password changed under a running service, a permission taken away) is named as one
        // (an outside audit got the fix for a dead host after `CONFIG SET requirepass`), but
        // only on a single server that has not connected since: one from before a
        // reconnection that worked says nothing of this failure (a review: a NOAUTH met while
        // a password was being changed, then fixed, was blamed for a pause later), and a
        // cluster client stays connected while one of its masters is gone, so it cannot tell.
        let now_lost = !self.inner.clustered && !self.inner.client.is_connected();
        match self.last_connection_error() {
            Some(lost)
                if now_lost
                    && ConnectError::from_fred(&lost, self.inner.tls, timeout).is_config() =>
            {
                ConnectError::from_fred(&lost, self.inner.tls, timeout)
            }
            Some(_) => ConnectError::Unreachable {
                message: format!(
                    "the connection was lost, and the check failed after it within {timeout:?}"
                ),
            },
            None => cause,
        }
    }

    /// The last connection error fred reported since the store was made, if any (kept: every
    /// failed check that asks gets the same answer, or a later one).
    fn last_connection_error(&self) -> Option<FredError> {
        let mut errors = (self.inner.connection_errors)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let (rx, last) = &mut *errors;
        loop {
            match rx.try_recv() {
                Ok((error, _)) => *last = Some(error),
                Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) => {}
                Err(_) => break,
            }
        }
        last.clone()
    }

    /// Closes the connection in the background (after a fallback, say).
    pub(crate) fn shutdown(&self) {
        self.inner.shutdown();
    }
}

impl Connections {
    /// The first connection, within the connect timeout: connect, load the script, subscribe
    /// to invalidations (which may fail on its own: it only turns the denial cache off).
    ///
    /// The subscription has what is left, once the script is loaded, of the first three
    /// quarters of the connect timeout, and is not part of the connection's own deadline: a
    /// probe that does not come back (a cluster bus link reconnecting under load can drop it)
    /// turns the denial cache off, and does not make the store fall back. The last quarter is
    /// the margin by which the store reports itself up before any waiter gives up on it.
    async fn connect(&self, deadline: tokio::time::Instant) -> Result<(), ConnectError> {
        let connected = tokio::time::timeout_at(deadline, async {
            let router = self.client.init().await?;
            self.keep_router(router);
            self.script.load(&self.client).await?;
            if let Some(master) = replica_of(&self.client).await {
                return Ok(Some(ConnectError::ReadOnlyReplica {
                    message: format!("ROLE: the server is a replica{master}, not the master"),
                }));
            }
            Ok::<_, FredError>(cluster_node(&self.client).await.then(|| {
                ConnectError::InvalidSettings {
                    message: "INFO cluster: the server is a node of a Redis Cluster \
                              (cluster_enabled:1), and the URL names a single server: keys \
                              on other masters would answer MOVED, and every check over \
                              several keys would fail with CROSSSLOT"
                        .to_owned(),
                }
            }))
        })
        .await;
        match connected {
            Ok(Ok(Some(wrong))) => Err(wrong),
            Ok(Ok(None)) => {
                if !self.closed.load(Ordering::Acquire) {
                    self.listen_for_invalidations(deadline - self.connect_timeout / 4)
                        .await;
                }
                Ok(())
            }
            Ok(Err(error)) => Err(ConnectError::from_fred(
                &error,
                self.tls,
                self.connect_timeout,
            )),
            Err(_) => Err(ConnectError::Timeout {
                after: self.connect_timeout,
            }),
        }
    }

    /// Keeps the routing task of a client that connected, for [`close_clients`](Self::close_clients).
    pub(super) fn keep_router(&self, router: fred::types::ConnectHandle) {
        let mut routers = self.routers.lock().unwrap_or_else(|e| e.into_inner());
        routers.retain(|r| !r.is_finished());
        routers.push(router);
    }

    /// Closes the connections (after a fallback, or when the store is dropped), in the
    /// background, on the runtime the store started on.
    pub(super) fn shutdown(&self) {
        self.denials.close();
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.close_clients();
    }

    /// Closes what is open now: each connected client with `QUIT`, then every routing task
    /// aborted, which ends a reconnection under way (fred's `QUIT` does not reach one that is
    /// in the middle of connecting). Called again by the start if it connects after the store
    /// was closed: each client and task is taken once.
    pub(super) fn close_clients(&self) {
        let listener = self
            .listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let routers = std::mem::take(&mut *self.routers.lock().unwrap_or_else(|e| e.into_inner()));
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
        clients.extend(self.ask_clients.open_now());
        runtime.spawn(async move {
            // A client not connected has nothing to say `QUIT` to (and fred would log a
            // warning of its own for one whose task has ended): its task is aborted below.
            for client in clients.into_iter().filter(|c| c.is_connected()) {
                let _ = tokio::time::timeout(Duration::from_secs(1), client.quit()).await;
            }
            for router in routers {
                router.abort();
            }
        });
    }
}

impl Drop for Connections {
    fn drop(&mut self) {
        self.shutdown();
    }
}
